// Quantized text fixtures (`hlx fixture --quant awq|gptq|fp8`): the text fixture with every decoder
// linear layer stored as that method's tensors (layouts in io/quantized.h). Codes, zero points and
// scales are all random (GPTQ: g_idx a shuffled act-order grouping; FP8: every finite e4m3 code,
// subnormals included, and a random scale per 128 x 128 block), so a misread nibble order, zero
// offset, group mapping, e4m3 decoding or block grid changes the logits.
#include <algorithm>
#include <numeric>
#include <random>
#include <set>

#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "models/fixture.h"

namespace hlx::models {
namespace {

using ojson = nlohmann::ordered_json;

bool is_quantized_linear(const std::string& name) {
  return name.find(".layers.") != std::string::npos && name.size() > 12 &&
         name.compare(name.size() - 12, 12, "_proj.weight") == 0;
}

uint64_t name_seed(uint64_t seed, const std::string& name) {
  uint64_t h = 1469598103934665603ull ^ seed;  // FNV-1a over the name
  for (char c : name) h = (h ^ uint8_t(c)) * 1099511628211ull;
  return h;
}

// Eight 4-bit values into one int32: value j at nibble pos[j].
int32_t pack8(const uint8_t* v, const int* pos) {
  uint32_t w = 0;
  for (int j = 0; j < 8; ++j) w |= uint32_t(v[j] & 15) << (4 * pos[j]);
  return int32_t(w);
}

// A tensor the quantized layouts keep as is (norms, embeddings), in the fixture's dtype.
Tensor unquantized_tensor(const TextModelSpec& spec, const TensorInfo& info, const FixtureOptions& options) {
  std::vector<float> v = fixture_tensor_values(spec, info, options.seed);
  Tensor t = Tensor::zeros(options.dtype, info.shape);
  if (options.dtype == DType::kF32)
    std::copy(v.begin(), v.end(), t.data<float>());
  else
    for (size_t i = 0; i < v.size(); ++i) t.data<bf16>()[i] = f32_to_bf16(v[i]);
  return t;
}

Tensor make_i32(const Shape& shape, const std::vector<int32_t>& v) {
  Tensor t = Tensor::zeros(DType::kI32, shape);
  std::copy(v.begin(), v.end(), t.data<int32_t>());
  return t;
}

}  // namespace

static Status write_fp8_text_fixture(const std::string& dir, const FixtureOptions& options) {
  HLX_ASSIGN_OR_RETURN(FixtureConfigs configs, fixture_configs(options));
  HLX_ASSIGN_OR_RETURN(TextModelSpec spec, fixture_spec(options));
  constexpr int64_t kB = 128;
  ojson root = ojson::parse(configs.config_json);
  // As Qwen3-*-FP8 publish it.
  root["quantization_config"] = {
      {"activation_scheme", "dynamic"}, {"fmt", "e4m3"}, {"quant_method", "fp8"}, {"weight_block_size", {kB, kB}}};
  HLX_RETURN_IF_ERROR(write_fixture_files(
      dir, {{"config.json", root.dump(2) + "\n"}, {"generation_config.json", configs.generation_config_json}}, options,
      ""));
  NamedTensors tensors;
  std::set<std::string> f8;
  for (const TensorInfo& info : text_checkpoint_layout(spec)) {
    const FixtureTensor ft = text_fixture_tensor(spec, info);
    if (!is_quantized_linear(info.name)) {
      tensors.emplace_back(info.name, unquantized_tensor(spec, info, options));
      continue;
    }
    const int64_t n = info.shape[0], k = info.shape[1], nb = (n + kB - 1) / kB, kb = (k + kB - 1) / kB;
    std::mt19937_64 rng(name_seed(options.seed, info.name));
    // Codes: every byte except the two NaNs (0x7f, 0xff), so |fp8| spans 2^-9 .. 448.
    std::uniform_int_distribution<int> code(0, 253);
    Tensor w = Tensor::zeros(DType::kU8, {n, k});
    for (int64_t i = 0; i < n * k; ++i) {
      const int c = code(rng);
      w.data<uint8_t>()[i] = uint8_t(c < 127 ? c : c + 1);
    }
    // A typical |fp8| is ~2^3, so the weights' size is about scale * 8; scales vary 4x between blocks.
    std::uniform_real_distribution<float> sd(0.5f, 2.f);
    Tensor s = Tensor::zeros(DType::kF32, {nb, kb});
    for (int64_t i = 0; i < nb * kb; ++i) s.data<float>()[i] = sd(rng) * ft.half_width / 64.f;
    const std::string base = info.name.substr(0, info.name.size() - 7);  // drop ".weight"
    f8.insert(info.name);
    tensors.emplace_back(info.name, std::move(w));
    tensors.emplace_back(base + ".weight_scale_inv", std::move(s));
  }
  return write_safetensors(dir + "/model.safetensors", tensors,
                           {{"format", "pt"}, {"generator", "hlx fixture --quant fp8"}}, f8);
}

Status write_quantized_text_fixture(const std::string& dir, const FixtureOptions& options) {
  if (options.quant == "fp8") return write_fp8_text_fixture(dir, options);
  const bool awq = options.quant == "awq";
  if (!awq && options.quant != "gptq")
    return make_error(ErrorKind::kInvalidArgument, "fixture: --quant '", options.quant,
                      "' (expected awq, gptq or fp8)");
  HLX_ASSIGN_OR_RETURN(FixtureConfigs configs, fixture_configs(options));
  HLX_ASSIGN_OR_RETURN(TextModelSpec spec, fixture_spec(options));
  const int64_t group = options.quant_group > 0 ? options.quant_group : (options.preset == "tiny" ? 32 : 128);
  ojson root = ojson::parse(configs.config_json);
  if (awq)
    root["quantization_config"] = {
        {"bits", 4},         {"group_size", group}, {"modules_to_not_convert", nullptr}, {"quant_method", "awq"},
        {"version", "gemm"}, {"zero_point", true}};
  else
    root["quantization_config"] = {{"bits", 4},
                                   {"checkpoint_format", "gptq"},
                                   {"damp_percent", 0.01},
                                   {"desc_act", true},
                                   {"group_size", group},
                                   {"quant_method", "gptq"},
                                   {"static_groups", false},
                                   {"sym", true},
                                   {"true_sequential", true}};
  HLX_RETURN_IF_ERROR(write_fixture_files(
      dir, {{"config.json", root.dump(2) + "\n"}, {"generation_config.json", configs.generation_config_json}}, options,
      ""));
  static const int kSeq[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  static const int kAwqPos[8] = {0, 4, 1, 5, 2, 6, 3, 7};  // column 8c + j sits at nibble kAwqPos[j]
  NamedTensors tensors;
  for (const TensorInfo& info : text_checkpoint_layout(spec)) {
    const FixtureTensor ft = text_fixture_tensor(spec, info);
    if (!is_quantized_linear(info.name)) {
      tensors.emplace_back(info.name, unquantized_tensor(spec, info, options));
      continue;
    }
    const int64_t n = info.shape[0], k = info.shape[1];
    if (n % 8 || k % 8 || (awq && k % group))
      return make_error(ErrorKind::kInvalidArgument, "fixture: ", info.name, " [", n, ", ", k, "] does not fit ",
                        options.quant, " packing with group_size ", group);
    const int64_t groups = (k + group - 1) / group;
    std::mt19937_64 rng(name_seed(options.seed, info.name));
    std::uniform_int_distribution<int> nib(0, 15);
    std::uniform_real_distribution<float> sd(0.5f, 1.5f);
    std::vector<uint8_t> q(static_cast<size_t>(k * n)), z(static_cast<size_t>(groups * n));  // q[k][n], z[g][n]
    for (auto& v : q) v = uint8_t(nib(rng));
    for (auto& v : z) v = uint8_t(nib(rng));
    Tensor scales = Tensor::zeros(DType::kF16, {groups, n});
    for (int64_t i = 0; i < groups * n; ++i) scales.data<f16>()[i] = f32_to_f16(sd(rng) * ft.half_width / 8.f);
    const std::string base = info.name.substr(0, info.name.size() - 7);  // drop ".weight"
    std::vector<int32_t> qw, qz;
    uint8_t tmp[8];
    if (awq) {
      for (int64_t kk = 0; kk < k; ++kk)
        for (int64_t c = 0; c < n / 8; ++c) qw.push_back(pack8(&q[size_t(kk * n + 8 * c)], kAwqPos));
      for (int64_t g = 0; g < groups; ++g)
        for (int64_t c = 0; c < n / 8; ++c) qz.push_back(pack8(&z[size_t(g * n + 8 * c)], kAwqPos));
      tensors.emplace_back(base + ".qweight", make_i32({k, n / 8}, qw));
      tensors.emplace_back(base + ".qzeros", make_i32({groups, n / 8}, qz));
      tensors.emplace_back(base + ".scales", std::move(scales));
    } else {
      for (int64_t r = 0; r < k / 8; ++r)
        for (int64_t j = 0; j < n; ++j) {
          for (int i = 0; i < 8; ++i) tmp[i] = q[size_t((8 * r + i) * n + j)];
          qw.push_back(pack8(tmp, kSeq));
        }
      for (int64_t g = 0; g < groups; ++g)
        for (int64_t c = 0; c < n / 8; ++c) {
          for (int i = 0; i < 8; ++i) tmp[i] = uint8_t((z[size_t(g * n + 8 * c + i)] + 15) % 16);  // stored z - 1
          qz.push_back(pack8(tmp, kSeq));
        }
      // Act-order: input k's group is its rank in a random order, divided by the group size.
      std::vector<int32_t> order(static_cast<size_t>(k)), g_idx(static_cast<size_t>(k));
      std::iota(order.begin(), order.end(), 0);
      std::shuffle(order.begin(), order.end(), rng);
      for (int64_t i = 0; i < k; ++i) g_idx[size_t(order[size_t(i)])] = int32_t(i / group);
      tensors.emplace_back(base + ".qweight", make_i32({k / 8, n}, qw));
      tensors.emplace_back(base + ".qzeros", make_i32({groups, n / 8}, qz));
      tensors.emplace_back(base + ".scales", std::move(scales));
      tensors.emplace_back(base + ".g_idx", make_i32({k}, g_idx));
    }
  }
  return write_safetensors(dir + "/model.safetensors", tensors,
                           {{"format", "pt"}, {"generator", "hlx fixture --quant " + options.quant}});
}

}  // namespace hlx::models
