// AVX-512 body of rms_norm rows (norms_internal.h), compiled with HLX_AVX512_FLAGS. It keeps the
// portable loop's summation order and rounding exactly, so both paths give the same bits. That
// order is a chain of dim/4 dependent 4-lane adds per row, so rows are summed R at a time to keep
// R chains in flight; each row's arithmetic is the same whatever R.
#include <immintrin.h>

#include <cmath>

#include "runtime/kernels/norms_internal.h"
#include "runtime/kernels/static_dispatch.h"

// Each product is rounded before it is added, as in the portable loop (no FMA contraction; GCC
// contracts across statements unless told not to, clang only within one expression).
#ifndef __clang__  // clang does not know this pragma (and ignored it)
#pragma GCC optimize("fp-contract=off")
#endif

namespace hlx::kernels::internal {
namespace {

// 1 / sqrt(mean of squares + eps) of R rows (row stride dim), in the portable loop's order.
template <int R>
void inv_rms(const float* x, int64_t dim, float epsilon, float* inv) {
  const int64_t dim4 = dim & ~int64_t(3);
  __m128 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm_setzero_ps();
  for (int64_t i = 0; i < dim4; i += 4) {
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m128 v = _mm_loadu_ps(x + r * dim + i);
      acc[r] = _mm_add_ps(acc[r], _mm_mul_ps(v, v));
    }
  }
  for (int r = 0; r < R; ++r) {
    alignas(16) float lane[4];
    _mm_store_ps(lane, acc[r]);
    const float* xr = x + r * dim;
    for (int64_t i = dim4; i < dim; ++i) {
      const float sq = xr[i] * xr[i];  // its own statement: clang contracts only within one
      lane[0] = sq + lane[0];
    }
    const float ss = (((0.f + lane[0]) + lane[1]) + lane[2]) + lane[3];
    inv[r] = 1.f / std::sqrt(ss / float(dim) + epsilon);
  }
}

}  // namespace

void rms_norm_rows_avx512(const float* x, int64_t rows, const float* w, int64_t dim, float epsilon, float* y) {
  for (int64_t r0 = 0; r0 < rows; r0 += 8) {
    float inv[8];
    const int64_t nr = rows - r0 < 8 ? rows - r0 : 8;
    const float* xb = x + r0 * dim;
    with_count<1, 8>(int(nr), [&](auto r) { inv_rms<r.value>(xb, dim, epsilon, inv); });
    for (int64_t r = 0; r < nr; ++r) {
      const float* xr = xb + r * dim;
      float* yr = y + (r0 + r) * dim;
      const __m512 vinv = _mm512_set1_ps(inv[r]);
      // Plain loads/stores for full vectors (a masked load waits for older overlapping stores).
      int64_t i = 0;
      for (; i + 16 <= dim; i += 16)
        _mm512_storeu_ps(yr + i, _mm512_mul_ps(_mm512_mul_ps(_mm512_loadu_ps(xr + i), vinv), _mm512_loadu_ps(w + i)));
      if (i < dim) {
        const __mmask16 m = __mmask16((1u << (dim - i)) - 1);
        const __m512 v =
            _mm512_mul_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, xr + i), vinv), _mm512_maskz_loadu_ps(m, w + i));
        _mm512_mask_storeu_ps(yr + i, m, v);
      }
    }
  }
}

}  // namespace hlx::kernels::internal
