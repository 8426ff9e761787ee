// gemma-3-4b-shaped vision tower (SigLIP so400m: image 896, patch 14 -> 64 x 64 = 4,096 patches,
// hidden 1152, 27 layers, 16 heads of head_dim 72, MLP 4304; pooled to 256 tokens, projected to
// the 2560-wide text model; random bf16 weights built in memory, f32 activations) through
// `vision_encode`: encode ms per image, GFLOP/s, and the ratio to the packed bf16 GEMM rate
// measured in the same run on the tower's fc1 shape. BM_Gemma3TowerAttention times the tower's
// attention alone (one layer: 4,096 x 4,096 per head, f32 q/k/v).
#include <benchmark/benchmark.h>

#include <chrono>
#include <cmath>
#include <string>
#include <vector>

#include "bench_util.h"
#include "core/tensor.h"
#include "engine/vision_model.h"
#include "models/vision_spec.h"
#include "runtime/kernels/attention.h"
#include "runtime/program.h"

namespace {

using namespace hlx;

// google/gemma-3-4b-it's vision_config and projector (legacy tensor names).
models::VlmSpec spec_4b() {
  models::VlmSpec s;
  s.family = models::VlmFamily::kGemma3;
  models::VisionSpec& v = s.vision;
  v.family = models::VisionFamily::kSiglip;
  v.model_type = "siglip_vision_model";
  v.image_size = 896;
  v.patch_size = 14;
  v.hidden_size = 1152;
  v.intermediate_size = 4304;
  v.num_layers = 27;
  v.num_heads = 16;
  v.layer_norm_eps = 1e-6;
  v.activation = models::VisionActivation::kGeluTanh;
  v.feature_layer = 27;  // last_hidden_state: every layer, then post_layernorm
  v.select_strategy = "full";
  v.use_post_layernorm = true;
  v.weight_prefix = "vision_tower.vision_model.";
  v.weight_dtype = DType::kBF16;
  s.mm_tokens_per_image = 256;
  s.projector_prefix = "multi_modal_projector.";
  s.projector_norm_eps = 1e-6;
  s.text.hidden_size = 2560;
  return s;
}

// Multiply-adds x 2 of one encode (patch embedding, per layer q/k/v/out + fc1/fc2 + attention's
// Q.K^T and P.V, the projection; norms, GELU and the pooling ignored).
double encode_flops(const models::VlmSpec& s) {
  const models::VisionSpec& v = s.vision;
  const double n = double(v.num_patches()), d = double(v.hidden_size), i = double(v.intermediate_size);
  const double per_layer = 2.0 * n * d * (4 * d + 2 * i) + 4.0 * n * n * d;
  const double patch = 2.0 * n * d * double(v.num_channels * v.patch_size * v.patch_size);
  return patch + double(v.num_layers) * per_layer +
         2.0 * double(s.mm_tokens_per_image) * d * double(s.text.hidden_size);
}

bool ends_with(const std::string& s, const char* suffix) {
  const std::string x(suffix);
  return s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0;
}

void BM_Gemma3VisionEncode4B(benchmark::State& state) {
  const models::VlmSpec spec = spec_4b();
  const models::VisionSpec& v = spec.vision;
  auto module = models::emit_vision_entry(spec);
  if (!module.ok()) return state.SkipWithError(module.status().to_string().c_str());
  auto program =
      rt::Program::compile(std::make_shared<const shlo::Module>(std::move(*module)), engine::tower_program_options(0));
  if (!program.ok()) return state.SkipWithError(program.status().to_string().c_str());
  uint32_t seed = 1;
  for (const auto& info : models::vision_checkpoint_layout(spec)) {
    Tensor t = Tensor::empty(DType::kBF16, info.shape);
    auto r = bench::random_bf16(t.num_elements(), seed++);
    // Norm gains near 1, small biases, matrices scaled by 1/sqrt(fan_in): activations stay O(1)
    // through 27 layers (no overflow or denormal slow paths in the timing).
    const bool gain = ends_with(info.name, "norm1.weight") || ends_with(info.name, "norm2.weight") ||
                      ends_with(info.name, "post_layernorm.weight");
    int64_t fan_in = 1;
    for (size_t i = 1; i < info.shape.size(); ++i) fan_in *= info.shape[i];
    if (ends_with(info.name, "mm_input_projection_weight")) fan_in = info.shape[0];
    const float scale = info.shape.size() > 1 ? 1.f / std::sqrt(float(fan_in)) : 0.1f;
    for (int64_t i = 0; i < t.num_elements(); ++i)
      t.data<bf16>()[i] = f32_to_bf16((gain ? 1.f : 0.f) + bf16_to_f32(r[size_t(i)]) * scale);
    if (!(*program)->bind_weight(info.name, t).ok()) return state.SkipWithError("bind failed");
  }
  Tensor pixels = Tensor::empty(DType::kF32, {1, v.num_channels, v.image_size, v.image_size});
  auto r = bench::random_bf16(pixels.num_elements(), 99);
  for (int64_t i = 0; i < pixels.num_elements(); ++i) pixels.data<float>()[i] = bf16_to_f32(r[size_t(i)]);
  double total = 0;
  for (auto _ : state) {
    auto t0 = std::chrono::steady_clock::now();
    auto out = (*program)->run("vision_encode", {pixels});
    total += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!out.ok()) return state.SkipWithError(out.status().to_string().c_str());
    benchmark::DoNotOptimize(out->data());
  }
  const double flops = encode_flops(spec);
  state.counters["patches"] = double(v.num_patches());
  state.counters["head_dim"] = double(v.head_dim());
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
  // The same run's GEMM rate on the MLP's fc1 shape ([n, hidden] x [hidden, intermediate]).
  const double gemm = bench::packed_bf16_gemm_rate(v.num_patches(), v.intermediate_size, v.hidden_size);
  state.counters["gemm_GFLOP/s"] = gemm;
  const double rate = total > 0 ? flops * double(state.iterations()) / total / 1e9 : 0;
  state.counters["vs_gemm"] = gemm > 0 ? rate / gemm : 0;
}
BENCHMARK(BM_Gemma3VisionEncode4B)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(2.0);

