// AVX-512 kernels for int8 weights (layout and arithmetic contract in matmul_int8.h). Compiled with
// HLX_AVX512_FLAGS; called only when cpu_features().avx512f/bw/bf16. int8 -> f32 is vpmovsxbd +
// vcvtdq2ps; products are f32 FMAs with broadcast activations; the per-column scale is applied once
// at the end.
#include <immintrin.h>

#include <algorithm>
#include <limits>

#include "runtime/kernels/matmul_int8.h"

namespace hlx::kernels::int8 {
namespace {

inline __m512 load_q16(const int8_t* p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(p))));
}

// Writes acc * scale for 16 columns starting at column `col` of row `row` (masked past n).
inline void store16(__m512 acc, const float* scale, int64_t col, int64_t n, DType c_type, void* c, int64_t row) {
  if (col >= n) return;
  const int64_t cnt = std::min<int64_t>(16, n - col);
  const __mmask16 mask = cnt == 16 ? __mmask16(0xffff) : __mmask16((1u << cnt) - 1);
  const __m512 v = _mm512_mul_ps(acc, _mm512_loadu_ps(scale + col));
  if (c_type == DType::kF32) {
    _mm512_mask_storeu_ps(static_cast<float*>(c) + row * n + col, mask, v);
  } else {
    _mm256_mask_storeu_epi16(static_cast<bf16*>(c) + row * n + col, mask, (__m256i)_mm512_cvtneps_pbh(v));
  }
}

