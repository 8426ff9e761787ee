// AVX-512 BF16 kernels for matmul.cc. Compiled with HLX_AVX512_FLAGS; called only when
// cpu_features().avx512bf16. Uses AVX512F/BW/BF16 only (no FP16/AMX: AMD Zen 4/5 lack them).
#include <immintrin.h>
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "runtime/kernels/cpu.h"
#include "runtime/kernels/internal.h"
#include "runtime/kernels/parallel.h"
#include "runtime/kernels/static_dispatch.h"

namespace hlx::kernels::internal {

void f32_to_bf16_avx512(const float* src, int64_t n, bf16* dst) {
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(src + i + 16), _mm512_loadu_ps(src + i));
    _mm512_storeu_si512(dst + i, (__m512i)v);
  }
  for (; i < n; ++i) dst[i] = f32_to_bf16(src[i]);
}

namespace {

// Rows [0, M) of A (row stride lda, bf16 bits) times k-pairs [p0, p1) of one 64-column weight
// block, added into acc. Every output column accumulates its k-pairs in order in one f32 lane,
// whatever M and however K is chunked, so a row's result does not depend on the batch it is in.
// The i-th k-pair (i = p - p0) also prefetches (prefetcht0) the kLines cache lines at
// pf + i * kLines * 64: a linear stream of prefetches at the rate the loop runs.
template <int M, int kLines>
__attribute__((always_inline)) inline void accumulate(const uint16_t* a16, int64_t lda, const bf16* w, int64_t p0,
                                                      int64_t p1, const char* pf, __m512 (&acc)[M][4]) {
  for (int64_t p = p0; p < p1; ++p) {
    const bf16* wp = w + p * 128;
    for (int line = 0; line < kLines; ++line) _mm_prefetch(pf + ((p - p0) * kLines + line) * 64, _MM_HINT_T0);
    __m512i w0 = _mm512_load_si512(wp), w1 = _mm512_load_si512(wp + 32);
    __m512i w2 = _mm512_load_si512(wp + 64), w3 = _mm512_load_si512(wp + 96);
#pragma GCC unroll 8
    for (int m = 0; m < M; ++m) {
      uint32_t x;
      std::memcpy(&x, a16 + m * lda + 2 * p, 4);
      __m512bh xb = (__m512bh)_mm512_set1_epi32(int(x));
      acc[m][0] = _mm512_dpbf16_ps(acc[m][0], xb, (__m512bh)w0);
      acc[m][1] = _mm512_dpbf16_ps(acc[m][1], xb, (__m512bh)w1);
      acc[m][2] = _mm512_dpbf16_ps(acc[m][2], xb, (__m512bh)w2);
      acc[m][3] = _mm512_dpbf16_ps(acc[m][3], xb, (__m512bh)w3);
    }
  }
}

// The last k of an odd K alone: paired with a zero activation (the packed weight pads with zeros).
template <int M>
__attribute__((always_inline)) inline void accumulate_last(const uint16_t* a16, int64_t lda, int64_t k, const bf16* w,
                                                           __m512 (&acc)[M][4]) {
  const bf16* wp = w + (k / 2) * 128;
  __m512i w0 = _mm512_load_si512(wp), w1 = _mm512_load_si512(wp + 32);
  __m512i w2 = _mm512_load_si512(wp + 64), w3 = _mm512_load_si512(wp + 96);
  for (int m = 0; m < M; ++m) {
    __m512bh xb = (__m512bh)_mm512_set1_epi32(int(uint32_t(a16[m * lda + k - 1])));
    acc[m][0] = _mm512_dpbf16_ps(acc[m][0], xb, (__m512bh)w0);
    acc[m][1] = _mm512_dpbf16_ps(acc[m][1], xb, (__m512bh)w1);
    acc[m][2] = _mm512_dpbf16_ps(acc[m][2], xb, (__m512bh)w2);
    acc[m][3] = _mm512_dpbf16_ps(acc[m][3], xb, (__m512bh)w3);
  }
}

template <int M>
void store_rows(const __m512 (&acc)[M][4], int64_t nv, DType c_type, int64_t ldc, void* c, int64_t n0) {
  for (int m = 0; m < M; ++m) {
    for (int j = 0; j < 4; ++j) {
      int64_t off = j * 16;
      if (off >= nv) break;
      int64_t cnt = nv - off < 16 ? nv - off : 16;
      __mmask16 mask = cnt == 16 ? __mmask16(0xffff) : __mmask16((1u << cnt) - 1);
      if (c_type == DType::kF32) {
        float* cp = static_cast<float*>(c) + m * ldc + n0 + off;
        _mm512_mask_storeu_ps(cp, mask, acc[m][j]);
      } else {
        bf16* cp = static_cast<bf16*>(c) + m * ldc + n0 + off;
        __m256i v = (__m256i)_mm512_cvtneps_pbh(acc[m][j]);
        _mm256_mask_storeu_epi16(cp, mask, v);
      }
    }
  }
}

template <int M>
void zero(__m512 (&acc)[M][4]) {
  for (int m = 0; m < M; ++m)
    for (int j = 0; j < 4; ++j) acc[m][j] = _mm512_setzero_ps();
}

// C rows [0, M) (M <= 8) for one 64-column block of W.
//
// M <= 4: one pass, 4M accumulators in registers; software prefetch of the k-pair 2 KiB ahead
// by default on Intel only, because its effect has opposite signs on the two vendors seen here.
// AMD Zen 4/5 (interleaved A/B, BM_StreamBf16 and BM_DecodeStepWeights, 2 threads, load ~3): it
// made M = 1 slower on the decode shapes (4096x4096 -29..41%, 1024x3072 -21..37%, the whole decode
// step -13..23%; N = K = 2048 alone +15%), and at load 6-7 on one thread still cost M = 1 7-11%.
// Intel Xeon with AVX512-BF16 and AMX (2026-12-02, quiet, `hlx bench` on Qwen3-0.6B shapes, runs
// alternated): decode b1 17.1 -> 20.6 tok/s (71 -> 86 % of the roofline), b2 1.07x, b4 1.24x.
// HLX_GEMV_PREFETCH=0 or 1 overrides the default (A/B runs on other CPUs).
//
// M > 4: rows 4.. need another 16 accumulators (all 32 registers hold 8 rows x 64 columns, with
// none left for the weights), so K is walked in chunks of kChunkPairs k-pairs (8 KiB of the
// block): rows 0-3 stream a chunk in, rows 4.. re-read it from L1, and whichever set of 16
// accumulators is not in use waits on the stack. A chunk is one DRAM pass for any M <= 8.
// Software prefetch keeps DRAM busy in BOTH halves: over a chunk's two halves the loop
// prefetches, 2 lines per k-pair, the whole chunk kSpreadAhead bytes on (its first half during
// rows 0-3, its second during rows 4..), so the reads in flight do not stop while rows 4..
// compute from L1. Before (16 KiB chunks, the 4 lines of the k-pair 2 KiB ahead during rows 0-3
// only) the DRAM stream idled during rows 4.., and M = 8 cost about memory + compute time.
// Measured (variants interleaved in one process; load 5-7, so medians of process CPU time): the
// decode step's weights at M = 8 took 56.7 -> 48.7 ms on one thread (M = 1: 40.7, M = 4: 45.4)
// and 54.5 -> 46.8-48.6 ms of CPU on two; N = K = 2048 alone +10-17%. Other layouts, against
// this one on N = K = 2048 (M = 8, 4 runs) and the decode step: 8 KiB chunks 6, 12 or 16 KiB
// ahead -3..+2%, 16 KiB chunks 8, 16 or 32 KiB ahead 2-10% slower, 4-6 KiB chunks 4-12 KiB ahead
// 2-8% slower; prefetcht1 (into L2 only) 5-20% slower; prefetchnta (the weights are read once)
// level with prefetcht0 to 3% faster on AMD, but on an Intel Xeon (2026-12-02, quiet, `hlx bench`
// b8 on Qwen3-0.6B shapes, alternated) NTA ran 67.8 tok/s and T0 105 (1.55x; 16 KiB ahead level
// with 8), so T0 everywhere. M = 5 and 6
// fit one pass (20-24 accumulators + 4 weights + 1 broadcast, no spills), which measured level
// with these chunks (M = 5 -2..+2% against NTA; M = 6 -8..+7%), so every M > 4 takes the chunks.
constexpr int64_t kChunkPairs = 32;
constexpr int64_t kSpreadAhead = 8192;

template <int M, bool kPrefetch>
void gemv_block(int64_t k, const bf16* a, const bf16* w, int64_t nv, DType c_type, int64_t ldc, void* c, int64_t n0) {
  const uint16_t* a16 = reinterpret_cast<const uint16_t*>(a);
  const int64_t pairs = k / 2;
  constexpr int M0 = M < 4 ? M : 4;
  __m512 acc0[M0][4];
  zero(acc0);
  if constexpr (M <= 4) {
    // Optional prefetch: the 4 lines of the k-pair 2 KiB ahead.
    accumulate<M, kPrefetch ? 4 : 0>(a16, k, w, 0, pairs, reinterpret_cast<const char*>(w) + 2048, acc0);
    if (k & 1) accumulate_last(a16, k, k, w, acc0);
    store_rows(acc0, nv, c_type, ldc, c, n0);
  } else {
    constexpr int M1 = M - 4;
    __m512 acc1[M1][4];
    zero(acc1);
    for (int64_t p0 = 0; p0 < pairs; p0 += kChunkPairs) {
      const int64_t p1 = std::min(pairs, p0 + kChunkPairs);
      // Past the block's end this prefetches the next block, which is usually this thread's next.
      const char* ahead = reinterpret_cast<const char*>(w + p0 * 128) + kSpreadAhead;
      accumulate<4, 2>(a16, k, w, p0, p1, ahead, acc0);
      accumulate<M1, 2>(a16 + 4 * k, k, w, p0, p1, ahead + kChunkPairs * 128, acc1);
    }
    if (k & 1) {
      accumulate_last(a16, k, k, w, acc0);
      accumulate_last(a16 + 4 * k, k, k, w, acc1);
    }
    store_rows(acc0, nv, c_type, ldc, c, n0);
    store_rows(acc1, nv, c_type, ldc, static_cast<char*>(c) + 4 * ldc * int64_t(dtype_size(c_type)), n0);
  }
}

template <bool kPrefetch>
void run_block(int64_t rows, int64_t k, const bf16* a, const bf16* w, int64_t nv, DType c_type, int64_t ldc, void* c,
               int64_t n0) {
  with_count<1, 8>(int(rows), [&](auto r) { gemv_block<r.value, kPrefetch>(k, a, w, nv, c_type, ldc, c, n0); });
}

// Software prefetch for M <= 4 (see gemv_block): Intel's default, or HLX_GEMV_PREFETCH=0/1.
bool small_m_prefetch() {
  static const bool on = [] {
    const char* e = std::getenv("HLX_GEMV_PREFETCH");
    if (e && (std::strcmp(e, "0") == 0 || std::strcmp(e, "1") == 0)) return e[0] == '1';
    return kernels::cpu_features().intel;
  }();
  return on;
}

}  // namespace

