// hlx.attention for one query token per row (decode) over a bf16 or i8 cache. attention.cc calls it
// when q_len == 1, the cache is bf16 or i8 (i8 with AVX512-VNNI), head_dim % 16 == 0 and the CPU has
// AVX-512BW/VL; other decode shapes keep attention_impl.h.
// i8 (int8 KV): integer products, no dequantized row is ever stored. Each query row is rounded to
// int16 codes on its own scale (max|q| / 32767) and each score is an exact int32 sum of code
// products (vpdpwssd on sign-extended K codes), times q's scale and the K row's scale. The softmax
// weights, each times its V row's scale, are rounded to int16 per chunk of kVChunk keys on the
// chunk's own scale (max weight / 32767); V rows are sign-extended and interleaved in key pairs,
// so one vpdpwssd adds two keys' products per column; each chunk's exact int32 sums join the f32
// accumulators times the chunk's scale. Against f32 widening (4 conversions + 4 FMAs per 32 codes
// of K, and of V, for a pair of query heads) this is 3 instructions per 32 K codes and 4 per 32 V
// codes (docs/PERFORMANCE.md); each rounding moves a value by at most 1/65534 of its row's or
// chunk's largest (docs/COMPOSITES.md, int8 KV cache).
//
// Why a separate kernel: decode reads each K/V row of a kv head for only Hq/Hkv query rows, and
// attention_impl.h widened every bf16 element to f32 (two instructions per 16) once per query row,
// ran a full horizontal sum per score and an online softmax: ~5x the memory time
// (bench/attention_bench.cc). Here a work item is a batch row and a run of adjacent kv heads (all
// of them when there are enough rows: whole cache rows, one sequential stream); the query heads of
// a kv head are taken two at a time and share every K/V load and widening:
//   widening: a zmm of 32 bf16 (16 dwords) gives its even elements as dword << 16 and its odd ones
//             as dword & 0xffff0000, one instruction per 16 values; Q is stored split the same way
//             and the P.V accumulators hold even and odd columns apart until the end;
//   scores:   f32 FMAs, one accumulator per (row, key), each lane's odd product first; for a
//             bf16 Q, vdpbf16ps on the raw pairs (the same sums without widening: 1.03-1.13x
//             from DRAM on Zen 5); 16 accumulators are then summed by one transposing reduction;
//   softmax:  two passes (all scores of the row are kept), so there is no running-max rescaling;
//   P.V:      in chunks of keys over every head of the item, accumulators kept in memory between
//             chunks (exact: the same FMA chain per column as one pass).
// All arithmetic is f32 on the exact values: Q as given (bf16 from the text emitters over a bf16
// cache, so decode and prefill see the same Q), P never rounded (a bf16 P.V, P as hi + lo bf16,
// cost about the same as the FMAs; AMX-BF16 scores, 0.56x of
// these FMAs' time on L2-resident rows, made the kernel 0.9x: it waits on memory, docs/PERFORMANCE.md).
// Split-K (flash-decoding, issue 27): a row whose visible keys cross a multiple of kSplitKeys is
// cut there into parts, each a work item over whole cache rows (all kv heads: one sequential
// stream) with its own softmax max and sum, merged after by exact log-sum-exp weights. Before it
// a batch-1 step at 8k context read each head's 256-byte pieces of 2 KiB rows, one strided stream
// per item (BM_AttentionDecodeCold 1/8192: ~2-4 GB/s of KV on a loaded host).
// A row's bits depend only on its own query, visible key range and K/V rows: each score is one
// accumulator reduced by the same tree whatever its position among the 16, the pairing of query
// heads never mixes rows, keys are summed in order from the part's first key, and the cuts and
// the merge order follow the row's key range alone. So batch, slot, thread count and work split
// never change a row.
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

namespace hlx::kernels::attention_decode {
namespace {

using internal::exp_nonpos16;
using internal::int16_query_max;
using internal::quantize_int16;

// Even / odd elements of 32 bf16 as two f32 vectors (exact).
inline __m512 even_f32(__m512i x) { return _mm512_castsi512_ps(_mm512_slli_epi32(x, 16)); }
inline __m512 odd_f32(__m512i x) {
  return _mm512_castsi512_ps(_mm512_and_si512(x, _mm512_set1_epi32(int32_t(0xffff0000u))));
}

// The 16 horizontal sums of v[0..15], in order, in one vector: each level adds the two halves of
// every partial vector, so every output goes through the same tree (lane k + lane k + 8, then
// k + 4, k + 2, k + 1) whatever its index.
// Add: f32 adds, or int32 ones on the same bits (exact, so any tree would do for them).
template <class Add>
inline __m512 hsum16(const __m512* v, Add add) {
  __m512 x[8], y[4], z[2];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i)  // [v_i lanes 0-7 + 8-15 | v_{i+8} lanes 0-7 + 8-15]
    x[i] = add(_mm512_shuffle_f32x4(v[i], v[i + 8], 0x44), _mm512_shuffle_f32x4(v[i], v[i + 8], 0xEE));
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i)  // 128-bit lanes: v_i, v_{i+8}, v_{i+4}, v_{i+12}
    y[i] = add(_mm512_shuffle_f32x4(x[i], x[i + 4], 0x88), _mm512_shuffle_f32x4(x[i], x[i + 4], 0xDD));
#pragma GCC unroll 2
  for (int i = 0; i < 2; ++i) {
    const __m512d a = _mm512_castps_pd(y[i]), b = _mm512_castps_pd(y[i + 2]);
    z[i] = add(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)), _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
  }
  // Lanes: v0 v2 v1 v3 | v8 v10 v9 v11 | v4 v6 v5 v7 | v12 v14 v13 v15.
  const __m512 w = add(_mm512_shuffle_ps(z[0], z[1], 0x88), _mm512_shuffle_ps(z[0], z[1], 0xDD));
  return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 2, 1, 3, 8, 10, 9, 11, 4, 6, 5, 7, 12, 14, 13, 15), w);
}
inline __m512 add_f32(__m512 a, __m512 b) { return _mm512_add_ps(a, b); }
inline __m512 add_i32(__m512 a, __m512 b) {
  return _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(a), _mm512_castps_si512(b)));
}

