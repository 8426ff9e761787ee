// AVX-512 kernels for int8 weights (layout and arithmetic contract in matmul_int8.h). Compiled with
// HLX_AVX512_FLAGS; the products also use AVX512-VNNI's vpdpwssd (x86_intrin.h) and are called
// only when cpu_features() has AVX512-VNNI and AVX512-BF16 (bf16 C). Weights are widened
// with vpmovsxbw (32 bytes -> 16 columns of (k, k+1) int16 pairs) and multiplied with broadcast
// activation pairs by vpdpwssd into int32 sums, one exact chunk of k-pairs at a time.
#include "runtime/kernels/x86_intrin.h"  // <immintrin.h>; see there why

#include <algorithm>
#include <limits>

#include "runtime/kernels/matmul_int8.h"
#include "runtime/kernels/static_dispatch.h"

namespace hlx::kernels::int8 {
namespace {

inline __mmask16 mask16(int64_t cnt) {
  return cnt >= 16 ? __mmask16(0xffff) : cnt <= 0 ? __mmask16(0) : __mmask16((1u << cnt) - 1);
}

// Writes (sum * s_a) * s_w for 16 columns starting at column `col` of row `row` (masked past n).
inline void store16(__m512 sum, float sa, const float* sw, int64_t col, int64_t n, DType c_type, void* c, int64_t row) {
  if (col >= n) return;
  const __mmask16 mask = mask16(n - col);
  const __m512 v = _mm512_mul_ps(_mm512_mul_ps(sum, _mm512_set1_ps(sa)), _mm512_loadu_ps(sw + col));
  if (c_type == DType::kF32) {
    _mm512_mask_storeu_ps(static_cast<float*>(c) + row * n + col, mask, v);
  } else {
    _mm256_mask_storeu_epi16(static_cast<bf16*>(c) + row * n + col, mask, (__m256i)_mm512_cvtneps_pbh(v));
  }
}

// One streaming pass: rows [r0, r0 + R) x NB consecutive whole blocks from block b, over all k-pairs.
template <int R, int NB>
void stream_pass(int64_t pairs, int64_t n, const int32_t* qa, const float* sa, const int8_t* q, const float* sw,
                 int64_t b, DType c_type, void* c, int r0 = 0) {
  constexpr int V = 4, W = NB * V;
  qa += r0 * pairs;
  sa += r0;
  __m512 sum[R][W];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < W; ++j) sum[r][j] = _mm512_setzero_ps();
  const int8_t* base = q + b * pairs * kLine;
  for (int64_t c0 = 0; c0 < pairs; c0 += kChunkPairs) {
    const int64_t c1 = std::min(pairs, c0 + kChunkPairs);
    __m512i acc[R][W];
    for (int r = 0; r < R; ++r)
      for (int j = 0; j < W; ++j) acc[r][j] = _mm512_setzero_si512();
    for (int64_t p = c0; p < c1; ++p) {
      __m512i w[W];
      for (int nb = 0; nb < NB; ++nb) {
        const int8_t* line = base + (nb * pairs + p) * kLine;
        // 16 k-pairs ahead in this block's contiguous stream: both lines of the k-pair.
        _mm_prefetch(reinterpret_cast<const char*>(line + 16 * kLine), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(line + 16 * kLine + 64), _MM_HINT_T0);
        for (int j = 0; j < V; ++j)
          w[nb * V + j] = _mm512_cvtepi8_epi16(_mm256_load_si256(reinterpret_cast<const __m256i*>(line + 32 * j)));
      }
      for (int r = 0; r < R; ++r) {
        const __m512i x = _mm512_set1_epi32(qa[r * pairs + p]);
        for (int j = 0; j < W; ++j) acc[r][j] = dpwssd(acc[r][j], x, w[j]);
      }
    }
    for (int r = 0; r < R; ++r)
      for (int j = 0; j < W; ++j) sum[r][j] = _mm512_add_ps(sum[r][j], _mm512_cvtepi32_ps(acc[r][j]));
  }
  for (int r = 0; r < R; ++r)
    for (int nb = 0; nb < NB; ++nb)
      for (int j = 0; j < V; ++j)
        store16(sum[r][nb * V + j], sa[r], sw, (b + nb) * kBlock + j * 16, n, c_type, c, r0 + r);
}

// One register tile (6 rows x 64 columns) over the `pc` k-pairs of a chunk widened to int16 in
// `w` ([pc][64][2] int16); ap: the tile's pairs of the chunk ([pc][6] int32). The chunk's int32 sums
// are converted and added to the f32 running sums `sum` ([6][64]), or replace them for the first.
void tile_chunk(int64_t pc, const int32_t* ap, const int16_t* w, float* sum, bool first) {
  __m512i acc[kTileRows][4];
  for (int r = 0; r < kTileRows; ++r)
    for (int j = 0; j < 4; ++j) acc[r][j] = _mm512_setzero_si512();
  for (int64_t p = 0; p < pc; ++p) {
    const int16_t* wp = w + p * kLine;
    const __m512i w0 = _mm512_load_si512(wp), w1 = _mm512_load_si512(wp + 32);
    const __m512i w2 = _mm512_load_si512(wp + 64), w3 = _mm512_load_si512(wp + 96);
#pragma GCC unroll 6
    for (int r = 0; r < kTileRows; ++r) {
      const __m512i x = _mm512_set1_epi32(ap[p * kTileRows + r]);
      acc[r][0] = dpwssd(acc[r][0], x, w0);
      acc[r][1] = dpwssd(acc[r][1], x, w1);
      acc[r][2] = dpwssd(acc[r][2], x, w2);
      acc[r][3] = dpwssd(acc[r][3], x, w3);
    }
  }
  for (int r = 0; r < kTileRows; ++r)
    for (int j = 0; j < 4; ++j) {
      float* s = sum + r * kBlock + j * 16;
      const __m512 v = _mm512_cvtepi32_ps(acc[r][j]);
      _mm512_store_ps(s, first ? v : _mm512_add_ps(_mm512_load_ps(s), v));  // 0 + v == v exactly
    }
}

// 16 activations of row `row` from i on (masked past k) as f32.
inline __m512 load_act16(DType t, const void* a, int64_t at, __mmask16 mask) {
  switch (t) {
    case DType::kBF16: {
      const __m256i h = _mm256_maskz_loadu_epi16(mask, static_cast<const bf16*>(a) + at);
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
    case DType::kF16:
      return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, static_cast<const f16*>(a) + at));
    default:
      return _mm512_maskz_loadu_ps(mask, static_cast<const float*>(a) + at);
  }
}

