// Int8 weight micro-benchmarks (WeightFormat::kInt8): packing time, small-M streaming (GB/s of
// packed bytes, int8 + scales) and larger-M throughput, each next to the bf16 packed weight on
// the same shape so the two can be compared in one run.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "bench_util.h"
#include "core/tensor.h"
#include "runtime/kernels/matmul.h"
#include "runtime/kernels/parallel.h"

namespace {

using namespace hlx;
using kernels::WeightFormat;

using bench::random_bf16;

// Packed copies of one [N, K] bf16 weight totalling >= min_bytes (beyond the LLC when cycled).
std::vector<std::unique_ptr<kernels::PackedWeight>> make(int64_t k, int64_t n, size_t min_bytes, WeightFormat f) {
  auto w = random_bf16(k * n, 7);
  std::vector<std::unique_ptr<kernels::PackedWeight>> out;
  size_t total = 0;
  do {
    auto p = kernels::PackedWeight::pack(DType::kBF16, k, n, true, w.data(), f);
    if (!p.ok()) return {};
    total += (*p)->packed_bytes();
    out.push_back(std::move(p).value());
  } while (total < min_bytes);
  return out;
}

// Args: M, N, K, format (0 bf16, 1 int8, 2 int4). Cycles through 1 GiB of packed weights like decode.
void BM_Stream(benchmark::State& state) {
  const int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  const WeightFormat f = WeightFormat(state.range(3));
  auto ws = make(k, n, size_t(1) << 30, f);
  if (ws.empty()) return state.SkipWithError("pack failed");
  std::vector<float> a(size_t(m * k), 0.25f), c(size_t(m * n));
  for (auto& w : ws) (void)w->multiply(m, DType::kF32, a.data(), DType::kF32, c.data());
  size_t i = 0;
  for (auto _ : state) {
    (void)ws[i]->multiply(m, DType::kF32, a.data(), DType::kF32, c.data());
    benchmark::DoNotOptimize(c.data());
    i = (i + 1) % ws.size();
  }
  state.counters["GB/s"] = benchmark::Counter(
      double(ws[0]->packed_bytes()), benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
  state.counters["threads"] = kernels::max_threads();
}
// The decode step of a Qwen3-0.6B-shaped model (hidden 1024, 16 q / 8 kv heads of 128, MLP 3072):
// q, k/v, o, gate/up, down, lm_head at M = 1 in both formats, then batched decode rows.
BENCHMARK(BM_Stream)
    ->Args({1, 2048, 1024, 0})
    ->Args({1, 2048, 1024, 1})
    ->Args({1, 1024, 1024, 0})
    ->Args({1, 1024, 1024, 1})
    ->Args({1, 1024, 2048, 0})
    ->Args({1, 1024, 2048, 1})
    ->Args({1, 3072, 1024, 0})
    ->Args({1, 3072, 1024, 1})
    ->Args({1, 1024, 3072, 0})
    ->Args({1, 1024, 3072, 1})
    ->Args({2, 2048, 1024, 1})
    ->Args({4, 2048, 1024, 1})
    ->Args({6, 2048, 1024, 1})
    ->Args({8, 2048, 1024, 1})
    ->Args({1, 151936, 1024, 0})
    ->Args({1, 151936, 1024, 1})
    ->Args({1, 3072, 1024, 2})
    ->Args({1, 151936, 1024, 2})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// Args: M, N, K, format. One weight re-used (cache resident: compute bound).
void BM_Prefill(benchmark::State& state) {
  const int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  auto ws = make(k, n, 0, WeightFormat(state.range(3)));
  if (ws.empty()) return state.SkipWithError("pack failed");
  std::vector<float> a(size_t(m * k), 0.25f), c(size_t(m * n));
  for (auto _ : state) {
    (void)ws[0]->multiply(m, DType::kF32, a.data(), DType::kF32, c.data());
    benchmark::DoNotOptimize(c.data());
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * m * n * k, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}
BENCHMARK(BM_Prefill)
    ->Args({1, 2048, 1024, 0})
    ->Args({1, 2048, 1024, 1})
    ->Args({4, 2048, 1024, 0})
    ->Args({4, 2048, 1024, 1})
    ->Args({8, 2048, 1024, 0})
    ->Args({8, 2048, 1024, 1})
    ->Args({128, 3072, 1024, 0})
    ->Args({128, 3072, 1024, 1})
    ->Args({512, 2048, 1024, 0})
    ->Args({512, 2048, 1024, 1})
    ->Args({128, 1024, 3072, 0})
    ->Args({128, 1024, 3072, 1})
    ->Args({16, 2048, 1024, 1})
    ->Args({1, 3072, 1024, 2})
    ->Args({1, 3072, 1024, 1})
    ->Args({1, 3072, 1024, 0})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// Args: N, K, format: packing one [N, K] bf16 weight.
void BM_Pack(benchmark::State& state) {
  const int64_t n = state.range(0), k = state.range(1);
  auto w = random_bf16(k * n, 7);
  for (auto _ : state) {
    auto p = kernels::PackedWeight::pack(DType::kBF16, k, n, true, w.data(), WeightFormat(state.range(2)));
    benchmark::DoNotOptimize(p);
  }
  state.counters["GB/s"] =
      benchmark::Counter(double(k * n * 2), benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}
BENCHMARK(BM_Pack)->Args({3072, 1024, 0})->Args({3072, 1024, 1})->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
