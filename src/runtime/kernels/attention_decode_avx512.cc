// hlx.attention for one query token per row (decode) over a bf16 cache, with AVX512-BF16 dot
// products. attention.cc calls it when q_len == 1, the cache is bf16, head_dim % 32 == 0 and the
// CPU has AVX512-BF16; other decode shapes keep attention_impl.h.
//
// Why a separate kernel: decode reads each K/V row of a kv head for only Hq/Hkv query rows, so
// attention_impl.h (f32 FMAs on K/V rows widened from bf16, one pass per query row, online
// softmax) spent ~5x the memory time on widening and reductions (bench/attention_bench.cc).
// Here a work item is (batch row, kv head); its query heads are taken two at a time and share
// every K/V register load:
//   scores: per key, the K row's 32-element chunks meet Q as hi + lo bf16 (Q = hi + lo carries ~16
//           significant bits, as in attention_prefill_avx512.cc) in vdpbf16ps, one accumulator per
//           (row, key); 16 accumulators are then summed by one transposing reduction;
//   softmax: two passes (all scores of the row are kept), so there is no running-max rescaling:
//           exact max, weights P = e^(s - max) rounded to bf16, sum of the rounded weights in f32;
//   P.V:     key pairs (j, j+1) of V interleaved with vpunpck{l,h}wd meet the (p_j, p_j+1) dword in
//           vdpbf16ps; the accumulators hold the columns in the unpack order and are put back in
//           order once at the end.
// Numerics are those of the prefill bf16 kernel (Q to 2^-16, P to 2^-9, f32 statistics); sums run
// in a different order. A row's bits depend only on its own query, visible key range and K/V rows:
// each score is one accumulator reduced by the same tree whatever its position among the 16, the
// pairing of query heads never mixes rows, and key pairs start at the row's first visible key.
// So batch, slot, thread count and work split never change a row.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "runtime/kernels/attention.h"
#include "runtime/kernels/exp_nonpos16_avx512.h"
#include "runtime/kernels/internal.h"
#include "runtime/kernels/parallel.h"

namespace hlx::kernels::attention_decode {
namespace {

using internal::exp_nonpos16;

inline __m512bh as_bh(__m512i v) { return (__m512bh)v; }

// acc + dot(a, broadcast *p) with vdpbf16ps's embedded broadcast (GCC emits a separate
// vpbroadcastd for _mm512_set1_epi32 of a load).
inline __m512 dp_bcast(__m512 acc, __m512i a, const uint32_t* p) {
  __asm__("vdpbf16ps %1%{1to16%}, %2, %0" : "+v"(acc) : "m"(*p), "v"(a));
  return acc;
}

// The 16 horizontal sums of v[0..15], in order, in one vector: each level adds the two halves of
// every partial vector, so every output goes through the same tree (lane k + lane k + 8, then
// k + 4, k + 2, k + 1) whatever its index.
inline __m512 hsum16(const __m512* v) {
  __m512 x[8], y[4], z[2];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i)  // [v_i lanes 0-7 + 8-15 | v_{i+8} lanes 0-7 + 8-15]
    x[i] = _mm512_add_ps(_mm512_shuffle_f32x4(v[i], v[i + 8], 0x44), _mm512_shuffle_f32x4(v[i], v[i + 8], 0xEE));
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i)  // 128-bit lanes: v_i, v_{i+8}, v_{i+4}, v_{i+12}
    y[i] = _mm512_add_ps(_mm512_shuffle_f32x4(x[i], x[i + 4], 0x88), _mm512_shuffle_f32x4(x[i], x[i + 4], 0xDD));
#pragma GCC unroll 2
  for (int i = 0; i < 2; ++i) {
    const __m512d a = _mm512_castps_pd(y[i]), b = _mm512_castps_pd(y[i + 2]);
    z[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)), _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
  }
  // Lanes: v0 v2 v1 v3 | v8 v10 v9 v11 | v4 v6 v5 v7 | v12 v14 v13 v15.
  const __m512 w = _mm512_add_ps(_mm512_shuffle_ps(z[0], z[1], 0x88), _mm512_shuffle_ps(z[0], z[1], 0xDD));
  return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 2, 1, 3, 8, 10, 9, 11, 4, 6, 5, 7, 12, 14, 13, 15), w);
}

inline void prefetch_row(const uint16_t* p, int64_t Dh) {
  for (int64_t c = 0; c < Dh; c += 32) _mm_prefetch(reinterpret_cast<const char*>(p + c), _MM_HINT_T0);
}

