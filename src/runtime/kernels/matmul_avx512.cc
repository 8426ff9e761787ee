// AVX-512 BF16 kernels for matmul.cc. Compiled with HLX_AVX512_FLAGS; called only when
// cpu_features().avx512bf16. Uses AVX512F/BW/BF16 only (no FP16/AMX: AMD Zen 4/5 lack them).
#include <immintrin.h>
#include <algorithm>
#include <cstring>

#include "runtime/kernels/internal.h"
#include "runtime/kernels/parallel.h"

namespace hlx::kernels::internal {

void f32_to_bf16_avx512(const float* src, int64_t n, bf16* dst) {
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(src + i + 16), _mm512_loadu_ps(src + i));
    _mm512_storeu_si512(dst + i, (__m512i)v);
  }
  for (; i < n; ++i) dst[i] = f32_to_bf16(src[i]);
}

namespace {

template <int M>
void gemv_block(int64_t k, int64_t lda, const bf16* a, const bf16* w, int64_t n_valid, DType c_type,
                int64_t ldc, void* c, int64_t n0) {
  __m512 acc[M][4];
  for (int m = 0; m < M; ++m)
    for (int j = 0; j < 4; ++j) acc[m][j] = _mm512_setzero_ps();
  const int64_t pairs = k / 2;
  const uint16_t* a16 = reinterpret_cast<const uint16_t*>(a);
  for (int64_t p = 0; p < pairs; ++p) {
    const bf16* wp = w + p * 128;
    // 2 KiB ahead in this thread's contiguous stream; helps the L2 streamer keep up when the
    // other core competes for DRAM.
    _mm_prefetch(reinterpret_cast<const char*>(wp + 1024), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(wp + 1024 + 64), _MM_HINT_T0);
    __m512i w0 = _mm512_load_si512(wp), w1 = _mm512_load_si512(wp + 32);
    __m512i w2 = _mm512_load_si512(wp + 64), w3 = _mm512_load_si512(wp + 96);
    for (int m = 0; m < M; ++m) {
      uint32_t x;
      std::memcpy(&x, a16 + m * lda + 2 * p, 4);
      __m512bh xb = (__m512bh)_mm512_set1_epi32(int(x));
      acc[m][0] = _mm512_dpbf16_ps(acc[m][0], xb, (__m512bh)w0);
      acc[m][1] = _mm512_dpbf16_ps(acc[m][1], xb, (__m512bh)w1);
      acc[m][2] = _mm512_dpbf16_ps(acc[m][2], xb, (__m512bh)w2);
      acc[m][3] = _mm512_dpbf16_ps(acc[m][3], xb, (__m512bh)w3);
    }
  }
  if (k & 1) {  // last k alone: pair it with a zero activation
    const bf16* wp = w + pairs * 128;
    __m512i w0 = _mm512_load_si512(wp), w1 = _mm512_load_si512(wp + 32);
    __m512i w2 = _mm512_load_si512(wp + 64), w3 = _mm512_load_si512(wp + 96);
    for (int m = 0; m < M; ++m) {
      uint32_t x = a16[m * lda + k - 1];
      __m512bh xb = (__m512bh)_mm512_set1_epi32(int(x));
      acc[m][0] = _mm512_dpbf16_ps(acc[m][0], xb, (__m512bh)w0);
      acc[m][1] = _mm512_dpbf16_ps(acc[m][1], xb, (__m512bh)w1);
      acc[m][2] = _mm512_dpbf16_ps(acc[m][2], xb, (__m512bh)w2);
      acc[m][3] = _mm512_dpbf16_ps(acc[m][3], xb, (__m512bh)w3);
    }
  }
  for (int m = 0; m < M; ++m) {
    for (int j = 0; j < 4; ++j) {
      int64_t off = j * 16;
      if (off >= n_valid) break;
      int64_t cnt = n_valid - off < 16 ? n_valid - off : 16;
      __mmask16 mask = cnt == 16 ? __mmask16(0xffff) : __mmask16((1u << cnt) - 1);
      if (c_type == DType::kF32) {
        float* cp = static_cast<float*>(c) + m * ldc + n0 + off;
        _mm512_mask_storeu_ps(cp, mask, acc[m][j]);
      } else {
        bf16* cp = static_cast<bf16*>(c) + m * ldc + n0 + off;
        __m256i v = (__m256i)_mm512_cvtneps_pbh(acc[m][j]);
        _mm256_mask_storeu_epi16(cp, mask, v);
      }
    }
  }
}

}  // namespace

void gemv_vnni_bf16_avx512(int64_t m, int64_t n, int64_t k, int64_t kp, const bf16* a,
                           const bf16* w_packed, DType c_type, void* c) {
  const int64_t nblocks = (n + 63) / 64;
  // Chunks of a few column blocks, claimed dynamically (parallel.h): ~4 chunks per thread keeps
  // each thread's weight stream long while letting one thread absorb another's share when that
  // one is descheduled.
  const int64_t grain = std::max<int64_t>(1, nblocks / (4 * max_threads()));
  parallel_for(nblocks, grain, [&](int64_t nb0, int64_t nb1) {
    FtzDazScope ftz_daz;
    for (int64_t nb = nb0; nb < nb1; ++nb) {
      const bf16* w = w_packed + nb * kp * 64;
      const int64_t n0 = nb * 64;
      const int64_t nv = n - n0 < 64 ? n - n0 : 64;
      for (int64_t m0 = 0; m0 < m; m0 += 4) {
        const bf16* am = a + m0 * k;
        void* cm = static_cast<char*>(c) + m0 * n * int64_t(dtype_size(c_type));
        switch (m - m0 >= 4 ? 4 : m - m0) {
          case 1: gemv_block<1>(k, k, am, w, nv, c_type, n, cm, n0); break;
          case 2: gemv_block<2>(k, k, am, w, nv, c_type, n, cm, n0); break;
          case 3: gemv_block<3>(k, k, am, w, nv, c_type, n, cm, n0); break;
          default: gemv_block<4>(k, k, am, w, nv, c_type, n, cm, n0); break;
        }
      }
    }
  });
}

}  // namespace hlx::kernels::internal