void gemv_vnni_bf16_avx512(int64_t m, int64_t n, int64_t k, int64_t kp, const bf16* a, const bf16* w_packed,
                           DType c_type, void* c) {
  const GemvTarget target{n, kp, w_packed, c};
  gemv_vnni_bf16_avx512_grouped(m, k, a, &target, 1, c_type);
}

void gemv_vnni_bf16_avx512_grouped(int64_t m, int64_t k, const bf16* a, const GemvTarget* targets, int count,
                                   DType c_type) {
  // Column blocks are numbered across the targets in order: target t owns [first[t], first[t + 1]).
  const std::vector<int64_t> first = block_starts(targets, count);
  const int64_t nblocks = first.back();
  // Pieces of consecutive column blocks, claimed dynamically (parallel.h): 1/(4T) of the blocks
  // while more than half are left (long contiguous streams per thread, and a thread descheduled
  // on a busy machine holds up at most that much), then 1/(2T) of what is left, down to single
  // blocks, which bounds how long one thread idles at the end waiting for the other (with
  // 1/(4T) pieces to the end that was half a piece on average, ~6% of the product's time).
  // A piece may run on from one target's blocks into the next's; a block's arithmetic is the
  // same wherever it falls, so each output has the bits of its own ungrouped product.
  const int64_t threads = max_threads();
  const int64_t largest = std::max<int64_t>(1, nblocks / (4 * threads));
  std::vector<int64_t> bounds{0};
  for (int64_t b = 0; b < nblocks;)
    bounds.push_back(b += std::clamp<int64_t>((nblocks - b) / (2 * threads), 1, largest));
  const bool prefetch_small = small_m_prefetch();
  const size_t c_size = dtype_size(c_type);
  parallel_for(int64_t(bounds.size()) - 1, 1, [&](int64_t i0, int64_t i1) {
    FtzDazScope ftz_daz;
    const int64_t g0 = bounds[size_t(i0)], g1 = bounds[size_t(i1)];
    int t = part_of(first, g0);
    for (int64_t g = g0; g < g1; ++g) {
      while (g >= first[size_t(t) + 1]) ++t;
      const GemvTarget& tg = targets[t];
      const int64_t nb = g - first[size_t(t)];
      const bf16* w = tg.w_packed + nb * tg.kp * 64;
      const int64_t n0 = nb * 64;
      const int64_t nv = tg.n - n0 < 64 ? tg.n - n0 : 64;
      for (int64_t m0 = 0; m0 < m; m0 += 8) {  // m <= 8 in practice (stream_max_m())
        const bf16* am = a + m0 * k;
        void* cm = static_cast<char*>(tg.c) + m0 * tg.n * int64_t(c_size);
        const int64_t rows = std::min<int64_t>(8, m - m0);
        if (prefetch_small)
          run_block<true>(rows, k, am, w, nv, c_type, tg.n, cm, n0);
        else
          run_block<false>(rows, k, am, w, nv, c_type, tg.n, cm, n0);
      }
    }
  });
}

}  // namespace hlx::kernels::internal
