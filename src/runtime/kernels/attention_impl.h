// Body of the hlx.attention kernel, included by attention.cc (baseline ISA) and by
// attention_avx512.cc (compiled for AVX-512), each inside its own namespace, so the same
// vectorisable loops are built twice and picked at run time. Arguments are validated by the caller.
//
// Work item = (row b, kv head, tile of query tokens): all Hq/Hkv query heads of a kv head share
// each key/value block, converted once to f32; q·k and p·v vectorise over head_dim. (A first
// version transposed each K block so q·k vectorised over keys without horizontal sums; the
// scalar transpose made decode 5x slower, as decode has only Hq/Hkv query rows per block.) Online softmax over key
// blocks of kKeyBlock; only blocks that hold a visible key are touched, so the cost follows kv_len (and the
// causal/window bounds), never the capacity S.
#pragma once

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "runtime/kernels/attention.h"
#include "runtime/kernels/exp_nonpos16_avx512.h"
#include "runtime/kernels/internal.h"
#include "runtime/kernels/parallel.h"

namespace HLX_ATTENTION_NS {

using ::hlx::bf16;
using ::hlx::DType;
using ::hlx::kernels::AttentionDesc;

constexpr int64_t kKeyBlock = 32;    // K and V blocks (16 KiB each as f32 at Dh 128) stay in L1 across rows
constexpr int64_t kQueryRows = 128;  // query rows (heads x tokens) per work item

// exp(x) for x <= 0 (scores minus their running max), Cephes-style: 2^n * p(r) with a degree-6
// polynomial on |r| <= ln2/2; relative error ~2 ulp; branch-free so loops over it vectorise.
inline float exp_nonpos(float x) {
  x = x < -87.0f ? -87.0f : x;
  const float n = std::nearbyint(x * 1.44269504088896341f);
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int32_t e = int32_t(n) + 127;
  return p * ::hlx::f32_from_bits(uint32_t(e) << 23);
}

// q·k over head_dim. GCC turns an `omp simd reduction` into 16 dependent scalar adds through the
// stack; with two query rows per key block at decode that chain dominated (perf: ~65% of decode
// time), so the horizontal sum is a log-depth tree here.
inline float dot(const float* a, const float* b, int64_t n) {
#if defined(__AVX512F__)
  __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
    s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), s1);
  }
  for (; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - i)) - 1);
    s0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), s0);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
#else
  float part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l) part[l] += a[i + l] * b[i + l];
  for (; i < n; ++i) part[0] += a[i] * b[i];
  return ((part[0] + part[4]) + (part[1] + part[5])) + ((part[2] + part[6]) + (part[3] + part[7]));
#endif
}

#if defined(__AVX512F__)
// 128 columns of pv_accumulate with the eight accumulators as named locals: written as an array
// indexed in a loop, GCC kept them on the stack and stored all eight after every key (perf on
// prefill 512: the spills were the hottest instructions of the kernel).
template <class RowLoad>
inline void pv_block128(float* acc, __m512 al, const float* p, int64_t a, int64_t e, RowLoad row) {
  __m512 r0 = _mm512_mul_ps(_mm512_loadu_ps(acc), al), r1 = _mm512_mul_ps(_mm512_loadu_ps(acc + 16), al);
  __m512 r2 = _mm512_mul_ps(_mm512_loadu_ps(acc + 32), al), r3 = _mm512_mul_ps(_mm512_loadu_ps(acc + 48), al);
  __m512 r4 = _mm512_mul_ps(_mm512_loadu_ps(acc + 64), al), r5 = _mm512_mul_ps(_mm512_loadu_ps(acc + 80), al);
  __m512 r6 = _mm512_mul_ps(_mm512_loadu_ps(acc + 96), al), r7 = _mm512_mul_ps(_mm512_loadu_ps(acc + 112), al);
  for (int64_t jj = a; jj < e; ++jj) {
    const __m512 pb = _mm512_set1_ps(p[jj]);
    r0 = _mm512_fmadd_ps(pb, row(jj, 0), r0);
    r1 = _mm512_fmadd_ps(pb, row(jj, 16), r1);
    r2 = _mm512_fmadd_ps(pb, row(jj, 32), r2);
    r3 = _mm512_fmadd_ps(pb, row(jj, 48), r3);
    r4 = _mm512_fmadd_ps(pb, row(jj, 64), r4);
    r5 = _mm512_fmadd_ps(pb, row(jj, 80), r5);
    r6 = _mm512_fmadd_ps(pb, row(jj, 96), r6);
    r7 = _mm512_fmadd_ps(pb, row(jj, 112), r7);
  }
  _mm512_storeu_ps(acc, r0);
  _mm512_storeu_ps(acc + 16, r1);
  _mm512_storeu_ps(acc + 32, r2);
  _mm512_storeu_ps(acc + 48, r3);
  _mm512_storeu_ps(acc + 64, r4);
  _mm512_storeu_ps(acc + 80, r5);
  _mm512_storeu_ps(acc + 96, r6);
  _mm512_storeu_ps(acc + 112, r7);
}