// Prefetch distances in bf16 cache rows (i8: twice the rows, the same bytes): K rows ahead of the
// score pass, V rows ahead of the P.V pass; at least a pass's block of rows (AddressOrderPrefetch).
// Spread through the products, one line per line read: issued in bursts they stalled the core on
// full fill buffers (Intel Xeon 2026-12-03, BM_AttentionDecodeCold 1/32768: bf16 24.0 -> 26.0 GB/s
// of KV). Intel: 8 / 16 .. 24 / 48 flat, prefetcht1 / t2 at 32-128 rows no faster, prefetchnta
// 0.37x, none 0.73x. Zen 5 with the address-order cursor: 16 / 32 best; 24 / 48 and 32 / 64 level
// to 0.9x, 48 / 96 0.85-0.9x, V 16 or 24 rows (less than the P.V block) 0.8-0.9x.
constexpr int64_t kKAheadRows = 16, kVAheadRows = 32;

constexpr int64_t kVChunk = 32;  // keys per P.V chunk

// Software prefetch in address order over an item's K rows [lo, hi), then its V rows [lo, hi)
// (row t at base + t * stride, `span` elements each: the item's kv heads). The passes read a block
// of rows head by head; prefetching each head's piece of the rows ahead as it was read gave the
// CPU's own stream prefetchers no sequence to follow. One line is prefetched per line read, the
// cursor walking the rows ahead in plain address order (Zen 5, a stand-alone model of the score
// pass: 51-56 -> 62-65 GB/s on 2 threads; rows read in order without software prefetch 64-74).
// The distance must cover a pass's block of rows (16 keys for scores, kVChunk for P.V): a block's
// first head reads every row of it.
template <class E>
class AddressOrderPrefetch {
 public:
  AddressOrderPrefetch(const E* k, const E* v, int64_t stride, int64_t span, int64_t lo, int64_t hi)
      : k_(k), v_(v), stride_(stride), span_(span), lo_(lo), hi_(hi) {
    seek(lo);
  }
  // Prefetches the next line: call once per 64 bytes read.
  void step() {
    if (!row_) return;
    _mm_prefetch(reinterpret_cast<const char*>(row_ + col_), _MM_HINT_T0);
    if ((col_ += kLine) >= span_) seek(t_ + 1);
  }
  // Prefetches at once every line not yet prefetched before row t (t >= hi: row lo + t - hi of V).
  void run_to(int64_t t) {
    while (row_ && t_ < t) step();
  }

 private:
  void seek(int64_t t) {
    t_ = t;
    col_ = 0;
    row_ = t < hi_ ? k_ + t * stride_ : t - hi_ + lo_ < hi_ ? v_ + (t - hi_ + lo_) * stride_ : nullptr;
  }

  static constexpr int64_t kLine = 64 / int64_t(sizeof(E));
  const E *k_, *v_, *row_ = nullptr;
  int64_t stride_, span_, lo_, hi_, t_ = 0, col_ = 0;
};

// 32 bf16 cache elements as two f32 vectors, their even / odd elements (exact, one instruction per
// 16), the chunk layout of Q and the accumulators. Mask m: 32 elements, or 16 (the rest zero) for
// the last chunk of a head_dim that is an odd multiple of 16.
inline void load_chunk(const uint16_t* p, __mmask32 m, __m512* e, __m512* o) {
  const __m512i x = _mm512_maskz_loadu_epi16(m, p);
  *e = even_f32(x);
  *o = odd_f32(x);
}
// 32 i8 codes sign-extended to int16, in order.
inline __m512i load_codes(const int8_t* p, __mmask32 m) { return _mm512_cvtepi8_epi16(_mm256_maskz_loadu_epi8(m, p)); }
inline __mmask32 chunk_mask(int64_t left) { return left >= 32 ? ~__mmask32(0) : __mmask32(0xffff); }

// Calls f.template operator()<C>() with C = Dh / 32 for the usual head sizes (64, 128, 256), else
// C = 0: the chunk loops of the score pass then have a compile-time count (unrolled, every mask
// constant). Zen 5, the whole kernel's KV rate from DRAM at 8k and 32k context: median 1.04-1.06x
// over six rounds with bf16 KV, 0.97-1.28x with int8 (docs/PERFORMANCE.md).
template <class F>
void with_chunk_count(int64_t Dh, F f) {
  switch (Dh) {
    case 64:
      return f.template operator()<2>();
    case 128:
      return f.template operator()<4>();
    case 256:
      return f.template operator()<8>();
    default:
      return f.template operator()<0>();
  }
}

