// Internal to matmul_int4*.cc: the group-wise 4-bit weight layout, the arithmetic every int4 kernel
// follows, and the per-item kernels (portable ones in matmul_int4.cc, AVX512-BF16 ones in
// matmul_int4_avx512.cc, picked by cpu_features()).
//
// Weights: K is cut into groups of G consecutive (packed) k, G even in [32, 128]; K is padded with
// zero weights to Kp = ceil(K / G) * G. Each (group g, column n) has an f32 scale s and an f32 min
// m, and each weight a 4-bit code q in [0, 15]:   w(k, n) = s(g, n) * q(k, n) + m(g, n).
// (Quantized at load: m = min of the group's values, s = (max - min) / 15, q = round((w - m) / s),
// so |w - decoded| <= s / 2 = (max - min) / 30 per group, up to f32 rounding. AWQ / GPTQ zero
// points z become m = -s * z.) An optional permutation `perm` says packed k reads activation
// perm[k] (GPTQ's act-order); without it packed k is activation k.
//
// Layout: N is cut into blocks of 64 columns; a block is its groups in order, each group G/2 lines
// of 64 bytes (one per k-pair p) followed by 64 f32 scales and 64 f32 offsets o = m - 128 s:
//   line byte 32 u + 2 j + i (u < 2, j < 16, i < 2): low nibble  q(2p + i, n = 64 b + 32 u + j),
//                                                    high nibble q(2p + i, n = 64 b + 32 u + 16 + j)
// Columns past N have q = 0, s = 0, o = 0. Zero-extending 32 bytes to words gives, after a mask
// or a 4-bit shift and an OR with 0x4300, the bf16 values 128 + q (exact: 128..143 need 8
// significant bits) of 16 columns x one k-pair: vdpbf16ps's operand, no table and no widening copy.
//
// Arithmetic, per output (m, n): the activations are rounded to bf16 (round to nearest even; the
// bf16 matmul's policy) into a row padded with zeros to Kp, and for every group g
//   A(g) = sum of the group's bf16 activations in f32: 16 lanes, lane j adding elements j, j + 16,
//          ... in order, then the lanes added 0..15 (group_sums);
//   acc  = 0; per k-pair in order acc += a(2p) * (128 + q(2p)) + a(2p+1) * (128 + q(2p+1))
//          (vdpbf16ps: both products exact in f32);
//   sum  = fma(s, acc, sum); sum = fma(o, A(g), sum)       (sum starts at 0, groups in order)
// since s * sum a (128 + q) + (m - 128 s) sum a = sum a (s q + m). C = sum (rounded to bf16 for a
// bf16 C). The streaming kernel (M <= kStreamMaxM) and the tiled one (larger M) run exactly this
// per lane, so a row's bits do not depend on M, on the grouping of rows or on the thread count;
// the portable kernel computes the same sums with scalar f32 arithmetic (equal up to the order
// vdpbf16ps adds its two products in).
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace hlx::kernels::int4 {

constexpr int64_t kBlock = 64;      // output columns per block
constexpr int64_t kLine = 64;       // bytes per k-pair line of a block
constexpr int64_t kStreamMaxM = 8;  // M <= this: streaming kernel, larger: tiles
constexpr int64_t kTileRows = 6;    // rows per register tile
constexpr int64_t kItemTiles = 16;  // register tiles per work item of the tiled kernel
constexpr uint16_t kBias = 0x4300;  // bf16 bits of 128.0; OR-ing a nibble in gives 128 + q

// Bytes of one group of one block: lines, then scales and offsets.
constexpr int64_t group_bytes(int64_t g) { return g / 2 * kLine + 2 * kBlock * 4; }

// Activations of one product: row r is Kp bf16 values at a + r * kp (zeros past K), and its group
// sums at asum + r * groups.
struct Acts {
  const uint16_t* a = nullptr;
  const float* asum = nullptr;
  int64_t kp = 0, groups = 0;
};

// The packed weight as the kernels see it.
struct Packed {
  const uint8_t* data = nullptr;  // nblocks * groups * group_bytes(group)
  int64_t n = 0, group = 0, groups = 0;
  int64_t block_stride() const { return groups * group_bytes(group); }
};

// Column blocks per work item of the streaming kernel: one row streams four blocks at once (four
// DRAM streams per thread), two rows two, more rows one.
constexpr int64_t stream_item_blocks(int64_t m) { return m == 1 ? 4 : m == 2 ? 2 : 1; }

// Group sums of a prepared row (kp / group of them), in the order above.
void group_sums(const uint16_t* row, int64_t kp, int64_t group, float* asum);
// Row r of A ([*, k], a_type f32/bf16/f16) as bf16 zero-padded to kp, and its group sums: the
// same bits as the portable preparation (without a permutation).
void prepare_row_avx512(DType a_type, const void* a, int64_t r, int64_t k, int64_t kp, int64_t group, uint16_t* dst,
                        float* asum);

// Streaming product for all `m` rows (m <= kStreamMaxM) over column blocks [b0, b1); c: [m, n].
void stream_avx512(int64_t m, const Acts& x, const Packed& w, int64_t b0, int64_t b1, DType c_type, void* c);

// Tiled product of rows [r0, r1) (a multiple of kTileRows rows except at the end) against block b.
// `scratch` holds tile_scratch_bytes(group) (64-byte aligned).
constexpr int64_t tile_scratch_bytes(int64_t group) {
  return group / 2 * kBlock * 4 + kItemTiles * kTileRows * kBlock * 4;
}
void tile_avx512(int64_t r0, int64_t r1, const Acts& x, const Packed& w, int64_t b, void* scratch, DType c_type,
                 void* c);

}  // namespace hlx::kernels::int4
