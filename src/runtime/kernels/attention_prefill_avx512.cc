// hlx.attention for more than one query token (prefill chunks, the vision tower), query rows in
// the lanes of a zmm. attention.cc calls it when q_len > 1 (decode has attention_decode_avx512.cc
// and attention_impl.h), the cache is bf16 on a CPU with AVX512-BF16 (head_dim % 16 == 0, or % 8
// == 0 with a bf16 Q) or f32 on one with AVX-512F (head_dim % 8 == 0). P.V ends in a masked 8-column
// vector when head_dim % 16 == 8: the SigLIP towers' head_dim 72.
//
// f32 cache: f32 FMAs throughout (Q, K, V and P are not rounded); only the order of the sums
// differs from attention_impl.h.
//
// i8 cache (int8 KV), with AVX512-VNNI and head_dim % 16 == 0: the bf16 path's layout and loops on
// int16 codes (vpdpwssd, exact int32 sums), as the decode kernel rounds: each Q row to int16 on
// its own scale (int16_codes_avx512.h), a score = float(sum) * (Q's scale * K row's scale), then
// the softmax scale; each row's weights times their V rows' scales, per key block, to int16 on
// the block's largest, summed against the V codes in int32 and added to the f32 accumulators
// times that scale; the softmax sum is over the unrounded weights. Key blocks are widened to
// int16 (widen_codes) and packed as bf16 ones. At Qwen3-0.6B's prefill 8192 this took 0.71-0.76x the
// time of the f32 path below (BM_Attention/1/8192/8192/1/1). Otherwise the f32 path, each key
// block of codes dequantized to f32 (code * row scale, exact) before the packing (dequant_rows).
//
// bf16 cache, with AVX512-BF16 dot products (vdpbf16ps, f32 accumulation): K and V are bf16 already. The emitters
// give a bf16 Q over a bf16 cache (the text decoders round it after rotary, as upstream run in bf16 holds it; the
// bf16 vision towers), and Q.K^T takes one vdpbf16ps per pair. An f32 Q (direct callers) is split as hi + lo, two bf16
// whose sum carries ~16 significant bits (relative error <= 2^-16), two vdpbf16ps per pair: rounding Q inside the
// kernel, unmodelled by the references, flipped a greedy token of tests/models/test_text_families.py. The softmax
// weights P are rounded to bf16 (round to nearest even, relative error <= 2^-8) for P.V. The softmax scale is applied
// to the f32 scores; statistics (running max, sum) stay f32, and the sum is taken over the bf16-rounded weights, so
// each output row is exactly a convex combination of V rows with the weights the P.V product used.
// tests/runtime/attention_test.cc checks the resulting error bound against a double-precision reference.
//
// Layout: a work item is (batch row, kv head, tile of query tokens); its query rows (G heads x
// tokens) are split into groups of 16 that sit in the 16 f32 lanes of a zmm:
//   S^T = Q K^T: per key, lanes = 16 query rows, reduction over head_dim pairs: Q is packed once per
//                item as [pair][hi/lo][16 rows] dwords, each key block once as [pair][key]
//                dwords, and each K dword (a pair of bf16 along head_dim) is broadcast;
//   softmax:     lanes = rows again, so max/exp/sum over a key block are plain vertical ops;
//   O += P V:    lanes = 16 head_dim columns; V of each key block is repacked once per item as
//                [key pair][head_dim][2] and each P dword (a pair of keys' weights) is broadcast.
// (f32 caches: the same with single f32 values in place of bf16 pairs.)
// Every row's arithmetic depends only on its own visible key range (key blocks start at
// multiples of kKeyBlock, key pairs at even positions, fixed accumulation orders; blocks or
// pairs outside a row's range contribute exact zeros), never on which rows share its item or
// group, or on the thread count: chunked and whole prefills, and batched and single requests,
// give the same bits.
#include "runtime/kernels/x86_intrin.h"  // <immintrin.h>; see there why

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "runtime/kernels/attention.h"
#include "runtime/kernels/cpu.h"
#include "runtime/kernels/exp_nonpos16_avx512.h"
#include "runtime/kernels/int16_codes_avx512.h"
#include "runtime/kernels/internal.h"
#include "runtime/kernels/parallel.h"

