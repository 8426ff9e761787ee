// Checkpoints stored 4-bit (AWQ, GPTQ): one linear layer's stored tensors packed for the int4
// kernels as they are, with no bf16 copy (runtime/kernels/matmul_int4.h).
#pragma once

#include <memory>
#include <vector>

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

// An FP8 block-scaled linear layer runs on the int8 kernels (or int4 when `format` is kInt4): the
// stored blocks are dequantized to f32 one layer at a time (w = fp8 * scale_inv, one rounding) and
// requantized per output row by the int8 rule (matmul_int8.h), so a weight moves by at most
// max_k |w[n, k]| / 254 from its exact dequantized value. Why not a dedicated fp8 kernel: int8 is
// the same byte per weight (plus 4 bytes per row), so decode streams the stored checkpoint's bytes
// at the int8 kernels' measured DRAM roofline and prefill reuses their VNNI tiles; an e4m3 kernel
// would be exact but needs its own streaming, tiled and portable variants. kInvalidArgument for a
// NaN weight code. `scratch` holds the layer's f32 copy; reusing one across layers keeps the load
// from leaving a freed copy per layer in the heap.
Result<std::unique_ptr<kernels::PackedWeight>> pack_fp8_linear(const Fp8Linear& linear, kernels::WeightFormat format,
                                                               std::vector<float>& scratch);

}  // namespace hlx::engine
