// Matmul micro-benchmarks: packed bf16 prefill throughput (GFLOP/s), small-M weight streaming
// (GB/s of weight bytes) against a DRAM read-bandwidth probe with the same thread count.
#include <benchmark/benchmark.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench_util.h"
#include "core/tensor.h"
#include "runtime/kernels/cpu.h"
#include "runtime/kernels/matmul.h"

#include "runtime/kernels/x86_intrin.h"  // <immintrin.h>; see there why

namespace {

using namespace hlx;

using bench::random_bf16;

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

// Args: M, N, K. Products that re-use one cache-resident weight: the kernels' compute rate without
// DRAM (prefill-sized M, and decode-sized M to see the streaming kernel's own rate: Gdp/s counts
// G vdpbf16ps/s, 32 multiply-adds each; ~6 G/s per core is the peak). See BM_StreamBf16 for the
// bandwidth-bound case.
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
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * m * n * k, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
  state.counters["Gdp/s"] = benchmark::Counter(double(m * n * k) / 32, benchmark::Counter::kIsIterationInvariantRate,
                                               benchmark::Counter::kIs1000);
  state.counters["threads"] = omp_get_max_threads();
}
BENCHMARK(BM_PackedBf16)
    ->Args({128, 2048, 2048})
    ->Args({512, 2048, 2048})
    ->Args({128, 3072, 1024})
    ->Args({16, 2048, 2048})
    ->Args({1, 512, 1024})
    ->Args({4, 512, 1024})
    ->Args({8, 512, 1024})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// Args: M, N, K. Cycles through 1 GiB of distinct packed weights so every product streams its
