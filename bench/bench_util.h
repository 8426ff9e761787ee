// Inputs shared by the micro-benchmarks.
#pragma once

#include <algorithm>
#include <chrono>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "runtime/kernels/matmul.h"

namespace hlx::bench {

// n bf16 values uniform in [-1, 1).
inline std::vector<bf16> random_bf16(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  std::vector<bf16> v(static_cast<size_t>(n));
  for (auto& x : v) x = f32_to_bf16(d(rng));
  return v;
}

// Packed bf16 GEMM rate (GFLOP/s) on [m, k] x [k, n] (f32 out), best of 5 runs: the yardstick the
// vision-tower benches divide by, measured in the same run with the towers' product order.
inline double packed_bf16_gemm_rate(int64_t m, int64_t n, int64_t k) {
  auto w = random_bf16(k * n, 7);
  auto p = kernels::PackedWeight::pack(DType::kBF16, k, n, /*transposed=*/true, w.data(),
                                       kernels::WeightFormat::kAsStored, kernels::ProductOrder::kAnyOrder);
  if (!p.ok()) return 0;
  auto a = random_bf16(m * k, 1);
  std::vector<float> c(static_cast<size_t>(m * n));
  double best = 1e30;
  for (int r = 0; r < 5; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    if (!(*p)->multiply(m, DType::kBF16, a.data(), DType::kF32, c.data()).ok()) return 0;
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return 2.0 * double(m) * double(n) * double(k) / best / 1e9;
}

}  // namespace hlx::bench
