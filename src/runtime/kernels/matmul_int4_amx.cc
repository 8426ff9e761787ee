// AMX-INT8 tiled product for group-wise 4-bit weights (layout and arithmetic in matmul_int4.h),
// called only where amx_available() (cpu_features().amx_int8 and AVX-512 VNNI/BF16 for the rest;
// HLX_CPU=noamx keeps the AVX-512 tiles). Compiled with HLX_AVX512_FLAGS (CMakeLists.txt: files
// ending in _avx512.cc or _amx.cc); the tile instructions are inline asm, so no -mamx-* flags: GCC
// 12's tileloadd / ldtilecfg intrinsics do not tell the compiler the memory they read.
//
// The integer group sums stay exact: each int16 activation a = 256 * hi + lo with hi = a >> 8 in
// [-128, 127] (signed byte) and lo = a & 255 in [0, 255] (unsigned byte), and with the codes q in
// [0, 15] as bytes, isum = 256 * tdpbssd(hi, q) + tdpbusd(lo, q) in int32 (|256 * sum hi q| <= 2^8 *
// 128 * 128 * 15 < 2^31). Then the contract's f32 fold, unchanged and in group order, so the bits
// are those of the AVX-512 and portable kernels.
//
// Tiles (palette 1): C 0-3 = 16 rows x 16 columns int32 (hi and lo sums of two 16-column tiles), A 4
// / 5 = 16 rows x `chunk` hi / lo bytes, B 6 / 7 = chunk / 4 rows x 64 bytes (VNNI: row = 4
// consecutive k of 16 columns). Per 16 rows x 32 columns and k chunk: 4 tile loads, 4 dot products.
#include "runtime/kernels/x86_intrin.h"  // <immintrin.h>; see there why

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "runtime/kernels/matmul_int4.h"
#include "runtime/kernels/matmul_int4_fold_avx512.h"

namespace hlx::kernels::int4 {
namespace {

// The 64-byte operand of ldtilecfg, palette 1: tile t has rows[t] rows of colsb[t] bytes.
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64);

inline void load_config(const TileConfig& c) { __asm__ volatile("ldtilecfg %0" : : "m"(c)); }
// Returns the tiles to the init state (a pool thread that keeps them costs every context switch 8 KiB).
inline void release_tiles() { __asm__ volatile("tilerelease" ::: "memory"); }
template <int T>
inline void tile_zero() {
  __asm__ volatile("tilezero %%tmm%c0" : : "i"(T));
}
// Tile T's rows from p, p + stride, ... (stride in bytes).
template <int T>
inline void tile_load(const void* p, int64_t stride) {
  __asm__ volatile("tileloadd (%0,%1,1), %%tmm%c2" : : "r"(p), "r"(stride), "i"(T) : "memory");
}
template <int T>
inline void tile_store(void* p, int64_t stride) {
  __asm__ volatile("tilestored %%tmm%c2, (%0,%1,1)" : : "r"(p), "r"(stride), "i"(T) : "memory");
}
// C += A . B, int32 sums of 4 byte products per dword: A signed, B signed.
template <int C, int A, int B>
inline void tile_dpbssd() {
  __asm__ volatile("tdpbssd %%tmm%c2, %%tmm%c1, %%tmm%c0" : : "i"(C), "i"(A), "i"(B));
}
// The same with A unsigned, B signed.
template <int C, int A, int B>
inline void tile_dpbusd() {
  __asm__ volatile("tdpbusd %%tmm%c2, %%tmm%c1, %%tmm%c0" : : "i"(C), "i"(A), "i"(B));
}

inline __mmask32 mask32(int64_t cnt) {
  return cnt >= 32 ? __mmask32(0xffffffffu) : cnt <= 0 ? __mmask32(0) : __mmask32((1u << cnt) - 1);
}
// One group of a block as B tiles: column tile t (columns 16 t .. 16 t + 15) at bt + t * brows * 64,
// row i = 64 bytes, dword j = q(4 i .. 4 i + 3, 16 t + j); k past the group's G are zero. From the
// packed lines (two k each): line p's half u holds, per column j < 16, the word (q(2p, .), q(2p +
// 1, .)) of column 32 u + j in its low nibbles and of 32 u + 16 + j in its high ones, so
// interleaving the words of lines 2i and 2i + 1 and masking gives the dwords.
void group_b_tiles(const uint8_t* grp, int64_t pairs, int64_t brows, uint8_t* bt) {
  const __m512i lo4 = _mm512_set1_epi8(0x0f);
  alignas(64) static constexpr uint16_t kWords[32] = {0, 32, 1, 33, 2,  34, 3,  35, 4,  36, 5,  37, 6,  38, 7,  39,
                                                      8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
  const __m512i idx0 = _mm512_load_si512(kWords);  // word 2 j: line 2 i's word j, 2 j + 1: line 2 i + 1's
  const __m512i idx1 = _mm512_add_epi16(idx0, _mm512_set1_epi16(16));
  for (int64_t i = 0; i < brows; ++i) {
    const int64_t p = 2 * i;
    const __m512i l0 = p < pairs ? _mm512_loadu_si512(grp + p * kLine) : _mm512_setzero_si512();
    const __m512i l1 = p + 1 < pairs ? _mm512_loadu_si512(grp + (p + 1) * kLine) : _mm512_setzero_si512();
    const __m512i u0 = _mm512_permutex2var_epi16(l0, idx0, l1), u1 = _mm512_permutex2var_epi16(l0, idx1, l1);
    _mm512_store_si512(bt + (0 * brows + i) * 64, _mm512_and_si512(u0, lo4));
    _mm512_store_si512(bt + (1 * brows + i) * 64, _mm512_and_si512(_mm512_srli_epi16(u0, 4), lo4));
    _mm512_store_si512(bt + (2 * brows + i) * 64, _mm512_and_si512(u1, lo4));
    _mm512_store_si512(bt + (3 * brows + i) * 64, _mm512_and_si512(_mm512_srli_epi16(u1, 4), lo4));
  }
}

}  // namespace

void split_act_amx(const int32_t* q, int64_t groups, int64_t group, uint8_t* out) {
  const int64_t gs = amx_group_stride(group);
  const int16_t* a = reinterpret_cast<const int16_t*>(q);
  uint8_t* lo = out + groups * gs;
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t k0 = 0; k0 < gs; k0 += 32) {
      const __m512i v = _mm512_maskz_loadu_epi16(mask32(group - k0), a + g * group + k0);
      const __mmask32 st = mask32(gs - k0);
      _mm256_mask_storeu_epi8(out + g * gs + k0, st, _mm512_cvtepi16_epi8(_mm512_srai_epi16(v, 8)));
      _mm256_mask_storeu_epi8(lo + g * gs + k0, st, _mm512_cvtepi16_epi8(v));
    }
}

void tile_amx(int64_t r0, int64_t r1, const Acts& x, const Packed& w, int64_t b, void* scratch, DType c_type, void* c) {
  const int64_t pairs = w.group / 2, gb = group_bytes(w.group);
  const int64_t chunks = amx_chunks(w.group), chunk = amx_chunk(w.group), gs = chunks * chunk, brows = gs / 4;
  uint8_t* bt = static_cast<uint8_t*>(scratch);                // [4][brows][64] B tiles of the group
  int32_t* ct = reinterpret_cast<int32_t*>(bt + 4 * gs * 16);  // [4][16][16] C tiles
  float* sums = reinterpret_cast<float*>(ct + 4 * 256);        // [rows][64]
  const int64_t rows = r1 - r0;
  std::memset(sums, 0, size_t(rows) * kBlock * 4);
  TileConfig cfg;
  for (int t = 0; t < 4; ++t) cfg.rows[t] = 16, cfg.colsb[t] = 64;
  cfg.rows[4] = cfg.rows[5] = 16;
  cfg.colsb[4] = cfg.colsb[5] = uint16_t(chunk);
  cfg.rows[6] = cfg.rows[7] = uint8_t(chunk / 4);
  cfg.colsb[6] = cfg.colsb[7] = 64;
  load_config(cfg);
  const int64_t as = x.hl_stride, lo_off = x.groups * gs;
  const uint8_t* blk = w.data + b * w.block_stride();
  for (int64_t g = 0; g < w.groups; ++g) {
    const uint8_t* grp = blk + g * gb;
    group_b_tiles(grp, pairs, brows, bt);  // once per group for every row tile of the item
    const float* s = reinterpret_cast<const float*>(grp + pairs * kLine);
    for (int64_t t0 = 0; t0 < rows; t0 += kAmxTileRows) {
      // Rows past r1 (up to the next multiple of 16, zero past M) are computed, never stored.
      const int64_t tr = std::min(rows - t0, kAmxTileRows);
      const uint8_t* ahi = x.hl + (r0 + t0) * as + g * gs;
      for (int64_t h = 0; h < 2; ++h) {
        const uint8_t* b0 = bt + 2 * h * brows * 64;
        const uint8_t* b1 = b0 + brows * 64;
        tile_zero<0>();
        tile_zero<1>();
        tile_zero<2>();
        tile_zero<3>();
        for (int64_t ci = 0; ci < chunks; ++ci) {
          tile_load<4>(ahi + ci * chunk, as);
          tile_load<5>(ahi + lo_off + ci * chunk, as);
          tile_load<6>(b0 + ci * chunk * 16, 64);
          tile_load<7>(b1 + ci * chunk * 16, 64);
          tile_dpbssd<0, 4, 6>();
          tile_dpbusd<1, 5, 6>();
          tile_dpbssd<2, 4, 7>();
          tile_dpbusd<3, 5, 7>();
        }
        tile_store<0>(ct, 64);
        tile_store<1>(ct + 256, 64);
        tile_store<2>(ct + 512, 64);
        tile_store<3>(ct + 768, 64);
        for (int64_t r = 0; r < tr; ++r) {
          const int64_t row = r0 + t0 + r;
          const float sa = x.sa[row * x.groups + g], sq = x.sq[row * x.groups + g];
          for (int64_t j = 0; j < 2; ++j) {
            const __m512i hi = _mm512_load_si512(ct + 512 * j + 16 * r);
            const __m512i lo = _mm512_load_si512(ct + 512 * j + 256 + 16 * r);
            const int64_t col = 32 * h + 16 * j;
            fold(sums + (t0 + r) * kBlock + col, _mm512_add_epi32(_mm512_slli_epi32(hi, 8), lo), s + col,
                 s + kBlock + col, sa, sq);
          }
        }
      }
    }
  }
  release_tiles();
  for (int64_t r = 0; r < rows; ++r) store_block(sums + r * kBlock, r0 + r, b * kBlock, w.n, c_type, c);
}

}  // namespace hlx::kernels::int4