// weight from DRAM, like a decode step does.
void BM_StreamBf16(benchmark::State& state) {
  const int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  auto ws = make_weights(k, n, size_t(1) << 30);
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
  state.counters["GB/s"] =
      benchmark::Counter(2.0 * n * k, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
  state.counters["threads"] = omp_get_max_threads();
}
BENCHMARK(BM_StreamBf16)
    ->Args({1, 2048, 2048})
    ->Args({1, 4096, 4096})
    ->Args({1, 3072, 1024})
    ->Args({1, 1024, 3072})
    ->Args({4, 2048, 2048})
    ->Args({5, 2048, 2048})
    ->Args({8, 2048, 2048})
    ->Args({8, 3072, 1024})
    ->Args({8, 1024, 3072})
    ->Args({16, 2048, 2048})
    ->Args({1, 151936, 1024})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// The decode step's weights (Qwen3-0.6B: 28 layers of q, k, v, o, gate, up, down, plus lm_head;
// 1.19 GB of bf16), packed once. step(grouped) multiplies by all of them: with `grouped`, q/k/v
// and gate/up run as one kernels::multiply_grouped each, as the runtime's plan groups sibling
// dot_generals (HLX_GROUP_DOTS); otherwise one multiply per weight. Unlike in BM_StreamBf16, each
// product's pool job start/finish and the wait for the last thread's blocks count here.
struct DecodeStep {
  int64_t m = 1;
  std::vector<std::unique_ptr<kernels::PackedWeight>> ws;
  std::vector<bf16> a;
  std::vector<float> c;
  double bytes = 0;
  std::vector<kernels::GroupedProduct> group;

  Status init(int64_t rows, kernels::WeightFormat format = kernels::WeightFormat::kAsStored) {
    m = rows;
    const int64_t layer[][2] = {{1024, 2048}, {1024, 1024}, {1024, 1024}, {2048, 1024},
                                {1024, 3072}, {1024, 3072}, {3072, 1024}};  // {K, N}
    std::vector<std::vector<bf16>> src;
    for (const auto& kn : layer) src.push_back(random_bf16(kn[0] * kn[1], uint32_t(kn[0] + kn[1])));
    for (int l = 0; l < 28; ++l)
      for (size_t i = 0; i < 7; ++i) {
        HLX_ASSIGN_OR_RETURN(
            auto p, kernels::PackedWeight::pack(DType::kBF16, layer[i][0], layer[i][1], true, src[i].data(), format));
        bytes += double(p->packed_bytes());
        ws.push_back(std::move(p));
      }
    auto head = random_bf16(int64_t(151936) * 1024, 11);
    HLX_ASSIGN_OR_RETURN(auto p, kernels::PackedWeight::pack(DType::kBF16, 1024, 151936, true, head.data(), format));
    bytes += double(p->packed_bytes());
    ws.push_back(std::move(p));
    a = random_bf16(m * 3072, 1);
    c.assign(static_cast<size_t>(m * 151936), 0.f);
    return ok_status();
  }

  Status step(bool grouped) {
    const size_t group_size[] = {3, 0, 0, 1, 2, 0, 1};  // q/k/v, o, gate/up, down
    for (size_t i = 0; i < ws.size(); ++i) {
      const size_t g = i < 28 * 7 ? group_size[i % 7] : 1;
      if (grouped && g > 1) {
        group.clear();
        for (size_t j = 0; j < g; ++j) group.push_back({ws[i + j].get(), c.data() + j * size_t(m) * 3072});
        HLX_RETURN_IF_ERROR(kernels::multiply_grouped(m, DType::kBF16, a.data(), DType::kF32, group));
      } else if (!grouped || g == 1) {
        HLX_RETURN_IF_ERROR(ws[i]->multiply(m, DType::kBF16, a.data(), DType::kF32, c.data()));
      }
    }
    benchmark::DoNotOptimize(c.data());
    return ok_status();
  }
};

void decode_step_weights(benchmark::State& state, bool grouped) {
  DecodeStep d;
  Status s = d.init(state.range(0));
  if (!s.ok()) return state.SkipWithError(s.to_string().c_str());
  for (auto _ : state)
    if (s = d.step(grouped); !s.ok()) return state.SkipWithError(s.to_string().c_str());
  state.counters["GB/s"] =
      benchmark::Counter(d.bytes, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
  state.counters["threads"] = omp_get_max_threads();
}
void BM_DecodeStepWeights(benchmark::State& state) { decode_step_weights(state, false); }
void BM_DecodeStepWeightsGrouped(benchmark::State& state) { decode_step_weights(state, true); }
BENCHMARK(BM_DecodeStepWeights)->Arg(1)->Arg(8)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(1.0);
BENCHMARK(BM_DecodeStepWeightsGrouped)->Arg(1)->Arg(8)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(1.0);

// Grouped vs ungrouped A/B in one process on the same packed weights (where they sit in memory,
// and so their TLB and DRAM behaviour, varies from process to process): each iteration runs the
// ungrouped step then the grouped one; counters give each one's mean ms and GB/s.
void BM_DecodeStepWeightsAB(benchmark::State& state) {
  DecodeStep d;
  Status s = d.init(state.range(0));
  if (!s.ok()) return state.SkipWithError(s.to_string().c_str());
  using clock = std::chrono::steady_clock;
  double ns[2] = {0, 0};
  for (auto _ : state)
    for (int g = 0; g < 2; ++g) {
      const auto t0 = clock::now();
      if (s = d.step(g == 1); !s.ok()) return state.SkipWithError(s.to_string().c_str());
      ns[g] += std::chrono::duration<double, std::nano>(clock::now() - t0).count();
    }
  const double it = double(state.iterations());
  state.counters["ungrouped_ms"] = ns[0] / it / 1e6;
  state.counters["grouped_ms"] = ns[1] / it / 1e6;
  state.counters["ungrouped_GB/s"] = d.bytes / (ns[0] / it);
  state.counters["grouped_GB/s"] = d.bytes / (ns[1] / it);
  state.counters["threads"] = omp_get_max_threads();
}
BENCHMARK(BM_DecodeStepWeightsAB)->Arg(1)->Arg(8)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(3.0);

// The grouped decode step in bf16, int8 and int4 (--weights int8 / int4) in turn, M = the
// argument, on weights packed once per format: all three see the same load, so the ratios of their
// step times show how the integer kernels compare with the bf16 ones (at M = 1 a ratio of
// bandwidths: the formats' bytes differ; at M = 8, issue 26's "the batch must not fall behind
// bf16"). Counters: each format's median wall ms and GB/s (its packed bytes over that time) and
// bf16's time over each integer format's (> 1: faster than bf16).
void BM_DecodeStepFormats(benchmark::State& state) {
  const kernels::WeightFormat formats[] = {kernels::WeightFormat::kAsStored, kernels::WeightFormat::kInt8,
                                           kernels::WeightFormat::kInt4};
  const char* names[] = {"bf16", "int8", "int4"};
  DecodeStep d[3];
  for (int i = 0; i < 3; ++i)
    if (Status s = d[i].init(state.range(0), formats[i]); !s.ok()) return state.SkipWithError(s.to_string().c_str());
  using clock = std::chrono::steady_clock;
  std::vector<double> wall[3];
  for (auto _ : state)
    for (int i = 0; i < 3; ++i) {
      const auto t0 = clock::now();
      if (Status s = d[i].step(true); !s.ok()) return state.SkipWithError(s.to_string().c_str());
      wall[i].push_back(std::chrono::duration<double, std::milli>(clock::now() - t0).count());
    }
  double ms[3];
  for (int i = 0; i < 3; ++i) {
    std::sort(wall[i].begin(), wall[i].end());
    ms[i] = wall[i][wall[i].size() / 2];
    state.counters[std::string(names[i]) + "_ms"] = ms[i];
    state.counters[std::string(names[i]) + "_GB/s"] = d[i].bytes / ms[i] / 1e6;
  }
  state.counters["bf16/int8_time"] = ms[0] / ms[1];
  state.counters["bf16/int4_time"] = ms[0] / ms[2];
  state.counters["threads"] = omp_get_max_threads();
}
BENCHMARK(BM_DecodeStepFormats)->Arg(1)->Arg(8)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(4.0);

// The grouped decode step at M = 1, 4 and 8 in turn on the same packed weights, each iteration
// running all three: on a busy machine the three see the same load. Counters: the median wall ms
// and the median process CPU ms (both threads' time on a CPU: robust to being descheduled, which
// wall time is not) of each M, and the ratio M = 8 / M = 1 of both.
void BM_DecodeStepByM(benchmark::State& state) {
  DecodeStep d;
  Status s = d.init(8);
  if (!s.ok()) return state.SkipWithError(s.to_string().c_str());
  const int64_t ms[] = {1, 4, 8};
  using clock = std::chrono::steady_clock;
  auto cpu_ms = [] {
    timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return double(t.tv_sec) * 1e3 + double(t.tv_nsec) / 1e6;
  };
  std::vector<double> wall[3], cpu[3];
  for (auto _ : state)
    for (int i = 0; i < 3; ++i) {
      d.m = ms[i];  // rows [0, m) of the M = 8 activations and outputs
      const auto t0 = clock::now();
      const double c0 = cpu_ms();
      if (s = d.step(true); !s.ok()) return state.SkipWithError(s.to_string().c_str());
      cpu[i].push_back(cpu_ms() - c0);
      wall[i].push_back(std::chrono::duration<double, std::milli>(clock::now() - t0).count());
    }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  for (int i = 0; i < 3; ++i) {
    const std::string m = std::string("m").append(std::to_string(ms[i]));
    state.counters[m + "_ms"] = median(wall[i]);
    state.counters[m + "_cpu_ms"] = median(cpu[i]);
  }
  state.counters["m8/m1"] = median(wall[2]) / median(wall[0]);
  state.counters["m8/m1_cpu"] = median(cpu[2]) / median(cpu[0]);
  state.counters["threads"] = omp_get_max_threads();
}
BENCHMARK(BM_DecodeStepByM)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(6.0);

// Sums [begin, end) 64-byte lines with 512-bit loads (4 independent accumulators).
__attribute__((target("avx512f"))) uint64_t sum_lines_avx512(const uint64_t* p, int64_t begin, int64_t end) {
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
  int64_t i = begin;
  for (; i + 4 <= end; i += 4) {
    a0 = _mm512_add_epi64(a0, _mm512_load_si512(p + 8 * i));
    a1 = _mm512_add_epi64(a1, _mm512_load_si512(p + 8 * i + 8));
    a2 = _mm512_add_epi64(a2, _mm512_load_si512(p + 8 * i + 16));
    a3 = _mm512_add_epi64(a3, _mm512_load_si512(p + 8 * i + 24));
  }
  for (; i < end; ++i) a0 = _mm512_add_epi64(a0, _mm512_load_si512(p + 8 * i));
  return uint64_t(_mm512_reduce_add_epi64(_mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3))));
}

