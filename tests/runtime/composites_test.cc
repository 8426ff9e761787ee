// Every hlx composite, run twice on the same inputs: through its native kernel and through its
// own StableHLO decomposition (native_composites = false). The two must agree.
#include <gtest/gtest.h>

#include <cmath>

#include "runtime/program.h"
#include "stablehlo/composites.h"

namespace hlx {
namespace {

using shlo::FunctionBuilder;
using shlo::ModuleBuilder;
using shlo::TensorType;
using shlo::Value;

Tensor random_tensor(DType dtype, Shape shape, uint32_t seed, float scale = 1.f) {
  Tensor t = Tensor::empty(dtype, std::move(shape));
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    seed = seed * 1664525u + 1013904223u;
    float v = scale * (float(seed >> 8) / float(1 << 24) * 2.f - 1.f);
    if (dtype == DType::kF32)
      t.data<float>()[i] = v;
    else if (dtype == DType::kBF16)
      t.data<bf16>()[i] = f32_to_bf16(v);
    else
      t.data<f16>()[i] = f32_to_f16(v);
  }
  return t;
}

// int8 KV: codes in [-127, 127] and positive per-row scales.
Tensor int8_codes(Shape shape, uint32_t seed) {
  Tensor t = Tensor::empty(DType::kI8, std::move(shape));
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    seed = seed * 1664525u + 1013904223u;
    t.data<int8_t>()[i] = int8_t(int32_t(seed >> 8) % 255 - 127);
  }
  return t;
}

Tensor ints(Shape shape, std::vector<int32_t> values) {
  Tensor t = Tensor::empty(DType::kI32, std::move(shape));
  for (size_t i = 0; i < values.size(); ++i) t.data<int32_t>()[i] = values[i];
  return t;
}

float at(const Tensor& t, int64_t i) {
  if (t.dtype() == DType::kF32) return t.data<float>()[i];
  if (t.dtype() == DType::kBF16) return bf16_to_f32(t.data<bf16>()[i]);
  return f16_to_f32(t.data<f16>()[i]);
}

// Builds @main(args...) -> build(args), runs it with native kernels and with decompositions.
void expect_native_matches_decomposition(const std::vector<Tensor>& inputs,
                                         const std::function<Value(FunctionBuilder&, std::vector<Value>&)>& build,
                                         float tolerance, const std::string& expect_composite) {
  ModuleBuilder mb("composite_test");
  FunctionBuilder& f = mb.function("main");
  std::vector<Value> args;
  for (const Tensor& t : inputs) args.push_back(f.arg(TensorType{t.dtype(), t.shape()}));
  f.ret({build(f, args)});
  auto module = mb.finish();
  ASSERT_TRUE(module.ok()) << module.status().to_string();
  bool has_composite = false;
  for (const auto& op : module->find_function("main")->body)
    if (op.name == "stablehlo.composite" && op.attr("name")->str == expect_composite) has_composite = true;
  ASSERT_TRUE(has_composite);

  auto shared = std::make_shared<shlo::Module>(std::move(*module));
  std::vector<Tensor> results[2];
  for (int native = 0; native < 2; ++native) {
    rt::ProgramOptions options;
    options.native_composites = native == 1;
    auto program = rt::Program::compile(shared, options);
    ASSERT_TRUE(program.ok()) << program.status().to_string();
    auto out = (*program)->run("main", inputs);
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    results[native] = std::move(*out);
  }
  const Tensor& a = results[0][0];
  const Tensor& b = results[1][0];
  ASSERT_EQ(a.dtype(), b.dtype());
  ASSERT_EQ(a.shape(), b.shape());
  double max_err = 0, max_ref = 0;
  for (int64_t i = 0; i < a.num_elements(); ++i) {
    ASSERT_TRUE(std::isfinite(at(a, i)) && std::isfinite(at(b, i))) << "element " << i;
    max_err = std::max(max_err, double(std::fabs(at(a, i) - at(b, i))));
    max_ref = std::max(max_ref, double(std::fabs(at(a, i))));
  }
  EXPECT_GT(max_ref, 0.0) << "degenerate output";
  EXPECT_LE(max_err, tolerance * std::max(1.0, max_ref)) << expect_composite;
}

TEST(Composites, RmsNorm) {
  for (DType xt : {DType::kF32, DType::kBF16})
    for (float offset : {0.f, 1.f}) {
      std::vector<Tensor> in = {random_tensor(xt, {5, 64}, 1, 3.f), random_tensor(DType::kBF16, {64}, 2)};
      float tol = xt == DType::kF32 ? 1e-5f : 1e-2f;  // bf16 output: one rounding step may differ
      expect_native_matches_decomposition(
          in, [&](FunctionBuilder& f, std::vector<Value>& a) { return shlo::rms_norm(f, a[0], a[1], 1e-6f, offset); },
          tol, "hlx.rms_norm");
    }
}