// Scores of R query rows (R = 1 or 2) against the 16 / R keys [j, j + 16 / R) (keys at or past hi
// re-read row hi - 1 and are dropped): s_r[t] = dot(q_r, k_{j+t}), with q_r stored as [chunks][even
// 16 f32, odd 16 f32] (chunks = ceil(Dh / 32), row r at qp + r * chunks * 32; kDot: the chunk's 32
// bf16 in its first 64 bytes). One accumulator per (row, key), per lane the odd element's product
// added first (vdpbf16ps's order), then one hsum16. C: Dh / 32 when known at compile time, else 0.
template <int R, bool kDot, int C>
inline void score_keys(const float* qp, const uint16_t* k, int64_t stride, int64_t j, int64_t hi, int64_t Dh, float* s0,
                       float* s1, AddressOrderPrefetch<uint16_t>* pf) {
  constexpr int kK = 16 / R;
  const int64_t chunks = C ? C : (Dh + 31) / 32;
  const uint16_t* kp[kK];
#pragma GCC unroll 16
  for (int t = 0; t < kK; ++t) kp[t] = k + std::min(j + t, hi - 1) * stride;
  __m512 acc[16];
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) acc[i] = _mm512_setzero_ps();
#pragma GCC unroll 8
  for (int64_t c = 0; c < chunks; ++c) {
    const __mmask32 m = C ? ~__mmask32(0) : chunk_mask(Dh - 32 * c);
    if constexpr (kDot) {
      __m512bh q[R];
#pragma GCC unroll 2
      for (int r = 0; r < R; ++r) q[r] = (__m512bh)_mm512_loadu_si512(qp + (r * chunks + c) * 32);
#pragma GCC unroll 16
      for (int t = 0; t < kK; ++t) {
        const __m512bh kc = (__m512bh)_mm512_maskz_loadu_epi16(m, kp[t] + c * 32);
        if (pf) pf->step();
#pragma GCC unroll 2
        for (int r = 0; r < R; ++r) acc[r * kK + t] = _mm512_dpbf16_ps(acc[r * kK + t], kc, q[r]);
      }
      continue;
    }
    __m512 qe[R], qo[R];
#pragma GCC unroll 2
    for (int r = 0; r < R; ++r) {
      qe[r] = _mm512_loadu_ps(qp + (r * chunks + c) * 32);
      qo[r] = _mm512_loadu_ps(qp + (r * chunks + c) * 32 + 16);
    }
#pragma GCC unroll 16
    for (int t = 0; t < kK; ++t) {
      __m512 ke, ko;
      load_chunk(kp[t] + c * 32, m, &ke, &ko);
      if (pf) pf->step();
#pragma GCC unroll 2
      for (int r = 0; r < R; ++r)
        acc[r * kK + t] = _mm512_fmadd_ps(qe[r], ke, _mm512_fmadd_ps(qo[r], ko, acc[r * kK + t]));
    }
  }
  alignas(64) float sums[16];
  _mm512_store_ps(sums, hsum16(acc, add_f32));
  const int n = int(std::min<int64_t>(kK, hi - j));
  for (int t = 0; t < n; ++t) {
    s0[t] = sums[t];
    if (R == 2) s1[t] = sums[kK + t];
  }
}

// score_keys over i8 K codes: q_r as int16 codes in order (chunk c of row r at qi + (r * chunks +
// c) * 32) with scale qs[r]; each (row, key) sum is exact in int32 (|sum| <= Dh * q_max * 127 <
// 2^31, q_max from int16_query_max) and s_r[t] = float(sum) * (qs[r] * ks[(j + t) * ks_stride]).
template <int R, int C>
inline void score_keys_i8(const int16_t* qi, const float* qs, const int8_t* k, int64_t stride, int64_t j, int64_t hi,
                          int64_t Dh, float* s0, float* s1, const float* ks, int64_t ks_stride,
                          AddressOrderPrefetch<int8_t>* pf) {
  constexpr int kK = 16 / R;
  const int64_t chunks = C ? C : (Dh + 31) / 32;
  const int8_t* kp[kK];
#pragma GCC unroll 16
  for (int t = 0; t < kK; ++t) kp[t] = k + std::min(j + t, hi - 1) * stride;
  __m512i acc[16];
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) acc[i] = _mm512_setzero_si512();
#pragma GCC unroll 8
  for (int64_t c = 0; c < chunks; ++c) {
    const __mmask32 m = C ? ~__mmask32(0) : chunk_mask(Dh - 32 * c);
    __m512i q[R];
#pragma GCC unroll 2
    for (int r = 0; r < R; ++r) q[r] = _mm512_loadu_si512(qi + (r * chunks + c) * 32);
#pragma GCC unroll 16
    for (int t = 0; t < kK; ++t) {
      const __m512i kc = load_codes(kp[t] + c * 32, m);
      if (pf && c % 2 == 0) pf->step();
#pragma GCC unroll 2
      for (int r = 0; r < R; ++r) acc[r * kK + t] = dpwssd(acc[r * kK + t], q[r], kc);
    }
  }
  __m512 accf[16];
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) accf[i] = _mm512_castsi512_ps(acc[i]);
  alignas(64) int32_t sums[16];
  _mm512_store_si512(sums, _mm512_castps_si512(hsum16(accf, add_i32)));
  const int n = int(std::min<int64_t>(kK, hi - j));
  for (int t = 0; t < n; ++t) {
    const float f = ks[(j + t) * ks_stride];
    s0[t] = float(sums[t]) * (qs[0] * f);
    if (R == 2) s1[t] = float(sums[kK + t]) * (qs[1] * f);
  }
}

