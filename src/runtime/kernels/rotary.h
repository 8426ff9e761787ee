// Native kernel of `hlx.rotary` (semantics: docs/COMPOSITES.md).
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"

namespace hlx::kernels {

// x and out: [rows, heads, head_dim] of x_type (f32 or bf16); positions [rows] i32;
// inv_freq [rotary_dim / 2] f32 with rotary_dim <= head_dim.
Status rotary(int64_t rows, int64_t heads, int64_t head_dim, int64_t rotary_dim, DType x_type, const void* x,
              const int32_t* positions, const float* inv_freq, void* out);

}  // namespace hlx::kernels
