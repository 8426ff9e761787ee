#include "runtime/kernels/membw.h"

#include "runtime/kernels/x86_intrin.h"  // <immintrin.h>; see there why

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/tensor.h"
#include "runtime/kernels/cpu.h"
#include "runtime/kernels/parallel.h"

namespace hlx::kernels {
namespace {

// Sums 64-byte lines [begin, end) with four independent 512-bit accumulators.
__attribute__((target("avx512f"))) uint64_t sum_lines_avx512(const uint64_t* p, int64_t begin, int64_t end) {
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
  int64_t i = begin;
  for (; i + 4 <= end; i += 4) {
    a0 = _mm512_add_epi64(a0, _mm512_load_si512(p + 8 * i));
    a1 = _mm512_add_epi64(a1, _mm512_load_si512(p + 8 * i + 8));
    a2 = _mm512_add_epi64(a2, _mm512_load_si512(p + 8 * i + 16));
    a3 = _mm512_add_epi64(a3, _mm512_load_si512(p + 8 * i + 24));
  }
  for (; i < end; ++i) a0 = _mm512_add_epi64(a0, _mm512_load_si512(p + 8 * i));
  return uint64_t(_mm512_reduce_add_epi64(_mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3))));
}

uint64_t sum_lines(const uint64_t* p, int64_t begin, int64_t end) {
  uint64_t t0 = 0, t1 = 0;
  for (int64_t i = begin; i < end; ++i) {
    const uint64_t* l = p + 8 * i;
    t0 += l[0] + l[2] + l[4] + l[6];
    t1 += l[1] + l[3] + l[5] + l[7];
  }
  return t0 + t1;
}

}  // namespace

DramProbe probe_dram_read(size_t bytes, int reps) {
  DramProbe r;
  r.threads = max_threads();
  bytes = std::max<size_t>(bytes / (size_t(1) << 24), 1) << 24;  // whole 16 MiB chunks
  auto buf = allocate_aligned(bytes);
  std::memset(buf.get(), 1, bytes);
  const uint64_t* p = static_cast<const uint64_t*>(buf.get());
  const int64_t lines_per_chunk = (int64_t(1) << 24) / 64, chunks = int64_t(bytes >> 24);
  const bool wide = cpu_features().avx512f;
  std::vector<double> gbps;
  std::atomic<uint64_t> sink{0};
  for (int rep = 0; rep <= reps; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    parallel_for(chunks, 1, [&](int64_t c0, int64_t c1) {
      const int64_t b = c0 * lines_per_chunk, e = c1 * lines_per_chunk;
      sink.fetch_add(wide ? sum_lines_avx512(p, b, e) : sum_lines(p, b, e), std::memory_order_relaxed);
    });
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (rep > 0) gbps.push_back(double(bytes) / s / 1e9);
  }
  std::sort(gbps.begin(), gbps.end());
  r.best_gbps = gbps.back();
  r.median_gbps = gbps[gbps.size() / 2];
  return r;
}

}  // namespace hlx::kernels