// acc_r[32 c + (0..15 | 16..31)] (+)= sum_{j in [j0, j1)} p_r[j - j0] * (even | odd columns of v_j[c0 +
// 32 c, ...)), c < NC, for R rows; `first` starts the sums at zero. The accumulators live in
// registers across the keys of a chunk and in memory (f32, exact) between chunks, so every
// column's sum is still the same chain of FMAs in key order.
template <int R, int NC>
void weighted_part(const float* const* p, const uint16_t* v, int64_t stride, int64_t j0, int64_t j1, int64_t c0,
                   int64_t w, float* const* acc_mem, bool first, AddressOrderPrefetch<uint16_t>* pf) {
  __mmask32 m[NC];
#pragma GCC unroll 4
  for (int c = 0; c < NC; ++c) m[c] = chunk_mask(w - 32 * c);
  __m512 acc[R][2 * NC];
#pragma GCC unroll 2
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int i = 0; i < 2 * NC; ++i)
      acc[r][i] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(acc_mem[r] + c0 + 16 * i);
  for (int64_t j = j0; j < j1; ++j) {
    const uint16_t* vr = v + j * stride + c0;
    __m512 pj[R];
#pragma GCC unroll 2
    for (int r = 0; r < R; ++r) pj[r] = _mm512_set1_ps(p[r][j - j0]);
#pragma GCC unroll 4
    for (int c = 0; c < NC; ++c) {
      __m512 ve, vo;
      load_chunk(vr + 32 * c, m[c], &ve, &vo);
      if (pf) pf->step();
#pragma GCC unroll 2
      for (int r = 0; r < R; ++r) {
        acc[r][2 * c] = _mm512_fmadd_ps(pj[r], ve, acc[r][2 * c]);
        acc[r][2 * c + 1] = _mm512_fmadd_ps(pj[r], vo, acc[r][2 * c + 1]);
      }
    }
  }
#pragma GCC unroll 2
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int i = 0; i < 2 * NC; ++i) _mm512_storeu_ps(acc_mem[r] + c0 + 16 * i, acc[r][i]);
}

// weighted_part over i8 V codes: the chunk's weights of row r as int16 codes (key j at wq[r][j - j0],
// read two keys at a time, key j in the low half; a missing last key has code 0) with scale ws[r]
// (quantize_int16). Rows j, j + 1 are sign-extended and interleaved by 16-bit unpacks, so the
// accumulators of a 32-column chunk hold columns 8L + 0..3 (L = 128-bit lane), then 8L + 4..7;
// their int32 sums are exact (kVChunk * 32767 * 127 < 2^31) and join acc_mem as f32 times ws[r].
template <int R, int NC>
void weighted_part_i8(const int16_t* const* wq, const float* ws, const int8_t* v, int64_t stride, int64_t j0,
                      int64_t j1, int64_t c0, int64_t w, float* const* acc_mem, bool first,
                      AddressOrderPrefetch<int8_t>* pf) {
  static_assert(kVChunk * 32767 * 127 < std::numeric_limits<int32_t>::max());
  __mmask32 m[NC];
#pragma GCC unroll 4
  for (int c = 0; c < NC; ++c) m[c] = chunk_mask(w - 32 * c);
  __m512i acc[R][2 * NC];
#pragma GCC unroll 2
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int i = 0; i < 2 * NC; ++i) acc[r][i] = _mm512_setzero_si512();
  for (int64_t j = j0; j < j1; j += 2) {
    const int8_t* v0 = v + j * stride + c0;
    const int8_t* v1 = j + 1 < j1 ? v0 + stride : v0;  // weight 0 there
    __m512i wp[R];
#pragma GCC unroll 2
    for (int r = 0; r < R; ++r) {
      int32_t pair;  // codes of keys j, j + 1 (memcpy: no int32 view of int16 storage)
      std::memcpy(&pair, wq[r] + (j - j0), sizeof pair);
      wp[r] = _mm512_set1_epi32(pair);
    }
#pragma GCC unroll 4
    for (int c = 0; c < NC; ++c) {
      const __m512i a = load_codes(v0 + 32 * c, m[c]), b = load_codes(v1 + 32 * c, m[c]);
      if (pf) pf->step();  // 2 x 32 codes read
      const __m512i lo = _mm512_unpacklo_epi16(a, b), hi = _mm512_unpackhi_epi16(a, b);
#pragma GCC unroll 2
      for (int r = 0; r < R; ++r) {
        acc[r][2 * c] = dpwssd(acc[r][2 * c], lo, wp[r]);
        acc[r][2 * c + 1] = dpwssd(acc[r][2 * c + 1], hi, wp[r]);
      }
    }
  }
#pragma GCC unroll 2
  for (int r = 0; r < R; ++r) {
    const __m512 sc = _mm512_set1_ps(ws[r]);
#pragma GCC unroll 8
    for (int i = 0; i < 2 * NC; ++i) {
      float* a = acc_mem[r] + c0 + 16 * i;
      const __m512 x = _mm512_cvtepi32_ps(acc[r][i]);
      _mm512_storeu_ps(a, first ? _mm512_mul_ps(x, sc) : _mm512_fmadd_ps(x, sc, _mm512_loadu_ps(a)));
    }
  }
}

// Calls part<NC>(c0, w) for each block of up to 128 columns [c0, c0 + w) of Dh, NC = ceil(w / 32).
template <class Part>
void for_column_blocks(int64_t Dh, Part part) {
  for (int64_t c0 = 0; c0 < Dh; c0 += 128) {
    const int64_t w = std::min<int64_t>(128, Dh - c0);
    switch ((w + 31) / 32) {
      case 1:
        part.template operator()<1>(c0, w);
        break;
      case 2:
        part.template operator()<2>(c0, w);
        break;
      case 3:
        part.template operator()<3>(c0, w);
        break;
      default:
        part.template operator()<4>(c0, w);
        break;
    }
  }
}

