// Internal to matmul_int4*.cc: the group-wise 4-bit weight layout, the arithmetic every int4 kernel
// follows, and the per-item kernels (portable ones in matmul_int4.cc, AVX-512 VNNI ones in
// matmul_int4_avx512.cc, AMX-INT8 tiles in matmul_int4_amx.cc, picked by cpu_features()).
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
// of 64 bytes (one per k-pair p) followed by 64 f32 scales s and 64 f32 mins m:
//   line byte 32 u + 2 j + i (u < 2, j < 16, i < 2): low nibble  q(2p + i, n = 64 b + 32 u + j),
//                                                    high nibble q(2p + i, n = 64 b + 32 u + 16 + j)
// Columns past N have q = 0, s = 0, m = 0. Zero-extending 32 bytes to words and masking (or
// shifting by 4) gives the int16 codes of 16 columns x one k-pair, (q(2p), q(2p+1)) per dword:
// vpdpwssd's operand, no table and no widening copy.
//
// Activations: at the start of every product, row r of A is taken in packed k order (perm), padded
// with zeros to Kp, and each of its groups g is quantized on its own to int16 by int8's rule (the
// same function, int8::quantize_act in matmul_int8.h): s_a(r, g) = max |a| over the group / 32767
// (f32), q_a = round-half-even(a / s_a) clamped to [-32767, 32767], from the exact f32 values under
// FTZ/DAZ; a group whose s_a is not a normal f32 (all zero or flushed) gets s_a = 0 and q_a = 0, a
// group with a NaN or Inf s_a = NaN and q_a = 0, which makes the whole output row NaN (as int8's).
// A scale per group rather than per row: AWQ / GPTQ models have activation outliers, and one would
// otherwise coarsen the row's other groups; it costs one scalar per group. With it, per row and
// group, the exact qsum(r, g) = sum of the group's q_a and the f32 product sq(r, g) = s_a *
// float(qsum) (computed once per row and group, not per column).
//
// Product, per output (r, n), with sum = 0 and the groups in order:
//   isum = sum over the group of q_a * q         (exact int32: |isum| <= 128 * 32767 * 15 < 2^31)
//   sum  = fma(s, float(isum) * s_a, sum); sum = fma(m, sq, sum)
// since s_a (s isum + m qsum) = sum of s_a q_a (s q + m). (s_a goes on isum and qsum rather than on
// s and m: one multiply per column and group instead of two.) C = sum (rounded to bf16, nearest
// even, for a bf16 C). Integer sums are exact in any order, so the only roundings are the ones
// written here: the streaming kernel (M <= kStreamMaxM), the tiled ones (larger M: AVX-512, or AMX-INT8
// tiles where the CPU has them) and the portable one (CPUs without AVX512 F/BW/VNNI/BF16: plain int32
// loops and the same f32 operations) give the same bits, and a row's bits do not depend on M, on the
// grouping of rows or on the thread count.
//
// Precision: an activation's quantization error is at most s_a / 2 = max |a| / 65534 of its group.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace hlx::kernels::int4 {

constexpr int64_t kBlock = 64;      // output columns per block
constexpr int64_t kLine = 64;       // bytes per k-pair line of a block
constexpr int64_t kStreamMaxM = 8;  // M <= this: streaming kernel, larger: tiles
constexpr int64_t kTileRows = 6;    // rows per register tile
constexpr int64_t kItemTiles = 16;  // register tiles per work item of the tiled kernel

// Bytes of one group of one block: lines, then scales and mins.
constexpr int64_t group_bytes(int64_t g) { return g / 2 * kLine + 2 * kBlock * 4; }

