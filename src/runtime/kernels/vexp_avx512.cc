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
    const __m512 neg_abs =
        _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(v), _mm512_set1_epi32(int(0x80000000u))));
    const __m512 e = exp16(neg_abs);
    const __mmask16 pos = _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_GE_OQ);
    const __m512 num = _mm512_mask_mov_ps(e, pos, one);
    _mm512_mask_storeu_ps(y + i, m, _mm512_div_ps(num, _mm512_add_ps(one, e)));
  }
}

namespace {
// tanh of 8 lanes in double precision, so that the f32 result is (nearly always) the correctly
// rounded one: models whose GELU output is rounded to bf16 for the next matmul then round it the
// way a correctly rounded libm does (std::tanh, glibc: 0.5 ulp in ~91 % of inputs), instead of
// flipping bf16 roundings at every 1-ulp difference of a cheaper f32 formula.
// tanh a = m / (m + 2) with m = expm1(2a), a = |x| (the sign is put back by the caller): 2a is
// capped at 40 (tanh rounds to 1 in f32 from a = 9.01; inf -> 1, NaN flows through), reduced as
// 2a = n ln2 + r, |r| <= ln2 / 2, expm1 r by its Taylor series to r^12 / 12! (truncation < 2e-15
// relative), then m = 2^n (expm1 r) + (2^n - 1) (exact for n = 0, where small a needs it).
inline __m512d tanh_abs8(__m512d a) {
  const __m512d c = _mm512_min_pd(_mm512_set1_pd(40.0), _mm512_add_pd(a, a));
  const __m512d n = _mm512_roundscale_pd(_mm512_mul_pd(c, _mm512_set1_pd(1.4426950408889634)),
                                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512d r = _mm512_fnmadd_pd(n, _mm512_set1_pd(6.93147180369123816490e-01), c);  // ln2 hi (exact n * hi)
  r = _mm512_fnmadd_pd(n, _mm512_set1_pd(1.90821492927058770002e-10), r);          // ln2 lo
  // expm1 r = r + r^2 (1/2! + r/3! + ... + r^10/12!)
  const double inv_fact[11] = {1.0 / 2,     1.0 / 6,      1.0 / 24,      1.0 / 120,      1.0 / 720,      1.0 / 5040,
                               1.0 / 40320, 1.0 / 362880, 1.0 / 3628800, 1.0 / 39916800, 1.0 / 479001600};
  __m512d p = _mm512_set1_pd(inv_fact[10]);
  for (int k = 9; k >= 0; --k) p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(inv_fact[k]));
  const __m512d em1 = _mm512_fmadd_pd(_mm512_mul_pd(r, r), p, r);
  const __m512d two_n = _mm512_scalef_pd(_mm512_set1_pd(1.0), n);
  const __m512d m = _mm512_add_pd(_mm512_mul_pd(two_n, em1), _mm512_sub_pd(two_n, _mm512_set1_pd(1.0)));
  return _mm512_div_pd(m, _mm512_add_pd(m, _mm512_set1_pd(2.0)));
}
}  // namespace

void tanh_f32_avx512(const float* x, float* y, int64_t n) {
  const __m512i sign = _mm512_set1_epi32(int(0x80000000u));
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail(n - i);
    const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
    const __m512 a = _mm512_castsi512_ps(_mm512_andnot_si512(sign, _mm512_castps_si512(v)));
    const __m256 lo = _mm512_cvtpd_ps(tanh_abs8(_mm512_cvtps_pd(_mm512_castps512_ps256(a))));
    const __m256 hi =
        _mm512_cvtpd_ps(tanh_abs8(_mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1)))));
    const __m512 t =
        _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(lo)), _mm256_castps_pd(hi), 1));
    // x's sign back (-0 -> -0); NaN lanes return x itself, quietened, as std::tanh does.
    const __m512 r =
        _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(t), _mm512_and_si512(sign, _mm512_castps_si512(v))));
    const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    _mm512_mask_storeu_ps(y + i, m, _mm512_mask_add_ps(r, nan, v, v));
  }
}

}  // namespace hlx::kernels::internal
