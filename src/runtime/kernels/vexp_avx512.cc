// AVX-512 bodies of vexp.h (compiled with HLX_AVX512_FLAGS, called only when cpu_features().avx512f).
// Tails use masked loads/stores, so every element goes through exactly the same instructions
// whatever its position in the array (a fused tile and a one-op chunk give the same bits).
#include <immintrin.h>

#include "runtime/kernels/vexp.h"

namespace hlx::kernels::internal {
namespace {

inline __m512 exp16(__m512 x) {
  // Clamp so n stays a small integer; +-inf and NaN are handled by the clamp order (min/max
  // return their second operand when either is NaN, so NaN passes through) and by scalef.
  // e^x overflows above 88.73 and is below half the smallest subnormal under -103.98.
  __m512 c = _mm512_min_ps(_mm512_set1_ps(89.0f), x);
  c = _mm512_max_ps(_mm512_set1_ps(-104.0f), c);
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(c, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  // r = c - n ln2 with ln2 split hi + lo (hi has few mantissa bits, so n * hi is exact).
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), c);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  // e^r on |r| <= ln2/2: 1 + r + r^2 (1/2 + r/6 + ...), minimax coefficients (Cephes expf).
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, r);
  p = _mm512_add_ps(p, _mm512_set1_ps(1.0f));
  // p * 2^n, rounded once: overflows to inf, underflows gradually (the elementwise kernels run
  // without FTZ), NaN stays NaN.
  return _mm512_scalef_ps(p, n);
}

inline __mmask16 tail(int64_t left) { return left >= 16 ? __mmask16(0xffff) : __mmask16((1u << left) - 1); }

}  // namespace

void exp_f32_avx512(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail(n - i);
    _mm512_mask_storeu_ps(y + i, m, exp16(_mm512_maskz_loadu_ps(m, x + i)));
  }
}

void logistic_f32_avx512(const float* x, float* y, int64_t n) {
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail(n - i);
    const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
    // e = e^-|x| never overflows; x < 0 gives e / (1 + e), which keeps the tiny results of
    // x < -88.7 where 1 / (1 + e^-x) would be 1 / inf = 0.
    const __m512 neg_abs = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(v), _mm512_set1_epi32(int(0x80000000u))));
    const __m512 e = exp16(neg_abs);
    const __mmask16 pos = _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_GE_OQ);
    const __m512 num = _mm512_mask_mov_ps(e, pos, one);
    _mm512_mask_storeu_ps(y + i, m, _mm512_div_ps(num, _mm512_add_ps(one, e)));
  }
}

}  // namespace hlx::kernels::internal