// Scores of one query row against 16 key rows (k + j * kstride, j < 16), Dh a multiple of 16:
// 16 independent FMA chains, then one transposing reduction of the 16 partial-sum vectors into a
// vector of 16 sums (about one shuffle/add per score instead of a full horizontal sum each).
// K rows are f32, or bf16 (K16 = uint16_t) read in place.
template <class K>
inline void dot16(const float* q, const K* k, int64_t kstride, int64_t Dh, float* out) {
  __m512 v[16];
#pragma GCC unroll 16
  for (int j = 0; j < 16; ++j) v[j] = _mm512_setzero_ps();
  for (int64_t d = 0; d < Dh; d += 16) {
    const __m512 qd = _mm512_loadu_ps(q + d);
#pragma GCC unroll 16
    for (int j = 0; j < 16; ++j) {
      __m512 kv;
      if constexpr (sizeof(K) == 2)
        kv = _mm512_castsi512_ps(_mm512_slli_epi32(
            _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(k + j * kstride + d))), 16));
      else
        kv = _mm512_loadu_ps(k + j * kstride + d);
      v[j] = _mm512_fmadd_ps(qd, kv, v[j]);
    }
  }
  __m512 x[8], y[4], z[2];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i)  // 256-bit halves: [v_i | v_{i+8}]
    x[i] = _mm512_add_ps(_mm512_shuffle_f32x4(v[i], v[i + 8], 0x44), _mm512_shuffle_f32x4(v[i], v[i + 8], 0xEE));
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i)  // 128-bit lanes: [v_i, v_{i+8}, v_{i+4}, v_{i+12}]
    y[i] = _mm512_add_ps(_mm512_shuffle_f32x4(x[i], x[i + 4], 0x88), _mm512_shuffle_f32x4(x[i], x[i + 4], 0xDD));
#pragma GCC unroll 2
  for (int i = 0; i < 2; ++i) {  // 64-bit pairs
    const __m512d a = _mm512_castps_pd(y[i]), b = _mm512_castps_pd(y[i + 2]);
    z[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)), _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
  }
  // Lanes now hold the sums of v0 v2 v1 v3 | v8 v10 v9 v11 | v4 v6 v5 v7 | v12 v14 v13 v15.
  const __m512 w = _mm512_add_ps(_mm512_shuffle_ps(z[0], z[1], 0x88), _mm512_shuffle_ps(z[0], z[1], 0xDD));
  const __m512i order = _mm512_setr_epi32(0, 2, 1, 3, 8, 10, 9, 11, 4, 6, 5, 7, 12, 14, 13, 15);
  _mm512_storeu_ps(out, _mm512_permutexvar_ps(order, w));
}

// exp_nonpos on 16 lanes (exp_nonpos16_avx512.h: the same polynomial and range reduction).
using internal::exp_nonpos16;
#endif

