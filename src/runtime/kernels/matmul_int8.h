// Internal to matmul_int8*.cc: the int8 weight layout, the arithmetic contract every int8 kernel
// follows, and the per-item kernels (portable ones in matmul_int8.cc, AVX-512 VNNI ones in
// matmul_int8_avx512.cc, picked by cpu_features()).
//
// Weights: per output column n, s_w[n] = max_k |w(k, n)| / 127 (f32) and q(k, n) = round-half-even
// (w / s_w[n]) clamped to [-127, 127] (a zero column: s_w = 0, q = 0; a non-finite w is an error).
// Layout: N is cut into blocks of 64 columns; with P = ceil(K / 2) k-pairs, block b holds P lines
// of 128 bytes, line p = [64 columns][2] int8:
//   q[(b * P + p) * 128 + 2 j + i] = q(2 p + i, n = 64 b + j)   (i = 0, 1)
// with zeros for the odd K's padded last k and for the columns past N (s_w = 0 there too). One
// vpmovsxbw of 32 bytes gives 16 columns of (k, k+1) int16 pairs, the operand of vpdpwssd.
//
// Activations: at the start of every product, each row m of A is quantized on its own to int16:
//   s_a[m] = max_k |a(m, k)| / 32767 (f32 division), q_a(m, k) = round-half-even(a / s_a[m])
//   clamped to [-32767, 32767] (f32 division, then rounding).
// A bf16/f16 A is quantized from its exact f32 values. Quantization runs under FTZ/DAZ like the
// kernels: an |a| below FLT_MIN reads as 0, and a row whose s_a is not a normal f32 (max |a| <
// 32767 * FLT_MIN, including an all-zero row) gets s_a = 0 and q_a = 0. A row with any NaN or Inf
// gets s_a = NaN and q_a = 0, so its whole output row is NaN. The odd K's padded k has q_a = 0.
//
// Product, per output (m, n): the k-pairs are taken in chunks of kChunkPairs (chunk c = pairs
// [c * kChunkPairs, (c + 1) * kChunkPairs) clipped to P); within a chunk the int16 products are
// summed exactly in int32 (vpdpwssd; |sum| <= 256 * 127 * 32767 < 2^31, never overflowing). Then
//   sum = 0.f; for each chunk c in order: sum = sum + float(int32 chunk sum c)   (round to nearest)
//   C[m, n] = (sum * s_a[m]) * s_w[n]                                            (two f32 products)
// rounded to bf16 (nearest even) for a bf16 C. Integer sums are exact whatever their order, so the
// only roundings are the ones written above: the streaming kernel (M <= kStreamMaxM), the tiled
// kernel (larger M) and the portable kernel (CPUs without AVX512-VNNI/BW: plain int32 loops) give
// the same bits, and a row's bits do not depend on M, on the grouping of rows or on the thread count.
//
// Precision: an activation's quantization error is at most s_a / 2 = max|a| / 65534 in its row,
// i.e. 2^-16 relative for the row's largest entries -- finer than the bf16 path's bf16 activations
// (2^-9 relative) for every entry within 2^7 of the row's max magnitude, coarser for smaller ones.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace hlx::kernels::int8 {

constexpr int64_t kBlock = 64;         // output columns per block
constexpr int64_t kLine = 2 * kBlock;  // bytes per k-pair line of a block
constexpr int64_t kChunkPairs = 128;   // k-pairs per exact int32 chunk
constexpr int64_t kStreamMaxM = 8;     // M <= this: streaming kernel, larger: tiles
constexpr int64_t kTileRows = 6;       // rows per register tile
constexpr int64_t kItemTiles = 16;     // register tiles per work item of the tiled kernel

inline int64_t pairs_of(int64_t k) { return (k + 1) / 2; }

// Quantized activations of one product. Row-major (stream layout): row r's k-pair p is
// qa[r * P + p], an int32 holding the int16 pair (q_a(2p) low, q_a(2p+1) high). Tile layout: tile t
// (rows 6t..6t+5) is P * 6 int32, pair p of row i at qa[(t * P + p) * 6 + i]; rows past M are zero.
// s_a[m] per row as defined above.

// Quantizes the `len` activations a[at .. at + len) (a_type f32/bf16/f16) as one row above into
// `pairs` int32 pairs at dst (zeros past len, 2 * pairs >= len) and returns s_a. A row of A is
// at = row * k, len = k, pairs = P; matmul_int4 quantizes each group of a row this way. Call under
// FTZ/DAZ. Portable and AVX-512 versions give equal bits.
float quantize_act(DType a_type, const void* a, int64_t at, int64_t len, int64_t pairs, int32_t* dst);
float quantize_act_avx512(DType a_type, const void* a, int64_t at, int64_t len, int64_t pairs, int32_t* dst);

// Whether the AVX-512 int8 kernels (and the quantizer above, and int4's kernels) run: AVX512
// F/BW/VNNI for the products, BF16 for a bf16 C's stores.
bool avx512_vnni();

// Column blocks per work item of the streaming kernel: one row streams four blocks at once (four
// DRAM streams per thread: the decode step's weights at M = 1 measured 1.17-1.19x the bandwidth of
// two at once, in-process alternation, BM_DecodeStepBf16VsInt8 shapes); 2-8 rows take two or one.
constexpr int64_t stream_item_blocks(int64_t m) { return m == 1 ? 4 : 2; }

// Streaming product for all `m` rows (m <= kStreamMaxM) over column blocks [b0, b1).
// qa: stream layout; c: [m, n] of c_type (row stride n).
void stream_avx512(int64_t m, int64_t k, int64_t n, const int32_t* qa, const float* sa, const int8_t* q,
                   const float* sw, int64_t b0, int64_t b1, DType c_type, void* c);

// Tiled product of register tiles [t0, t1) (tile layout qa, tiles of 6 rows, m rows in all) against
// block b. `scratch` holds tile_scratch_bytes() (64-byte aligned): the block's chunk widened to
// int16 once, and the f32 running sums of the item's rows.
constexpr int64_t tile_scratch_bytes() { return kChunkPairs * kLine * 2 + kItemTiles * kTileRows * kBlock * 4; }
void tile_avx512(int64_t t0, int64_t t1, int64_t m, int64_t k, int64_t n, const int32_t* qa, const float* sa,
                 const int8_t* q, const float* sw, int64_t b, void* scratch, DType c_type, void* c);

// Weight packing helpers. q[i] = round-half-even(x[i] / s) clamped to [-127, 127] for i < k
// (s > 0); the same values as the portable loop in matmul_int8.cc.
void quantize_row_avx512(const float* x, int64_t k, float s, int8_t* q);
// max |x[at + i]| over i < k for x of type t (f32/bf16/f16), as f32; NaN when some value is NaN
// or infinite. Under DAZ (the activations' case) an |x| below FLT_MIN reads as 0.
float maxabs_avx512(DType t, const void* x, int64_t at, int64_t k);

}  // namespace hlx::kernels::int8
