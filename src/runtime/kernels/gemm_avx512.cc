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

#include "runtime/kernels/internal.h"
#include "runtime/kernels/parallel.h"

namespace hlx::kernels::internal {

namespace {

// Register tile: kRows rows x one 64-column block = 4 * kRows f32 accumulators (24 of 32 zmm),
// 4 zmm for the weight k-pair. Each k-pair is 4 weight loads + kRows broadcast activations for
// 4 * kRows vdpbf16ps.
constexpr int kRows = 6;

// K is walked in chunks of kChunkPairs k-pairs so the block's chunk of W (kChunkPairs * 256
// bytes) stays in L1 while every row tile of the work item passes over it; between chunks the
// accumulators wait in an f32 scratch tile (an exact round trip, so the bits are unchanged).
constexpr int64_t kChunkPairs = 96;

// Rows per work item (a multiple of kRows): the item's A rows and its f32 scratch stay in L2.
constexpr int64_t kMaxItemTiles = 16;

thread_local ScratchBuffer tl_acc;

template <int R>
__attribute__((always_inline)) inline void load_acc(const float* s, __m512 (&acc)[R][4]) {
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < 4; ++j) acc[r][j] = _mm512_load_ps(s + r * 64 + j * 16);
}

template <int R>
__attribute__((always_inline)) inline void save_acc(const __m512 (&acc)[R][4], float* s) {
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < 4; ++j) _mm512_store_ps(s + r * 64 + j * 16, acc[r][j]);
}

// Rows [0, R) of A (row stride lda) times k-pairs [p0, p1) of one 64-column block w, into acc.
template <int R>
__attribute__((always_inline)) inline void accumulate(const uint16_t* a16, int64_t lda, const bf16* w, int64_t p0,
                                                      int64_t p1, __m512 (&acc)[R][4]) {
  for (int64_t p = p0; p < p1; ++p) {
    const bf16* wp = w + p * 128;
    const __m512bh w0 = (__m512bh)_mm512_load_si512(wp), w1 = (__m512bh)_mm512_load_si512(wp + 32);
    const __m512bh w2 = (__m512bh)_mm512_load_si512(wp + 64), w3 = (__m512bh)_mm512_load_si512(wp + 96);
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      uint32_t x;
      std::memcpy(&x, a16 + r * lda + 2 * p, 4);
      const __m512bh xb = (__m512bh)_mm512_set1_epi32(int(x));
      acc[r][0] = _mm512_dpbf16_ps(acc[r][0], xb, w0);
      acc[r][1] = _mm512_dpbf16_ps(acc[r][1], xb, w1);
      acc[r][2] = _mm512_dpbf16_ps(acc[r][2], xb, w2);
      acc[r][3] = _mm512_dpbf16_ps(acc[r][3], xb, w3);
    }
  }
}

// The last k of an odd K, paired with a zero activation (the packed weight's pad is zero).
template <int R>
__attribute__((always_inline)) inline void accumulate_last(const uint16_t* a16, int64_t lda, int64_t k,
                                                           const bf16* w, __m512 (&acc)[R][4]) {
  const bf16* wp = w + (k / 2) * 128;
  const __m512bh w0 = (__m512bh)_mm512_load_si512(wp), w1 = (__m512bh)_mm512_load_si512(wp + 32);
  const __m512bh w2 = (__m512bh)_mm512_load_si512(wp + 64), w3 = (__m512bh)_mm512_load_si512(wp + 96);
  for (int r = 0; r < R; ++r) {
    const __m512bh xb = (__m512bh)_mm512_set1_epi32(int(uint32_t(a16[r * lda + k - 1])));
    acc[r][0] = _mm512_dpbf16_ps(acc[r][0], xb, w0);
    acc[r][1] = _mm512_dpbf16_ps(acc[r][1], xb, w1);
    acc[r][2] = _mm512_dpbf16_ps(acc[r][2], xb, w2);
    acc[r][3] = _mm512_dpbf16_ps(acc[r][3], xb, w3);
  }
}

