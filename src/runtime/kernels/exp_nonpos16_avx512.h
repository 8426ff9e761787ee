// e^x for x <= 0 on 16 lanes, for the attention kernels' online softmax (scores minus their
// running max): Cody-Waite reduction and the Cephes expf polynomial; inputs below -87 give e^-87.
// Only AVX-512 translation units see it (attention_impl.h is also compiled for the baseline ISA).
#pragma once

#if defined(__AVX512F__)
#include <immintrin.h>

namespace hlx::kernels::internal {

// e^c / 2^n with n = round(c / ln2) (returned in `n`), for |c| small enough that n fits: the
// Cody-Waite reduction r = c - n ln2 (ln2 split hi + lo) and the Cephes expf polynomial for e^r.
// Shared by exp_nonpos16 and vexp_avx512.cc's exp16, which scale by 2^n in their own ways.
inline __m512 exp_reduced16(__m512 c, __m512& n) {
  n = _mm512_roundscale_ps(_mm512_mul_ps(c, _mm512_set1_ps(1.44269504088896341f)),
                           _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), c);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  return _mm512_add_ps(_mm512_fmadd_ps(_mm512_mul_ps(p, r), r, r), _mm512_set1_ps(1.0f));
}

inline __m512 exp_nonpos16(__m512 x) {
  __m512 n;
  const __m512 p = exp_reduced16(_mm512_max_ps(x, _mm512_set1_ps(-87.0f)), n);
  const __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
  return _mm512_mul_ps(p, _mm512_castsi512_ps(e));
}

}  // namespace hlx::kernels::internal
#endif
