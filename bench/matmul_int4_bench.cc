// Prefill products of a Qwen3-0.6B-shaped layer (hidden 1024, q 2048, k/v 1024, MLP 3072) at
// M = 512 bf16 rows with bf16, int8 and int4 weights, one and two threads: the int4 tiled kernel
// against the two it must keep up with. Compare formats in one process with
//   hlx_bench --benchmark_filter=BM_Int4Prefill --benchmark_repetitions=5
//             --benchmark_enable_random_interleaving=true
// (repetitions of all benchmarks interleaved, so load drift hits each format alike). And the rate
// of the two dot-product instructions on the prefill kernels' register tile (BM_Int4TileLoop): why
// int4 runs on vpdpwssd (int16 activations) rather than vdpbf16ps.
#include "runtime/kernels/x86_intrin.h"  // <immintrin.h>; see there why

#include <benchmark/benchmark.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "bench_util.h"
#include "runtime/kernels/cpu.h"
#include "runtime/kernels/matmul.h"
#include "runtime/kernels/parallel.h"

namespace {

using namespace hlx;
using kernels::WeightFormat;

// The products sharing one A: {N, K} of each (grouped when more than one).
struct Op {
  std::vector<int64_t> n;
  int64_t k;
};
const Op kOps[] = {{{2048, 1024, 1024}, 1024}, {{3072, 3072}, 1024}, {{1024}, 3072}, {{1024}, 2048}};
const char* const kOpNames[] = {"qkv", "gate_up", "down", "o"};

struct Product {
  std::vector<std::unique_ptr<kernels::PackedWeight>> w;
  std::vector<std::vector<bf16>> c;
  std::vector<bf16> a;
};

Product make(const Op& op, int64_t m, WeightFormat f) {
  Product p;
  for (size_t i = 0; i < op.n.size(); ++i) {
    auto w = bench::random_bf16(op.k * op.n[i], uint32_t(7 + i));
    auto packed = kernels::PackedWeight::pack(DType::kBF16, op.k, op.n[i], true, w.data(), f);
    if (!packed.ok()) return {};
    p.w.push_back(std::move(packed).value());
    p.c.emplace_back(size_t(m * op.n[i]));
  }
  p.a = bench::random_bf16(m * op.k, 1);
  return p;
}

Status run(Product& p, int64_t m) {
  std::vector<kernels::GroupedProduct> g;
  for (size_t i = 0; i < p.w.size(); ++i) g.push_back({p.w[i].get(), p.c[i].data()});
  return kernels::multiply_grouped(m, DType::kBF16, p.a.data(), DType::kBF16, g);
}

double flops(const Op& op, int64_t m) {
  double f = 0;
  for (int64_t n : op.n) f += 2.0 * double(m) * double(n) * double(op.k);
  return f;
}

// Args: op (0 qkv, 1 gate/up, 2 down, 3 o, 4 the whole layer), format (0 bf16, 1 int8, 2 int4),
// threads. Weights re-used across iterations (L2/L3 resident), as a prefill chunk re-reads them.
void BM_Int4Prefill(benchmark::State& state) {
  const int64_t m = 512, which = state.range(0);
  const WeightFormat f = WeightFormat(state.range(1));
  kernels::ThreadLimit limit(int(state.range(2)));
  std::vector<Product> ps;
  double fl = 0;
  for (int64_t i = 0; i < 4; ++i) {
    if (which != 4 && which != i) continue;
    ps.push_back(make(kOps[i], m, f));
    if (ps.back().w.empty()) return state.SkipWithError("pack failed");
    fl += flops(kOps[i], m);
  }
  for (auto _ : state) {
    for (Product& p : ps)
      if (!run(p, m).ok()) return state.SkipWithError("multiply failed");
    benchmark::ClobberMemory();
  }
  state.SetLabel(std::string(which == 4 ? "layer" : kOpNames[which]) + " " + kernels::weight_format_name(f) + " t" +
                 std::to_string(state.range(2)));
  state.counters["GFLOP/s"] =
      benchmark::Counter(fl, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}
BENCHMARK(BM_Int4Prefill)
    ->ArgsProduct({{0, 1, 2, 3, 4}, {0, 1, 2}, {1, 2}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// The register tile every prefill kernel here runs (6 rows x 64 columns, 24 accumulators; 4 weight
// loads and 6 broadcasts per k-pair), on L1-resident operands, one thread: the dot-product
// instruction's own rate. Arg 0: vdpbf16ps (bf16 GEMM), 1: vpdpwssd (int8, int4). Both do 32
// multiply-adds per instruction.
constexpr int kPairs = 64;
// (AVX512-VNNI's intrinsic needs flags the shared build does not pass, so vpdpwssd is inline asm.)
__attribute__((target("avx512f,avx512bw"), always_inline)) inline __m512i dpwssd(__m512i acc, __m512i a, __m512i b) {
  __asm__("vpdpwssd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
  return acc;
}
// One product step by the accumulator's type: f32 by vdpbf16ps, int32 by vpdpwssd.
__attribute__((target("avx512f,avx512bw,avx512bf16"), always_inline)) inline __m512 dp(__m512 acc, __m512i x,
                                                                                       __m512i w) {
  return _mm512_dpbf16_ps(acc, (__m512bh)x, (__m512bh)w);
}
__attribute__((target("avx512f,avx512bw"), always_inline)) inline __m512i dp(__m512i acc, __m512i x, __m512i w) {
  return dpwssd(acc, x, w);
}
// One k-pair of a 6-row x 64-column tile, the step every loop below times: each row's dword of
// activations (a[r]) broadcast against the pair's four 64-byte weight vectors at wp.
template <class Acc>
__attribute__((target("avx512f,avx512bw,avx512bf16"), always_inline)) inline void tile_pair(const void* wp,
                                                                                            const uint32_t* a,
                                                                                            Acc (&acc)[6][4]) {
  const char* b = static_cast<const char*>(wp);
  const __m512i w[4] = {_mm512_load_si512(b), _mm512_load_si512(b + 64), _mm512_load_si512(b + 128),
                        _mm512_load_si512(b + 192)};
#pragma GCC unroll 6
  for (int r = 0; r < 6; ++r) {
    const __m512i x = _mm512_set1_epi32(int(a[r]));
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) acc[r][j] = dp(acc[r][j], x, w[j]);
  }
}
template <bool kBf16>
__attribute__((target("avx512f,avx512bw,avx512bf16"), noinline)) float tile_loop(const uint32_t* w, const uint32_t* a,
                                                                                 long reps) {
  float total = 0;
  for (long rep = 0; rep < reps; ++rep) {
    __m512 acc[6][4];
    __m512i iacc[6][4];
    for (int r = 0; r < 6; ++r)
      for (int j = 0; j < 4; ++j) acc[r][j] = _mm512_setzero_ps(), iacc[r][j] = _mm512_setzero_si512();
    for (int p = 0; p < kPairs; ++p) {
      if constexpr (kBf16)
        tile_pair(w + p * 64, a + p * 6, acc);
      else
        tile_pair(w + p * 64, a + p * 6, iacc);
    }
    for (int r = 0; r < 6; ++r)
      for (int j = 0; j < 4; ++j)
        total += kBf16 ? _mm512_reduce_add_ps(acc[r][j]) : float(_mm512_reduce_add_epi32(iacc[r][j]));
  }
  return total;
}

void BM_Int4TileLoop(benchmark::State& state) {
  const bool bf = state.range(0) == 0;
  const auto& cpu = kernels::cpu_features();
  if (!cpu.avx512bf16 || !cpu.avx512vnni) return state.SkipWithError("needs AVX512-BF16 and AVX512-VNNI");
  alignas(64) static uint32_t w[kPairs * 64], a[kPairs * 6];
  for (auto& v : w) v = 0x3f803f80u;
  for (auto& v : a) v = 0x3f803f80u;
  const long reps = 1000;
  for (auto _ : state) benchmark::DoNotOptimize(bf ? tile_loop<true>(w, a, reps) : tile_loop<false>(w, a, reps));
  state.SetLabel(bf ? "vdpbf16ps" : "vpdpwssd");
  state.counters["Ginstr/s"] = benchmark::Counter(
      double(reps) * kPairs * 24, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}
BENCHMARK(BM_Int4TileLoop)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

}  // namespace
