// Qwen3-VL-2B-shaped vision tower (depth 24, hidden 1024, MLP 4096, 16 heads, patch 16, merge 2,
// DeepStack taps 5/11/17, out 2048; random bf16 weights built in memory) on a 448x448 and an
// 896x896 image through `vision_encode_padded` at the exact patch count: encode ms, GFLOP/s, and
// the ratio to the packed bf16 GEMM rate measured in the same run on the tower's MLP shape.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <vector>

#include "bench_util.h"
#include "core/tensor.h"
#include "engine/vision_model.h"
#include "models/qwen3_vl.h"
#include "runtime/program.h"

namespace {

using namespace hlx;

models::Qwen3VLSpec spec_2b() {
  models::Qwen3VLSpec s;
  models::Qwen3VLVisionSpec& v = s.vision;
  v.depth = 24;
  v.hidden_size = 1024;
  v.intermediate_size = 4096;
  v.num_heads = 16;
  v.patch_size = 16;
  v.out_hidden_size = 2048;
  v.num_position_embeddings = 2304;
  v.deepstack_visual_indexes = {5, 11, 17};
  v.weight_dtype = DType::kBF16;
  s.text.hidden_size = 2048;
  return s;
}

// Multiply-adds x 2 of one encode of n patches (matmuls and attention; norms and GELU ignored).
double encode_flops(const models::Qwen3VLVisionSpec& v, int64_t n) {
  const double d = double(v.hidden_size), i = double(v.intermediate_size), m = double(v.merge_unit());
  const double per_block = 2.0 * n * d * (3 * d + d + 2 * i) + 4.0 * double(n) * double(n) * d;
  const double merger = 2.0 * (n / m) * (m * d) * (m * d + double(v.out_hidden_size));
  return 2.0 * n * d * double(v.patch_dim()) + v.depth * per_block +
         (1 + double(v.deepstack_visual_indexes.size())) * merger;
}

void BM_Qwen3VLVisionEncode2B(benchmark::State& state) {
  const int64_t side = state.range(0);
  models::Qwen3VLSpec spec = spec_2b();
  const auto& v = spec.vision;
  const int64_t g = side / v.patch_size, n = g * g;
  auto module = models::emit_qwen3_vl_vision_padded_entry(spec, n);
  if (!module.ok()) return state.SkipWithError(module.status().to_string().c_str());
  auto program =
      rt::Program::compile(std::make_shared<const shlo::Module>(std::move(*module)), engine::tower_program_options(0));
  if (!program.ok()) return state.SkipWithError(program.status().to_string().c_str());
  uint32_t seed = 1;
  for (const auto& info : models::qwen3_vl_vision_layout(spec)) {
    Tensor t = Tensor::empty(DType::kBF16, info.shape);
    auto r = bench::random_bf16(t.num_elements(), seed++);
    // Scale by 1/sqrt(fan_in) so activations stay O(1) through 24 blocks.
    const float scale = info.shape.size() > 1 ? 1.f / std::sqrt(float(info.shape.back())) : 0.1f;
    for (int64_t i = 0; i < t.num_elements(); ++i) t.data<bf16>()[i] = f32_to_bf16(bf16_to_f32(r[size_t(i)]) * scale);
    if (!(*program)->bind_weight(info.name, t).ok()) return state.SkipWithError("bind failed");
  }
  auto pos = models::qwen3_vl_vision_positions(v, models::VisionGrid{1, g, g}, n);
  if (!pos.ok()) return state.SkipWithError(pos.status().to_string().c_str());
  Tensor patches = Tensor::empty(DType::kF32, {n, v.patch_dim()});
  auto r = bench::random_bf16(patches.num_elements(), 99);
  for (int64_t i = 0; i < patches.num_elements(); ++i) patches.data<float>()[i] = bf16_to_f32(r[size_t(i)]);
  Tensor valid = Tensor::empty(DType::kI32, {});
  *valid.data<int32_t>() = int32_t(n);
  double total = 0;
  for (auto _ : state) {
    auto t0 = std::chrono::steady_clock::now();
    auto out =
        (*program)->run("vision_encode_padded", {patches, pos->embed_index, pos->embed_weight, pos->rotary, valid});
    total += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!out.ok()) return state.SkipWithError(out.status().to_string().c_str());
    benchmark::DoNotOptimize(out->data());
  }
  const double flops = encode_flops(v, n);
  state.counters["patches"] = double(n);
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
  // The same run's GEMM rate on the MLP's fc1 shape ([n, hidden] x [hidden, intermediate]).
  const double gemm = bench::packed_bf16_gemm_rate(n, v.intermediate_size, v.hidden_size);
  state.counters["gemm_GFLOP/s"] = gemm;
  const double rate = total > 0 ? flops * double(state.iterations()) / total / 1e9 : 0;
  state.counters["vs_gemm"] = gemm > 0 ? rate / gemm : 0;
}
BENCHMARK(BM_Qwen3VLVisionEncode2B)->Arg(448)->Arg(896)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(2.0);

}  // namespace
