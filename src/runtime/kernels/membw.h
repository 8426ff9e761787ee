// A DRAM read-bandwidth probe for `hlx bench` and the kernel benchmarks: the ceiling that the
// decode roofline divides by.
#pragma once

#include <cstddef>

namespace hlx::kernels {

struct DramProbe {
  double best_gbps = 0;  // best of the repetitions (GB/s = 1e9 bytes/s)
  double median_gbps = 0;
  int threads = 0;
};

// Sums a `bytes` buffer (far beyond the LLC; 1 GiB by default) with 512-bit loads where the CPU
// has AVX-512, on max_threads() threads of the runtime pool, in 16 MiB chunks claimed
// dynamically; `reps` timed passes after one untimed pass.
DramProbe probe_dram_read(size_t bytes = size_t(1) << 30, int reps = 5);

}  // namespace hlx::kernels
