// The end of an int4 product on AVX-512, shared by the AVX-512 and AMX kernels
// (matmul_int4_avx512.cc, matmul_int4_amx.cc) so both give the contract's bits (matmul_int4.h):
// each group's fold of its exact int32 sums, and the store of a 64-column block of sums.
#pragma once

#if defined(__AVX512F__)
#include "runtime/kernels/x86_intrin.h"  // <immintrin.h>; see there why

#include <cstdint>

#include "core/dtype.h"

namespace hlx::kernels::int4 {

inline __mmask16 mask16(int64_t cnt) {
  return cnt >= 16 ? __mmask16(0xffff) : cnt <= 0 ? __mmask16(0) : __mmask16((1u << cnt) - 1);
}

// sum = fma(s, float(isum) * s_a, sum); sum = fma(m, sq, sum) for 16 columns (a group's end).
inline void fold(float* sum, __m512i isum, const float* s, const float* m, float sa, float sq) {
  const __m512 t = _mm512_mul_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(sa));
  const __m512 v = _mm512_fmadd_ps(_mm512_load_ps(s), t, _mm512_load_ps(sum));
  _mm512_store_ps(sum, _mm512_fmadd_ps(_mm512_load_ps(m), _mm512_set1_ps(sq), v));
}

// Writes 64 sums of row `row` as columns [col, col + 64) of C (masked past n).
inline void store_block(const float* sum, int64_t row, int64_t col, int64_t n, DType c_type, void* c) {
  for (int j = 0; j < 4; ++j) {
    const int64_t at = col + 16 * j;
    if (at >= n) return;
    const __mmask16 mask = mask16(n - at);
    const __m512 v = _mm512_load_ps(sum + 16 * j);
    if (c_type == DType::kF32)
      _mm512_mask_storeu_ps(static_cast<float*>(c) + row * n + at, mask, v);
    else
      _mm256_mask_storeu_epi16(static_cast<bf16*>(c) + row * n + at, mask, (__m256i)_mm512_cvtneps_pbh(v));
  }
}

}  // namespace hlx::kernels::int4
#endif