namespace hlx::kernels::attention_prefill {
namespace {

// Keys per online-softmax step (a multiple of 16). Each step rescales the item's accumulators and
// packs a K and a V block, so longer steps amortise that: at Qwen3-0.6B shapes on Zen 5 (2
// threads, alternated binaries) 128 keys took 0.84-0.91x the time of 32 at prefill 512-8192 with a
// bf16 Q, 0.83-0.89x on the Gemma3 tower's attention; 64 was in between, 256 slower than 128.
constexpr int64_t kKeyBlock = 128;
static_assert(kKeyBlock % 16 == 0 && kKeyBlock * 32767 * 128 < (int64_t(1) << 31),
              "16-key score calls; int8 KV: P.V sums fit int32");
// Query rows (heads x tokens) per work item: each key block is packed once per item. At Qwen3-0.6B's
// prefill 2048 (1 thread, old and new kernels alternated in one process) 256 rows took 0.94x the
// time of 128; 512 took 0.97x the time of 256 at 8192 (1.0x at 2048) but double the per-thread Q
// and accumulator tiles (256 KiB each at head_dim 128, half the L2), so 256.
constexpr int64_t kQueryRows = 256;
constexpr int kLanes = 16;
// bf16 caches: 16-row groups per Q.K^T call (qk_groups). At Qwen3-0.6B's prefill 512 (1 thread,
// A/B alternated in one process, load ~5) pairs took 0.92-0.96x the CPU time of one group at a
// time, and bundles of 4 were no faster than pairs.
constexpr int kBundle = 2;

using internal::exp_nonpos16;  // e^x for x <= 0 (scores minus their running max)

inline __m512bh as_bh(__m512i v) { return (__m512bh)v; }

// acc + dot(a, broadcast *p): GCC does not fold _mm512_set1_epi32 of a load into vdpbf16ps's
// embedded broadcast ({1to16}) and spends a separate vpbroadcastd per product, so spell it out.
// INT: the pairs are int16 codes and acc holds int32 sums (vpdpwssd, AVX512-VNNI; int8 KV).
template <bool INT>
inline __m512 dp_bcast(__m512 acc, __m512bh a, const uint32_t* p) {
  if constexpr (INT)
    __asm__("vpdpwssd %1%{1to16%}, %2, %0" : "+v"(acc) : "m"(*p), "v"(a));
  else
    __asm__("vdpbf16ps %1%{1to16%}, %2, %0" : "+v"(acc) : "m"(*p), "v"(a));
  return acc;
}
template <bool INT>
inline __m512 dp(__m512 acc, __m512bh a, __m512bh b) {
  if constexpr (INT) return _mm512_castsi512_ps(dpwssd(_mm512_castps_si512(acc), (__m512i)a, (__m512i)b));
  return _mm512_dpbf16_ps(acc, a, b);
}

// Scores of one 16-row group against 16 keys: out[j][lane] = sum_p dot(qt[p][lane], kt[p][j]) over
// P head_dim pairs, with qt = [pair][hi, lo][16 lanes] (Q = hi + lo, both bf16) and kt = the
// block's keys packed as [pair][kKeyBlock] dwords (so the 16 broadcast sources sit at fixed
// offsets from one pointer). Both halves go into the same accumulator, hi first. LO = false skips
// the lo products: for a bf16 Q, whose lo halves are all zero, it gives the same bits in half the
// instructions. INT: int16 code pairs and int32 sums (dp_bcast), LO false.
template <bool LO, bool INT = false>
inline void qk16(const uint32_t* qt, const uint32_t* kt, int64_t P, float* out) {
  __m512 acc[16];
#pragma GCC unroll 16
  for (int j = 0; j < 16; ++j) acc[j] = _mm512_setzero_ps();
  for (int64_t p = 0; p < P; ++p) {
    const __m512bh qh = as_bh(_mm512_loadu_si512(qt + p * 2 * kLanes));
    const __m512bh ql = as_bh(_mm512_loadu_si512(qt + p * 2 * kLanes + kLanes));
    const uint32_t* kp = kt + p * kKeyBlock;
#pragma GCC unroll 16
    for (int j = 0; j < 16; ++j) {
      acc[j] = dp_bcast<INT>(acc[j], qh, kp + j);
      if constexpr (LO) acc[j] = dp_bcast<INT>(acc[j], ql, kp + j);
    }
  }
#pragma GCC unroll 16
  for (int j = 0; j < 16; ++j) _mm512_storeu_ps(out + j * kLanes, acc[j]);
}

// qk16 for 16 / NG keys and NG 16-row groups (q[0..NG), P * 2 * 16 dwords apart) at once: each K
// dword is broadcast once and feeds 2 * NG products (hi and lo of every group), where qk16 loads it
// for every group. Each score is the same sum in the same order as in qk16 (hi then lo per pair),
// so the same bits.
template <int NG, bool LO, bool INT = false>
inline void qk_groups(const uint32_t* q, const uint32_t* kt, int64_t P, float* out, int64_t out_stride) {
  constexpr int kKeys = 16 / NG;
  __m512 acc[NG][kKeys];
#pragma GCC unroll 16
  for (int i = 0; i < NG * kKeys; ++i) acc[i / kKeys][i % kKeys] = _mm512_setzero_ps();
  for (int64_t p = 0; p < P; ++p) {
    __m512bh h[NG], l[NG];
#pragma GCC unroll 4
    for (int g = 0; g < NG; ++g) {
      h[g] = as_bh(_mm512_loadu_si512(q + g * P * 2 * kLanes + p * 2 * kLanes));
      l[g] = as_bh(_mm512_loadu_si512(q + g * P * 2 * kLanes + p * 2 * kLanes + kLanes));
    }
    const uint32_t* kp = kt + p * kKeyBlock;
#pragma GCC unroll 8
    for (int j = 0; j < kKeys; ++j) {
      const __m512bh kb = as_bh(_mm512_set1_epi32(int(kp[j])));
#pragma GCC unroll 4
      for (int g = 0; g < NG; ++g) {
        acc[g][j] = dp<INT>(acc[g][j], h[g], kb);
        if constexpr (LO) acc[g][j] = dp<INT>(acc[g][j], l[g], kb);
      }
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < NG * kKeys; ++i)
    _mm512_storeu_ps(out + (i / kKeys) * out_stride + (i % kKeys) * kLanes, acc[i / kKeys][i % kKeys]);
}

// ---- f32 caches (the same structure with f32 FMAs: no rounding of Q, K, V or P) ----

// out[j][lane] = sum_d qt[d][lane] * kt[d][j], qt = [Dh][16 lanes], kt = [Dh][kKeyBlock] (f32).
inline void qk16_f32(const float* qt, const float* kt, int64_t Dh, float* out) {
  __m512 acc[16];
#pragma GCC unroll 16
  for (int j = 0; j < 16; ++j) acc[j] = _mm512_setzero_ps();
  for (int64_t i = 0; i < Dh; ++i) {
    const __m512 qv = _mm512_loadu_ps(qt + i * kLanes);
    const float* kp = kt + i * kKeyBlock;
#pragma GCC unroll 16
    for (int j = 0; j < 16; ++j) acc[j] = _mm512_fmadd_ps(qv, _mm512_set1_ps(kp[j]), acc[j]);
  }
#pragma GCC unroll 16
  for (int j = 0; j < 16; ++j) _mm512_storeu_ps(out + j * kLanes, acc[j]);
}

// acc[row] = acc[row] * alpha[row] + sum_{key in [j0, j1)} P[key][lane] * V[key] for four rows (lanes
// l0 .. l0 + 3 of the group, acc rows Dh apart), keys of vt = [kKeyBlock][Dh] f32, weights pp =
// [key][16 lanes] f32; NV column vectors of 16 from column c0, then, with TAIL, one of 8 (head_dim %
// 16 == 8: SigLIP's 72) with the same FMAs in the same order. NV + TAIL <= 5 (20 accumulators): each
// V vector is loaded once per key for the four rows (two rows at a time, GCC folded the load into
// each FMA: 11 loads per 10 FMAs, load-bound). A row's result does not depend on the other three.
template <int NV, bool TAIL = false>
inline void pv4_f32(float* acc, const float* alpha, const float* pp, int l0, const float* vt, int64_t Dh, int64_t c0,
                    int64_t j0, int64_t j1) {
  constexpr int NR = NV + (TAIL ? 1 : 0);
  static_assert(NR <= 5, "4 rows x NR accumulators + NR values must fit the 32 zmm registers");
  constexpr __mmask16 kTailMask = 0x00ff;
  __m512 r[4][NR];
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {
    const __m512 al = _mm512_set1_ps(alpha[l0 + k]);
    float* a = acc + k * Dh + c0;
#pragma GCC unroll 8
    for (int i = 0; i < NV; ++i) r[k][i] = _mm512_mul_ps(_mm512_loadu_ps(a + 16 * i), al);
    if constexpr (TAIL) r[k][NV] = _mm512_mul_ps(_mm512_maskz_loadu_ps(kTailMask, a + 16 * NV), al);
  }
  for (int64_t j = j0; j < j1; ++j) {
    const float* vr = vt + j * Dh + c0;
    __m512 vv[NR];
#pragma GCC unroll 8
    for (int i = 0; i < NV; ++i) {
      vv[i] = _mm512_loadu_ps(vr + 16 * i);
      __asm__("" : "+v"(vv[i]));  // keep it in a register: one load for the four rows
    }
    if constexpr (TAIL) {
      vv[NV] = _mm512_maskz_loadu_ps(kTailMask, vr + 16 * NV);
      __asm__("" : "+v"(vv[NV]));
    }
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      const __m512 b = _mm512_set1_ps(pp[j * kLanes + l0 + k]);
#pragma GCC unroll 8
      for (int i = 0; i < NR; ++i) r[k][i] = _mm512_fmadd_ps(b, vv[i], r[k][i]);
    }
  }
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {
    float* a = acc + k * Dh + c0;
#pragma GCC unroll 8
    for (int i = 0; i < NV; ++i) _mm512_storeu_ps(a + 16 * i, r[k][i]);
    if constexpr (TAIL) _mm512_mask_storeu_ps(a + 16 * NV, kTailMask, r[k][NV]);
  }
}

using Pv4F32Fn = void (*)(float*, const float*, const float*, int, const float*, int64_t, int64_t, int64_t, int64_t);
// [n]: n full vectors (n <= 5); [n] of the tail table: n full vectors then 8 columns (n <= 4).
constexpr Pv4F32Fn kPv4F32[6] = {nullptr, &pv4_f32<1>, &pv4_f32<2>, &pv4_f32<3>, &pv4_f32<4>, &pv4_f32<5>};
constexpr Pv4F32Fn kPv4F32Tail[5] = {&pv4_f32<0, true>, &pv4_f32<1, true>, &pv4_f32<2, true>, &pv4_f32<3, true>,
                                     &pv4_f32<4, true>};

// Keys [0, nk) of f32 rows as [Dh][kKeyBlock] (kt) and [kKeyBlock][Dh] (vt); keys past nk are zeros.
void pack_kv_f32(const float* k, const float* v, int64_t stride, int64_t nk, int64_t Dh, float* kt, float* vt) {
  for (int64_t j = 0; j < kKeyBlock; ++j) {
    if (j < nk) {
      const float* kr = k + j * stride;
      for (int64_t i = 0; i < Dh; ++i) kt[i * kKeyBlock + j] = kr[i];
      std::memcpy(vt + j * Dh, v + j * stride, size_t(Dh) * 4);
    } else {
      for (int64_t i = 0; i < Dh; ++i) kt[i * kKeyBlock + j] = 0.f;
      std::memset(vt + j * Dh, 0, size_t(Dh) * 4);
    }
  }
}

// r[i][j] <- r[j][i] (16 x 16 dwords).
inline void transpose16(__m512i r[16]) {
  __m512i t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {
    r[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    r[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    r[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    r[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  for (int i = 0; i < 2; ++i)
    for (int k = 0; k < 4; ++k) {
      t[8 * i + k] = _mm512_shuffle_i32x4(r[8 * i + k], r[8 * i + 4 + k], 0x88);
      t[8 * i + 4 + k] = _mm512_shuffle_i32x4(r[8 * i + k], r[8 * i + 4 + k], 0xdd);
    }
  for (int k = 0; k < 8; ++k) {
    r[k] = _mm512_shuffle_i32x4(t[k], t[8 + k], 0x88);
    r[8 + k] = _mm512_shuffle_i32x4(t[k], t[8 + k], 0xdd);
  }
}

// Keys [0, nk) (row j at k + j * stride) as [pair][kKeyBlock] dwords; keys past nk are zeros.
// 16 keys x 16 pairs per transpose (one dword at a time took 5 % of an 8k prefill's attention).
void pack_k(const uint16_t* k, int64_t stride, int64_t nk, int64_t P, uint32_t* kt) {
  for (int64_t j0 = 0; j0 < kKeyBlock; j0 += 16)
    for (int64_t p0 = 0; p0 < P; p0 += 16) {
      const int64_t np = std::min<int64_t>(16, P - p0);
      const __mmask16 m = __mmask16((1u << np) - 1);
      __m512i r[16];
      for (int64_t i = 0; i < 16; ++i)
        r[i] = j0 + i < nk ? _mm512_maskz_loadu_epi32(m, k + (j0 + i) * stride + 2 * p0) : _mm512_setzero_si512();
      transpose16(r);
      for (int64_t i = 0; i < np; ++i) _mm512_storeu_si512(kt + (p0 + i) * kKeyBlock + j0, r[i]);
    }
}

// acc[row] = acc[row] * alpha[row] + sum_{pair in [jp0, jp1)} P[pair][lane] . V[pair] for four rows
// (lanes l0 .. l0 + 3 of the group, acc rows Dh apart), NV column vectors of 16 from column c0, then,
// with TAIL, one of 8 with the same products in the same order; NV + TAIL <= 5. Each V vector is
// loaded once per key pair for the four rows, as in pv4_f32: two rows at a time was load-bound at
// head_dim 128. INT (int8 KV): P and V are int16 code pairs whose exact int32 sums join acc at the
// end times the row's weight scale ws[lane] (vpdpwssd; |sum| <= kKeyBlock * 32767 * 128 < 2^31).
template <int NV, bool TAIL = false, bool INT = false>
inline void pv4(float* acc, const float* alpha, const uint32_t* pp, int l0, const uint16_t* vt, int64_t Dh, int64_t c0,
                int64_t jp0, int64_t jp1, const float* ws) {
  constexpr int NR = NV + (TAIL ? 1 : 0);
  static_assert(NR <= 5, "4 rows x NR accumulators + NR values must fit the 32 zmm registers");
  constexpr __mmask16 kTailMask = 0x00ff;
  __m512 r[4][NR];
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {
    const __m512 al = _mm512_set1_ps(alpha[l0 + k]);
#pragma GCC unroll 8
    for (int i = 0; i < NR; ++i)
      r[k][i] = INT ? _mm512_setzero_ps()
                    : _mm512_mul_ps(_mm512_maskz_loadu_ps(TAIL && i == NV ? kTailMask : __mmask16(0xffff),
                                                          acc + k * Dh + c0 + 16 * i),
                                    al);
  }
  for (int64_t jp = jp0; jp < jp1; ++jp) {
    const uint16_t* vr = vt + (jp * Dh + c0) * 2;
    __m512i vv[NR];
#pragma GCC unroll 8
    for (int i = 0; i < NR; ++i) {
      vv[i] = TAIL && i == NV ? _mm512_maskz_loadu_epi32(kTailMask, vr + 32 * i) : _mm512_loadu_si512(vr + 32 * i);
      __asm__("" : "+v"(vv[i]));  // keep it in a register: one load for the four rows
    }
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      const __m512bh b = as_bh(_mm512_set1_epi32(int(pp[jp * kLanes + l0 + k])));
#pragma GCC unroll 8
      for (int i = 0; i < NR; ++i) r[k][i] = dp<INT>(r[k][i], b, as_bh(vv[i]));
    }
  }
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k)
#pragma GCC unroll 8
    for (int i = 0; i < NR; ++i) {
      const __mmask16 m = TAIL && i == NV ? kTailMask : __mmask16(0xffff);
      float* a = acc + k * Dh + c0 + 16 * i;
      if constexpr (INT)
        r[k][i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_castps_si512(r[k][i])), _mm512_set1_ps(ws[l0 + k]),
                                  _mm512_mul_ps(_mm512_maskz_loadu_ps(m, a), _mm512_set1_ps(alpha[l0 + k])));
      _mm512_mask_storeu_ps(a, m, r[k][i]);
    }
}

using Pv4Fn = void (*)(float*, const float*, const uint32_t*, int, const uint16_t*, int64_t, int64_t, int64_t, int64_t,
                       const float*);
// [n]: n full vectors (n <= 5); [n] of the tail table: n full vectors then 8 columns (n <= 4); the
// int16 version (head_dim % 16 == 0: no tail).
constexpr Pv4Fn kPv4[6] = {nullptr, &pv4<1>, &pv4<2>, &pv4<3>, &pv4<4>, &pv4<5>};
constexpr Pv4Fn kPv4Tail[5] = {&pv4<0, true>, &pv4<1, true>, &pv4<2, true>, &pv4<3, true>, &pv4<4, true>};
constexpr Pv4Fn kPv4Int[6] = {nullptr,
                              &pv4<1, false, true>,
                              &pv4<2, false, true>,
                              &pv4<3, false, true>,
                              &pv4<4, false, true>,
                              &pv4<5, false, true>};

// Keys [j0, j0 + nk) of one kv head from the cache (row j at v + j * stride), packed as
// [key pair][Dh][2] bf16 for kKeyBlock keys; keys past nk are zeros.
void pack_v(const uint16_t* v, int64_t stride, int64_t nk, int64_t Dh, uint16_t* vt) {
  const __m512i lo_idx =
      _mm512_setr_epi32(0x00200000, 0x00210001, 0x00220002, 0x00230003, 0x00240004, 0x00250005, 0x00260006, 0x00270007,
                        0x00280008, 0x00290009, 0x002a000a, 0x002b000b, 0x002c000c, 0x002d000d, 0x002e000e, 0x002f000f);
  const __m512i hi_idx = _mm512_add_epi16(lo_idx, _mm512_set1_epi16(16));
  for (int64_t jp = 0; jp < kKeyBlock / 2; ++jp) {
    const int64_t a = 2 * jp, b = a + 1;
    uint16_t* dst = vt + jp * Dh * 2;
    for (int64_t d0 = 0; d0 < Dh; d0 += 32) {
      const __mmask32 m = Dh - d0 >= 32 ? __mmask32(0xffffffffu) : __mmask32((1u << (Dh - d0)) - 1);
      const __m512i ra = a < nk ? _mm512_maskz_loadu_epi16(m, v + a * stride + d0) : _mm512_setzero_si512();
      const __m512i rb = b < nk ? _mm512_maskz_loadu_epi16(m, v + b * stride + d0) : _mm512_setzero_si512();
      // Columns d0.. of keys a and b interleaved; a last 8 columns (head_dim % 16 == 8) are 16 values.
      const __mmask32 lo_m = Dh - d0 >= 16 ? __mmask32(0xffffffffu) : __mmask32(0xffffu);
      _mm512_mask_storeu_epi16(dst + d0 * 2, lo_m, _mm512_permutex2var_epi16(ra, lo_idx, rb));
      if (Dh - d0 > 16) {
        const __mmask32 hi_m = Dh - d0 >= 32 ? __mmask32(0xffffffffu) : __mmask32(0xffffu);
        _mm512_mask_storeu_epi16(dst + d0 * 2 + 32, hi_m, _mm512_permutex2var_epi16(ra, hi_idx, rb));
      }
    }
  }
}

// int8 KV: keys [0, nk) of one kv head (row j at codes + j * stride, its scale at scales[j * Hkv])
// dequantized to f32 rows [nk][Dh] (code * scale, exact in f32), which the f32 path then packs.
void dequant_rows(const int8_t* codes, const float* scales, int64_t stride, int64_t Hkv, int64_t nk, int64_t Dh,
                  float* dst) {
  for (int64_t j = 0; j < nk; ++j) {
    const __m512 sc = _mm512_set1_ps(scales[j * Hkv]);
    const int8_t* row = codes + j * stride;
    for (int64_t i = 0; i < Dh; i += 16) {
      const __mmask16 m = Dh - i >= 16 ? __mmask16(0xffff) : __mmask16((1u << (Dh - i)) - 1);
      const __m512 x = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(m, row + i)));
      _mm512_mask_storeu_ps(dst + j * Dh + i, m, _mm512_mul_ps(x, sc));
    }
  }
}

// int8 KV on the integer path: keys [0, nk) of one kv head's codes (row j at codes + j * stride) as
// rows [nk][Dh] of int16 codes, which pack_k and pack_v then lay out as for bf16. Dh % 16 == 0.
void widen_codes(const int8_t* codes, int64_t stride, int64_t nk, int64_t Dh, uint16_t* dst) {
  for (int64_t j = 0; j < nk; ++j)
    for (int64_t i = 0; i < Dh; i += 16) {
      const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + j * stride + i));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + j * Dh + i), _mm256_cvtepi8_epi16(c));
    }
}

}  // namespace