// Column order of the P.V accumulators within each 32-column chunk, as the two permutex2var
// indices that give output columns 0-15 and 16-31 from the chunk's two 16-float halves.
struct ColumnOrder {
  __m512i first, second;
};
// bf16: 16 even columns, then 16 odd.
inline ColumnOrder even_odd_order() {
  return {_mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23),
          _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31)};
}
// i8: columns 8L + 0..3 of the four lanes L, then 8L + 4..7 (weighted_part_i8).
inline ColumnOrder key_pair_order() {
  return {_mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23),
          _mm512_setr_epi32(8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31)};
}

// out[0, Dh) = inv * the columns of acc, each 32-column chunk put back in order.
void finish_row(const float* acc, int64_t Dh, float inv, float* out, const ColumnOrder& order) {
  const __m512i first = order.first, second = order.second;
  const __m512 sc = _mm512_set1_ps(inv);
  for (int64_t c = 0; 32 * c < Dh; ++c) {
    const __m512 e = _mm512_loadu_ps(acc + 32 * c), o = _mm512_loadu_ps(acc + 32 * c + 16);
    _mm512_storeu_ps(out + 32 * c, _mm512_mul_ps(_mm512_permutex2var_ps(e, first, o), sc));
    if (Dh - 32 * c > 16) _mm512_storeu_ps(out + 32 * c + 16, _mm512_mul_ps(_mm512_permutex2var_ps(e, second, o), sc));
  }
}

// Softmax weights of one row's scores, in place: s[0, n) = e^(s - max) (0 for -inf scores);
// returns their f32 sum, or 0 when every score is -inf; *max_out = the max.
float softmax_in_place(float* s, int64_t n, float* max_out) {
  const __m512 ninf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  __m512 mx = ninf;
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - i)) - 1);
    mx = _mm512_max_ps(mx, _mm512_mask_loadu_ps(ninf, m, s + i));
  }
  const float smax = _mm512_reduce_max_ps(mx);
  *max_out = smax;
  if (smax == -std::numeric_limits<float>::infinity()) return 0.f;
  const __m512 mv = _mm512_set1_ps(smax);
  __m512 sum = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - i)) - 1);
    const __m512 sv = _mm512_mask_loadu_ps(ninf, m, s + i);
    const __mmask16 vis = _mm512_cmp_ps_mask(sv, ninf, _CMP_NEQ_OQ);
    const __m512 e = _mm512_maskz_mov_ps(vis, exp_nonpos16(_mm512_sub_ps(sv, mv)));
    _mm512_mask_storeu_ps(s + i, m, e);
    sum = _mm512_add_ps(sum, e);
  }
  return _mm512_reduce_add_ps(sum);
}

// Keys per split-K part. At Qwen3-0.6B shapes (8 kv heads, head_dim 128) a part is 512 whole
// cache rows (1 MiB of K, then of V): long enough to stream, short enough that batch 1 at 8k
// context gives 16 items for the threads.
constexpr int64_t kSplitKeys = 512;

// A row's keys [lo, hi), one item's share of them; split: one of several parts of its row
// (results to the partial buffer at the part's index), else written straight to the output.
struct Part {
  int64_t b, lo, hi;
  bool split;
};
// A row cut into parts [first, first + count) of the part list.
struct SplitRow {
  int64_t b, first, count;
};
std::vector<Part>& part_list() {
  thread_local std::vector<Part> v;  // the calling thread's, kept across calls
  return v;
}
std::vector<SplitRow>& split_list() {
  thread_local std::vector<SplitRow> v;
  return v;
}
std::vector<float>& partial_buffer() {
  thread_local std::vector<float> v;
  return v;
}

// The keys a decode row at position pos with kv_len keys may see (causal, sliding window).
void visible_range(const AttentionDesc& d, int64_t pos, int64_t len, int64_t* lo, int64_t* hi) {
  int64_t h = len, l = 0;
  if (d.causal) h = std::min<int64_t>(h, std::max<int64_t>(pos + 1, 0));
  if (d.sliding_window > 0) l = std::max<int64_t>(0, pos - d.sliding_window + 1);
  *lo = l;
  *hi = std::max(h, l);
}

