// AVX512-BF16 kernels for group-wise 4-bit weights (layout and arithmetic in matmul_int4.h).
// Compiled with HLX_AVX512_FLAGS; called only when cpu_features() has AVX512F/BW/BF16. The nibbles
// are turned into bf16 (128 + q) in registers (zero-extend, mask or shift, OR) and multiplied with
// broadcast bf16 activation pairs by vdpbf16ps; each group's f32 sums are scaled once at its end.
#include "runtime/kernels/x86_intrin.h"  // <immintrin.h>; see there why

#include <algorithm>
#include <cstring>

#include "runtime/kernels/matmul_int4.h"
#include "runtime/kernels/static_dispatch.h"

namespace hlx::kernels::int4 {
namespace {

inline __mmask16 mask16(int64_t cnt) {
  return cnt >= 16 ? __mmask16(0xffff) : cnt <= 0 ? __mmask16(0) : __mmask16((1u << cnt) - 1);
}

// The four bf16 weight vectors (columns 0-15, 16-31, 32-47, 48-63) of one 64-byte line.
inline void unpack_line(const uint8_t* line, __m512i (&w)[4]) {
  const __m512i lo4 = _mm512_set1_epi16(0x000f), bias = _mm512_set1_epi16(int16_t(kBias));
  for (int u = 0; u < 2; ++u) {
    const __m512i raw = _mm512_cvtepu8_epi16(_mm256_load_si256(reinterpret_cast<const __m256i*>(line + 32 * u)));
    w[2 * u] = _mm512_ternarylogic_epi32(raw, lo4, bias, 0xEA);  // (raw & 0xf) | bias
    w[2 * u + 1] = _mm512_or_si512(_mm512_srli_epi16(raw, 4), bias);
  }
}

inline __m512bh bcast(const uint16_t* a, int64_t p) {
  uint32_t v;
  std::memcpy(&v, a + 2 * p, 4);
  return (__m512bh)_mm512_set1_epi32(int(v));
}

// sum = fma(s, acc, sum); sum = fma(o, A, sum) for 16 columns (the group's end, matmul_int4.h).
inline void fold(float* sum, __m512 acc, const float* s, const float* o, float asum) {
  __m512 v = _mm512_fmadd_ps(_mm512_load_ps(s), acc, _mm512_load_ps(sum));
  _mm512_store_ps(sum, _mm512_fmadd_ps(_mm512_load_ps(o), _mm512_set1_ps(asum), v));
}

// One group of R rows (from r0) x NB blocks (from b): sums[r][nb * 64 + col] += the group's terms.
template <int R, int NB>
void group_pass(const Acts& x, const Packed& w, int64_t r0, int64_t b, int64_t g, float (*sums)[4 * kBlock]) {
  __m512 acc[R][NB * 4];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < NB * 4; ++j) acc[r][j] = _mm512_setzero_ps();
  const int64_t gb = group_bytes(w.group), pairs = w.group / 2;
  const uint8_t* base[NB];
  for (int nb = 0; nb < NB; ++nb) base[nb] = w.data + (b + nb) * w.block_stride() + g * gb;
  const uint16_t* ar[R];
  for (int r = 0; r < R; ++r) ar[r] = x.a + (r0 + r) * x.kp + g * w.group;
  for (int64_t p = 0; p < pairs; ++p) {
    for (int nb = 0; nb < NB; ++nb) {
      const uint8_t* line = base[nb] + p * kLine;
      // 16 lines ahead in this block's contiguous stream.
      _mm_prefetch(reinterpret_cast<const char*>(line + 16 * kLine), _MM_HINT_T0);
      __m512i wv[4];
      unpack_line(line, wv);
      for (int r = 0; r < R; ++r) {
        const __m512bh xb = bcast(ar[r], p);
        for (int j = 0; j < 4; ++j) acc[r][nb * 4 + j] = _mm512_dpbf16_ps(acc[r][nb * 4 + j], xb, (__m512bh)wv[j]);
      }
    }
  }
  for (int nb = 0; nb < NB; ++nb) {
    const float* s = reinterpret_cast<const float*>(base[nb] + pairs * kLine);
    for (int r = 0; r < R; ++r) {
      const float asum = x.asum[(r0 + r) * x.groups + g];
      for (int j = 0; j < 4; ++j)
        fold(sums[r0 + r] + nb * kBlock + 16 * j, acc[r][nb * 4 + j], s + 16 * j, s + kBlock + 16 * j, asum);
    }
  }
}

// Writes 64 sums of row `row` as columns [col, col + 64) of C (masked past n).
inline void store_block(const float* sum, int64_t row, int64_t col, int64_t n, DType c_type, void* c) {
  for (int j = 0; j < 4; ++j) {
    const int64_t at = col + 16 * j;
    if (at >= n) return;
    const __mmask16 mask = mask16(n - at);
    const __m512 v = _mm512_load_ps(sum + 16 * j);
    if (c_type == DType::kF32)
      _mm512_mask_storeu_ps(static_cast<float*>(c) + row * n + at, mask, v);
    else
      _mm256_mask_storeu_epi16(static_cast<bf16*>(c) + row * n + at, mask, (__m256i)_mm512_cvtneps_pbh(v));
  }
}

}  // namespace

