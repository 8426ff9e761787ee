// Matmul micro-benchmarks: packed bf16 prefill throughput (GFLOP/s), small-M weight streaming
// (GB/s of weight bytes) against a DRAM read-bandwidth probe with the same thread count.
#include <benchmark/benchmark.h>
#include <omp.h>

#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "core/tensor.h"
#include "runtime/kernels/matmul.h"

namespace {

using namespace hlx;

std::vector<bf16> random_bf16(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  std::vector<bf16> v(static_cast<size_t>(n));
  for (auto& x : v) x = f32_to_bf16(d(rng));
  return v;
}

// Weights totalling >= `min_bytes` so a cycle through them cannot be served from the LLC
// (64-128 MiB usable here).
std::vector<std::unique_ptr<kernels::PackedWeight>> make_weights(int64_t k, int64_t n, size_t min_bytes) {
  auto w = random_bf16(k * n, 7);
  size_t each = size_t(k * n) * 2;
  size_t count = std::max<size_t>(1, (min_bytes + each - 1) / each);
  std::vector<std::unique_ptr<kernels::PackedWeight>> out;
  for (size_t i = 0; i < count; ++i) {
    auto p = kernels::PackedWeight::pack(DType::kBF16, k, n, /*transposed=*/true, w.data());
    if (!p.ok()) return {};
    out.push_back(std::move(p).value());
  }
  return out;
}

// Args: M, N, K. Prefill-sized products re-use one weight (compute bound); see BM_StreamBf16 for
// the bandwidth-bound case.
void BM_PackedBf16(benchmark::State& state) {
  const int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  auto ws = make_weights(k, n, 0);
  if (ws.empty()) return state.SkipWithError("pack failed");
  auto a = random_bf16(m * k, 1);
  std::vector<float> c(static_cast<size_t>(m * n));
  for (auto _ : state) {
    Status s = ws[0]->multiply(m, DType::kBF16, a.data(), DType::kF32, c.data());
    if (!s.ok()) return state.SkipWithError(s.to_string().c_str());
    benchmark::DoNotOptimize(c.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * m * n * k, benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::kIs1000);
  state.counters["threads"] = omp_get_max_threads();
}
BENCHMARK(BM_PackedBf16)->Args({128, 2048, 2048})->Args({512, 2048, 2048})->Args({128, 3072, 1024})
    ->Args({16, 2048, 2048})->Unit(benchmark::kMicrosecond)->UseRealTime();

// Args: M, N, K. Cycles through 512 MiB of distinct packed weights so every product streams its
// weight from DRAM, like a decode step does.
void BM_StreamBf16(benchmark::State& state) {
  const int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  auto ws = make_weights(k, n, size_t(512) << 20);
  if (ws.empty()) return state.SkipWithError("pack failed");
  auto a = random_bf16(m * k, 1);
  std::vector<float> c(static_cast<size_t>(m * n));
  for (auto& w : ws) (void)w->multiply(m, DType::kBF16, a.data(), DType::kF32, c.data());  // warm-up
  size_t i = 0;
  for (auto _ : state) {
    Status s = ws[i]->multiply(m, DType::kBF16, a.data(), DType::kF32, c.data());
    if (!s.ok()) return state.SkipWithError(s.to_string().c_str());
    benchmark::DoNotOptimize(c.data());
    i = (i + 1) % ws.size();
  }
  state.counters["GB/s"] = benchmark::Counter(2.0 * n * k, benchmark::Counter::kIsIterationInvariantRate,
                                              benchmark::Counter::kIs1000);
  state.counters["threads"] = omp_get_max_threads();
}
BENCHMARK(BM_StreamBf16)->Args({1, 2048, 2048})->Args({1, 4096, 4096})->Args({1, 3072, 1024})
    ->Args({1, 1024, 3072})->Args({4, 2048, 2048})->Args({1, 151936, 1024})
    ->Unit(benchmark::kMicrosecond)->UseRealTime();

// DRAM read bandwidth probe: sums a 1 GiB buffer (16x any LLC here) with all OpenMP threads.
void BM_DramRead(benchmark::State& state) {
  const size_t bytes = size_t(1) << 30;
  auto buf = allocate_aligned(bytes);
  std::memset(buf.get(), 1, bytes);
  const uint64_t* p = static_cast<const uint64_t*>(buf.get());
  const int64_t words = int64_t(bytes / 8);
  for (auto _ : state) {
    uint64_t total = 0;
#pragma omp parallel for schedule(static) reduction(+ : total)
    for (int64_t i = 0; i < words; i += 8) {
      total += (p[i] ^ p[i + 1]) + (p[i + 2] ^ p[i + 3]) + (p[i + 4] ^ p[i + 5]) + (p[i + 6] ^ p[i + 7]);
    }
    benchmark::DoNotOptimize(total);
  }
  state.counters["GB/s"] = benchmark::Counter(double(bytes), benchmark::Counter::kIsIterationInvariantRate,
                                              benchmark::Counter::kIs1000);
  state.counters["threads"] = omp_get_max_threads();
}
BENCHMARK(BM_DramRead)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(1.0);

}  // namespace
