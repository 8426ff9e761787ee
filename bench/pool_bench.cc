// The runtime's thread pool (kernels/parallel.h): the cost of one parallel_for (what every decode
// kernel pays, ~300 times per token) and the DRAM probe `hlx bench` divides by.
#include <benchmark/benchmark.h>

#include <atomic>

#include "runtime/kernels/membw.h"
#include "runtime/kernels/parallel.h"

namespace {

using namespace hlx;

// Arg: items. Each item is a trivial atomic add, so the time is the pool's fork/claim/join cost.
void BM_ParallelForOverhead(benchmark::State& state) {
  const int64_t n = state.range(0);
  std::atomic<int64_t> sink{0};
  for (auto _ : state)
    kernels::parallel_for(n, 1, [&](int64_t b, int64_t e) { sink.fetch_add(e - b, std::memory_order_relaxed); });
  benchmark::DoNotOptimize(sink.load());
  state.counters["threads"] = kernels::max_threads();
}
BENCHMARK(BM_ParallelForOverhead)->Arg(2)->Arg(16)->Arg(256)->Unit(benchmark::kMicrosecond)->UseRealTime();

// The probe of `hlx bench` (1 GiB, 16 MiB chunks claimed on the pool, best of 3 passes).
void BM_DramReadPool(benchmark::State& state) {
  double best = 0;
  for (auto _ : state) best = kernels::probe_dram_read(size_t(1) << 30, 3).best_gbps;
  state.counters["GB/s"] = best;
  state.counters["threads"] = kernels::max_threads();
}
BENCHMARK(BM_DramReadPool)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(1);

}  // namespace
