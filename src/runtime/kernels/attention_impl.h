// Body of the hlx.attention kernel, included by attention.cc (baseline ISA) and by
// attention_avx512.cc (compiled for AVX-512), each inside its own namespace, so the same
// vectorisable loops are built twice and picked at run time. Arguments are validated by the caller.
//
// Work item = (row b, kv head, tile of query tokens): all Hq/Hkv query heads of a kv head share
// each key/value block, converted once to f32 (keys transposed, so q·k vectorises over keys and
// p·v over head_dim, neither needing a horizontal reduction). Online softmax over key blocks of
// kKeyBlock; only blocks that hold a visible key are touched, so the cost follows kv_len (and the
// causal/window bounds), never the capacity S.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "runtime/kernels/attention.h"
#include "runtime/kernels/internal.h"

namespace HLX_ATTENTION_NS {

using ::hlx::bf16;
using ::hlx::DType;
using ::hlx::kernels::AttentionDesc;

constexpr int64_t kKeyBlock = 64;
constexpr int64_t kQueryRows = 32;  // query rows (heads x tokens) per work item

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

inline void load_f32(DType t, const void* base, int64_t off, int64_t n, float* dst) {
  if (t == DType::kF32) {
    std::memcpy(dst, static_cast<const float*>(base) + off, size_t(n) * 4);
  } else {
    const uint16_t* s = static_cast<const uint16_t*>(base) + off;
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) dst[i] = ::hlx::f32_from_bits(uint32_t(s[i]) << 16);
  }
}

void run(const AttentionDesc& d, const void* q, const void* k_cache, const void* v_cache,
                const int32_t* slot, const int32_t* q_pos, const int32_t* kv_len, const float* bias,
                float* out) {
  const int64_t B = d.batch, T = d.q_len, Hq = d.q_heads, Hkv = d.kv_heads, Dh = d.head_dim, S = d.capacity;
  const int64_t G = Hq / Hkv;
  const int64_t t_tile = std::max<int64_t>(1, kQueryRows / G);
  const int64_t t_tiles = (T + t_tile - 1) / t_tile;
  const int64_t items = B * Hkv * t_tiles;
  const float neg_inf = -std::numeric_limits<float>::infinity();
  const float cap = d.logit_softcap;
  const int64_t W = d.sliding_window;

#pragma omp parallel if (items > 1)
  {
    ::hlx::kernels::internal::set_ftz_daz();
    const int64_t max_rows = G * t_tile;
    std::vector<float> qf(static_cast<size_t>(max_rows * Dh)), acc(static_cast<size_t>(max_rows * Dh));
    std::vector<float> mrow(static_cast<size_t>(max_rows)), lrow(static_cast<size_t>(max_rows));
    std::vector<int64_t> lo(static_cast<size_t>(max_rows)), hi(static_cast<size_t>(max_rows));
    std::vector<float> kt(static_cast<size_t>(Dh * kKeyBlock)), vb(static_cast<size_t>(kKeyBlock * Dh));
    std::vector<float> s(static_cast<size_t>(kKeyBlock));

#pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < items; ++item) {
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
      // Key blocks aligned to kKeyBlock from jmin.
      for (int64_t j0 = jmin; j0 < jmax; j0 += kKeyBlock) {
        const int64_t nk = std::min(kKeyBlock, jmax - j0);
        for (int64_t jj = 0; jj < nk; ++jj) {
          const int64_t off = ((sl * S + j0 + jj) * Hkv + kvh) * Dh;
          float* kr = &vb[jj * Dh];  // stage K row in vb, then transpose into kt
          load_f32(d.kv_type, k_cache, off, Dh, kr);
          for (int64_t i = 0; i < Dh; ++i) kt[i * kKeyBlock + jj] = kr[i];
        }
        for (int64_t jj = 0; jj < nk; ++jj)
          load_f32(d.kv_type, v_cache, ((sl * S + j0 + jj) * Hkv + kvh) * Dh, Dh, &vb[jj * Dh]);
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t a = std::max(lo[r], j0) - j0, e = std::min(hi[r], j0 + nk) - j0;
          if (a >= e) continue;
          float* sp = s.data();
          std::fill(sp, sp + kKeyBlock, 0.f);
          const float* qr = &qf[r * Dh];
          for (int64_t i = 0; i < Dh; ++i) {
            const float qi = qr[i];
            const float* kti = &kt[i * kKeyBlock];
#pragma omp simd
            for (int64_t jj = 0; jj < kKeyBlock; ++jj) sp[jj] += qi * kti[jj];
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
#pragma omp simd reduction(+ : psum)
          for (int64_t jj = 0; jj < kKeyBlock; ++jj) {
            const bool vis = jj >= a && jj < e && sp[jj] != neg_inf;
            const float p = vis ? exp_nonpos(sp[jj] - m_new) : 0.f;
            sp[jj] = p;
            psum += p;
          }
          mrow[r] = m_new;
          lrow[r] = lrow[r] * alpha + psum;
          float* ar = &acc[r * Dh];
#pragma omp simd
          for (int64_t i = 0; i < Dh; ++i) ar[i] *= alpha;
          for (int64_t jj = a; jj < e; ++jj) {
            const float p = sp[jj];
            const float* vr = &vb[jj * Dh];
#pragma omp simd
            for (int64_t i = 0; i < Dh; ++i) ar[i] += p * vr[i];
          }
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
  }
}

}  // namespace HLX_ATTENTION_NS
