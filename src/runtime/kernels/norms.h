// Native kernels of `hlx.rms_norm` and `hlx.layer_norm` (semantics: docs/COMPOSITES.md).
// x and out are [rows, dim] of x_type (f32 or bf16); weight/bias are [dim] of w_type (f32, bf16, f16).
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"

namespace hlx::kernels {

Status rms_norm(int64_t rows, int64_t dim, DType x_type, const void* x, DType w_type, const void* weight, float epsilon,
                float weight_offset, void* out);
Status layer_norm(int64_t rows, int64_t dim, DType x_type, const void* x, DType w_type, const void* weight,
                  const void* bias, float epsilon, void* out);

}  // namespace hlx::kernels
