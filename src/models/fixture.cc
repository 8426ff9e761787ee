// Random-weight text checkpoints per family. Each preset is a small table of architecture numbers;
// config.json is written with the field names that family's Hugging Face configuration class and
// real checkpoints use, so the fixture exercises the same config parsing a downloaded model does.
#include "models/fixture.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <algorithm>
#include <map>
#include <memory>

#include <nlohmann/json.hpp>

#include "io/file.h"
#include "io/hf_config.h"
#include "io/safetensors.h"
#include "models/fixture_arch.h"
#include "models/text_family.h"

namespace hlx::models {

nlohmann::json fixture_eos_json(const std::vector<int64_t>& eos) {
  if (eos.size() == 1) return eos[0];
  return eos;
}

namespace {

using ojson = nlohmann::ordered_json;

using Arch = FixtureArch;

// What a fixture needs from the real tokenizer files: the largest id and special-token ids.
struct TokenizerFacts {
  int64_t max_id = -1;
  std::map<std::string, int64_t> special;  // content -> id, for the tokens looked up below
};

Result<TokenizerFacts> read_tokenizer_facts(const std::string& dir, const std::vector<std::string>& wanted) {
  const std::string path = dir + "/tokenizer.json";
  HLX_ASSIGN_OR_RETURN(std::string text, read_file(path));
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return make_error(ErrorKind::kParse, "fixture: '", path, "' is not a JSON object");
  TokenizerFacts f;
  auto note = [&](const std::string& content, const nlohmann::json& id) -> Status {
    if (!id.is_number_integer() || id.get<int64_t>() < 0)
      return make_error(ErrorKind::kParse, "fixture: '", path, "': id of \"", content, "\" is not a token id");
    int64_t v = id.get<int64_t>();
    f.max_id = std::max(f.max_id, v);
    for (const auto& w : wanted)
      if (w == content) f.special[w] = v;
    return ok_status();
  };
  auto model = j.find("model");
  if (model == j.end() || !model->is_object() || !model->contains("vocab") || !(*model)["vocab"].is_object())
    return make_error(ErrorKind::kParse, "fixture: '", path, "' has no model.vocab object");
  for (auto it = (*model)["vocab"].begin(); it != (*model)["vocab"].end(); ++it)
    HLX_RETURN_IF_ERROR(note(it.key(), it.value()));
  auto added = j.find("added_tokens");
  if (added != j.end() && added->is_array())
    for (const auto& t : *added) {
      if (!t.is_object() || !t.contains("content") || !t["content"].is_string() || !t.contains("id"))
        return make_error(ErrorKind::kParse, "fixture: '", path, "': malformed added_tokens entry");
      HLX_RETURN_IF_ERROR(note(t["content"].get<std::string>(), t["id"]));
    }
  for (const auto& w : wanted)
    if (!f.special.count(w)) return make_error(ErrorKind::kNotFound, "fixture: '", path, "' has no token \"", w, "\"");
  return f;
}

// The special tokens a family's fixture takes from its tokenizer, in the order apply_tokenizer uses.
std::vector<std::string> wanted_tokens(const std::string& tokenizer) {
  if (tokenizer == "gemma3")
    return {"<pad>", "<eos>", "<bos>", "<end_of_turn>", "<start_of_image>", "<end_of_image>", "<image_soft_token>"};
  return {"<|endoftext|>", "<|im_end|>"};
}

// Real vocabulary sizes (embedding rows) of the models these tokenizers ship with.
int64_t real_vocab(const std::string& tokenizer) { return tokenizer == "gemma3" ? 262208 : 151936; }

bool is_gemma(const std::string& family) { return family == "gemma3_text" || family == "gemma3"; }

// The text family a fixture family writes: its own model_type, or gemma3_text inside gemma3.
const TextFamily* fixture_text_family(const std::string& family) {
  const TextFamily* f = find_text_family(family == "gemma3" ? "gemma3_text" : family);
  return f && f->fixture ? f : nullptr;
}

Result<Arch> preset_arch(const FixtureOptions& o) {
  Arch a;
  a.family = o.family;
  if (o.preset == "tiny") {
    const TextFamily* family = fixture_text_family(o.family);
    if (!family) {
      std::string names;
      const std::vector<std::string> all = fixture_families();
      for (size_t i = 0; i < all.size(); ++i) names += str_cat(i ? (i + 1 < all.size() ? ", " : " or ") : "", all[i]);
      return make_error(ErrorKind::kInvalidArgument, "fixture: unknown family '", o.family, "' (expected ", names, ")");
    }
    family->fixture->tiny(a);
    if (o.quant == "fp8") {
      // FP8 blocks are 128 x 128: dimensions past 128 and not multiples of it, so every linear layer
      // has full blocks and short edge blocks in both directions (hidden 200 = 128 + 72, q/o 192,
      // k/v 96, intermediate 328 = 2 x 128 + 72).
      a.hidden = 200;
      a.heads = 4;
      a.kv_heads = 2;
      a.head_dim = 48;
      a.intermediate = 328;
    }
  } else if (o.preset == "qwen3-0.6b") {
    if (o.family != "qwen3")
      return make_error(ErrorKind::kInvalidArgument, "fixture: preset 'qwen3-0.6b' is a qwen3 model, not family '",
                        o.family, "'");
    // Qwen/Qwen3-0.6B config.json.
    a.vocab = 151936;
    a.hidden = 1024;
    a.intermediate = 3072;
    a.layers = 28;
    a.heads = 16;
    a.kv_heads = 8;
    a.head_dim = 128;
    a.rope_theta = 1000000.0;
    a.tied = true;
    a.max_pos = 40960;
    a.bos = 151643;
    a.pad = 151643;
    a.eos = {151645, 151643};
  } else {
    return make_error(ErrorKind::kInvalidArgument, "fixture: unknown preset '", o.preset,
                      "' (expected tiny or qwen3-0.6b)");
  }
  if (o.dtype != DType::kF32 && o.dtype != DType::kBF16)
    return make_error(ErrorKind::kInvalidArgument, "fixture: dtype ", dtype_name(o.dtype),
                      " is not supported (expected f32 or bf16)");
  return a;
}

// Arch for the options, with the tokenizer's vocabulary and special ids when it has one.
Result<Arch> fixture_arch(const FixtureOptions& o) {
  HLX_ASSIGN_OR_RETURN(Arch a, preset_arch(o));
  if (!o.tokenizer_dir.empty()) {
    const std::string name = fixture_tokenizer_name(o.family);
    HLX_ASSIGN_OR_RETURN(TokenizerFacts f, read_tokenizer_facts(o.tokenizer_dir, wanted_tokens(name)));
    a.vocab = std::max(a.vocab, real_vocab(name));
    if (o.vocab_size > 0) {
      if (o.vocab_size <= f.max_id)
        return make_error(ErrorKind::kInvalidArgument, "fixture: --vocab-size ", o.vocab_size,
                          " does not cover the tokenizer's largest id ", f.max_id, " (need >= ", f.max_id + 1, ")");
      a.vocab = o.vocab_size;
    }
    if (name == "gemma3") {
      a.pad = f.special["<pad>"];
      a.bos = f.special["<bos>"];
      a.eos = {f.special["<eos>"], f.special["<end_of_turn>"]};
      a.boi = f.special["<start_of_image>"];
      a.eoi = f.special["<end_of_image>"];
      a.image = f.special["<image_soft_token>"];
    } else {
      // As Qwen3's config.json and generation_config.json: bos = pad = <|endoftext|>,
      // eos = [<|im_end|>, <|endoftext|>].
      a.bos = a.pad = f.special["<|endoftext|>"];
      a.eos = {f.special["<|im_end|>"], f.special["<|endoftext|>"]};
    }
  } else if (o.vocab_size > 0) {
    int64_t need = 1 + std::max({a.bos, a.pad, *std::max_element(a.eos.begin(), a.eos.end())});
    if (is_gemma(o.family)) need = std::max<int64_t>(need, 21);  // room for the image token ids
    if (o.vocab_size < need)
      return make_error(ErrorKind::kInvalidArgument, "fixture: --vocab-size ", o.vocab_size,
                        " is smaller than the special token ids need (", need, ")");
    a.vocab = o.vocab_size;
  }
  return a;
}

const char* torch_dtype(DType t) { return t == DType::kBF16 ? "bfloat16" : "float32"; }

ojson text_config(const Arch& a, DType dtype) {
  // The keys every family writes; the family adds its own (and may override one, e.g. Qwen3's eos).
  nlohmann::json c = {{"attention_dropout", 0.0},
                      {"bos_token_id", a.bos},
                      {"eos_token_id", fixture_eos_json(a.eos)},
                      {"hidden_size", a.hidden},
                      {"initializer_range", 0.02},
                      {"intermediate_size", a.intermediate},
                      {"max_position_embeddings", a.max_pos},
                      {"num_attention_heads", a.heads},
                      {"num_hidden_layers", a.layers},
                      {"num_key_value_heads", a.kv_heads},
                      {"rms_norm_eps", a.rms_eps},
                      {"rope_theta", a.rope_theta},
                      {"tie_word_embeddings", a.tied},
                      {"torch_dtype", torch_dtype(dtype)},
                      {"use_cache", true},
                      {"vocab_size", a.vocab}};
  const TextFamily* family = fixture_text_family(a.family);
  c["model_type"] = family->model_type;
  family->fixture->config(a, c);
  return ojson::parse(c.dump());  // sorted keys, as transformers writes config.json
}

ojson root_config(const Arch& a, DType dtype) {
  ojson text = text_config(a, dtype);
  if (a.family != "gemma3") return text;
  // Gemma3ForConditionalGeneration: the text model nests under text_config (architectures only at
  // the root), next to a SigLIP vision_config. The vision tower's weights are not part of a text
  // fixture; the numbers below are small but consistent (28/14 = 2x2 patches -> 4 tokens).
  text.erase("architectures");
  ojson c = ojson::object();
  c["architectures"] = {"Gemma3ForConditionalGeneration"};
  c["boi_token_index"] = a.boi >= 0 ? a.boi : a.vocab - 20;
  c["eoi_token_index"] = a.eoi >= 0 ? a.eoi : a.vocab - 19;
  c["eos_token_id"] = fixture_eos_json(a.eos);
  c["image_token_index"] = a.image >= 0 ? a.image : a.vocab - 18;
  c["initializer_range"] = 0.02;
  c["mm_tokens_per_image"] = 4;
  c["model_type"] = "gemma3";
  c["text_config"] = std::move(text);
  c["tie_word_embeddings"] = a.tied;
  c["torch_dtype"] = torch_dtype(dtype);
  c["vision_config"] = {{"hidden_size", 32},
                        {"image_size", 28},
                        {"intermediate_size", 64},
                        {"layer_norm_eps", 1e-6},
                        {"model_type", "siglip_vision_model"},
                        {"num_attention_heads", 2},
                        {"num_hidden_layers", 1},
                        {"patch_size", 14},
                        {"vision_use_head", false}};
  return c;
}

ojson generation_config(const Arch& a) {
  ojson g = ojson::object();
  g["bos_token_id"] = a.bos;
  g["eos_token_id"] = fixture_eos_json(a.eos);
  g["pad_token_id"] = a.pad;
  g["do_sample"] = false;
  return g;
}

// --- deterministic values ----------------------------------------------------------------------

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// xoshiro256** streams, one per (seed, tensor name): a tensor's values do not depend on the order
// or presence of other tensors.
class Stream {
 public:
  Stream(uint64_t seed, const std::string& name) {
    uint64_t st = seed ^ fnv1a(name);
    for (auto& w : s_) w = splitmix64(st);
  }
  uint64_t next() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }
  // Uniform in [-1, 1) from the top 24 bits (exact in f32, so identical everywhere).
  float symmetric() { return float(int64_t(next() >> 40) - (int64_t(1) << 23)) * (1.0f / float(1 << 23)); }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// value = center + half_width * u, u uniform in [-1, 1).
struct Distribution {
  float center = 0.f, half_width = 0.f;
};

Distribution distribution_for(const TextModelSpec& spec, const TensorInfo& info) {
  const std::string& n = info.name;
  const bool gemma = spec.norm_weight_offset != 0.f;  // Gemma multiplies by (1 + w)
  // sqrt(3) turns a uniform half-width into a standard deviation.
  constexpr float kSqrt3 = 1.7320508f;
  // With a tied head, a random model's logits are dominated by the current token's own embedding
  // (e.e ~ hidden * s^2 against ~ sqrt(hidden) * s^2 for other rows), so greedy decoding repeats
  // one token and a decode test would compare nothing. Small embeddings under strong block outputs
  // and a larger final scale give varied generations (10-20 distinct ids in 32 steps, measured
  // with tests/models/reference.py) at logit std ~2-3.
  const bool tied = spec.tie_word_embeddings;
  auto norm = [&](float scale) -> Distribution {
    // Effective scale `scale` +- 0.2: Gemma stores scale - 1.
    return {gemma ? scale - 1.f : scale, 0.2f};
  };
  if (n == spec.weight_prefix + "norm.weight") return norm(tied ? 4.f : 1.f);
  if (gemma && (ends_with(n, "post_attention_layernorm.weight") || ends_with(n, "post_feedforward_layernorm.weight")))
    return norm(3.f);  // Gemma's post-norms fix each block's output scale; 3 lets blocks dominate
  if (ends_with(n, "norm.weight")) return norm(1.f);  // layernorms and q/k norms
  if (ends_with(n, ".bias")) return {0.f, 0.1f * kSqrt3};
  if (ends_with(n, "embed_tokens.weight")) return {0.f, (tied ? 0.1f : 0.5f) * kSqrt3};
  if (n == spec.lm_head_name) return {0.f, 0.5f * kSqrt3};
  // Linear weights [out, in]: std 1/sqrt(in) keeps each projection's output at the scale of its
  // (normalised) input; the projections back into the residual stream get twice that (tiny: 0.125
  // and 0.18-0.25; Qwen3-0.6B shapes: 0.031 and 0.036-0.044).
  const float fan_in = float(info.shape.back());
  const bool residual_out = ends_with(n, "o_proj.weight") || ends_with(n, "down_proj.weight");
  const float std_dev = (residual_out ? 2.f : 1.f) / std::sqrt(fan_in);
  return {0.f, std_dev * kSqrt3};
}

constexpr int64_t kChunk = int64_t(1) << 20;  // elements generated and written per step

// Generates `count` values of one tensor in chunks, handing each chunk to `sink`.
template <class Sink>
Status generate(const FixtureTensor& t, uint64_t seed, Sink&& sink) {
  const Distribution d{t.center, t.half_width};
  Stream stream(seed, t.info.name);
  const int64_t count = num_elements(t.info.shape);
  std::vector<float> buf;
  for (int64_t done = 0; done < count; done += kChunk) {
    int64_t n = std::min(kChunk, count - done);
    buf.resize(size_t(n));
    for (auto& v : buf) v = d.center + d.half_width * stream.symmetric();
    HLX_RETURN_IF_ERROR(sink(buf));
  }
  return ok_status();
}

// A FILE* that closes itself.
struct FileCloser {
  void operator()(std::FILE* f) const {
    if (f) std::fclose(f);
  }
};

Status write_all(std::FILE* f, const void* data, size_t bytes, const std::string& path) {
  if (bytes && std::fwrite(data, 1, bytes, f) != bytes)
    return make_error(ErrorKind::kIo, "fixture: write to '", path, "' failed");
  return ok_status();
}

}  // namespace

// Streams the safetensors file: header (same layout as io/safetensors.cc writes: tensors back to
// back in layout order, header padded with spaces to 8 bytes), then each tensor as it is generated.
Status write_fixture_safetensors(const std::string& path, const std::vector<FixtureTensor>& tensors, DType dtype,
                                 uint64_t seed) {
  ojson header = ojson::object();
  header["__metadata__"] = {{"format", "pt"}, {"generator", "hlx fixture"}, {"seed", std::to_string(seed)}};
  uint64_t offset = 0;
  for (const auto& ft : tensors) {
    const TensorInfo& t = ft.info;
    uint64_t bytes = uint64_t(num_elements(t.shape)) * dtype_size(dtype);
    header[t.name] = {{"dtype", std::string(dtype_safetensors_name(dtype))},
                      {"shape", t.shape},
                      {"data_offsets", ojson::array({offset, offset + bytes})}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = uint8_t(uint64_t(text.size()) >> (8 * i));

  const std::string tmp = path + ".tmp";
  std::unique_ptr<std::FILE, FileCloser> f(std::fopen(tmp.c_str(), "wb"));
  if (!f) return make_error(ErrorKind::kIo, "fixture: cannot create '", tmp, "'");
  HLX_RETURN_IF_ERROR(write_all(f.get(), len, 8, tmp));
  HLX_RETURN_IF_ERROR(write_all(f.get(), text.data(), text.size(), tmp));
  std::vector<uint16_t> half;
  for (const auto& t : tensors) {
    HLX_RETURN_IF_ERROR(generate(t, seed, [&](const std::vector<float>& values) -> Status {
      if (dtype == DType::kF32) return write_all(f.get(), values.data(), values.size() * 4, tmp);
      half.resize(values.size());
      for (size_t i = 0; i < values.size(); ++i) half[i] = f32_to_bf16(values[i]).bits;
      return write_all(f.get(), half.data(), half.size() * 2, tmp);
    }));
  }
  std::FILE* raw = f.release();
  if (std::fclose(raw) != 0) return make_error(ErrorKind::kIo, "fixture: closing '", tmp, "' failed");
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return make_error(ErrorKind::kIo, "fixture: cannot rename '", tmp, "' to '", path, "': ", ec.message());
  return ok_status();
}

FixtureTensor text_fixture_tensor(const TextModelSpec& spec, const TensorInfo& info) {
  Distribution d = distribution_for(spec, info);
  return {info, d.center, d.half_width};
}

std::vector<std::string> fixture_families() {
  std::vector<std::string> out;
  for (const TextFamily* f : text_families())
    if (f->fixture) out.push_back(f->model_type);
  out.push_back("gemma3");  // Gemma3ForConditionalGeneration's layout around gemma3_text
  return out;
}
std::vector<std::string> fixture_presets() { return {"tiny", "qwen3-0.6b"}; }

std::string fixture_tokenizer_name(const std::string& family) {
  if (is_gemma(family) || family == "gemma3-vlm") return "gemma3";
  if (family == "llama" || family == "qwen2" || family == "qwen3" || is_vlm_fixture_family(family) ||
      is_qwen3_vl_fixture_family(family))
    return "qwen3";
  return "";
}

namespace {

FixtureConfigs configs_for(const Arch& a, DType dtype) {
  FixtureConfigs out;
  out.config_json = root_config(a, dtype).dump(2) + "\n";
  out.generation_config_json = generation_config(a).dump(2) + "\n";
  return out;
}

Result<TextModelSpec> spec_from_configs(const FixtureConfigs& configs, const FixtureOptions& options) {
  // The fixture's architecture is whatever the production parser makes of its config.json, so a
  // config the parser misreads (or rejects) shows up here, not as a silently different layout.
  HLX_ASSIGN_OR_RETURN(HfConfig config,
                       HfConfig::parse(configs.config_json, "fixture config.json", configs.generation_config_json));
  Result<TextModelSpec> spec = text_spec_from_config(config);
  if (!spec.ok()) return spec.status().with_context(str_cat("fixture ", options.family, "/", options.preset));
  return spec;
}

}  // namespace

Result<FixtureConfigs> fixture_configs(const FixtureOptions& options) {
  HLX_ASSIGN_OR_RETURN(Arch a, fixture_arch(options));
  return configs_for(a, options.dtype);
}

Result<TextModelSpec> fixture_spec(const FixtureOptions& options) {
  HLX_ASSIGN_OR_RETURN(FixtureConfigs configs, fixture_configs(options));
  return spec_from_configs(configs, options);
}

std::vector<float> fixture_tensor_values(const TextModelSpec& spec, const TensorInfo& info, uint64_t seed) {
  std::vector<float> out;
  out.reserve(size_t(num_elements(info.shape)));
  Status st = generate(text_fixture_tensor(spec, info), seed, [&](const std::vector<float>& v) {
    out.insert(out.end(), v.begin(), v.end());
    return ok_status();
  });
  (void)st;  // the sink never fails
  return out;
}

Status write_fixture_files(const std::string& dir, const std::vector<std::pair<std::string, std::string>>& files,
                           const FixtureOptions& options, const std::string& chat_template) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return make_error(ErrorKind::kIo, "fixture: cannot create directory '", dir, "': ", ec.message());
  for (const auto& [name, text] : files) HLX_RETURN_IF_ERROR(write_file(dir + "/" + name, text));
  if (options.tokenizer_dir.empty()) {  // a stale copy would not match this vocabulary
    for (const char* name : {"/tokenizer.json", "/tokenizer_config.json"}) std::filesystem::remove(dir + name, ec);
    return ok_status();
  }
  auto copy = [&](const char* name) -> Status {
    const std::string source = options.tokenizer_dir + name, target = dir + name;
    std::filesystem::copy_file(source, target, std::filesystem::copy_options::overwrite_existing, ec);
    if (ec) return make_error(ErrorKind::kIo, "fixture: cannot copy '", source, "' to '", target, "': ", ec.message());
    return ok_status();
  };
  HLX_RETURN_IF_ERROR(copy("/tokenizer.json"));
  if (chat_template.empty()) return copy("/tokenizer_config.json");
  const std::string src = options.tokenizer_dir + "/tokenizer_config.json";
  HLX_ASSIGN_OR_RETURN(std::string text, read_file(src));
  ojson cfg = ojson::parse(text, nullptr, /*allow_exceptions=*/false);
  if (cfg.is_discarded() || !cfg.is_object())
    return make_error(ErrorKind::kParse, "fixture: '", src, "' is not a JSON object");
  cfg["chat_template"] = chat_template;
  return write_file(dir + "/tokenizer_config.json", cfg.dump(2) + "\n");
}

Status write_fixture_weights(const std::string& dir, const std::vector<FixtureTensor>& tensors,
                             const FixtureOptions& options) {
  const std::string weights = dir + "/model.safetensors";
  HLX_RETURN_IF_ERROR(write_fixture_safetensors(weights, tensors, options.dtype, options.seed));
  return SafetensorsFile::open(weights).status().with_context("fixture: written checkpoint");
}

Status write_text_fixture(const std::string& dir, const FixtureOptions& options) {
  HLX_ASSIGN_OR_RETURN(FixtureConfigs configs, fixture_configs(options));
  HLX_ASSIGN_OR_RETURN(TextModelSpec spec, spec_from_configs(configs, options));
  HLX_RETURN_IF_ERROR(write_fixture_files(
      dir, {{"config.json", configs.config_json}, {"generation_config.json", configs.generation_config_json}}, options,
      ""));
  std::vector<FixtureTensor> tensors;
  for (const TensorInfo& t : text_checkpoint_layout(spec)) tensors.push_back(text_fixture_tensor(spec, t));
  return write_fixture_weights(dir, tensors, options);
}

}  // namespace hlx::models
