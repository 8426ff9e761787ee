// Internal to matmul_int8*.cc: the int8 weight layout and the per-item kernels (a portable one in
// matmul_int8.cc, AVX-512 ones in matmul_int8_avx512.cc, picked by cpu_features()).
//
// Layout: N is cut into blocks of 64 output columns; block b holds K rows of 64 int8 values,
// q[b * K * 64 + k * 64 + j] = q(k, n = 64 b + j), zeros past N; scale[n] (f32, zeros past N).
// One k step of one block is a single 64-byte line, so a decode step streams each weight byte once.
//
// Every kernel computes an output as acc = 0; for k = 0..K-1: acc = fma(a[m, k], float(q[k, n]), acc);
// then C[m, n] = acc * scale[n] (rounded to bf16 for a bf16 C). The order and the fused multiply-add
// are the same in the streaming and the tiled kernel, so a row's bits do not depend on M, on how
// rows are grouped or on the thread count. (The portable kernel uses a separate multiply and add,
// everywhere, on CPUs without FMA.)
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace hlx::kernels::int8 {

constexpr int64_t kBlock = 64;       // output columns per block
constexpr int64_t kStreamMaxM = 8;   // M <= this: streaming kernel, larger: dequantized tiles
constexpr int64_t kTileRows = 96;    // rows per tiled work item
constexpr int64_t kTileK = 256;      // k steps per chunk of a tiled work item

// Streaming product for all `m` rows (m <= kStreamMaxM) over column blocks [b0, b1).
// a: f32 [m, k] (row stride k); c: [m, n] of c_type (row stride n).
void stream_avx512(int64_t m, int64_t k, int64_t n, const float* a, const int8_t* q, const float* scale,
                   int64_t b0, int64_t b1, DType c_type, void* c);
// Tiled product of `rows` rows (<= kTileRows) starting at `a` against block `b`: the block is
// converted to f32 chunk by chunk in `scratch` (tile_scratch_floats() floats, 64-byte aligned).
// c points at row 0 of C (row stride n).
constexpr int64_t tile_scratch_floats() { return (kTileK + kTileRows) * kBlock; }
void tile_avx512(int64_t rows, int64_t k, int64_t n, const float* a, const int8_t* q, const float* scale,
                 int64_t b, float* scratch, DType c_type, void* c);

// q[i] = round-half-even(x[i] / s) clamped to [-127, 127] for i < k (s > 0); the same values as the
// portable loop in matmul_int8.cc.
void quantize_row_avx512(const float* x, int64_t k, float s, int8_t* q);
// max_i |x[i]| over i < k; NaN when some x[i] is NaN or infinite.
float maxabs_avx512(const float* x, int64_t k);

}  // namespace hlx::kernels::int8
