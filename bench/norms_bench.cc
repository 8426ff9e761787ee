// rms_norm and rotary at Qwen3-0.6B-like shapes: hidden 1024, 16 heads x 128; decode (1 row) and
// prefill (512 rows), bf16 activations and weights.
#include <benchmark/benchmark.h>

#include <cmath>
#include <random>
#include <vector>

#include "runtime/kernels/norms.h"
#include "runtime/kernels/rotary.h"

namespace {

using namespace hlx;

std::vector<bf16> rand_bf16(size_t n) {
  std::mt19937 rng(2);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<bf16> v(n);
  for (auto& x : v) x = f32_to_bf16(u(rng));
  return v;
}

void BM_RmsNorm(benchmark::State& state) {
  const int64_t rows = state.range(0), dim = state.range(1);
  auto x = rand_bf16(static_cast<size_t>(rows * dim));
  auto w = rand_bf16(static_cast<size_t>(dim));
  std::vector<bf16> out(x.size());
  for (auto _ : state) {
    Status s = kernels::rms_norm(rows, dim, DType::kBF16, x.data(), DType::kBF16, w.data(), 1e-6f, 0.f, out.data());
    if (!s.ok()) return state.SkipWithError(s.to_string().c_str());
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["GB/s"] = benchmark::Counter(double(rows * dim) * 4, benchmark::Counter::kIsIterationInvariantRate,
                                              benchmark::Counter::kIs1000);
}
// 1 x 1024: decode hidden; 16 x 128: Qwen3 per-head q_norm at decode; 512 rows: prefill.
BENCHMARK(BM_RmsNorm)->Args({1, 1024})->Args({16, 128})->Args({512, 1024})->Args({8192, 128})
    ->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_Rotary(benchmark::State& state) {
  const int64_t rows = state.range(0), heads = 16, hd = 128;
  auto x = rand_bf16(static_cast<size_t>(rows * heads * hd));
  std::vector<bf16> out(x.size());
  std::vector<int32_t> pos(static_cast<size_t>(rows));
  for (int64_t i = 0; i < rows; ++i) pos[static_cast<size_t>(i)] = int32_t(i + 100);
  std::vector<float> inv(64);
  for (int i = 0; i < 64; ++i) inv[static_cast<size_t>(i)] = std::pow(1e6f, -float(i) / 64.f);
  for (auto _ : state) {
    Status s = kernels::rotary(rows, heads, hd, hd, DType::kBF16, x.data(), pos.data(), inv.data(), out.data());
    if (!s.ok()) return state.SkipWithError(s.to_string().c_str());
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["GB/s"] = benchmark::Counter(double(rows * heads * hd) * 4,
                                              benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}
BENCHMARK(BM_Rotary)->Arg(1)->Arg(512)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace
