// Inputs shared by the micro-benchmarks.
#pragma once

#include <random>
#include <vector>

#include "core/dtype.h"

namespace hlx::bench {

// n bf16 values uniform in [-1, 1).
inline std::vector<bf16> random_bf16(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  std::vector<bf16> v(static_cast<size_t>(n));
  for (auto& x : v) x = f32_to_bf16(d(rng));
  return v;
}

}  // namespace hlx::bench