constexpr int64_t kAhead = 16;  // keys prefetched ahead: rows of one kv head are Hkv * Dh apart

// Scores of R query rows (R = 1 or 2) against keys [lo, hi): s[r][j - lo] = dot(q_r, k_j) with
// q_r = hi + lo as [Dh / 32][hi zmm, lo zmm] (qp + r * Dh * 2 bf16). 16 / R keys per step, one
// accumulator per (row, key); keys past hi re-read row hi - 1 and are dropped.
template <int R>
void scores(const uint16_t* qp, const uint16_t* k, int64_t stride, int64_t lo, int64_t hi, int64_t Dh, float* s0,
            float* s1) {
  constexpr int kK = 16 / R;
  const int64_t chunks = Dh / 32;
  for (int64_t j = lo; j < hi; j += kK) {
    const uint16_t* kp[kK];
#pragma GCC unroll 16
    for (int t = 0; t < kK; ++t) kp[t] = k + std::min(j + t, hi - 1) * stride;
    for (int t = 0; t < kK; ++t)
      if (j + kAhead + t < hi) prefetch_row(k + (j + kAhead + t) * stride, Dh);
    __m512 acc[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) acc[i] = _mm512_setzero_ps();
    for (int64_t c = 0; c < chunks; ++c) {
      __m512bh qh[R], ql[R];
#pragma GCC unroll 2
      for (int r = 0; r < R; ++r) {
        qh[r] = as_bh(_mm512_loadu_si512(qp + (r * chunks + c) * 64));
        ql[r] = as_bh(_mm512_loadu_si512(qp + (r * chunks + c) * 64 + 32));
      }
#pragma GCC unroll 16
      for (int t = 0; t < kK; ++t) {
        const __m512bh kv = as_bh(_mm512_loadu_si512(kp[t] + c * 32));
#pragma GCC unroll 2
        for (int r = 0; r < R; ++r)
          acc[r * kK + t] = _mm512_dpbf16_ps(_mm512_dpbf16_ps(acc[r * kK + t], qh[r], kv), ql[r], kv);
      }
    }
    alignas(64) float sums[16];
    _mm512_store_ps(sums, hsum16(acc));
    const int n = int(std::min<int64_t>(kK, hi - j));
    for (int t = 0; t < n; ++t) {
      s0[j - lo + t] = sums[t];
      if (R == 2) s1[j - lo + t] = sums[kK + t];
    }
  }
}

// acc(R rows) over keys [lo, hi) for columns [c0, c0 + 32 NC): sum_j p_j v_j, with pw[r] the row's
// weights as bf16 pairs (p_{lo+2i}, p_{lo+2i+1}) per dword, then out = acc * inv, columns in order.
template <int R, int NC>
void weighted_sum(const uint32_t* const* pw, const uint16_t* v, int64_t stride, int64_t lo, int64_t hi, int64_t c0,
                  int64_t Dh, const float* inv, float* const* out) {
  __m512 acc[R][2 * NC];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int i = 0; i < 2 * NC; ++i) acc[r][i] = _mm512_setzero_ps();
  for (int64_t j = lo; j < hi; j += 2) {
    const uint16_t* v0 = v + j * stride + c0;
    const bool pair = j + 1 < hi;
    const uint16_t* v1 = v0 + stride;
    if (j + kAhead < hi) prefetch_row(v + (j + kAhead) * stride + c0, 32 * NC);
    if (j + kAhead + 1 < hi) prefetch_row(v + (j + kAhead + 1) * stride + c0, 32 * NC);
    const int64_t i = (j - lo) / 2;
#pragma GCC unroll 4
    for (int c = 0; c < NC; ++c) {
      const __m512i a = _mm512_loadu_si512(v0 + 32 * c);
      // The last key of an odd range pairs with zeros (its partner weight is 0 too).
      const __m512i b = pair ? _mm512_loadu_si512(v1 + 32 * c) : _mm512_setzero_si512();
      const __m512i lo16 = _mm512_unpacklo_epi16(a, b), hi16 = _mm512_unpackhi_epi16(a, b);
#pragma GCC unroll 2
      for (int r = 0; r < R; ++r) {
        acc[r][2 * c] = dp_bcast(acc[r][2 * c], lo16, pw[r] + i);
        acc[r][2 * c + 1] = dp_bcast(acc[r][2 * c + 1], hi16, pw[r] + i);
      }
    }
  }
  // unpacklo holds columns 0-3, 8-11, 16-19, 24-27 of a chunk, unpackhi 4-7, 12-15, ...
  const __m512i first = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23);
  const __m512i second = _mm512_setr_epi32(8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31);