// round-half-even(x / s) clamped to [-bound, bound], as int32 lanes (both quantizations of the
// contract: weights to int8, activations to int16).
inline __m512i quantize16(__m512 x, float s, float bound) {
  __m512 v = _mm512_div_ps(x, _mm512_set1_ps(s));
  v = _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  return _mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(v, _mm512_set1_ps(-bound)), _mm512_set1_ps(bound)));
}

}  // namespace

void stream_avx512(int64_t m, int64_t k, int64_t n, const int32_t* qa, const float* sa, const int8_t* q,
                   const float* sw, int64_t b0, int64_t b1, DType c_type, void* c) {
  const int64_t pairs = pairs_of(k);
  int64_t b = b0;
  // One row: four blocks at once, then two (16 or 8 independent vpdpwssd chains, one DRAM stream
  // per block); two rows: two blocks (16 chains); 3-6 rows: one block (up to 24 chains).
  if (m == 1) {
    for (; b + 4 <= b1; b += 4) stream_pass<1, 4>(pairs, n, qa, sa, q, sw, b, c_type, c);
    for (; b + 2 <= b1; b += 2) stream_pass<1, 2>(pairs, n, qa, sa, q, sw, b, c_type, c);
  } else if (m == 2) {
    for (; b + 2 <= b1; b += 2) stream_pass<2, 2>(pairs, n, qa, sa, q, sw, b, c_type, c);
  }
  for (; b < b1; ++b) {
    with_count<1, 6>(int(std::min<int64_t>(m, 6)),
                     [&](auto r) { stream_pass<r.value, 1>(pairs, n, qa, sa, q, sw, b, c_type, c); });
    // 7-8 rows: rows 6.. in a second pass over the block, re-read from L2 (<= 192 KiB at K =
    // 3072). Each half block in its own pass (16 sums of 8 rows) had the M = 8 decode step at 0.88x
    // the bf16 kernel's speed on Zen 5; this split runs it 1.25-1.38x faster than bf16
    // (BM_DecodeStepFormats/8; 4 + 4 rows 1.09-1.17x, 5 + 3 about as 6 + 2).
    if (m > 6)
      with_count<1, 2>(int(m - 6), [&](auto r) { stream_pass<r.value, 1>(pairs, n, qa, sa, q, sw, b, c_type, c, 6); });
  }
}

