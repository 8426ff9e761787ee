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