#pragma GCC unroll 2
  for (int r = 0; r < R; ++r) {
    const __m512 sc = _mm512_set1_ps(inv[r]);
#pragma GCC unroll 4
    for (int c = 0; c < NC; ++c) {
      float* o = out[r] + c0 + 32 * c;
      _mm512_storeu_ps(o, _mm512_mul_ps(_mm512_permutex2var_ps(acc[r][2 * c], first, acc[r][2 * c + 1]), sc));
      _mm512_storeu_ps(o + 16, _mm512_mul_ps(_mm512_permutex2var_ps(acc[r][2 * c], second, acc[r][2 * c + 1]), sc));
    }
  }
  (void)Dh;
}

template <int R>
void weighted_sum_all(const uint32_t* const* pw, const uint16_t* v, int64_t stride, int64_t lo, int64_t hi,
                      int64_t Dh, const float* inv, float* const* out) {
  for (int64_t c0 = 0; c0 < Dh; c0 += 128) {
    switch ((std::min<int64_t>(128, Dh - c0)) / 32) {
      case 1: weighted_sum<R, 1>(pw, v, stride, lo, hi, c0, Dh, inv, out); break;
      case 2: weighted_sum<R, 2>(pw, v, stride, lo, hi, c0, Dh, inv, out); break;
      case 3: weighted_sum<R, 3>(pw, v, stride, lo, hi, c0, Dh, inv, out); break;
      default: weighted_sum<R, 4>(pw, v, stride, lo, hi, c0, Dh, inv, out); break;
    }
  }
}

// Softmax of one row's scores s[0, n) in place of bf16 weights p (n rounded up to even, the pad
// weight 0); returns the sum of the rounded weights, or 0 when every score is -inf.
float softmax_bf16(float* s, int64_t n, uint16_t* p) {
  const __m512 ninf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  __m512 mx = ninf;
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - i)) - 1);
    mx = _mm512_max_ps(mx, _mm512_mask_loadu_ps(ninf, m, s + i));
  }
  const float smax = _mm512_reduce_max_ps(mx);
  if (smax == -std::numeric_limits<float>::infinity()) return 0.f;
  const __m512 mv = _mm512_set1_ps(smax);
  __m512 sum = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - i)) - 1);
    const __m512 sv = _mm512_mask_loadu_ps(ninf, m, s + i);
    const __mmask16 vis = _mm512_cmp_ps_mask(sv, ninf, _CMP_NEQ_OQ);
    const __m512 e = _mm512_maskz_mov_ps(vis, exp_nonpos16(_mm512_sub_ps(sv, mv)));
    const __m256i pb = (__m256i)_mm512_cvtneps_pbh(e);
    _mm256_mask_storeu_epi16(p + i, m, pb);
    sum = _mm512_add_ps(sum, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(pb), 16)));
  }
  if (n % 2) p[n] = 0;
  return _mm512_reduce_add_ps(sum);
}

}  // namespace