void tile_avx512(int64_t t0, int64_t t1, int64_t m, int64_t k, int64_t n, const int32_t* qa, const float* sa,
                 const int8_t* q, const float* sw, int64_t b, void* scratch, DType c_type, void* c) {
  const int64_t pairs = pairs_of(k);
  int16_t* w = static_cast<int16_t*>(scratch);
  float* sums = reinterpret_cast<float*>(static_cast<char*>(scratch) + kChunkPairs * kLine * 2);
  const int8_t* src = q + b * pairs * kLine;
  for (int64_t c0 = 0; c0 < pairs; c0 += kChunkPairs) {
    const int64_t pc = std::min(kChunkPairs, pairs - c0);
    // The chunk widened once (32 KiB, L1-resident) for every tile of the item.
    for (int64_t p = 0; p < pc; ++p)
      for (int j = 0; j < 4; ++j)
        _mm512_store_si512(
            w + p * kLine + j * 32,
            _mm512_cvtepi8_epi16(_mm256_load_si256(reinterpret_cast<const __m256i*>(src + (c0 + p) * kLine + j * 32))));
    for (int64_t t = t0; t < t1; ++t)
      tile_chunk(pc, qa + (t * pairs + c0) * kTileRows, w, sums + (t - t0) * kTileRows * kBlock, c0 == 0);
  }
  for (int64_t t = t0; t < t1; ++t)
    for (int64_t r = 0; r < std::min<int64_t>(kTileRows, m - t * kTileRows); ++r)
      for (int j = 0; j < 4; ++j)
        store16(_mm512_load_ps(sums + ((t - t0) * kTileRows + r) * kBlock + j * 16), sa[t * kTileRows + r], sw,
                b * kBlock + j * 16, n, c_type, c, t * kTileRows + r);
}

float maxabs_avx512(DType t, const void* x, int64_t at, int64_t k) {
  __m512 m = _mm512_setzero_ps();
  __mmask16 bad = 0;
  for (int64_t i = 0; i < k; i += 16) {
    const __m512 v = _mm512_abs_ps(load_act16(t, x, at + i, mask16(k - i)));
    bad |= _mm512_fpclass_ps_mask(v, 0x01 | 0x08 | 0x80);  // QNaN, +Inf, SNaN (after abs)
    m = _mm512_max_ps(m, v);                               // under DAZ an |x| below FLT_MIN compares as 0
  }
  return bad ? std::numeric_limits<float>::quiet_NaN() : _mm512_reduce_max_ps(m);
}

float quantize_act_avx512(DType a_type, const void* a, int64_t at, int64_t len, int64_t pairs, int32_t* dst) {
  const float s = maxabs_avx512(a_type, a, at, len) / 32767.f;  // NaN for a NaN/Inf row
  int16_t* out = reinterpret_cast<int16_t*>(dst);
  if (!(s > 0.f)) {
    for (int64_t p = 0; p < pairs; ++p) dst[p] = 0;
    return s;
  }
  for (int64_t i = 0; i < 2 * pairs; i += 16) {  // lanes past len load 0 and quantize to 0
    const __m512i v = quantize16(load_act16(a_type, a, at + i, mask16(len - i)), s, 32767.f);
    _mm256_mask_storeu_epi16(out + i, mask16(2 * pairs - i), _mm512_cvtepi32_epi16(v));
  }
  return s;
}

void quantize_row_avx512(const float* x, int64_t k, float s, int8_t* q) {
  for (int64_t i = 0; i < k; i += 16) {
    const __mmask16 mask = mask16(k - i);
    _mm_mask_storeu_epi8(q + i, mask, _mm512_cvtepi32_epi8(quantize16(_mm512_maskz_loadu_ps(mask, x + i), s, 127.f)));
  }
}

}  // namespace hlx::kernels::int8