void prepare_row_avx512(DType a_type, const void* a, int64_t r, int64_t k, int64_t kp, int64_t group, uint16_t* dst,
                        float* asum) {
  for (int64_t i = 0; i < kp; i += 16) {
    const __mmask16 mask = mask16(k - i);
    __m256i h;
    if (a_type == DType::kBF16) {
      h = _mm256_maskz_loadu_epi16(mask, static_cast<const bf16*>(a) + r * k + i);
    } else {
      const __m512 v = a_type == DType::kF16
                           ? _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, static_cast<const f16*>(a) + r * k + i))
                           : _mm512_maskz_loadu_ps(mask, static_cast<const float*>(a) + r * k + i);
      h = (__m256i)_mm512_cvtneps_pbh(v);  // round to nearest even, as f32_to_bf16
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), h);
  }
  for (int64_t g = 0; g < kp / group; ++g) {
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < group; i += 16) {
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(dst + g * group + i));
      acc = _mm512_add_ps(acc, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)));
    }
    alignas(64) float lane[16];
    _mm512_store_ps(lane, acc);
    float s = 0.f;
    for (float v : lane) s += v;
    asum[g] = s;
  }
}

void stream_avx512(int64_t m, const Acts& x, const Packed& w, int64_t b0, int64_t b1, DType c_type, void* c) {
  alignas(64) float sums[kStreamMaxM][4 * kBlock];
  for (int64_t b = b0; b < b1;) {
    const int64_t nb = std::min<int64_t>(b1 - b, m == 1 ? 4 : m == 2 ? 2 : 1);
    std::memset(sums, 0, size_t(m) * sizeof sums[0]);
    // Row chunks of at most four per group (16 accumulators): the group's lines (<= 4 KiB per
    // block) stay in L1 for the next chunk, so weights are read from DRAM once.
    for (int64_t g = 0; g < w.groups; ++g) {
      if (m == 1 && nb == 4)
        group_pass<1, 4>(x, w, 0, b, g, sums);
      else if (m == 1 && nb >= 2)
        group_pass<1, 2>(x, w, 0, b, g, sums);
      else if (m == 2 && nb == 2)
        group_pass<2, 2>(x, w, 0, b, g, sums);
      else {
        for (int64_t r0 = 0; r0 < m; r0 += 4) {
          with_count<1, 4>(int(std::min<int64_t>(4, m - r0)),
                           [&](auto r) { group_pass<r.value, 1>(x, w, r0, b, g, sums); });
        }
      }
    }
    const int64_t done = (m == 1 && nb == 3) ? 2 : (m == 1 || m == 2) ? nb : 1;
    for (int64_t r = 0; r < m; ++r)
      for (int64_t i = 0; i < done; ++i) store_block(sums[r] + i * kBlock, r, (b + i) * kBlock, w.n, c_type, c);
    b += done;
  }
}

void tile_avx512(int64_t r0, int64_t r1, const Acts& x, const Packed& w, int64_t b, void* scratch, DType c_type,
                 void* c) {
  const int64_t pairs = w.group / 2, gb = group_bytes(w.group);
  uint32_t* wbuf = static_cast<uint32_t*>(scratch);  // [pairs][64] bf16 pairs
  float* sums = reinterpret_cast<float*>(static_cast<char*>(scratch) + pairs * kBlock * 4);
  const int64_t rows = r1 - r0;
  std::memset(sums, 0, size_t(rows) * kBlock * 4);
  const uint8_t* blk = w.data + b * w.block_stride();
  for (int64_t g = 0; g < w.groups; ++g) {
    const uint8_t* grp = blk + g * gb;
    // The group unpacked once (L1-resident) for every tile of the item.
    for (int64_t p = 0; p < pairs; ++p) {
      __m512i wv[4];
      unpack_line(grp + p * kLine, wv);
      for (int j = 0; j < 4; ++j) _mm512_store_si512(wbuf + p * kBlock + 16 * j, wv[j]);
    }
    const float* s = reinterpret_cast<const float*>(grp + pairs * kLine);
    for (int64_t t0 = 0; t0 < rows; t0 += kTileRows) {
      const int64_t tr = std::min(kTileRows, rows - t0);
      const uint16_t* ar[kTileRows];
      // Rows past the end reuse the last row (computed, never stored).
      for (int64_t r = 0; r < kTileRows; ++r) ar[r] = x.a + (r0 + t0 + std::min(r, tr - 1)) * x.kp + g * w.group;
      __m512 acc[kTileRows][4];
      for (int r = 0; r < kTileRows; ++r)
        for (int j = 0; j < 4; ++j) acc[r][j] = _mm512_setzero_ps();
      for (int64_t p = 0; p < pairs; ++p) {
        const uint32_t* wp = wbuf + p * kBlock;
        const __m512bh w0 = (__m512bh)_mm512_load_si512(wp), w1 = (__m512bh)_mm512_load_si512(wp + 16);
        const __m512bh w2 = (__m512bh)_mm512_load_si512(wp + 32), w3 = (__m512bh)_mm512_load_si512(wp + 48);
#pragma GCC unroll 6
        for (int r = 0; r < kTileRows; ++r) {
          const __m512bh xb = bcast(ar[r], p);
          acc[r][0] = _mm512_dpbf16_ps(acc[r][0], xb, w0);
          acc[r][1] = _mm512_dpbf16_ps(acc[r][1], xb, w1);
          acc[r][2] = _mm512_dpbf16_ps(acc[r][2], xb, w2);
          acc[r][3] = _mm512_dpbf16_ps(acc[r][3], xb, w3);
        }
      }
      for (int64_t r = 0; r < tr; ++r) {
        const float asum = x.asum[(r0 + t0 + r) * x.groups + g];
        for (int j = 0; j < 4; ++j)
          fold(sums + (t0 + r) * kBlock + 16 * j, acc[r][j], s + 16 * j, s + kBlock + 16 * j, asum);
      }
    }
  }
  for (int64_t r = 0; r < rows; ++r) store_block(sums + r * kBlock, r0 + r, b * kBlock, w.n, c_type, c);
}

}  // namespace hlx::kernels::int4