void run(const AttentionDesc& d, const void* q, const void* k_cache, const void* v_cache, const int32_t* slot,
         const int32_t* q_pos, const int32_t* kv_len, const float* bias, float* out) {
  const int64_t Hq = d.q_heads, Hkv = d.kv_heads, Dh = d.head_dim, S = d.capacity, G = Hq / Hkv;
  const int64_t stride = Hkv * Dh;  // elements between consecutive cache rows of one kv head
  const uint16_t* k16 = static_cast<const uint16_t*>(k_cache);
  const uint16_t* v16 = static_cast<const uint16_t*>(v_cache);
  parallel_for(d.batch * Hkv, 1, [&](int64_t item_begin, int64_t item_end) {
    internal::FtzDazScope ftz_daz;
    thread_local std::vector<uint16_t> qp, pb;
    thread_local std::vector<float> sc;
    for (int64_t item = item_begin; item < item_end; ++item) {
      const int64_t b = item / Hkv, kvh = item % Hkv;
      const int64_t len = kv_len[b], pos = q_pos[b];
      int64_t hi = len, lo = 0;
      if (d.causal) hi = std::min<int64_t>(hi, std::max<int64_t>(pos + 1, 0));
      if (d.sliding_window > 0) lo = std::max<int64_t>(0, pos - d.sliding_window + 1);
      hi = std::max(hi, lo);
      const int64_t n = hi - lo, n_pad = (n + 1) / 2 * 2;
      if (int64_t(sc.size()) < 2 * n_pad + 32) sc.resize(size_t(2 * n_pad + 32));
      if (int64_t(pb.size()) < 2 * n_pad + 32) pb.resize(size_t(2 * n_pad + 32));
      if (int64_t(qp.size()) < 4 * Dh) qp.resize(size_t(4 * Dh));
      const uint16_t* kb = k16 + (slot[b] * S * Hkv + kvh) * Dh;
      const uint16_t* vb = v16 + (slot[b] * S * Hkv + kvh) * Dh;
      for (int64_t g0 = 0; g0 < G; g0 += 2) {
        const int R = G - g0 >= 2 ? 2 : 1;
        float* o[2];
        for (int r = 0; r < R; ++r) o[r] = out + (b * Hq + kvh * G + g0 + r) * Dh;
        if (n == 0) {  // no visible key: zeros
          for (int r = 0; r < R; ++r) std::fill(o[r], o[r] + Dh, 0.f);
          continue;
        }
        // Q rows as [chunk][hi 32 bf16, lo 32 bf16]: hi = bf16(x), lo = bf16(x - hi) (exact difference).
        for (int r = 0; r < R; ++r) {
          const int64_t qoff = (b * Hq + kvh * G + g0 + r) * Dh;
          for (int64_t c = 0; c < Dh / 32; ++c) {
            __m512 x0, x1;
            if (d.q_type == DType::kF32) {
              x0 = _mm512_loadu_ps(static_cast<const float*>(q) + qoff + 32 * c);
              x1 = _mm512_loadu_ps(static_cast<const float*>(q) + qoff + 32 * c + 16);
            } else {
              const uint16_t* qb = static_cast<const uint16_t*>(q) + qoff + 32 * c;
              x0 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)qb)), 16));
              x1 = _mm512_castsi512_ps(
                  _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)(qb + 16))), 16));
            }
            const __m512i h = (__m512i)_mm512_cvtne2ps_pbh(x1, x0);
            const __m512 h0 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(h)), 16));
            const __m512 h1 =
                _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(h, 1)), 16));
            uint16_t* dst = qp.data() + (r * (Dh / 32) + c) * 64;
            _mm512_storeu_si512(dst, h);
            _mm512_storeu_si512(dst + 32, (__m512i)_mm512_cvtne2ps_pbh(_mm512_sub_ps(x1, h1), _mm512_sub_ps(x0, h0)));
          }
        }
        float* s[2] = {sc.data(), sc.data() + n_pad + 16};
        if (R == 2)
          scores<2>(qp.data(), kb, stride, lo, hi, Dh, s[0], s[1]);
        else
          scores<1>(qp.data(), kb, stride, lo, hi, Dh, s[0], nullptr);
        float inv[2] = {0.f, 0.f};
        const uint32_t* pw[2];
        for (int r = 0; r < R; ++r) {
          float* sr = s[r];
          const __m512 scale = _mm512_set1_ps(d.scale);
          for (int64_t i = 0; i < n; i += 16) {
            const __mmask16 m = n - i >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - i)) - 1);
            _mm512_mask_storeu_ps(sr + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, sr + i), scale));
          }
          if (d.logit_softcap > 0.f)
            for (int64_t i = 0; i < n; ++i) sr[i] = d.logit_softcap * std::tanh(sr[i] / d.logit_softcap);
          if (bias)
            for (int64_t i = 0; i < n; ++i) sr[i] += bias[b * S + lo + i];
          uint16_t* pr = pb.data() + r * (n_pad + 16);
          const float l = softmax_bf16(sr, n, pr);
          if (l == 0.f) std::fill(pr, pr + n_pad, uint16_t(0));  // all -inf: zero weights, zero output
          inv[r] = l > 0.f ? 1.f / l : 0.f;
          pw[r] = reinterpret_cast<const uint32_t*>(pr);
        }
        if (R == 2)
          weighted_sum_all<2>(pw, vb, stride, lo, hi, Dh, inv, o);
        else
          weighted_sum_all<1>(pw, vb, stride, lo, hi, Dh, inv, o);
      }
    }
  });
}

}  // namespace hlx::kernels::attention_decode