template <bool F32>
void run_impl(const AttentionDesc& d, const void* q, const void* k_cache, const void* v_cache, const int32_t* slot,
              const int32_t* q_pos, const int32_t* kv_len, const float* bias, float* out) {
  const int64_t B = d.batch, T = d.q_len, Hq = d.q_heads, Hkv = d.kv_heads, Dh = d.head_dim, S = d.capacity;
  const int64_t G = Hq / Hkv, P = Dh / 2;
  const int64_t t_tile = std::max<int64_t>(1, kQueryRows / G);
  const int64_t t_tiles = (T + t_tile - 1) / t_tile;
  const int64_t items = B * Hkv * t_tiles;
  const float neg_inf = -std::numeric_limits<float>::infinity();
  const float cap = d.logit_softcap;
  const int64_t W = d.sliding_window;
  const uint16_t* k16 = static_cast<const uint16_t*>(k_cache);
  const uint16_t* v16 = static_cast<const uint16_t*>(v_cache);
  const float* k32 = static_cast<const float*>(k_cache);
  const float* v32 = static_cast<const float*>(v_cache);
  const int64_t kv_stride = Hkv * Dh;  // elements between consecutive keys of one kv head
  // An i8 cache runs the integer path (F32 false, see the top) or, without AVX512-VNNI, the f32
  // one (F32 true): each key block dequantized to f32 (dequant_rows).
  const bool i8 = d.kv_type == DType::kI8;
  const bool int16_products = i8 && !F32;
  const int64_t kEsz = i8 ? 1 : F32 ? 4 : 2;                      // bytes per cache element
  const bool q_lo = !int16_products && d.q_type != DType::kBF16;  // a bf16 Q is its own hi: every lo half is zero
  const int32_t q_max = internal::int16_query_max(Dh);            // int16_products: Q as int16 codes

  parallel_for(items, 1, [&](int64_t item_begin, int64_t item_end) {
    internal::FtzDazScope ftz_daz;
    const int64_t max_groups = (G * t_tile + kLanes - 1) / kLanes;
    thread_local std::vector<uint32_t> qt, pp, kt;
    thread_local std::vector<float> acc, mrow, lrow, sc;
    thread_local std::vector<int32_t> lo, hi;
    thread_local std::vector<uint16_t> vt;
    thread_local std::vector<float> ktf, vtf, ppf, kdq, vdq;
    thread_local std::vector<float> qscale, qrow_f32;  // int16_products: per row, Q's scale; a bf16 Q row widened
    thread_local std::vector<uint16_t> kw, vw;         // int16_products: a key block widened (widen_codes)
    thread_local std::vector<int16_t> qcodes;
    auto fit = [](auto& v, int64_t size) {
      if (int64_t(v.size()) < size) v.resize(size_t(size));
    };
    fit(qt, max_groups * Dh * kLanes);  // bf16: [P][hi, lo][16]; f32: [Dh][16] (f32 bits)
    fit(acc, max_groups * kLanes * Dh);
    fit(mrow, max_groups * kLanes);
    fit(lrow, max_groups * kLanes);
    fit(lo, max_groups * kLanes);
    fit(hi, max_groups * kLanes);
    fit(sc, kBundle * kKeyBlock * kLanes);
    fit(pp, kKeyBlock / 2 * kLanes);
    if constexpr (F32) {
      fit(ktf, kKeyBlock * Dh);
      fit(vtf, kKeyBlock * Dh);
      fit(ppf, kKeyBlock * kLanes);
      if (i8) {
        fit(kdq, kKeyBlock * Dh);
        fit(vdq, kKeyBlock * Dh);
      }
    } else {
      fit(vt, kKeyBlock * Dh);
      fit(kt, kKeyBlock * P);
      if (int16_products) {
        fit(qscale, max_groups * kLanes);
        fit(qrow_f32, Dh);
        fit(qcodes, Dh);
        fit(kw, kKeyBlock * Dh);
        fit(vw, kKeyBlock * Dh);
      }
    }

    for (int64_t item = item_begin; item < item_end; ++item) {
      // The last query tiles see the most keys under a causal mask: hand them out first so the
      // threads finish together.
      const int64_t b = item / (Hkv * t_tiles);
      const int64_t kvh = (item / t_tiles) % Hkv;
      const int64_t t0 = (t_tiles - 1 - item % t_tiles) * t_tile;
      const int64_t t1 = std::min(T, t0 + t_tile);
      const int64_t rows = G * (t1 - t0);
      const int64_t groups = (rows + kLanes - 1) / kLanes;
      const int64_t sl = slot[b], len = kv_len[b];
      const uint16_t* kbase = k16 + (sl * S * Hkv + kvh) * Dh;  // key j of this head at kbase + j * kv_stride
      const uint16_t* vbase = v16 + (sl * S * Hkv + kvh) * Dh;
      const float* kf32 = k32 + (sl * S * Hkv + kvh) * Dh;
      const float* vf32 = v32 + (sl * S * Hkv + kvh) * Dh;
      const int64_t row0 = (sl * S * Hkv + kvh) * Dh;  // element index of key 0 of this head
      const void* k_row0 = static_cast<const char*>(k_cache) + row0 * kEsz;
      const void* v_row0 = static_cast<const char*>(v_cache) + row0 * kEsz;
      // Row r = (t - t0) * G + g  <->  query head kvh * G + g at token t; lane r % 16 of group r / 16.
      int64_t jmin = len, jmax = 0;
      for (int64_t r = 0; r < groups * kLanes; ++r) {
        uint32_t* qrow = &qt[(r / kLanes) * P * 2 * kLanes + r % kLanes];  // hi of pair p at qrow[p * 32]
        mrow[r] = neg_inf;
        lrow[r] = 0.f;
        std::fill(&acc[r * Dh], &acc[r * Dh] + Dh, 0.f);
        if (r >= rows) {  // padding lane: sees nothing
          lo[r] = hi[r] = 0;
          if (int16_products) qscale[r] = 0.f;
          for (int64_t p = 0; p < P; ++p) qrow[p * 2 * kLanes] = qrow[p * 2 * kLanes + kLanes] = 0;
          continue;
        }
        const int64_t t = t0 + r / G, h = kvh * G + r % G;
        const int64_t pos = q_pos[b * T + t];
        int64_t h_end = len, l_beg = 0;
        if (d.causal) h_end = std::min<int64_t>(h_end, std::max<int64_t>(pos + 1, 0));
        if (W > 0) l_beg = std::max<int64_t>(0, pos - W + 1);
        lo[r] = int32_t(l_beg);
        hi[r] = int32_t(std::max(h_end, l_beg));
        if (lo[r] < hi[r]) {
          jmin = std::min<int64_t>(jmin, lo[r]);
          jmax = std::max<int64_t>(jmax, hi[r]);
        }
        const int64_t qoff = ((b * T + t) * Hq + h) * Dh;
        if (r + 1 < rows) {  // the next row: rows of one head are Hq * Dh apart, which the prefetchers miss
          const int64_t t2 = t0 + (r + 1) / G, h2 = kvh * G + (r + 1) % G;
          const char* nq = static_cast<const char*>(q) + ((b * T + t2) * Hq + h2) * Dh * ::hlx::dtype_size(d.q_type);
          for (int64_t c = 0; c < Dh * int64_t(::hlx::dtype_size(d.q_type)); c += 64) _mm_prefetch(nq + c, _MM_HINT_T0);
        }
        if constexpr (F32) {  // [Dh][16 lanes], exact
          for (int64_t i = 0; i < Dh; ++i) {
            const float x = d.q_type == DType::kF32 ? static_cast<const float*>(q)[qoff + i]
                                                    : bf16_to_f32(static_cast<const bf16*>(q)[qoff + i]);
            std::memcpy(&qrow[i * kLanes], &x, 4);
          }
          continue;
        }
        if (int16_products) {  // int16 codes in the hi halves, as the decode kernel rounds Q
          const float* qf = static_cast<const float*>(q) + qoff;
          if (d.q_type != DType::kF32) {  // bf16: widened exactly
            for (int64_t i = 0; i < Dh; ++i) qrow_f32[i] = bf16_to_f32(static_cast<const bf16*>(q)[qoff + i]);
            qf = qrow_f32.data();
          }
          qscale[r] = internal::quantize_int16(qf, Dh, q_max, qcodes.data());
          for (int64_t p = 0; p < P; ++p) {
            std::memcpy(&qrow[p * 2 * kLanes], &qcodes[2 * p], 4);
            qrow[p * 2 * kLanes + kLanes] = 0;
          }
          continue;
        }
        for (int64_t d0 = 0; d0 < Dh; d0 += 32) {  // 16 pairs (32 values) at a time; Dh % 8 == 0
          alignas(64) uint32_t hi[16], lo[16];
          const int64_t left = Dh - d0;  // a multiple of 8
          const __mmask16 lo_m = left >= 16 ? __mmask16(0xffff) : __mmask16(0x00ff);
          const __mmask16 hi_m = left >= 32 ? __mmask16(0xffff) : left > 16 ? __mmask16(0x00ff) : __mmask16(0);
          __m512 x0, x1;
          if (d.q_type == DType::kBF16) {
            const __m512i raw =
                _mm512_maskz_loadu_epi16(left >= 32 ? __mmask32(0xffffffffu) : __mmask32((1ull << left) - 1),
                                         static_cast<const uint16_t*>(q) + qoff + d0);
            x0 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(raw)), 16));
            x1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(raw, 1)), 16));
          } else {
            const float* qf = static_cast<const float*>(q) + qoff + d0;
            x0 = _mm512_maskz_loadu_ps(lo_m, qf);
            x1 = _mm512_maskz_loadu_ps(hi_m, qf + 16);
          }
          // hi = bf16(x), lo = bf16(x - hi) (x - hi is exact): Q to ~16 significant bits.
          const __m512i h = (__m512i)_mm512_cvtne2ps_pbh(x1, x0);
          const __m512 h0 =
              _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(h)), 16));
          const __m512 h1 =
              _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(h, 1)), 16));
          _mm512_store_si512(hi, h);
          _mm512_store_si512(lo, (__m512i)_mm512_cvtne2ps_pbh(_mm512_sub_ps(x1, h1), _mm512_sub_ps(x0, h0)));
          for (int64_t i = 0; i < 16 && d0 / 2 + i < P; ++i) {
            qrow[(d0 / 2 + i) * 2 * kLanes] = hi[i];
            qrow[(d0 / 2 + i) * 2 * kLanes + kLanes] = lo[i];
          }
        }
      }
      for (int64_t j0 = jmin / kKeyBlock * kKeyBlock; j0 < jmax; j0 += kKeyBlock) {
        const int64_t nk = std::min(kKeyBlock, jmax - j0);
        if (j0 + kKeyBlock < jmax)  // next block's rows: a strided stream the prefetchers follow poorly
          for (int64_t jj = 0; jj < std::min(kKeyBlock, jmax - j0 - kKeyBlock); ++jj)
            for (int64_t c = 0; c < Dh * kEsz; c += 64) {
              const int64_t off = (j0 + kKeyBlock + jj) * kv_stride * kEsz + c;
              _mm_prefetch(static_cast<const char*>(k_row0) + off, _MM_HINT_T0);
              _mm_prefetch(static_cast<const char*>(v_row0) + off, _MM_HINT_T0);
            }
        if constexpr (F32) {
          if (i8) {
            const int64_t first = sl * S * Hkv + j0 * Hkv + kvh;  // scale index of key j0
            dequant_rows(static_cast<const int8_t*>(k_row0) + j0 * kv_stride, d.k_scale + first, kv_stride, Hkv, nk, Dh,
                         kdq.data());
            dequant_rows(static_cast<const int8_t*>(v_row0) + j0 * kv_stride, d.v_scale + first, kv_stride, Hkv, nk, Dh,
                         vdq.data());
            pack_kv_f32(kdq.data(), vdq.data(), Dh, nk, Dh, ktf.data(), vtf.data());
          } else {
            pack_kv_f32(kf32 + j0 * kv_stride, vf32 + j0 * kv_stride, kv_stride, nk, Dh, ktf.data(), vtf.data());
          }
        } else if (int16_products) {
          widen_codes(static_cast<const int8_t*>(k_row0) + j0 * kv_stride, kv_stride, nk, Dh, kw.data());
          widen_codes(static_cast<const int8_t*>(v_row0) + j0 * kv_stride, kv_stride, nk, Dh, vw.data());
          pack_k(kw.data(), Dh, nk, P, kt.data());
          pack_v(vw.data(), Dh, nk, Dh, vt.data());
        } else {
          pack_k(kbase + j0 * kv_stride, kv_stride, nk, P, kt.data());
          pack_v(vbase + j0 * kv_stride, kv_stride, nk, Dh, vt.data());
        }
        // int16_products: the K and V scales of key j0 + jj at ks[jj * Hkv], vs[jj * Hkv].
        const float* ks = int16_products ? d.k_scale + sl * S * Hkv + j0 * Hkv + kvh : nullptr;
        const float* vs = int16_products ? d.v_scale + sl * S * Hkv + j0 * Hkv + kvh : nullptr;
        // The visible keys of group g within this block, [ka, ke) relative to j0.
        auto visible = [&](int64_t g, int64_t& ka, int64_t& ke) {
          const int32_t* glo = &lo[g * kLanes];
          const int32_t* ghi = &hi[g * kLanes];
          ka = kKeyBlock;
          ke = 0;
          for (int l = 0; l < kLanes; ++l)
            if (glo[l] < ghi[l] && glo[l] < j0 + nk && ghi[l] > j0) {
              ka = std::min<int64_t>(ka, std::max<int64_t>(glo[l] - j0, 0));
              ke = std::max<int64_t>(ke, std::min<int64_t>(ghi[l] - j0, nk));
            }
        };
        // A 16-key chunk is computed only if it holds a visible key (the others are never read).
        auto needs = [](int64_t kc, int64_t ka, int64_t ke) { return ka < ke && kc < ke && kc + 16 > ka; };
        for (int64_t g = 0; g < groups; ++g) {
          const int32_t* glo = &lo[g * kLanes];
          const int32_t* ghi = &hi[g * kLanes];
          int64_t ka, ke;
          visible(g, ka, ke);
          // bf16: groups go in bundles of kBundle for Q.K^T, each K dword loaded once for all of
          // them (qk_groups); the scores of bundle member i wait in part i of sc. A last group
          // without a full bundle goes alone.
          constexpr int nb = kBundle;
          const int64_t b0 = g / nb * nb;
          const bool paired = !F32 && b0 + nb <= groups;
          float* s = sc.data() + (paired ? (g - b0) * kKeyBlock * kLanes : 0);
          if constexpr (!F32) {
            if (paired && g == b0) {
              int64_t ba[nb], be[nb];
              for (int i = 0; i < nb; ++i) visible(g + i, ba[i], be[i]);
              const uint32_t* q0 = &qt[g * P * 2 * kLanes];
              for (int64_t kc = 0; kc < kKeyBlock; kc += 16) {
                int count = 0;
                for (int i = 0; i < nb; ++i) count += needs(kc, ba[i], be[i]);
                if (count == nb) {
                  for (int64_t k0 = kc; k0 < kc + 16; k0 += 16 / nb)
                    int16_products
                        ? qk_groups<nb, false, true>(q0, kt.data() + k0, P, s + k0 * kLanes, kKeyBlock * kLanes)
                    : q_lo ? qk_groups<nb, true>(q0, kt.data() + k0, P, s + k0 * kLanes, kKeyBlock * kLanes)
                           : qk_groups<nb, false>(q0, kt.data() + k0, P, s + k0 * kLanes, kKeyBlock * kLanes);
                } else {
                  for (int i = 0; i < nb; ++i)
                    if (needs(kc, ba[i], be[i]))
                      (int16_products ? qk16<false, true>
                       : q_lo         ? qk16<true>
                                      : qk16<false>)(q0 + i * P * 2 * kLanes, kt.data() + kc, P,
                                             s + (i * kKeyBlock + kc) * kLanes);
                }
              }
            }
          }
          if (ka >= ke) continue;
          if (!paired)
            for (int64_t kc = 0; kc < kKeyBlock; kc += 16) {
              if (!needs(kc, ka, ke)) continue;
              if constexpr (F32)
                qk16_f32(reinterpret_cast<const float*>(&qt[g * Dh * kLanes]), ktf.data() + kc, Dh, s + kc * kLanes);
              else
                (int16_products ? qk16<false, true>
                 : q_lo         ? qk16<true>
                                : qk16<false>)(&qt[g * P * 2 * kLanes], kt.data() + kc, P, s + kc * kLanes);
            }
          // Scale, softcap, bias, mask; block max per lane.
          const __m512 scale = _mm512_set1_ps(d.scale), ninf = _mm512_set1_ps(neg_inf);
          const __m512i vlo = _mm512_loadu_si512(glo), vhi = _mm512_loadu_si512(ghi);
          __m512 bm = ninf;
          __mmask16 vis[kKeyBlock];
          // int16_products: an int32 sum times Q's and K's scales, then the softmax scale (as in decode).
          const __m512 qsv = int16_products ? _mm512_loadu_ps(&qscale[g * kLanes]) : scale;
          for (int64_t jj = 0; jj < kKeyBlock; ++jj) {
            if (jj < ka || jj >= ke) {
              vis[jj] = 0;
              continue;
            }
            __m512 sv = _mm512_loadu_ps(s + jj * kLanes);
            if (int16_products)
              sv = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_castps_si512(sv)),
                                 _mm512_mul_ps(qsv, _mm512_set1_ps(ks[jj * Hkv])));
            sv = _mm512_mul_ps(sv, scale);
            if (cap > 0.f || bias) {
              alignas(64) float tmp[kLanes];
              _mm512_store_ps(tmp, sv);
              for (int l = 0; l < kLanes; ++l) {
                const int64_t r = g * kLanes + l;
                if (r >= rows) continue;
                if (cap > 0.f) tmp[l] = cap * std::tanh(tmp[l] / cap);
                if (bias) tmp[l] += bias[(b * T + t0 + r / G) * S + j0 + jj];
              }
              sv = _mm512_load_ps(tmp);
            }
            const __m512i j = _mm512_set1_epi32(int(j0 + jj));
            vis[jj] = _mm512_cmpge_epi32_mask(j, vlo) & _mm512_cmplt_epi32_mask(j, vhi) &
                      _mm512_cmp_ps_mask(sv, ninf, _CMP_NEQ_OQ);
            _mm512_storeu_ps(s + jj * kLanes, sv);
            bm = _mm512_mask_max_ps(bm, vis[jj], bm, sv);
          }
          float* gm = &mrow[g * kLanes];
          float* gl = &lrow[g * kLanes];
          const __m512 m_old = _mm512_loadu_ps(gm);
          const __m512 m_new = _mm512_max_ps(m_old, bm);
          // alpha = e^(m_old - m_new): 1 exactly where nothing new is visible, 0 before the first
          // visible key (m_old = -inf).
          const __mmask16 started = _mm512_cmp_ps_mask(m_old, ninf, _CMP_NEQ_OQ);
          const __m512 alpha = _mm512_maskz_mov_ps(started, exp_nonpos16(_mm512_sub_ps(m_old, m_new)));
          // Weights, rounded to bf16 and packed as key pairs; the sum uses the rounded values.
          const __m512i interleave = _mm512_setr_epi32(
              0x00100000, 0x00110001, 0x00120002, 0x00130003, 0x00140004, 0x00150005, 0x00160006, 0x00170007,
              0x00180008, 0x00190009, 0x001a000a, 0x001b000b, 0x001c000c, 0x001d000d, 0x001e000e, 0x001f000f);
          __m512 psum = _mm512_setzero_ps();
          const int64_t jp0 = ka / 2, jp1 = (ke + 1) / 2;
          alignas(64) float wts[kKeyBlock * kLanes];  // int16_products: weights times V's scales, [key][lane]
          alignas(64) float wscale[kLanes];           // int16_products: their int16 codes' scale per lane
          __m512 wmax = _mm512_setzero_ps();
          if constexpr (F32) {  // f32 weights, summed key by key
            for (int64_t jj = ka; jj < ke; ++jj) {
              const __m512 pv =
                  _mm512_maskz_mov_ps(vis[jj], exp_nonpos16(_mm512_sub_ps(_mm512_loadu_ps(s + jj * kLanes), m_new)));
              _mm512_storeu_ps(&ppf[jj * kLanes], pv);
              psum = _mm512_add_ps(psum, pv);
            }
          }
          for (int64_t jp = F32 ? jp1 : jp0; jp < jp1; ++jp) {
            const __m512 pe = _mm512_maskz_mov_ps(
                vis[2 * jp], exp_nonpos16(_mm512_sub_ps(_mm512_loadu_ps(s + 2 * jp * kLanes), m_new)));
            const __m512 po = _mm512_maskz_mov_ps(
                vis[2 * jp + 1], exp_nonpos16(_mm512_sub_ps(_mm512_loadu_ps(s + (2 * jp + 1) * kLanes), m_new)));
            if (int16_products) {  // the sum over the f32 weights; P.V takes them times V's scales (below)
              const auto v_scale = [&](int64_t jj) { return _mm512_set1_ps(jj >= ka && jj < ke ? vs[jj * Hkv] : 0.f); };
              const __m512 we = _mm512_maskz_mul_ps(vis[2 * jp], pe, v_scale(2 * jp));
              const __m512 wo = _mm512_maskz_mul_ps(vis[2 * jp + 1], po, v_scale(2 * jp + 1));
              _mm512_store_ps(&wts[2 * jp * kLanes], we);
              _mm512_store_ps(&wts[(2 * jp + 1) * kLanes], wo);
              wmax = _mm512_max_ps(wmax, _mm512_max_ps(we, wo));
              psum = _mm512_add_ps(psum, _mm512_add_ps(pe, po));
              continue;
            }
            // [even bf16 x16 | odd bf16 x16] -> dword per lane = even | odd << 16.
            const __m512i packed = _mm512_permutexvar_epi16(interleave, (__m512i)_mm512_cvtne2ps_pbh(po, pe));
            _mm512_storeu_si512(&pp[jp * kLanes], packed);
            psum = _mm512_add_ps(psum, _mm512_castsi512_ps(_mm512_slli_epi32(packed, 16)));
            psum =
                _mm512_add_ps(psum, _mm512_castsi512_ps(_mm512_and_si512(packed, _mm512_set1_epi32(int(0xffff0000u)))));
          }
          if (int16_products) {  // int16 codes per lane on the lane's largest weight of the block, as key pairs
            const __mmask16 nz = _mm512_cmp_ps_mask(wmax, _mm512_setzero_ps(), _CMP_GT_OQ);
            const __m512 inv = _mm512_maskz_div_ps(nz, _mm512_set1_ps(32767.f), wmax);
            _mm512_store_ps(wscale, _mm512_div_ps(wmax, _mm512_set1_ps(32767.f)));
            const __m512i lim = _mm512_set1_epi32(32767);
            for (int64_t jp = jp0; jp < jp1; ++jp) {
              const __m512i ce =
                  _mm512_min_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(_mm512_load_ps(&wts[2 * jp * kLanes]), inv)), lim);
              const __m512i co = _mm512_min_epi32(
                  _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_load_ps(&wts[(2 * jp + 1) * kLanes]), inv)), lim);
              _mm512_storeu_si512(&pp[jp * kLanes], _mm512_or_si512(_mm512_and_si512(ce, _mm512_set1_epi32(0xffff)),
                                                                    _mm512_slli_epi32(co, 16)));
            }
          }
          _mm512_storeu_ps(gl, _mm512_fmadd_ps(_mm512_loadu_ps(gl), alpha, psum));
          _mm512_storeu_ps(gm, m_new);
          alignas(64) float al[kLanes];
          _mm512_store_ps(al, alpha);
          // Lanes with a visible key here; the others would only add exact zeros.
          __mmask16 active = 0;
          for (int64_t jj = ka; jj < ke; ++jj) active |= vis[jj];
          // Four rows at a time: one pass of at most 5 vectors while head_dim <= 80, else passes of
          // 4 vectors (64 columns; a last one may end in 8 tail columns). Each V vector is loaded
          // once per key pair for the four rows (two rows at a time loaded it twice: load-bound at
          // head_dim 128). The passes split columns only: every column gets the same operations.
          const int64_t step = Dh <= 80 ? Dh : 64;
          for (int l = 0; l < kLanes; l += 4) {
            if (!((active >> l) & 0xf)) continue;
            float* a = &acc[(g * kLanes + l) * Dh];
            for (int64_t c0 = 0; c0 < Dh; c0 += step) {
              const int64_t cols = std::min(step, Dh - c0);
              const int nv = int(cols / 16);
              if constexpr (F32)
                (cols % 16 ? kPv4F32Tail[nv] : kPv4F32[nv])(a, al, ppf.data(), l, vtf.data(), Dh, c0, ka, ke);
              else
                (int16_products ? kPv4Int[nv]
                 : cols % 16    ? kPv4Tail[nv]
                                : kPv4[nv])(a, al, pp.data(), l, vt.data(), Dh, c0, jp0, jp1, wscale);
            }
          }
        }
      }
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t t = t0 + r / G, h = kvh * G + r % G;
        float* o = out + ((b * T + t) * Hq + h) * Dh;
        const float inv = lrow[r] > 0.f ? 1.f / lrow[r] : 0.f;
        const float* ar = &acc[r * Dh];
        for (int64_t i = 0; i < Dh; ++i) o[i] = ar[i] * inv;
      }
    }
  });
}

void run(const AttentionDesc& d, const void* q, const void* k_cache, const void* v_cache, const int32_t* slot,
         const int32_t* q_pos, const int32_t* kv_len, const float* bias, float* out) {
  const CpuFeatures& c = cpu_features();
  const bool int16_products = c.avx512vnni && c.avx512bf16 && c.avx512bw && d.head_dim % 16 == 0;
  if (d.kv_type == DType::kF32 || (d.kv_type == DType::kI8 && !int16_products))
    run_impl<true>(d, q, k_cache, v_cache, slot, q_pos, kv_len, bias, out);
  else
    run_impl<false>(d, q, k_cache, v_cache, slot, q_pos, kv_len, bias, out);
}

}  // namespace hlx::kernels::attention_prefill