// E: bf16 bits (uint16_t) or i8 codes (int8_t, with d.k_scale / d.v_scale).
template <class E>
void run_impl(const AttentionDesc& d, const void* q, const void* k_cache, const void* v_cache, const int32_t* slot,
              const int32_t* q_pos, const int32_t* kv_len, const float* bias, float* out) {
  const int64_t Hq = d.q_heads, Hkv = d.kv_heads, Dh = d.head_dim, S = d.capacity, G = Hq / Hkv;
  const int64_t stride = Hkv * Dh;  // elements between consecutive cache rows of one kv head
  const int64_t chunks = (Dh + 31) / 32;
  constexpr bool kI8 = sizeof(E) == 1;
  const ColumnOrder order = kI8 ? key_pair_order() : even_odd_order();
  // A bf16 Q over a bf16 cache: scores by vdpbf16ps (one per 32 elements, no widening). The FMA
  // path adds each lane's odd product first, as vdpbf16ps does, so the two give the same bits
  // where the instruction follows its documented definition (measured on Zen 5). Not on Intel:
  // the Xeon hosts measured issue vdpbf16ps at ~1.6 G/s per core, below their FMAs.
  const CpuFeatures& cpu = cpu_features();
  const bool dot = !kI8 && d.q_type == DType::kBF16 && cpu.avx512bf16 && !cpu.intel;
  const E* k16 = static_cast<const E*>(k_cache);
  const E* v16 = static_cast<const E*>(v_cache);
  // Split-K: a row's visible keys [lo, hi) are cut at multiples of kSplitKeys into parts (only
  // when they span more than one), each part its own work item with its own softmax max and sum;
  // the parts are then merged exactly (log-sum-exp weights, in part order). The cut depends only
  // on the row's own key range, never on the batch or the thread count, so a row's bits are the
  // same alone and in any batch; a row within one part takes the unsplit path (same bits as
  // before the split existed).
  std::vector<Part>& parts = part_list();
  std::vector<SplitRow>& splits = split_list();
  parts.clear();
  splits.clear();
  for (int64_t b = 0; b < d.batch; ++b) {
    int64_t lo = 0, hi = 0;
    visible_range(d, q_pos[b], kv_len[b], &lo, &hi);
    const int64_t first = lo / kSplitKeys, last = hi > lo ? (hi - 1) / kSplitKeys : first;
    if (first == last) {
      parts.push_back({b, lo, hi, false});
      continue;
    }
    splits.push_back({b, int64_t(parts.size()), last - first + 1});
    for (int64_t c = first; c <= last; ++c)
      parts.push_back({b, std::max(lo, c * kSplitKeys), std::min(hi, (c + 1) * kSplitKeys), true});
  }
  // Partial results of split parts: per (part, query head) the max, the sum and the
  // unnormalised P.V accumulator (chunk layout: 16 even, 16 odd columns).
  const int64_t n_parts = int64_t(parts.size());
  const int64_t acc_len = chunks * 32, rec_len = acc_len + 2;
  std::vector<float>& partial = partial_buffer();
  if (!splits.empty() && int64_t(partial.size()) < n_parts * Hq * rec_len)
    partial.resize(size_t(n_parts * Hq * rec_len));
  // A work item is a part of a batch row and a run of hg adjacent kv heads: its K/V reads are
  // hg * Dh contiguous elements per cache row (all heads: whole rows, one sequential stream the
  // hardware prefetchers follow). Whole rows whenever there are as many parts as threads: items
  // that share rows, each reading some of the kv heads, ran at 0.4-0.7x on Zen 5
  // (BM_AttentionDecodeCold 1/2048: 17-23 GB/s as 8 half-row items, 41-54 as 4 parts). Fewer
  // parts (short rows at small batch): heads are split until each thread has 4 items (a row's
  // bits do not depend on hg).
  int64_t hg = Hkv;
  if (n_parts < int64_t(max_threads()))
    while (hg % 2 == 0 && n_parts * (Hkv / hg) < 4 * int64_t(max_threads())) hg /= 2;
  const int64_t groups = Hkv / hg;
  parallel_for(n_parts * groups, 1, [&](int64_t item_begin, int64_t item_end) {
    internal::FtzDazScope ftz_daz;
    thread_local std::vector<float> qp, sc, acc, invs, maxs, qs;
    thread_local std::vector<int16_t> qi;  // i8: Q rows as int16 codes, scales in qs
    for (int64_t item = item_begin; item < item_end; ++item) {
      const int64_t part_index = item / groups;
      const Part& part = parts[size_t(part_index)];
      const int64_t b = part.b, h0 = (item % groups) * hg, lo = part.lo, hi = part.hi;
      const int64_t n = hi - lo, rows = hg * G, ld = n + 16;  // query heads of the item; score row length
      float* o0 = out + (b * Hq + h0 * G) * Dh;               // the item's query heads are adjacent in the output
      if (n == 0) {  // no visible key: zeros (never a split part: parts are not empty)
        std::fill(o0, o0 + rows * Dh, 0.f);
        continue;
      }
      if (int64_t(sc.size()) < rows * ld) sc.resize(size_t(rows * ld));
      if (int64_t(qp.size()) < rows * chunks * 32) qp.resize(size_t(rows * chunks * 32));
      if (int64_t(acc.size()) < rows * chunks * 32) acc.resize(size_t(rows * chunks * 32));
      // Q rows (f32, or bf16 widened) as [chunk][even 16, odd 16], zeros past Dh; row i = query
      // head h0 * G + i, so a pair of heads (g0, g0 + 1) of one kv head is two adjacent rows.
      const __m512i even_idx = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
      const __m512i odd_idx = _mm512_add_epi32(even_idx, _mm512_set1_epi32(1));
      for (int64_t i = 0; i < rows; ++i) {
        const int64_t qoff = (b * Hq + h0 * G + i) * Dh;
        float* dst = qp.data() + i * chunks * 32;
        for (int64_t c = 0; c < chunks; ++c) {
          const __mmask16 m1 = Dh - 32 * c > 16 ? __mmask16(0xffff) : __mmask16(0);  // columns 16-31 present
          __m512 x0, x1;
          if (d.q_type == DType::kF32) {
            const float* qf = static_cast<const float*>(q) + qoff + 32 * c;
            x0 = _mm512_loadu_ps(qf);
            x1 = _mm512_maskz_loadu_ps(m1, qf + 16);
          } else if (dot) {  // the 32 bf16 as they are
            const uint16_t* qb = static_cast<const uint16_t*>(q) + qoff + 32 * c;
            _mm512_storeu_si512(dst + c * 32, _mm512_maskz_loadu_epi16(chunk_mask(Dh - 32 * c), qb));
            continue;
          } else {
            const uint16_t* qb = static_cast<const uint16_t*>(q) + qoff + 32 * c;
            x0 = _mm512_castsi512_ps(
                _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)qb)), 16));
            x1 = _mm512_castsi512_ps(
                _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m1, qb + 16)), 16));
          }
          if constexpr (kI8) {  // in order: quantized below
            _mm512_storeu_ps(dst + c * 32, x0);
            _mm512_storeu_ps(dst + c * 32 + 16, x1);
          } else {
            _mm512_storeu_ps(dst + c * 32, _mm512_permutex2var_ps(x0, even_idx, x1));
            _mm512_storeu_ps(dst + c * 32 + 16, _mm512_permutex2var_ps(x0, odd_idx, x1));
          }
        }
      }
      if constexpr (kI8) {
        if (int64_t(qi.size()) < rows * chunks * 32) qi.resize(size_t(rows * chunks * 32));
        if (int64_t(qs.size()) < rows) qs.resize(size_t(rows));
        for (int64_t i = 0; i < rows; ++i)  // zeros past Dh stay zero codes
          qs[size_t(i)] = quantize_int16(qp.data() + i * chunks * 32, chunks * 32, int16_query_max(Dh),
                                         qi.data() + i * chunks * 32);
      }
      const E* kb = k16 + (slot[b] * S * Hkv + h0) * Dh;  // row j of head h0 + l at kb + j * stride + l * Dh
      const E* vb = v16 + (slot[b] * S * Hkv + h0) * Dh;
      // i8: the scale of row j, head h0 + l at ksb[j * Hkv + l] (null for bf16).
      const float* ksb = d.k_scale ? d.k_scale + slot[b] * S * Hkv + h0 : nullptr;
      const float* vsb = d.v_scale ? d.v_scale + slot[b] * S * Hkv + h0 : nullptr;
      const int64_t span = hg * Dh;
      // Scores, 16 keys at a time for every head of the item (score row i at sc + i * ld, key j at
      // j - lo). The first kAhead rows are prefetched at once, then the cursor keeps kAhead rows
      // ahead of the reads (driven by the first pair of query heads of each kv head), running on
      // into the first V rows of the P.V pass.
      const int64_t kAhead = kKAheadRows * 2 / int64_t(sizeof(E)), vAhead = kVAheadRows * 2 / int64_t(sizeof(E));
      AddressOrderPrefetch<E> pf(kb, vb, stride, span, lo, hi);
      pf.run_to(lo + kAhead);
      with_chunk_count(Dh, [&]<int C>() {
        for (int64_t j = lo; j < hi; j += 16) {
          for (int64_t l = 0; l < hg; ++l) {
            const float* ksl = ksb ? ksb + l : nullptr;
            for (int64_t g0 = 0; g0 < G; g0 += 2) {
              const int64_t i = l * G + g0;
              const float* qr = qp.data() + i * chunks * 32;
              float* s0 = sc.data() + i * ld + (j - lo);
              auto score = [&]<int R>(int64_t jj, float* a, float* b) {
                if constexpr (kI8)
                  score_keys_i8<R, C>(qi.data() + i * chunks * 32, qs.data() + i, kb + l * Dh, stride, jj, hi, Dh, a, b,
                                      ksl, Hkv, g0 == 0 ? &pf : nullptr);
                else if (dot)
                  score_keys<R, true, C>(qr, kb + l * Dh, stride, jj, hi, Dh, a, b, g0 == 0 ? &pf : nullptr);
                else
                  score_keys<R, false, C>(qr, kb + l * Dh, stride, jj, hi, Dh, a, b, g0 == 0 ? &pf : nullptr);
              };
              if (G - g0 >= 2) {
                score.template operator()<2>(j, s0, s0 + ld);
                if (j + 8 < hi) score.template operator()<2>(j + 8, s0 + 8, s0 + ld + 8);
              } else {
                score.template operator()<1>(j, s0, nullptr);
              }
            }
          }
        }
      });
      if (int64_t(invs.size()) < rows) invs.resize(size_t(rows));
      if (int64_t(maxs.size()) < rows) maxs.resize(size_t(rows));
      for (int64_t i = 0; i < rows; ++i) {
        float* sr = sc.data() + i * ld;
        const __m512 scale = _mm512_set1_ps(d.scale);
        for (int64_t x = 0; x < n; x += 16) {
          const __mmask16 m = n - x >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - x)) - 1);
          _mm512_mask_storeu_ps(sr + x, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, sr + x), scale));
        }
        if (d.logit_softcap > 0.f)
          for (int64_t x = 0; x < n; ++x) sr[x] = d.logit_softcap * std::tanh(sr[x] / d.logit_softcap);
        if (bias)
          for (int64_t x = 0; x < n; ++x) sr[x] += bias[b * S + lo + x];
        const float l = softmax_in_place(sr, n, &maxs[size_t(i)]);  // all -inf: zero weights, zero output
        if (l == 0.f) std::fill(sr, sr + n, 0.f);
        invs[size_t(i)] = part.split ? l : (l > 0.f ? 1.f / l : 0.f);  // a part keeps its sum
        if (vsb) {  // i8: fold each V row's scale into its weight (after the sum, which it must not change)
          const float* vs = vsb + i / G;
          for (int64_t x = 0; x < n; ++x) sr[x] *= vs[(lo + x) * Hkv];
        }
      }
      // P.V in chunks of kVChunk keys, every head of the item per chunk. The V rows between the
      // score pass's cursor and vAhead keys on are prefetched at once; the cursor goes on from there.
      pf.run_to(hi + vAhead);
      for (int64_t j0 = lo; j0 < hi; j0 += kVChunk) {
        const int64_t j1 = std::min(hi, j0 + kVChunk);
        for (int64_t l = 0; l < hg; ++l) {
          for (int64_t g0 = 0; g0 < G; g0 += 2) {
            const int64_t i = l * G + g0;
            // p_r[j - j0] = weight of key j (score row i + r).
            const float* p[2] = {sc.data() + i * ld + (j0 - lo), sc.data() + (i + 1) * ld + (j0 - lo)};
            float* a[2] = {acc.data() + i * chunks * 32, acc.data() + (i + 1) * chunks * 32};
            const bool first = j0 == lo;
            AddressOrderPrefetch<E>* ahead = g0 == 0 ? &pf : nullptr;  // the first pair of query heads prefetches
            if constexpr (kI8) {
              // The chunk's weights of each row as int16 codes (zeros past j1).
              alignas(64) int16_t codes[2][kVChunk];
              float ws[2];
              const int16_t* wq[2] = {codes[0], codes[1]};
              const int nr = G - g0 >= 2 ? 2 : 1;
              for (int r = 0; r < nr; ++r) {
                std::fill(codes[r], codes[r] + kVChunk, int16_t(0));
                ws[r] = quantize_int16(p[r], j1 - j0, 32767, codes[r]);
              }
              for_column_blocks(Dh, [&]<int NC>(int64_t c0, int64_t w) {
                if (nr == 2)
                  weighted_part_i8<2, NC>(wq, ws, vb + l * Dh, stride, j0, j1, c0, w, a, first, ahead);
                else
                  weighted_part_i8<1, NC>(wq, ws, vb + l * Dh, stride, j0, j1, c0, w, a, first, ahead);
              });
            } else {
              for_column_blocks(Dh, [&]<int NC>(int64_t c0, int64_t w) {
                if (G - g0 >= 2)
                  weighted_part<2, NC>(p, vb + l * Dh, stride, j0, j1, c0, w, a, first, ahead);
                else
                  weighted_part<1, NC>(p, vb + l * Dh, stride, j0, j1, c0, w, a, first, ahead);
              });
            }
          }
        }
      }
      if (!part.split) {
        for (int64_t i = 0; i < rows; ++i)
          finish_row(acc.data() + i * acc_len, Dh, invs[size_t(i)], o0 + i * Dh, order);
        continue;
      }
      for (int64_t i = 0; i < rows; ++i) {
        float* rec = partial.data() + (part_index * Hq + h0 * G + i) * rec_len;
        rec[0] = maxs[size_t(i)];
        rec[1] = invs[size_t(i)];
        std::memcpy(rec + 2, acc.data() + i * acc_len, size_t(acc_len) * sizeof(float));
      }
    }
  });
  if (splits.empty()) return;
  // Merge: per split row and query head, weights e^(m_p - M) over the parts in order.
  parallel_for(int64_t(splits.size()) * Hq, 1, [&](int64_t begin, int64_t end) {
    internal::FtzDazScope ftz_daz;
    thread_local std::vector<float> merged;
    if (int64_t(merged.size()) < acc_len) merged.resize(size_t(acc_len));
    for (int64_t r = begin; r < end; ++r) {
      const SplitRow& row = splits[size_t(r / Hq)];
      const int64_t h = r % Hq, np = row.count;
      auto rec = [&](int64_t p) { return partial.data() + ((row.first + p) * Hq + h) * rec_len; };
      float mx = -std::numeric_limits<float>::infinity();
      for (int64_t p = 0; p < np; ++p) mx = std::max(mx, rec(p)[0]);
      float* o = out + (row.b * Hq + h) * Dh;
      if (mx == -std::numeric_limits<float>::infinity()) {  // every score -inf: zeros, as unsplit
        std::fill(o, o + Dh, 0.f);
        continue;
      }
      float l = 0.f;
      std::fill(merged.begin(), merged.begin() + acc_len, 0.f);
      for (int64_t p = 0; p < np; ++p) {
        const float* x = rec(p);
        if (x[0] == -std::numeric_limits<float>::infinity()) continue;  // no weight in this part
        const float w = std::exp(x[0] - mx);
        l += w * x[1];
        const __m512 wv = _mm512_set1_ps(w);
        for (int64_t c = 0; c < acc_len; c += 16)
          _mm512_storeu_ps(merged.data() + c,
                           _mm512_fmadd_ps(wv, _mm512_loadu_ps(x + 2 + c), _mm512_loadu_ps(merged.data() + c)));
      }
      finish_row(merged.data(), Dh, l > 0.f ? 1.f / l : 0.f, o, order);
    }
  });
}

}  // namespace

void run(const AttentionDesc& d, const void* q, const void* k_cache, const void* v_cache, const int32_t* slot,
         const int32_t* q_pos, const int32_t* kv_len, const float* bias, float* out) {
  if (d.kv_type == DType::kI8)
    run_impl<int8_t>(d, q, k_cache, v_cache, slot, q_pos, kv_len, bias, out);
  else
    run_impl<uint16_t>(d, q, k_cache, v_cache, slot, q_pos, kv_len, bias, out);
}

}  // namespace hlx::kernels::attention_decode