// acc[0, Dh) = acc * alpha + sum_{jj in [a, e)} p[jj] * v[jj, :]. With AVX-512 the accumulator
// stays in registers for the whole key block (8 zmm per 128 columns) instead of a load/FMA/store
// per key and column chunk.
inline void pv_accumulate(float* acc, float alpha, const float* p, const float* v, int64_t a, int64_t e, int64_t Dh) {
#if defined(__AVX512F__)
  const __m512 al = _mm512_set1_ps(alpha);
  for (int64_t c0 = 0; c0 < Dh; c0 += 128) {
    const int64_t w = Dh - c0 < 128 ? Dh - c0 : 128;
    const int nq = int((w + 15) / 16);
    __mmask16 m[8];
    __m512 r[8];
    for (int q = 0; q < 8; ++q) {
      const int64_t left = w - q * 16;
      m[q] = left >= 16 ? __mmask16(0xffff) : left <= 0 ? __mmask16(0) : __mmask16((1u << left) - 1);
      r[q] = _mm512_mul_ps(_mm512_maskz_loadu_ps(m[q], acc + c0 + q * 16), al);
    }
    if (nq == 8) {
      pv_block128(acc + c0, al, p, a, e, [&](int64_t jj, int q) { return _mm512_loadu_ps(v + jj * Dh + c0 + q); });
      continue;
    } else {
      for (int64_t jj = a; jj < e; ++jj) {
        const __m512 pb = _mm512_set1_ps(p[jj]);
        const float* vr = v + jj * Dh + c0;
        for (int q = 0; q < nq; ++q) r[q] = _mm512_fmadd_ps(pb, _mm512_maskz_loadu_ps(m[q], vr + q * 16), r[q]);
      }
    }
    for (int q = 0; q < nq; ++q) _mm512_mask_storeu_ps(acc + c0 + q * 16, m[q], r[q]);
  }
#else
#pragma omp simd
  for (int64_t i = 0; i < Dh; ++i) acc[i] *= alpha;
  for (int64_t jj = a; jj < e; ++jj) {
    const float pj = p[jj];
    const float* vr = v + jj * Dh;
#pragma omp simd
    for (int64_t i = 0; i < Dh; ++i) acc[i] += pj * vr[i];
  }
#endif
}

#if defined(__AVX512F__)
constexpr bool kDirectBf16 = true;
inline __m512 bf16x16(const uint16_t* p, __mmask16 m) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16));
}
inline __mmask16 tail_mask(int64_t left) {
  return left >= 16 ? __mmask16(0xffff) : left <= 0 ? __mmask16(0) : __mmask16((1u << left) - 1);
}
// q·k with k read straight from a bf16 cache row.
inline float dot_bf16(const float* a, const uint16_t* b, int64_t n) {
  __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), bf16x16(b + i, 0xffff), s0);
    s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), bf16x16(b + i + 16, 0xffff), s1);
  }
  for (; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    s0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), bf16x16(b + i, m), s0);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
}
// pv_accumulate with v rows read straight from the bf16 cache (row jj at v + jj * stride).
inline void pv_accumulate_bf16(float* acc, float alpha, const float* p, const uint16_t* v, int64_t stride, int64_t a,
                               int64_t e, int64_t Dh) {
  const __m512 al = _mm512_set1_ps(alpha);
  for (int64_t c0 = 0; c0 < Dh; c0 += 128) {
    const int64_t w = Dh - c0 < 128 ? Dh - c0 : 128;
    const int nq = int((w + 15) / 16);
    __mmask16 m[8];
    __m512 r[8];
    for (int q = 0; q < 8; ++q) {
      m[q] = tail_mask(w - q * 16);
      r[q] = _mm512_mul_ps(_mm512_maskz_loadu_ps(m[q], acc + c0 + q * 16), al);
    }
    if (nq == 8) {
      pv_block128(acc + c0, al, p, a, e, [&](int64_t jj, int q) { return bf16x16(v + jj * stride + c0 + q, 0xffff); });
      continue;
    } else {
      for (int64_t jj = a; jj < e; ++jj) {
        const __m512 pb = _mm512_set1_ps(p[jj]);
        const uint16_t* vr = v + jj * stride + c0;
        for (int q = 0; q < nq; ++q) r[q] = _mm512_fmadd_ps(pb, bf16x16(vr + q * 16, m[q]), r[q]);
      }
    }
    for (int q = 0; q < nq; ++q) _mm512_mask_storeu_ps(acc + c0 + q * 16, m[q], r[q]);
  }
}
#else
constexpr bool kDirectBf16 = false;
inline float dot_bf16(const float*, const uint16_t*, int64_t) { return 0.f; }
inline void pv_accumulate_bf16(float*, float, const float*, const uint16_t*, int64_t, int64_t, int64_t, int64_t) {}
#endif