uint64_t sum_lines(const uint64_t* p, int64_t begin, int64_t end) {
  uint64_t t0 = 0, t1 = 0;
  for (int64_t i = begin; i < end; ++i) {
    const uint64_t* l = p + 8 * i;
    t0 += l[0] + l[2] + l[4] + l[6];
    t1 += l[1] + l[3] + l[5] + l[7];
  }
  return t0 + t1;
}

// DRAM read bandwidth probe: sums a 1 GiB buffer (far beyond any LLC here) with all OpenMP
// threads, each a contiguous chunk; 512-bit loads where the CPU has AVX-512.
void BM_DramRead(benchmark::State& state) {
  const size_t bytes = size_t(1) << 30;
  auto buf = allocate_aligned(bytes);
  std::memset(buf.get(), 1, bytes);
  const uint64_t* p = static_cast<const uint64_t*>(buf.get());
  const int64_t lines = int64_t(bytes / 64);
  const bool wide = kernels::cpu_features().avx512f;
  for (auto _ : state) {
    uint64_t total = 0;
#pragma omp parallel reduction(+ : total)
    {
      const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
      const int64_t b = lines * t / nt, e = lines * (t + 1) / nt;
      total += wide ? sum_lines_avx512(p, b, e) : sum_lines(p, b, e);
    }
    benchmark::DoNotOptimize(total);
  }
  state.counters["GB/s"] =
      benchmark::Counter(double(bytes), benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
  state.counters["threads"] = omp_get_max_threads();
}
BENCHMARK(BM_DramRead)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(1.0);

}  // namespace
