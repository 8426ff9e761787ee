// AVX-512 bodies of vexp.h (compiled with HLX_AVX512_FLAGS, called only when cpu_features().avx512f).
// Tails use masked loads/stores, so every element goes through exactly the same instructions
// whatever its position in the array (a fused tile and a one-op chunk give the same bits).
#include "runtime/kernels/x86_intrin.h"  // <immintrin.h>; see there why

#include "runtime/kernels/exp_nonpos16_avx512.h"
#include "runtime/kernels/vexp.h"

namespace hlx::kernels::internal {
namespace {

inline __m512 exp16(__m512 x) {
  // Clamp so n stays a small integer; +-inf and NaN are handled by the clamp order (min/max
  // return their second operand when either is NaN, so NaN passes through) and by scalef.
  // e^x overflows above 88.73 and is below half the smallest subnormal under -103.98.
  __m512 c = _mm512_min_ps(_mm512_set1_ps(89.0f), x);
  c = _mm512_max_ps(_mm512_set1_ps(-104.0f), c);
  // e^c = p * 2^n (exp_nonpos16_avx512.h: Cody-Waite reduction, Cephes expf polynomial).
  __m512 n;
  const __m512 p = exp_reduced16(c, n);
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