// n elements at base + off as f32; an i8 cache row is dequantized with its scale (code * scale).
inline void load_f32(DType t, const void* base, int64_t off, int64_t n, float* dst, float scale = 1.f) {
  if (t == DType::kF32) {
    std::memcpy(dst, static_cast<const float*>(base) + off, size_t(n) * 4);
  } else if (t == DType::kI8) {
    const int8_t* s = static_cast<const int8_t*>(base) + off;
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) dst[i] = float(s[i]) * scale;
  } else {
    const uint16_t* s = static_cast<const uint16_t*>(base) + off;
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) dst[i] = ::hlx::f32_from_bits(uint32_t(s[i]) << 16);
  }
}

void run(const AttentionDesc& d, const void* q, const void* k_cache, const void* v_cache, const int32_t* slot,
         const int32_t* q_pos, const int32_t* kv_len, const float* bias, float* out) {
  const int64_t B = d.batch, T = d.q_len, Hq = d.q_heads, Hkv = d.kv_heads, Dh = d.head_dim, S = d.capacity;
  const int64_t G = Hq / Hkv;
  const int64_t t_tile = std::max<int64_t>(1, kQueryRows / G);
  const int64_t t_tiles = (T + t_tile - 1) / t_tile;
  const int64_t items = B * Hkv * t_tiles;
  const float neg_inf = -std::numeric_limits<float>::infinity();
  const float cap = d.logit_softcap;
  const int64_t W = d.sliding_window;

  // Work items are claimed dynamically by the runtime's pool (parallel.h); scratch is per thread
  // and kept across calls.
  ::hlx::kernels::parallel_for(items, 1, [&](int64_t item_begin, int64_t item_end) {
    ::hlx::kernels::internal::FtzDazScope ftz_daz;
    const int64_t max_rows = G * t_tile;
    thread_local std::vector<float> qf, acc, mrow, lrow, kb, vb, s;
    thread_local std::vector<int64_t> lo, hi;
    auto fit = [](auto& v, int64_t size) {
      if (int64_t(v.size()) < size) v.resize(static_cast<size_t>(size));
    };
    fit(qf, max_rows * Dh);
    fit(acc, max_rows * Dh);
    fit(mrow, max_rows);
    fit(lrow, max_rows);
    fit(lo, max_rows);
    fit(hi, max_rows);
    fit(kb, kKeyBlock * Dh);
    fit(vb, kKeyBlock * Dh);
    fit(s, kKeyBlock);

    for (int64_t item = item_begin; item < item_end; ++item) {
      const int64_t b = item / (Hkv * t_tiles);
      const int64_t kvh = (item / t_tiles) % Hkv;
      const int64_t t0 = (item % t_tiles) * t_tile;
      const int64_t t1 = std::min(T, t0 + t_tile);
      const int64_t rows = G * (t1 - t0);
      const int64_t sl = slot[b], len = kv_len[b];
      // Row r = (t - t0) * G + g  <->  query head kvh * G + g at token t.
      int64_t jmin = len, jmax = 0;
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t t = t0 + r / G, h = kvh * G + r % G;
        const int64_t pos = q_pos[b * T + t];
        int64_t h_end = len, l_beg = 0;
        if (d.causal) h_end = std::min<int64_t>(h_end, std::max<int64_t>(pos + 1, 0));
        if (W > 0) l_beg = std::max<int64_t>(0, pos - W + 1);
        lo[r] = l_beg;
        hi[r] = std::max(h_end, l_beg);
        if (lo[r] < hi[r]) {
          jmin = std::min(jmin, lo[r]);
          jmax = std::max(jmax, hi[r]);
        }
        load_f32(d.q_type, q, ((b * T + t) * Hq + h) * Dh, Dh, &qf[r * Dh]);
        const float sc = d.scale;
#pragma omp simd
        for (int64_t i = 0; i < Dh; ++i) qf[r * Dh + i] *= sc;
        mrow[r] = neg_inf;
        lrow[r] = 0.f;
        std::fill(&acc[r * Dh], &acc[r * Dh] + Dh, 0.f);
      }
      // Few query rows per block (decode): read bf16 K/V rows in place rather than staging them
      // as f32, which costs a store and a reload per element for only Hq/Hkv uses.
      const bool direct = kDirectBf16 && d.kv_type == DType::kBF16 && rows <= 4;
      const uint16_t* k16 = static_cast<const uint16_t*>(k_cache);
      const uint16_t* v16 = static_cast<const uint16_t*>(v_cache);
      // Key blocks of kKeyBlock from jmin.
      // Blocks start at multiples of kKeyBlock, not at jmin: a row's online-softmax partition (and
      // so its rounding) then depends only on its own visible range, never on which other rows
      // share the work item — chunked and whole prefills give the same bits.
      for (int64_t j0 = jmin / kKeyBlock * kKeyBlock; j0 < jmax; j0 += kKeyBlock) {
        const int64_t nk = std::min(kKeyBlock, jmax - j0);
        const size_t row_bytes = size_t(Dh) * ::hlx::dtype_size(d.kv_type);
        for (int64_t jj = 0; jj < nk; ++jj) {
          const int64_t off = ((sl * S + j0 + jj) * Hkv + kvh) * Dh;
          // Rows of one kv head are Hkv * Dh apart: a strided stream the hardware prefetchers
          // follow poorly. Prefetching the row one block ahead took decode (kv_len 2048,
          // 8 kv heads) from 2.1 to ~X GB/s of KV on one core.
          if (j0 + jj + kKeyBlock < jmax) {
            const int64_t pf = off + kKeyBlock * Hkv * Dh;
            for (size_t c = 0; c < row_bytes; c += 64) {
              __builtin_prefetch(static_cast<const char*>(k_cache) + size_t(pf) * ::hlx::dtype_size(d.kv_type) + c);
              __builtin_prefetch(static_cast<const char*>(v_cache) + size_t(pf) * ::hlx::dtype_size(d.kv_type) + c);
            }
          }
          if (direct) continue;
          // i8: the row's scale sits at the same (slot, position, head) index of [N,S,Hkv].
          const float ks = d.k_scale ? d.k_scale[off / Dh] : 1.f, vs = d.v_scale ? d.v_scale[off / Dh] : 1.f;
          load_f32(d.kv_type, k_cache, off, Dh, &kb[jj * Dh], ks);
          load_f32(d.kv_type, v_cache, off, Dh, &vb[jj * Dh], vs);
        }
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t a = std::max(lo[r], j0) - j0, e = std::min(hi[r], j0 + nk) - j0;
          if (a >= e) continue;
          float* sp = s.data();
          const float* qr = &qf[r * Dh];
          const int64_t block_off = ((sl * S + j0) * Hkv + kvh) * Dh;
          if (direct) {
            int64_t jj = a;
#if defined(__AVX512F__)
            if (Dh % 16 == 0)  // 16 keys per reduction, as in the staged path below
              for (; jj + 16 <= e; jj += 16) dot16(qr, k16 + block_off + jj * Hkv * Dh, Hkv * Dh, Dh, sp + jj);
#endif
            for (; jj < e; ++jj) sp[jj] = dot_bf16(qr, k16 + block_off + jj * Hkv * Dh, Dh);
          } else {
            int64_t jj = a;
#if defined(__AVX512F__)
            if (Dh % 16 == 0)
              for (; jj + 16 <= e; jj += 16) dot16(qr, &kb[jj * Dh], Dh, Dh, sp + jj);
#endif
            for (; jj < e; ++jj) sp[jj] = dot(qr, &kb[jj * Dh], Dh);
          }
          if (cap > 0.f)
            for (int64_t jj = a; jj < e; ++jj) sp[jj] = cap * std::tanh(sp[jj] / cap);
          if (bias) {
            const float* br = bias + (b * T + t0 + r / G) * S + j0;
            for (int64_t jj = a; jj < e; ++jj) sp[jj] += br[jj];
          }
          float bm = neg_inf;
          for (int64_t jj = a; jj < e; ++jj) bm = std::max(bm, sp[jj]);
          if (bm == neg_inf) continue;  // every visible score is -inf (an all -inf bias)
          const float m_new = std::max(mrow[r], bm);
          const float alpha = mrow[r] == neg_inf ? 0.f : exp_nonpos(mrow[r] - m_new);
          float psum = 0.f;
#if defined(__AVX512F__)
          {  // explicit 16-lane exp: GCC left the loop below scalar
            const __m512 mv = _mm512_set1_ps(m_new), ninf = _mm512_set1_ps(neg_inf);
            __m512 sum = _mm512_setzero_ps();
            for (int64_t j16 = 0; j16 < kKeyBlock; j16 += 16) {
              const __m512i idx = _mm512_add_epi32(
                  _mm512_set1_epi32(int(j16)), _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
              const __m512 sv = _mm512_loadu_ps(sp + j16);
              const __mmask16 vis = _mm512_cmpge_epi32_mask(idx, _mm512_set1_epi32(int(a))) &
                                    _mm512_cmplt_epi32_mask(idx, _mm512_set1_epi32(int(e))) &
                                    _mm512_cmp_ps_mask(sv, ninf, _CMP_NEQ_OQ);
              const __m512 pv = _mm512_maskz_mov_ps(vis, exp_nonpos16(_mm512_sub_ps(sv, mv)));
              _mm512_storeu_ps(sp + j16, pv);
              sum = _mm512_add_ps(sum, pv);
            }
            psum = _mm512_reduce_add_ps(sum);
          }
#else
#pragma omp simd reduction(+ : psum)
          for (int64_t jj = 0; jj < kKeyBlock; ++jj) {
            const bool vis = jj >= a && jj < e && sp[jj] != neg_inf;
            const float p = vis ? exp_nonpos(sp[jj] - m_new) : 0.f;
            sp[jj] = p;
            psum += p;
          }
#endif
          mrow[r] = m_new;
          lrow[r] = lrow[r] * alpha + psum;
          if (direct)
            pv_accumulate_bf16(&acc[r * Dh], alpha, sp, v16 + block_off, Hkv * Dh, a, e, Dh);
          else
            pv_accumulate(&acc[r * Dh], alpha, sp, vb.data(), a, e, Dh);
        }
      }
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t t = t0 + r / G, h = kvh * G + r % G;
        float* o = out + ((b * T + t) * Hq + h) * Dh;
        const float inv = lrow[r] > 0.f ? 1.f / lrow[r] : 0.f;
        const float* ar = &acc[r * Dh];
#pragma omp simd
        for (int64_t i = 0; i < Dh; ++i) o[i] = ar[i] * inv;
      }
    }
  });
}

}  // namespace HLX_ATTENTION_NS
