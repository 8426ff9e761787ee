// hlx's own AVX-512 BF16 GEMM for prefill-sized products on packed BA16a64b2a weights (the layout
// gemv_vnni_bf16_avx512 streams). Compiled with HLX_AVX512_FLAGS; called only when
// cpu_features().avx512bf16.
//
// Numerics: every output column is one f32 lane that accumulates the k-pairs in order with
// vdpbf16ps from zero, an odd last k paired with a zero activation, under FTZ/DAZ, stored as f32 or
// rounded with vcvtneps2bf16 -- exactly the streaming kernel's sequence. A row's bits therefore do
// not depend on M, on the tiling, or on the thread count, and a decode row (M <= 8, streaming
// kernel) equals the same row inside a prefill product.
#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "runtime/kernels/internal.h"
#include "runtime/kernels/parallel.h"

namespace hlx::kernels::internal {

namespace {

// Register tile: kRows rows x one 64-column block = 4 * kRows f32 accumulators (24 of 32 zmm),
// 4 zmm for the weight k-pair. Each k-pair is 4 weight loads + kRows broadcast activations for
// 4 * kRows vdpbf16ps. On its own (operands in L1/L2, 1 thread) the loop runs 6.8 G vdpbf16ps/s
// (437 GFLOP/s, the core's peak); whole products measured 330-365 GFLOP/s of CPU time at load ~6,
// level with oneDNN's brgemm tiles in the same process (0.98-1.0).
constexpr int kRows = 6;

// A tile runs over the whole K in one pass: the block's W (K * 128 bytes) is re-read from L2 by
// each row tile of the work item. Walking K in L1-sized chunks instead, with the accumulators
// kept in an f32 scratch tile between chunks, measured slower (paired with oneDNN in one process,
// 1 thread, M=512: chunks of 64 / 256 k-pairs 0.86 / 0.95 of oneDNN's GFLOP/s, no chunks 0.98-1.01),
// and so did software prefetch of A or W (0.92).
//
// Rows per work item: at most kMaxItemTiles tiles (96 rows).
constexpr int64_t kMaxItemTiles = 16;

thread_local ScratchBuffer tl_a;

// A is first repacked per row tile as [pair][kRows] 32-bit k-pairs, so the micro-kernel reads
// one sequential stream (A's rows are K apart, often 4 KiB, which alias in L1) and an odd K's
// last k is the pair (a, 0) -- the same operand the streaming kernel pairs it into. Rows past M
// are zero and never stored.
//
// Whole tiles go 16 k-pairs at a time: output vector j holds flattened elements 16j..16j+15 of
// the [16][6] block, element e = row e % 6, pair e / 6; one vpermt2d per row pair gathers the
// lanes of its two rows, two blends pick each lane's row pair (2.5x the scalar copy, which was
// bound by one store per k-pair and row).
struct Transpose6x16 {
  __m512i idx[kRows];
  __mmask16 rows23[kRows], rows45[kRows];
  Transpose6x16() {
    for (int j = 0; j < kRows; ++j) {
      alignas(64) int32_t v[16];
      unsigned b23 = 0, b45 = 0;
      for (int l = 0; l < 16; ++l) {
        const int e = 16 * j + l, pair = e / kRows, row = e % kRows;
        v[l] = pair + 16 * (row & 1);  // vpermt2d: lanes 16.. index the second source
        if (row / 2 == 1) b23 |= 1u << l;
        if (row / 2 == 2) b45 |= 1u << l;
      }
      idx[j] = _mm512_load_si512(v);
      rows23[j] = __mmask16(b23);
      rows45[j] = __mmask16(b45);
    }
  }
};

void pack_a(const uint16_t* a16, int64_t m, int64_t k, int64_t tile, int64_t pairs, uint32_t* dst) {
  static_assert(kRows == 6, "Transpose6x16 gathers three row pairs");
  const int64_t r0 = tile * kRows;
  int64_t p = 0;
  if (r0 + kRows <= m) {
    static const Transpose6x16 tr;
    const uint16_t* rows = a16 + r0 * k;
    for (; p + 16 <= k / 2; p += 16) {
      __m512i x[kRows];
      for (int r = 0; r < kRows; ++r) x[r] = _mm512_loadu_si512(rows + r * k + 2 * p);
      for (int j = 0; j < kRows; ++j) {
        __m512i v = _mm512_permutex2var_epi32(x[0], tr.idx[j], x[1]);
        v = _mm512_mask_blend_epi32(tr.rows23[j], v, _mm512_permutex2var_epi32(x[2], tr.idx[j], x[3]));
        v = _mm512_mask_blend_epi32(tr.rows45[j], v, _mm512_permutex2var_epi32(x[4], tr.idx[j], x[5]));
        _mm512_storeu_si512(dst + p * kRows + 16 * j, v);
      }
    }
  }
  for (int r = 0; r < kRows; ++r) {  // the rest: pairs from p on, odd K, rows past M
    uint32_t* d = dst + r;
    if (r0 + r >= m) {
      for (int64_t q = p; q < pairs; ++q) d[q * kRows] = 0;
      continue;
    }
    const uint16_t* row = a16 + (r0 + r) * k;
    int64_t q = p;
    for (; 2 * q + 1 < k; ++q) std::memcpy(d + q * kRows, row + 2 * q, 4);
    if (q < pairs) d[q * kRows] = row[2 * q];
  }
}

// One row tile over all k-pairs of block w; ap is the tile's packed A. Stores rows [0, rows) and
// columns [0, nv) of the tile into C at column n0.
void tile(const uint32_t* ap, const bf16* w, int64_t pairs, int64_t rows, int64_t nv, DType c_type, int64_t ldc,
          void* c, int64_t n0) {
  __m512 acc[kRows][4];
  for (int r = 0; r < kRows; ++r)
    for (int j = 0; j < 4; ++j) acc[r][j] = _mm512_setzero_ps();
  for (int64_t p = 0; p < pairs; ++p) {
    const bf16* wp = w + p * 128;
    const __m512bh w0 = (__m512bh)_mm512_load_si512(wp), w1 = (__m512bh)_mm512_load_si512(wp + 32);
    const __m512bh w2 = (__m512bh)_mm512_load_si512(wp + 64), w3 = (__m512bh)_mm512_load_si512(wp + 96);
#pragma GCC unroll 6
    for (int r = 0; r < kRows; ++r) {
      const __m512bh xb = (__m512bh)_mm512_set1_epi32(int(ap[p * kRows + r]));
      acc[r][0] = _mm512_dpbf16_ps(acc[r][0], xb, w0);
      acc[r][1] = _mm512_dpbf16_ps(acc[r][1], xb, w1);
      acc[r][2] = _mm512_dpbf16_ps(acc[r][2], xb, w2);
      acc[r][3] = _mm512_dpbf16_ps(acc[r][3], xb, w3);
    }
  }
  for (int r = 0; r < rows; ++r)
    for (int j = 0; j < 4; ++j) {
      const int64_t off = j * 16;
      if (off >= nv) break;
      const int64_t cnt = std::min<int64_t>(16, nv - off);
      const __mmask16 mask = cnt == 16 ? __mmask16(0xffff) : __mmask16((1u << cnt) - 1);
      if (c_type == DType::kF32) {
        _mm512_mask_storeu_ps(static_cast<float*>(c) + r * ldc + n0 + off, mask, acc[r][j]);
      } else {
        const __m256i v = (__m256i)_mm512_cvtneps_pbh(acc[r][j]);
        _mm256_mask_storeu_epi16(static_cast<bf16*>(c) + r * ldc + n0 + off, mask, v);
      }
    }
}

// HLX_GEMM_ORDER=rows walks the items row group by row group (the order before), for A/B runs.
bool column_order() {
  static const bool on = [] {
    const char* e = std::getenv("HLX_GEMM_ORDER");
    return !(e && std::strcmp(e, "rows") == 0);
  }();
  return on;
}

}  // namespace

void gemm_bf16_avx512_grouped(int64_t m, int64_t k, const bf16* a, const GemvTarget* targets, int count, DType c_type) {
  const int64_t tiles = (m + kRows - 1) / kRows;
  const int64_t groups = (tiles + kMaxItemTiles - 1) / kMaxItemTiles;
  const int64_t group_tiles = (tiles + groups - 1) / groups;  // balanced
  const int64_t pairs = (k + 1) / 2;
  const int64_t c_size = int64_t(dtype_size(c_type));
  const int64_t tile_words = pairs * kRows;
  // Column blocks of all targets, numbered one after another: block_start[t] is target t's first.
  const std::vector<int64_t> block_start = block_starts(targets, count);
  const int64_t nblocks = block_start.back();
  // The caller's buffer, shared by the pool threads for this call.
  uint32_t* a_packed = static_cast<uint32_t*>(tl_a.get(size_t(tiles * tile_words) * 4));
  const uint16_t* a16 = reinterpret_cast<const uint16_t*>(a);
  parallel_for(tiles, 4, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) pack_a(a16, m, k, t, pairs, a_packed + t * tile_words);
  });
  const bool by_column = column_order();
  // Items are (row group, column block), claimed one at a time, so a descheduled thread holds
  // up at most one item. Consecutive items share the column block: its W (K * 128 bytes) stays in
  // the core's L2 for every row group, so each product reads its weights from memory once, while
  // the packed A (M * K * 2 bytes, reused by every block) streams from L2/L3 at 1/64 of the rate of
  // W per tile. Row groups first (the order before) re-read all of W per row group, two threads
  // each fetching different blocks: Qwen3-0.6B layer products at M=512 (in one process, A/B
  // alternated, load 4-6) took 0.89-0.96x the CPU time on 2 threads, ~1.0x on 1 thread.
  parallel_for(groups * nblocks, 1, [&](int64_t i0, int64_t i1) {
    FtzDazScope ftz_daz;
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t g = by_column ? i % groups : i / nblocks, cb = by_column ? i / groups : i % nblocks;
      const int t = part_of(block_start, cb);
      const GemvTarget& tg = targets[t];
      const int64_t nb = cb - block_start[size_t(t)];
      const bf16* w = tg.w_packed + nb * tg.kp * 64;
      const int64_t n0 = nb * 64, nv = std::min<int64_t>(64, tg.n - n0);
      for (int64_t r = g * group_tiles; r < std::min(tiles, (g + 1) * group_tiles); ++r)
        tile(a_packed + r * tile_words, w, pairs, std::min<int64_t>(kRows, m - r * kRows), nv, c_type, tg.n,
             static_cast<char*>(tg.c) + r * kRows * tg.n * c_size, n0);
    }
  });
}

void gemm_bf16_avx512(int64_t m, int64_t n, int64_t k, int64_t kp, const bf16* a, const bf16* w_packed, DType c_type,
                      void* c) {
  const GemvTarget target{n, kp, w_packed, c};
  gemm_bf16_avx512_grouped(m, k, a, &target, 1, c_type);
}

}  // namespace hlx::kernels::internal
