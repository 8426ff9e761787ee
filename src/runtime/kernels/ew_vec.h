// Array forms of the elementwise building blocks the fused and one-op elementwise kernels use at
// prefill sizes. Each gives exactly the bits of its scalar definition on every input (so the
// vector and scalar paths, and fused and unfused kernels, agree): the bf16 conversions are the
// software round-to-nearest-even of hlx::f32_to_bf16 done in integer lanes (no denormal flush, NaN
// -> quiet NaN keeping the payload's top bits), unlike vcvtneps2bf16. AVX-512 bodies live in
// ew_vec_avx512.cc and are used when the CPU has AVX512F+BW; otherwise the scalar loops run.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace hlx::kernels {

// y[i] = f32_to_bf16(x[i]).
void f32_to_bf16_exact(const float* x, bf16* y, int64_t n);
// y[i] = bf16_to_f32(x[i]).
void bf16_to_f32_n(const bf16* x, float* y, int64_t n);
// y[i] = bf16_to_f32(f32_to_bf16(x[i])): x rounded to bf16 precision, kept in f32. y may alias x.
void round_to_bf16(const float* x, float* y, int64_t n);

// y[i] = a[i] op b[i] in f32 (IEEE, correctly rounded: the same bits as the scalar operator, NaN
// payloads aside). y may alias a or b.
enum class VecBinOp { kAdd, kSub, kMul, kDiv };
void binary_f32(VecBinOp op, const float* a, const float* b, float* y, int64_t n);

namespace internal {
// The AVX-512 bodies (call only when the CPU has AVX512F and AVX512BW); exposed for the bit-sweep tests.
void f32_to_bf16_exact_avx512(const float* x, bf16* y, int64_t n);
void bf16_to_f32_avx512(const bf16* x, float* y, int64_t n);
void round_to_bf16_avx512(const float* x, float* y, int64_t n);
void binary_f32_avx512(VecBinOp op, const float* a, const float* b, float* y, int64_t n);
}  // namespace internal

}  // namespace hlx::kernels