TEST(Composites, LayerNorm) {
  std::vector<Tensor> in = {random_tensor(DType::kF32, {2, 3, 48}, 3, 2.f), random_tensor(DType::kF32, {48}, 4),
                            random_tensor(DType::kF16, {48}, 5)};
  in[2] = random_tensor(DType::kF32, {48}, 5);
  expect_native_matches_decomposition(
      in, [](FunctionBuilder& f, std::vector<Value>& a) { return shlo::layer_norm(f, a[0], a[1], a[2], 1e-5f); }, 1e-5f,
      "hlx.layer_norm");
}

TEST(Composites, Rotary) {
  for (int64_t half : {8, 4}) {  // full and partial rotary
    Tensor inv_freq = Tensor::empty(DType::kF32, {half});
    for (int64_t i = 0; i < half; ++i) inv_freq.data<float>()[i] = std::pow(10000.f, -float(i) / float(half));
    for (DType xt : {DType::kF32, DType::kBF16}) {
      std::vector<Tensor> in = {random_tensor(xt, {4, 3, 16}, 6), ints({4}, {0, 7, 300, 4095}), inv_freq};
      float tol = xt == DType::kF32 ? 1e-4f : 1e-2f;  // angles up to ~4e3 rad: sin/cos of large f32 arguments
      expect_native_matches_decomposition(
          in, [](FunctionBuilder& f, std::vector<Value>& a) { return shlo::rotary(f, a[0], a[1], a[2]); }, tol,
          "hlx.rotary");
    }
  }
}

struct AttentionCase {
  const char* name;
  bool causal;
  int64_t window;
  float softcap;
  bool bias;
  DType kv;
};

TEST(Composites, Attention) {
  const AttentionCase cases[] = {
      {"causal", true, 0, 0.f, false, DType::kBF16},  {"causal_f32_kv", true, 0, 0.f, false, DType::kF32},
      {"sliding", true, 3, 0.f, false, DType::kBF16}, {"softcap", true, 0, 5.f, false, DType::kBF16},
      {"bias", false, 0, 0.f, true, DType::kF32},     {"bidirectional", false, 0, 0.f, false, DType::kBF16},
      {"int8_kv", true, 0, 0.f, false, DType::kI8},   {"int8_kv_bias", false, 3, 0.f, true, DType::kI8},
  };
  const int64_t b = 3, t = 3, hq = 4, hkv = 2, dh = 8, n = 4, s = 16;
  for (const AttentionCase& c : cases) {
    SCOPED_TRACE(c.name);
    const bool i8 = c.kv == DType::kI8;
    std::vector<Tensor> in = {
        random_tensor(DType::kF32, {b, t, hq, dh}, 7),
        i8 ? int8_codes({n, s, hkv, dh}, 8) : random_tensor(c.kv, {n, s, hkv, dh}, 8),
        i8 ? int8_codes({n, s, hkv, dh}, 9) : random_tensor(c.kv, {n, s, hkv, dh}, 9),
        ints({b}, {2, 0, 3}),
        ints({b, t}, {5, 6, 7, 0, 1, 2, 0, 0, 0}),
        ints({b}, {8, 3, 0}),  // the last row sees no key: zeros
    };
    if (c.bias) in.push_back(random_tensor(DType::kF32, {b, t, s}, 10, 2.f));
    if (i8)  // k_scale, v_scale [N, S, Hkv]: positive, about 1/127
      for (uint32_t seed : {11u, 12u}) {
        Tensor sc = random_tensor(DType::kF32, {n, s, hkv}, seed);
        for (int64_t i = 0; i < sc.num_elements(); ++i)
          sc.data<float>()[i] = (std::fabs(sc.data<float>()[i]) + 0.1f) / 127.f;
        in.push_back(sc);
      }
    shlo::AttentionOptions o{1.f / std::sqrt(float(dh)), c.causal, c.window, c.softcap};
    expect_native_matches_decomposition(
        in,
        [&](FunctionBuilder& f, std::vector<Value>& a) {
          std::optional<Value> bias;
          if (c.bias) bias = a[6];
          std::optional<std::pair<Value, Value>> scales;
          if (i8) scales = std::make_pair(a[a.size() - 2], a[a.size() - 1]);
          return shlo::attention(f, a[0], a[1], a[2], a[3], a[4], a[5], bias, o, scales);
        },
        1e-5f, "hlx.attention");
  }
}

}  // namespace
}  // namespace hlx
