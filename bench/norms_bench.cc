// rms_norm and rotary at Qwen3-0.6B-like shapes: hidden 1024, 16 heads x 128; decode (1 row) and
// prefill (512 rows), bf16 activations and weights.
#include <benchmark/benchmark.h>

#include <cmath>
#include <random>
#include <vector>

#include "runtime/kernels/ew_vec.h"
#include "runtime/kernels/norms.h"
#include "runtime/kernels/norms_internal.h"
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
BENCHMARK(BM_RmsNorm)
    ->Args({1, 1024})
    ->Args({16, 128})
    ->Args({512, 1024})
    ->Args({8192, 128})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

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
  state.counters["GB/s"] = benchmark::Counter(
      double(rows * heads * hd) * 4, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}
BENCHMARK(BM_Rotary)->Arg(1)->Arg(512)->Unit(benchmark::kMicrosecond)->UseRealTime();

// f32 activations (the prefill graph's case), 512 rows of 16 x 128.
void BM_RotaryF32(benchmark::State& state) {
  const int64_t rows = 512, heads = 16, hd = 128;
  std::vector<float> x(static_cast<size_t>(rows * heads * hd), 0.5f), out(x.size());
  std::vector<int32_t> pos(static_cast<size_t>(rows));
  for (int64_t i = 0; i < rows; ++i) pos[static_cast<size_t>(i)] = int32_t(i);
  std::vector<float> inv(64);
  for (int i = 0; i < 64; ++i) inv[static_cast<size_t>(i)] = std::pow(1e6f, -float(i) / 64.f);
  for (auto _ : state) {
    Status s = kernels::rotary(rows, heads, hd, hd, DType::kF32, x.data(), pos.data(), inv.data(), out.data());
    if (!s.ok()) return state.SkipWithError(s.to_string().c_str());
    benchmark::DoNotOptimize(out.data());
  }
}
BENCHMARK(BM_RotaryF32)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace

namespace {

// f32 -> bf16 of a [512 x 1024] activation (the one-op convert before each matmul): the scalar
// loop (arg 0) against kernels/ew_vec.h (arg 1), one thread.
void BM_ConvertF32ToBf16(benchmark::State& state) {
  const size_t n = 512 * 1024;
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = float(i % 977) * 0.37f - 100.0f;
  std::vector<hlx::bf16> y(n);
  for (auto _ : state) {
    if (state.range(0) == 0)
      for (size_t i = 0; i < n; ++i) y[i] = hlx::f32_to_bf16(x[i]);
    else
      hlx::kernels::f32_to_bf16_exact(x.data(), y.data(), int64_t(n));
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GB/s"] =
      benchmark::Counter(double(n) * 6, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}
BENCHMARK(BM_ConvertF32ToBf16)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace

namespace {

// rms_norm with f32 activations and bf16 weights (the prefill graph's case): the portable loop
// (third arg 0) against the dispatching kernel (1, AVX-512 here).
void BM_RmsNormF32(benchmark::State& state) {
  const int64_t rows = state.range(0), dim = state.range(1);
  std::vector<float> x(static_cast<size_t>(rows * dim));
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(i % 977) * 0.01f - 4.0f;
  auto w = rand_bf16(static_cast<size_t>(dim));
  std::vector<float> out(x.size());
  for (auto _ : state) {
    Status s =
        state.range(2) == 0
            ? kernels::internal::rms_norm_portable(rows, dim, DType::kF32, x.data(), DType::kBF16, w.data(), 1e-6f, 0.f,
                                                   out.data())
            : kernels::rms_norm(rows, dim, DType::kF32, x.data(), DType::kBF16, w.data(), 1e-6f, 0.f, out.data());
    if (!s.ok()) return state.SkipWithError(s.to_string().c_str());
    benchmark::DoNotOptimize(out.data());
  }
}
BENCHMARK(BM_RmsNormF32)
    ->Args({512, 1024, 0})
    ->Args({512, 1024, 1})
    ->Args({8192, 128, 0})
    ->Args({8192, 128, 1})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

}  // namespace

namespace {

// The prefill pattern rms_norm (f32 out) -> convert to bf16 of the same [512 x 1024]: the
// convert as a scalar loop (arg 0) or kernels/ew_vec.h (arg 1).
void BM_RmsNormThenConvert(benchmark::State& state) {
  const int64_t rows = 512, dim = 1024;
  std::vector<float> x(static_cast<size_t>(rows * dim));
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(i % 977) * 0.01f - 4.0f;
  auto w = rand_bf16(static_cast<size_t>(dim));
  std::vector<float> normed(x.size());
  std::vector<bf16> y(x.size());
  for (auto _ : state) {
    Status s = kernels::rms_norm(rows, dim, DType::kF32, x.data(), DType::kBF16, w.data(), 1e-6f, 0.f, normed.data());
    if (!s.ok()) return state.SkipWithError(s.to_string().c_str());
    if (state.range(0) == 0)
      for (size_t i = 0; i < y.size(); ++i) y[i] = f32_to_bf16(normed[i]);
    else
      kernels::f32_to_bf16_exact(normed.data(), y.data(), int64_t(y.size()));
    benchmark::DoNotOptimize(y.data());
  }
}
BENCHMARK(BM_RmsNormThenConvert)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace
