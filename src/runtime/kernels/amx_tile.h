// AMX tile instructions (AMX-TILE, AMX-BF16) as inline asm, for kernels that run them only when
// cpu_features().amx_bf16. Not GCC's <amxtileintrin.h>: its tileloadd tells the compiler nothing of
// the memory it reads and its ldtilecfg only 8 of the config's 64 bytes (stores to either could be
// moved past the instruction or dropped), and these need no -mamx-* flags (HLX_AVX512_FLAGS has
// none). Tile numbers are template arguments: the instructions encode them.
#pragma once

#include <cstdint>

namespace hlx::kernels::amx {

// The 64-byte operand of ldtilecfg, palette 1: tile t has rows[t] rows of colsb[t] bytes.
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64);

inline void load_config(const TileConfig& c) { __asm__ volatile("ldtilecfg %0" : : "m"(c)); }
// Returns the tiles to the init state (a thread that keeps them costs every context switch 8 KiB).
inline void release() { __asm__ volatile("tilerelease" ::: "memory"); }

template <int T>
inline void zero() {
  __asm__ volatile("tilezero %%tmm%c0" : : "i"(T));
}
// Tile T's rows from p, p + stride, ... (stride in bytes).
template <int T>
inline void load(const void* p, int64_t stride) {
  __asm__ volatile("tileloadd (%0,%1,1), %%tmm%c2" : : "r"(p), "r"(stride), "i"(T) : "memory");
}
template <int T>
inline void store(void* p, int64_t stride) {
  __asm__ volatile("tilestored %%tmm%c2, (%0,%1,1)" : : "r"(p), "r"(stride), "i"(T) : "memory");
}
// C += A . B: A rows x (2K bf16), B K rows x (N bf16 pairs, VNNI), C rows x N f32. Products of bf16
// are exact in f32; input and output denormals are flushed to zero whatever MXCSR says.
template <int C, int A, int B>
inline void dpbf16ps() {
  __asm__ volatile("tdpbf16ps %%tmm%c2, %%tmm%c1, %%tmm%c0" : : "i"(C), "i"(A), "i"(B));
}

}  // namespace hlx::kernels::amx