// R rows x NB consecutive blocks starting at block b, straight from the int8 stream.
template <int R, int NB>
void stream_rows(int64_t k, int64_t n, const float* a, const int8_t* q, const float* scale, int64_t b,
                 DType c_type, void* c, int64_t row0) {
  __m512 acc[R][NB * 4];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < NB * 4; ++j) acc[r][j] = _mm512_setzero_ps();
  const int8_t* base = q + b * k * kBlock;
  for (int64_t kk = 0; kk < k; ++kk) {
    __m512 w[NB * 4];
    for (int nb = 0; nb < NB; ++nb) {
      const int8_t* p = base + nb * k * kBlock + kk * kBlock;
      // 2 KiB ahead in this block's contiguous stream (32 k steps).
      _mm_prefetch(reinterpret_cast<const char*>(p + 2048), _MM_HINT_T0);
      for (int j = 0; j < 4; ++j) w[nb * 4 + j] = load_q16(p + j * 16);
    }
    for (int r = 0; r < R; ++r) {
      const __m512 x = _mm512_set1_ps(a[(row0 + r) * k + kk]);
      for (int j = 0; j < NB * 4; ++j) acc[r][j] = _mm512_fmadd_ps(x, w[j], acc[r][j]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < NB * 4; ++j) store16(acc[r][j], scale, b * kBlock + j * 16, n, c_type, c, row0 + r);
}

// R rows (5..8) x one half (32 columns) of block b: all rows in one pass, so each int8 value is
// converted once per product instead of once per 4-row group.
template <int R>
void stream_half(int64_t k, int64_t n, const float* a, const int8_t* q, const float* scale, int64_t b, int half,
                 DType c_type, void* c) {
  __m512 acc[R][2];
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  const int8_t* base = q + b * k * kBlock + half * 32;
  for (int64_t kk = 0; kk < k; ++kk) {
    const int8_t* p = base + kk * kBlock;
    if (half == 0) _mm_prefetch(reinterpret_cast<const char*>(p + 2048), _MM_HINT_T0);
    const __m512 w0 = load_q16(p), w1 = load_q16(p + 16);
    for (int r = 0; r < R; ++r) {
      const __m512 x = _mm512_set1_ps(a[r * k + kk]);
      acc[r][0] = _mm512_fmadd_ps(x, w0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(x, w1, acc[r][1]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < 2; ++j) store16(acc[r][j], scale, b * kBlock + half * 32 + j * 16, n, c_type, c, r);
}

template <int R>
void stream_block(int64_t k, int64_t n, const float* a, const int8_t* q, const float* scale, int64_t b,
                  DType c_type, void* c, int64_t row0) {
  stream_rows<R, 1>(k, n, a, q, scale, b, c_type, c, row0);
}

// R rows x 64 columns over `kc` k steps of a block already converted to f32 (`w`, [kc][64]); `a`
// points at (row0, first k of the chunk) with row stride lda. The running sums live in `acc_buf`
// ([rows][64] f32) between chunks: stored and reloaded exactly, so the sequence of FMAs per output
// is the same as one pass over all of K. The last chunk applies the scale and writes C.
template <int R>
void tile_rows(int64_t kc, const float* a, int64_t lda, const float* w, float* acc_buf, bool first, bool last,
               const float* scale, int64_t b, int64_t n, DType c_type, void* c, int64_t row0) {
  __m512 acc[R][4];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < 4; ++j)
      acc[r][j] = first ? _mm512_setzero_ps() : _mm512_load_ps(acc_buf + (row0 + r) * kBlock + j * 16);
  const float* ar = a + row0 * lda;
  for (int64_t kk = 0; kk < kc; ++kk) {
    const float* wp = w + kk * kBlock;
    const __m512 w0 = _mm512_load_ps(wp), w1 = _mm512_load_ps(wp + 16);
    const __m512 w2 = _mm512_load_ps(wp + 32), w3 = _mm512_load_ps(wp + 48);
    for (int r = 0; r < R; ++r) {
      const __m512 x = _mm512_set1_ps(ar[r * lda + kk]);
      acc[r][0] = _mm512_fmadd_ps(x, w0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(x, w1, acc[r][1]);
      acc[r][2] = _mm512_fmadd_ps(x, w2, acc[r][2]);
      acc[r][3] = _mm512_fmadd_ps(x, w3, acc[r][3]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < 4; ++j) {
      if (last) store16(acc[r][j], scale, b * kBlock + j * 16, n, c_type, c, row0 + r);
      else _mm512_store_ps(acc_buf + (row0 + r) * kBlock + j * 16, acc[r][j]);
    }
}

}  // namespace

void stream_avx512(int64_t m, int64_t k, int64_t n, const float* a, const int8_t* q, const float* scale,
                   int64_t b0, int64_t b1, DType c_type, void* c) {
  int64_t b = b0;
  // One or two rows: two blocks at once, so 8+ independent FMA chains hide the FMA latency.
  if (m <= 2) {
    for (; b + 2 <= b1; b += 2) {
      if (m == 1) stream_rows<1, 2>(k, n, a, q, scale, b, c_type, c, 0);
      else stream_rows<2, 2>(k, n, a, q, scale, b, c_type, c, 0);
    }
  }
  if (m >= 5) {
    for (; b < b1; ++b)
      for (int half = 0; half < 2; ++half) switch (m) {
          case 5: stream_half<5>(k, n, a, q, scale, b, half, c_type, c); break;
          case 6: stream_half<6>(k, n, a, q, scale, b, half, c_type, c); break;
          case 7: stream_half<7>(k, n, a, q, scale, b, half, c_type, c); break;
          default: stream_half<8>(k, n, a, q, scale, b, half, c_type, c); break;
        }
    return;
  }
  for (; b < b1; ++b) {
    int64_t r = 0;
    for (; r + 4 <= m; r += 4) stream_block<4>(k, n, a, q, scale, b, c_type, c, r);
    switch (m - r) {
      case 1: stream_block<1>(k, n, a, q, scale, b, c_type, c, r); break;
      case 2: stream_block<2>(k, n, a, q, scale, b, c_type, c, r); break;
      case 3: stream_block<3>(k, n, a, q, scale, b, c_type, c, r); break;
      default: break;
    }
  }
}

float maxabs_avx512(const float* x, int64_t k) {
  __m512 m = _mm512_setzero_ps();
  __mmask16 bad = 0;
  for (int64_t i = 0; i < k; i += 16) {
    const __mmask16 mask = k - i >= 16 ? __mmask16(0xffff) : __mmask16((1u << (k - i)) - 1);
    const __m512 v = _mm512_abs_ps(_mm512_maskz_loadu_ps(mask, x + i));
    bad |= _mm512_fpclass_ps_mask(v, 0x01 | 0x08 | 0x80);  // QNaN, +Inf, SNaN (after abs)
    m = _mm512_max_ps(m, v);
  }
  return bad ? std::numeric_limits<float>::quiet_NaN() : _mm512_reduce_max_ps(m);
}

void quantize_row_avx512(const float* x, int64_t k, float s, int8_t* q) {
  const __m512 sv = _mm512_set1_ps(s), lo = _mm512_set1_ps(-127.f), hi = _mm512_set1_ps(127.f);
  for (int64_t i = 0; i < k; i += 16) {
    const __mmask16 mask = k - i >= 16 ? __mmask16(0xffff) : __mmask16((1u << (k - i)) - 1);
    __m512 v = _mm512_div_ps(_mm512_maskz_loadu_ps(mask, x + i), sv);
    v = _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    v = _mm512_min_ps(_mm512_max_ps(v, lo), hi);
    _mm_mask_storeu_epi8(q + i, mask, _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(v)));
  }
}

void tile_avx512(int64_t rows, int64_t k, int64_t n, const float* a, const int8_t* q, const float* scale,
                 int64_t b, float* scratch, DType c_type, void* c) {
  // K in chunks of kTileK: the chunk's f32 weights (kTileK x 64) and activations (rows x kTileK)
  // stay in L2 while every row group passes over them, instead of streaming all of K from L3.
  const int8_t* src = q + b * k * kBlock;
  float* acc_buf = scratch + kTileK * kBlock;
  for (int64_t k0 = 0; k0 < k; k0 += kTileK) {
    const int64_t kc = std::min(kTileK, k - k0);
    const bool first = k0 == 0, last = k0 + kc == k;
    for (int64_t kk = 0; kk < kc; ++kk)
      for (int j = 0; j < 4; ++j)
        _mm512_store_ps(scratch + kk * kBlock + j * 16, load_q16(src + (k0 + kk) * kBlock + j * 16));
    const float* ak = a + k0;
    int64_t r = 0;
    for (; r + 6 <= rows; r += 6) tile_rows<6>(kc, ak, k, scratch, acc_buf, first, last, scale, b, n, c_type, c, r);
    switch (rows - r) {
      case 1: tile_rows<1>(kc, ak, k, scratch, acc_buf, first, last, scale, b, n, c_type, c, r); break;
      case 2: tile_rows<2>(kc, ak, k, scratch, acc_buf, first, last, scale, b, n, c_type, c, r); break;
      case 3: tile_rows<3>(kc, ak, k, scratch, acc_buf, first, last, scale, b, n, c_type, c, r); break;
      case 4: tile_rows<4>(kc, ak, k, scratch, acc_buf, first, last, scale, b, n, c_type, c, r); break;
      case 5: tile_rows<5>(kc, ak, k, scratch, acc_buf, first, last, scale, b, n, c_type, c, r); break;
      default: break;
    }
  }
}

}  // namespace hlx::kernels::int8