// One layer's attention of the tower: q/k/v [1, 4096, 16, head_dim], f32 or (second argument 1)
// bf16 as a bf16 checkpoint's tower has them, bidirectional (kernel picked by
// kernels::attention_path, reported as `path`: 0 prefill, 2 generic attention_impl.h).
void BM_Gemma3TowerAttention(benchmark::State& state) {
  kernels::AttentionDesc d;
  d.batch = 1;
  d.q_len = d.capacity = 4096;
  d.q_heads = d.kv_heads = 16;
  d.head_dim = state.range(0);
  d.q_type = d.kv_type = state.range(1) ? DType::kBF16 : DType::kF32;
  d.scale = 1.f / std::sqrt(float(d.head_dim));
  d.causal = false;
  const int64_t n = d.q_len * d.q_heads * d.head_dim;
  const size_t len = static_cast<size_t>(n);
  std::vector<float> q(len), k(len), v(len), out(len);
  auto r = bench::random_bf16(3 * n, 5);
  for (int64_t i = 0; i < n; ++i) {
    q[size_t(i)] = bf16_to_f32(r[size_t(i)]);
    k[size_t(i)] = bf16_to_f32(r[size_t(n + i)]);
    v[size_t(i)] = bf16_to_f32(r[size_t(2 * n + i)]);
  }
  const bool b16 = d.kv_type == DType::kBF16;
  const void* qp = b16 ? static_cast<const void*>(r.data()) : q.data();
  const void* kp = b16 ? static_cast<const void*>(r.data() + n) : k.data();
  const void* vp = b16 ? static_cast<const void*>(r.data() + 2 * n) : v.data();
  const int32_t slot = 0, kv_len = int32_t(d.capacity);
  std::vector<int32_t> pos(size_t(d.q_len));
  for (int64_t t = 0; t < d.q_len; ++t) pos[size_t(t)] = int32_t(t);
  for (auto _ : state) {
    auto s = kernels::attention(d, qp, kp, vp, &slot, pos.data(), &kv_len, nullptr, out.data());
    if (!s.ok()) return state.SkipWithError(s.to_string().c_str());
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["path"] = double(int(kernels::attention_path(d)));
  state.counters["GFLOP/s"] =
      benchmark::Counter(4.0 * double(d.q_len) * double(d.capacity) * double(d.q_heads * d.head_dim),
                         benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}
BENCHMARK(BM_Gemma3TowerAttention)->ArgsProduct({{72, 64, 80}, {0, 1}})->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
