// Internals of norms.cc shared with its AVX-512 body and the tests (not a public API).
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"

namespace hlx::kernels::internal {

// rms_norm of `rows` contiguous f32 rows: y = x * (1 / sqrt(sum(x^2) / dim + eps)) * w, with w
// already offset, in exactly the arithmetic of the portable loop (norms.cc): the squares summed in
// 4 lanes (lane j takes elements i = j mod 4 of the first dim & ~3, in order), the rest added to
// lane 0 in order, then ((0 + l0) + l1) + l2) + l3; each product rounded (no FMA). y may alias x.
void rms_norm_rows_avx512(const float* x, int64_t rows, const float* w, int64_t dim, float epsilon, float* y);

// The portable rms_norm (the path CPUs without AVX-512 take), for tests comparing the two.
Status rms_norm_portable(int64_t rows, int64_t dim, DType x_type, const void* x, DType w_type, const void* weight,
                         float epsilon, float weight_offset, void* out);

}  // namespace hlx::kernels::internal