// Stores the first nv columns of acc into C rows [0, R) (row stride ldc) at column n0.
template <int R>
__attribute__((always_inline)) inline void store_c(const __m512 (&acc)[R][4], int64_t nv, DType c_type, int64_t ldc,
                                                   void* c, int64_t n0) {
  for (int r = 0; r < R; ++r)
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

// One row tile (R rows) over k-pairs [p0, p1) of block w. `first`: start from zero (else from
// the scratch tile s); `last`: finish (odd k) and store into C (else back into s).
template <int R>
void tile(const uint16_t* a16, int64_t k, const bf16* w, int64_t p0, int64_t p1, bool first, bool last, float* s,
          int64_t nv, DType c_type, int64_t ldc, void* c, int64_t n0) {
  __m512 acc[R][4];
  if (first) {
    for (int r = 0; r < R; ++r)
      for (int j = 0; j < 4; ++j) acc[r][j] = _mm512_setzero_ps();
  } else {
    load_acc(s, acc);
  }
  accumulate(a16, k, w, p0, p1, acc);
  if (!last) return save_acc(acc, s);
  if (k & 1) accumulate_last(a16, k, k, w, acc);
  store_c(acc, nv, c_type, ldc, c, n0);
}

void run_tile(int64_t rows, const uint16_t* a16, int64_t k, const bf16* w, int64_t p0, int64_t p1, bool first,
              bool last, float* s, int64_t nv, DType c_type, int64_t ldc, void* c, int64_t n0) {
  switch (rows) {
    case 1: return tile<1>(a16, k, w, p0, p1, first, last, s, nv, c_type, ldc, c, n0);
    case 2: return tile<2>(a16, k, w, p0, p1, first, last, s, nv, c_type, ldc, c, n0);
    case 3: return tile<3>(a16, k, w, p0, p1, first, last, s, nv, c_type, ldc, c, n0);
    case 4: return tile<4>(a16, k, w, p0, p1, first, last, s, nv, c_type, ldc, c, n0);
    case 5: return tile<5>(a16, k, w, p0, p1, first, last, s, nv, c_type, ldc, c, n0);
    default: return tile<6>(a16, k, w, p0, p1, first, last, s, nv, c_type, ldc, c, n0);
  }
}

// HLX_GEMM_CHUNK=<k-pairs> overrides kChunkPairs (tuning runs; the bits do not depend on it).
int64_t chunk_pairs() {
  static const int64_t v = [] {
    const char* e = std::getenv("HLX_GEMM_CHUNK");
    return e && std::atoll(e) > 0 ? int64_t(std::atoll(e)) : kChunkPairs;
  }();
  return v;
}

}  // namespace

void gemm_bf16_avx512(int64_t m, int64_t n, int64_t k, int64_t kp, const bf16* a, const bf16* w_packed,
                      DType c_type, void* c) {
  const int64_t nblocks = (n + 63) / 64, tiles = (m + kRows - 1) / kRows;
  const int64_t groups = (tiles + kMaxItemTiles - 1) / kMaxItemTiles;
  const int64_t group_rows = (tiles + groups - 1) / groups * kRows;  // balanced, a multiple of kRows
  const int64_t pairs = k / 2, chunk = std::min(std::max<int64_t>(pairs, 1), chunk_pairs());
  const int64_t c_size = int64_t(dtype_size(c_type));
  const uint16_t* a16 = reinterpret_cast<const uint16_t*>(a);
  // Items are (row group, column block), claimed one at a time, so a descheduled thread holds
  // up at most one item; consecutive items share the row group (its A rows stay in L2).
  parallel_for(groups * nblocks, 1, [&](int64_t i0, int64_t i1) {
    FtzDazScope ftz_daz;
    float* scratch = static_cast<float*>(tl_acc.get(size_t(group_rows * 64) * sizeof(float)));
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t g = i / nblocks, nb = i % nblocks;
      const int64_t r0 = g * group_rows, r1 = std::min(m, r0 + group_rows);
      const bf16* w = w_packed + nb * kp * 64;
      const int64_t n0 = nb * 64, nv = std::min<int64_t>(64, n - n0);
      for (int64_t p0 = 0; p0 < std::max<int64_t>(pairs, 1); p0 += chunk) {
        const int64_t p1 = std::min(pairs, p0 + chunk);
        const bool first = p0 == 0, last = p0 + chunk >= pairs;
        for (int64_t r = r0; r < r1; r += kRows)
          run_tile(std::min<int64_t>(kRows, r1 - r), a16 + r * k, k, w, p0, p1, first, last,
                   scratch + (r - r0) * 64, nv, c_type, n, static_cast<char*>(c) + r * n * c_size, n0);
      }
    }
  });
}

}  // namespace hlx::kernels::internal
