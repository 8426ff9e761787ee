// AVX-512 bodies of the hlx.rotary head rotation (rotary.cc), compiled with HLX_AVX512_FLAGS. The
// arithmetic is the portable loop's: y = a*c - b*s and b*c + a*s with each product rounded.
#include "runtime/kernels/x86_intrin.h"  // <immintrin.h>; see there why

#include <cstdint>

// Products are rounded before the add/subtract, as in the portable loop (no FMA contraction).
#ifndef __clang__  // clang does not know this pragma (and ignored it)
#pragma GCC optimize("fp-contract=off")
#endif

namespace hlx::kernels::internal {
namespace {

inline __mmask16 tail(int64_t left) { return left >= 16 ? __mmask16(0xffff) : __mmask16((1u << left) - 1); }

inline void rotate16(__m512 a, __m512 b, __m512 c, __m512 s, __m512& lo, __m512& hi) {
  lo = _mm512_sub_ps(_mm512_mul_ps(a, c), _mm512_mul_ps(b, s));
  hi = _mm512_add_ps(_mm512_mul_ps(b, c), _mm512_mul_ps(a, s));
}

// 16 lanes as f32 from f32 or bf16 (uint16_t bits); the masked forms zero the lanes past the tail.
inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 load16(__mmask16 m, const float* p) { return _mm512_maskz_loadu_ps(m, p); }
inline __m512 widen_bf16(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }
inline __m512 load16(const uint16_t* p) { return widen_bf16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
inline __m512 load16(__mmask16 m, const uint16_t* p) { return widen_bf16(_mm256_maskz_loadu_epi16(m, p)); }

// y[i], y[i + half] from x[i], x[i + half] for i < half; y may alias x. Full vectors use plain
// loads and stores (a masked load waits for older stores that may overlap it), the tail masked ones.
template <typename T>
void rotate_half(const T* x, const float* cs, const float* sn, int64_t half, float* y) {
  __m512 lo, hi;
  int64_t i = 0;
  for (; i + 16 <= half; i += 16) {
    rotate16(load16(x + i), load16(x + half + i), load16(cs + i), load16(sn + i), lo, hi);
    _mm512_storeu_ps(y + i, lo);
    _mm512_storeu_ps(y + half + i, hi);
  }
  if (i < half) {
    const __mmask16 m = tail(half - i);
    rotate16(load16(m, x + i), load16(m, x + half + i), load16(m, cs + i), load16(m, sn + i), lo, hi);
    _mm512_mask_storeu_ps(y + i, m, lo);
    _mm512_mask_storeu_ps(y + half + i, m, hi);
  }
}

}  // namespace

void rotate_half_f32_avx512(const float* x, const float* cs, const float* sn, int64_t half, float* y) {
  rotate_half(x, cs, sn, half, y);
}

// The same from bf16 x into an f32 buffer of 2 * half.
void rotate_half_bf16_avx512(const uint16_t* x, const float* cs, const float* sn, int64_t half, float* buf) {
  rotate_half(x, cs, sn, half, buf);
}

}  // namespace hlx::kernels::internal
