// Checkpoints stored 4-bit (AWQ, GPTQ): one linear layer's stored tensors packed for the int4
// kernels as they are, with no bf16 copy (runtime/kernels/matmul_int4.h).
#pragma once

#include <memory>

#include "core/status.h"
#include "io/quantized.h"
#include "runtime/kernels/matmul.h"

namespace hlx::engine {

// w[n, k] = s * (q - z) becomes the kernels' s * q + m with m = -s * z (exact in f32: an f16 scale
// times an integer <= 16). A GPTQ g_idx is mapped onto contiguous groups by permuting k: packed k
// runs through the inputs of group 0 (in k order), then group 1, ...; the permutation is dropped
// when it is the identity. kUnsupported when g_idx's groups are not all group_size inputs (the last
// one may be short), which act-order quantization always gives.
Result<std::unique_ptr<kernels::PackedWeight>> pack_quantized_linear(const Int4Linear& linear);

}  // namespace hlx::engine
