// int16 codes of an f32 row for the integer (AVX512-VNNI vpdpwssd) attention products over an
// int8 KV cache: the decode kernel's Q rows and P.V weights, the prefill kernel's Q rows. Both
// kernels round Q the same way, so a score's int32 sum is the same in either.
#pragma once

#if defined(__AVX512F__)
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <limits>

namespace hlx::kernels::internal {

// The largest int16 query code for head_dim Dh: 32767, or less when Dh * 32767 * 127 (a score's
// largest int32 sum) would not fit.
inline int32_t int16_query_max(int64_t Dh) {
  return int32_t(std::min<int64_t>(32767, std::numeric_limits<int32_t>::max() / (127 * Dh)));
}

// Rounds x[0, n) (f32) to int16 codes q[0, n) = round(x / scale), |q| <= q_max, and returns scale
// = max|x| / q_max (0 for a zero row, when the codes are 0; NaN when x holds a NaN, and inf for an
// infinity, so either still poisons what the codes feed).
inline float quantize_int16(const float* x, int64_t n, int32_t q_max, int16_t* q) {
  __m512 mx = _mm512_setzero_ps();
  __mmask16 nan = 0;
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - i)) - 1);
    const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
    nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    mx = _mm512_max_ps(mx, _mm512_abs_ps(v));
  }
  const float amax = nan ? std::numeric_limits<float>::quiet_NaN() : _mm512_reduce_max_ps(mx);
  const __m512 inv = _mm512_set1_ps(amax > 0.f ? float(q_max) / amax : 0.f);
  const __m512i lim = _mm512_set1_epi32(q_max);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - i)) - 1);
    __m512i c = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), inv));
    c = _mm512_max_epi32(_mm512_min_epi32(c, lim), _mm512_sub_epi32(_mm512_setzero_si512(), lim));
    _mm256_mask_storeu_epi16(q + i, m, _mm512_cvtepi32_epi16(c));
  }
  return amax / float(q_max);
}

}  // namespace hlx::kernels::internal
#endif