// Activations of one product: row r is Kp / 2 int16 pairs (q_a(2p) low, q_a(2p + 1) high) at
// q + r * kp / 2, and s_a(r, g), sq(r, g) at sa / sq + r * groups + g.
struct Acts {
  const int32_t* q = nullptr;
  const float* sa = nullptr;
  const float* sq = nullptr;
  int64_t kp = 0, groups = 0;
  // AMX tiles only (split_act_amx): row r's bytes at hl + r * hl_stride, rows padded with zeros to
  // a multiple of kAmxTileRows.
  const uint8_t* hl = nullptr;
  int64_t hl_stride = 0;
  const int32_t* row(int64_t r, int64_t g, int64_t group) const { return q + r * (kp / 2) + g * (group / 2); }
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

// Sum of the 2 * pairs int16 values of q (int32 pairs): a group's qsum.
int32_t qsum_avx512(const int32_t* q, int64_t pairs);

// Streaming product for all `m` rows (m <= kStreamMaxM) over column blocks [b0, b1); c: [m, n].
void stream_avx512(int64_t m, const Acts& x, const Packed& w, int64_t b0, int64_t b1, DType c_type, void* c);

// Tiled product of rows [r0, r1) (a multiple of kTileRows rows except at the end) against block b.
// `scratch` holds tile_scratch_bytes(group) (64-byte aligned): the group's codes widened to int16
// once, and the f32 running sums of the item's rows.
constexpr int64_t tile_scratch_bytes(int64_t group) {
  return group / 2 * kBlock * 4 + kItemTiles * kTileRows * kBlock * 4;
}
void tile_avx512(int64_t r0, int64_t r1, const Acts& x, const Packed& w, int64_t b, void* scratch, DType c_type,
                 void* c);

// ---- AMX-INT8 tiles (matmul_int4_amx.cc) for the tiled product ----
// An int16 activation a is 256 * hi + lo, hi = a >> 8 a signed byte, lo = a & 255 an unsigned one,
// so isum = 256 * sum(hi q) + sum(lo q) exactly (tdpbssd, tdpbusd; q in [0, 15] as bytes), then
// the contract's fold: the same bits as tile_avx512. A group of G k is `amx_chunks` tile chunks
// of `amx_chunk` k (a multiple of 4, <= 64), zero padded to amx_group_stride.
constexpr int64_t kAmxTileRows = 16;  // rows per tile
constexpr int64_t kAmxItemRows = 96;  // rows per work item (a multiple of kAmxTileRows)
constexpr int64_t amx_chunks(int64_t group) { return (group + 63) / 64; }
constexpr int64_t amx_chunk(int64_t group) { return ((group + amx_chunks(group) - 1) / amx_chunks(group) + 3) / 4 * 4; }
constexpr int64_t amx_group_stride(int64_t group) { return amx_chunks(group) * amx_chunk(group); }
// Bytes of one activation row: the hi bytes of every group, then the lo bytes.
constexpr int64_t amx_row_bytes(int64_t group, int64_t groups) { return 2 * groups * amx_group_stride(group); }
// Row q (Kp / 2 int16 pairs, as in Acts) as amx_row_bytes(group, groups) bytes at out.
void split_act_amx(const int32_t* q, int64_t groups, int64_t group, uint8_t* out);
// As tile_avx512 for rows [r0, r1) (a multiple of kAmxTileRows except at the end; x.hl set), with
// amx_scratch_bytes(group) of 64-byte aligned scratch: the group's B tiles, C tiles, the sums.
constexpr int64_t amx_scratch_bytes(int64_t group) {
  return amx_group_stride(group) * kBlock + 4 * 16 * 64 + kAmxItemRows * kBlock * 4;
}
void tile_amx(int64_t r0, int64_t r1, const Acts& x, const Packed& w, int64_t b, void* scratch, DType c_type, void* c);

// Whether tiled products take tile_amx: cpu_features().amx_int8 with the AVX-512 VNNI kernels' CPU
// features, unless HLX_CPU=noamx. set_tile_kernel overrides the choice (tests; kAmx only where
// amx_available(), else the AVX-512 tiles).
enum class TileKernel { kAuto, kAvx512, kAmx };
bool amx_available();
void set_tile_kernel(TileKernel k);

}  // namespace hlx::kernels::int4
