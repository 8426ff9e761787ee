// AVX-512 bodies of ew_vec.h (compiled with HLX_AVX512_FLAGS). Full vectors use plain loads and
// stores; tails use masked ones. Every lane's arithmetic is the same either way, so an element's
// result does not depend on where it sits in the array.
#include "runtime/kernels/x86_intrin.h"  // <immintrin.h>; see there why

#include "runtime/kernels/ew_vec.h"

// The scalar definitions round after every operation; keep GCC from fusing a multiply and an add.
#ifndef __clang__  // clang does not know this pragma (and ignored it)
#pragma GCC optimize("fp-contract=off")
#endif

namespace hlx::kernels::internal {
namespace {

inline __mmask16 tail(int64_t left) { return left >= 16 ? __mmask16(0xffff) : __mmask16((1u << left) - 1); }

// f32 bits -> bf16 bits in the low 16 bits of each lane, as hlx::f32_to_bf16: NaN keeps its top
// bits with the quiet bit set; everything else adds 0x7fff + lsb and truncates (ties to even,
// overflow to inf, subnormals rounded like any other value).
inline __m512i bf16_bits(__m512 x) {
  const __m512i u = _mm512_castps_si512(x);
  const __m512i hi = _mm512_srli_epi32(u, 16);
  const __m512i lsb = _mm512_and_si512(hi, _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb), 16);
  const __mmask16 nan =
      _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
  return _mm512_mask_or_epi32(rounded, nan, hi, _mm512_set1_epi32(0x40));
}

template <class Op>
void binary_loop(const float* a, const float* b, float* y, int64_t n, Op op) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, op(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i)));
  if (i < n) {
    const __mmask16 m = tail(n - i);
    _mm512_mask_storeu_ps(y + i, m, op(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i)));
  }
}

}  // namespace

void f32_to_bf16_exact_avx512(const float* x, bf16* y, int64_t n) {
  // 32 elements per step: two vectors of 16-bit results packed (values <= 0xffff, so the unsigned
  // saturation never clips) and put back in order, for one full 64-byte store.
  const __m512i order = _mm512_setr_epi64(0, 2, 4, 6, 1, 3, 5, 7);
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512i lo = bf16_bits(_mm512_loadu_ps(x + i)), hi = bf16_bits(_mm512_loadu_ps(x + i + 16));
    _mm512_storeu_si512(y + i, _mm512_permutexvar_epi64(order, _mm512_packus_epi32(lo, hi)));
  }
  for (; i < n; i += 16) {
    const __mmask16 m = tail(n - i);
    _mm256_mask_storeu_epi16(y + i, m, _mm512_cvtepi32_epi16(bf16_bits(_mm512_maskz_loadu_ps(m, x + i))));
  }
}

void bf16_to_f32_avx512(const bf16* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i h = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i)));
    _mm512_storeu_ps(y + i, _mm512_castsi512_ps(_mm512_slli_epi32(h, 16)));
  }
  if (i < n) {
    const __mmask16 m = tail(n - i);
    const __m512i h = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, x + i));
    _mm512_mask_storeu_ps(y + i, m, _mm512_castsi512_ps(_mm512_slli_epi32(h, 16)));
  }
}

void round_to_bf16_avx512(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(y + i, _mm512_castsi512_ps(_mm512_slli_epi32(bf16_bits(_mm512_loadu_ps(x + i)), 16)));
  if (i < n) {
    const __mmask16 m = tail(n - i);
    const __m512i b = _mm512_slli_epi32(bf16_bits(_mm512_maskz_loadu_ps(m, x + i)), 16);
    _mm512_mask_storeu_ps(y + i, m, _mm512_castsi512_ps(b));
  }
}

void binary_f32_avx512(VecBinOp op, const float* a, const float* b, float* y, int64_t n) {
  switch (op) {
    case VecBinOp::kAdd:
      return binary_loop(a, b, y, n, [](__m512 p, __m512 q) { return _mm512_add_ps(p, q); });
    case VecBinOp::kSub:
      return binary_loop(a, b, y, n, [](__m512 p, __m512 q) { return _mm512_sub_ps(p, q); });
    case VecBinOp::kMul:
      return binary_loop(a, b, y, n, [](__m512 p, __m512 q) { return _mm512_mul_ps(p, q); });
    case VecBinOp::kDiv:
      return binary_loop(a, b, y, n, [](__m512 p, __m512 q) { return _mm512_div_ps(p, q); });
  }
}

}  // namespace hlx::kernels::internal
