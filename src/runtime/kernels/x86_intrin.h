// <immintrin.h>, included with GCC 12.1/12.2's false uninitialized warnings off. Those versions
// build the unused merge source of many AVX-512 intrinsics from `__m512 __Y = __Y;`
// (_mm512_undefined_*) and then warn about it once inlined into our code
// (https://gcc.gnu.org/bugzilla/show_bug.cgi?id=105593, fixed in GCC 12.3 and 13). The warnings
// point into the system header, so ignoring them around this one include leaves our own code
// checked. Include this first, before anything else that pulls in <immintrin.h>.
#pragma once

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#else
#include <immintrin.h>
#endif

#if defined(__AVX512F__)
namespace hlx::kernels {
// acc += the int32 sums of the 16-bit pair products of a and b (AVX512-VNNI vpdpwssd; callers
// check cpu_features().avx512vnni). Inline asm: GCC 12's _mm512_dpwssd_epi32 kept every
// accumulator of a register tile on the stack (a store per instruction), and the shared AVX-512
// flags need no -mavx512vnni this way.
inline __m512i dpwssd(__m512i acc, __m512i a, __m512i b) {
  __asm__("vpdpwssd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
  return acc;
}
}  // namespace hlx::kernels
#endif
