// AVX-512 VNNI kernels for group-wise 4-bit weights (layout and arithmetic in matmul_int4.h).
// Compiled with HLX_AVX512_FLAGS; called only when cpu_features() has AVX512F/BW/VNNI/BF16 (BF16 for
// a bf16 C's stores). The nibbles are turned into int16 codes in registers (zero-extend, then mask
// or shift) and multiplied with broadcast int16 activation pairs by vpdpwssd into exact int32 sums;
// each group's sums are scaled and offset once at its end.
#include "runtime/kernels/x86_intrin.h"  // <immintrin.h>; see there why

#include <algorithm>
#include <cstring>

#include "runtime/kernels/matmul_int4.h"
#include "runtime/kernels/matmul_int4_fold_avx512.h"
#include "runtime/kernels/static_dispatch.h"

namespace hlx::kernels::int4 {
namespace {

// The four int16 code vectors (columns 0-15, 16-31, 32-47, 48-63) of one 64-byte line.
inline void unpack_line(const uint8_t* line, __m512i (&w)[4]) {
  const __m512i lo4 = _mm512_set1_epi16(0x000f);
  for (int u = 0; u < 2; ++u) {
    const __m512i raw = _mm512_cvtepu8_epi16(_mm256_load_si256(reinterpret_cast<const __m256i*>(line + 32 * u)));
    w[2 * u] = _mm512_and_si512(raw, lo4);
    w[2 * u + 1] = _mm512_srli_epi16(raw, 4);
  }
}

// One group of R rows (from r0) x NB blocks (from b): sums[r][nb * 64 + col] += the group's terms.
template <int R, int NB>
void group_pass(const Acts& x, const Packed& w, int64_t r0, int64_t b, int64_t g, float (*sums)[4 * kBlock]) {
  __m512i acc[R][NB * 4];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < NB * 4; ++j) acc[r][j] = _mm512_setzero_si512();
  const int64_t gb = group_bytes(w.group), pairs = w.group / 2;
  const uint8_t* base[NB];
  for (int nb = 0; nb < NB; ++nb) base[nb] = w.data + (b + nb) * w.block_stride() + g * gb;
  const int32_t* ar[R];
  for (int r = 0; r < R; ++r) ar[r] = x.row(r0 + r, g, w.group);
  for (int64_t p = 0; p < pairs; ++p) {
    for (int nb = 0; nb < NB; ++nb) {
      const uint8_t* line = base[nb] + p * kLine;
      // 16 lines ahead in this block's contiguous stream.
      _mm_prefetch(reinterpret_cast<const char*>(line + 16 * kLine), _MM_HINT_T0);
      __m512i wv[4];
      unpack_line(line, wv);
      for (int r = 0; r < R; ++r) {
        const __m512i xv = _mm512_set1_epi32(ar[r][p]);
        for (int j = 0; j < 4; ++j) acc[r][nb * 4 + j] = dpwssd(acc[r][nb * 4 + j], xv, wv[j]);
      }
    }
  }
  for (int nb = 0; nb < NB; ++nb) {
    const float* s = reinterpret_cast<const float*>(base[nb] + pairs * kLine);
    for (int r = 0; r < R; ++r) {
      const float sa = x.sa[(r0 + r) * x.groups + g], sq = x.sq[(r0 + r) * x.groups + g];
      for (int j = 0; j < 4; ++j)
        fold(sums[r0 + r] + nb * kBlock + 16 * j, acc[r][nb * 4 + j], s + 16 * j, s + kBlock + 16 * j, sa, sq);
    }
  }
}

}  // namespace

int32_t qsum_avx512(const int32_t* q, int64_t pairs) {
  __m512i acc = _mm512_setzero_si512();
  for (int64_t i = 0; i < pairs; i += 16)
    acc = _mm512_add_epi32(acc,
                           _mm512_madd_epi16(_mm512_maskz_loadu_epi32(mask16(pairs - i), q + i), _mm512_set1_epi16(1)));
  return _mm512_reduce_add_epi32(acc);
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
  int32_t* wbuf = static_cast<int32_t*>(scratch);  // [pairs][64] int16 code pairs
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
      const int32_t* ar[kTileRows];
      // Rows past the end reuse the last row (computed, never stored).
      for (int64_t r = 0; r < kTileRows; ++r) ar[r] = x.row(r0 + t0 + std::min(r, tr - 1), g, w.group);
      __m512i acc[kTileRows][4];
      for (int r = 0; r < kTileRows; ++r)
        for (int j = 0; j < 4; ++j) acc[r][j] = _mm512_setzero_si512();
      for (int64_t p = 0; p < pairs; ++p) {
        const int32_t* wp = wbuf + p * kBlock;
        const __m512i w0 = _mm512_load_si512(wp), w1 = _mm512_load_si512(wp + 16);
        const __m512i w2 = _mm512_load_si512(wp + 32), w3 = _mm512_load_si512(wp + 48);
#pragma GCC unroll 6
        for (int r = 0; r < kTileRows; ++r) {
          const __m512i xv = _mm512_set1_epi32(ar[r][p]);
          acc[r][0] = dpwssd(acc[r][0], xv, w0);
          acc[r][1] = dpwssd(acc[r][1], xv, w1);
          acc[r][2] = dpwssd(acc[r][2], xv, w2);
          acc[r][3] = dpwssd(acc[r][3], xv, w3);
        }
      }
      for (int64_t r = 0; r < tr; ++r) {
        const int64_t row = r0 + t0 + r;
        const float sa = x.sa[row * x.groups + g], sq = x.sq[row * x.groups + g];
        for (int j = 0; j < 4; ++j)
          fold(sums + (t0 + r) * kBlock + 16 * j, acc[r][j], s + 16 * j, s + kBlock + 16 * j, sa, sq);
      }
    }
  }
  for (int64_t r = 0; r < rows; ++r) store_block(sums + r * kBlock, r0 + r, b * kBlock, w.n, c_type, c);
}

}  // namespace hlx::kernels::int4
