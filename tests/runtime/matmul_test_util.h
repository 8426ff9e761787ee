// Operand helpers shared by the matmul and norm tests: random values, storing them as a dtype (and
// rounding the f32 copy to what that dtype holds, so references see the kernel's exact inputs).
#pragma once

#include <cstring>
#include <random>
#include <vector>

#include "core/dtype.h"

namespace hlx::matmul_test {

inline std::vector<float> rand_vec(int64_t n, uint32_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(rng);
  return v;
}

// Stores `v` as `t` (f32, bf16 or f16) and rounds `v` in place to what `t` holds.
inline std::vector<uint8_t> store(DType t, std::vector<float>& v) {
  std::vector<uint8_t> out(v.size() * dtype_size(t));
  for (size_t i = 0; i < v.size(); ++i) {
    if (t == DType::kF32) {
      std::memcpy(&out[i * 4], &v[i], 4);
    } else if (t == DType::kBF16) {
      bf16 h = f32_to_bf16(v[i]);
      std::memcpy(&out[i * 2], &h, 2);
      v[i] = bf16_to_f32(h);
    } else {
      f16 h = f32_to_f16(v[i]);
      std::memcpy(&out[i * 2], &h, 2);
      v[i] = f16_to_f32(h);
    }
  }
  return out;
}

// Element i of an f32 or bf16 result buffer.
inline float load(DType t, const std::vector<uint8_t>& bytes, size_t i) {
  if (t == DType::kF32) {
    float f;
    std::memcpy(&f, &bytes[i * 4], 4);
    return f;
  }
  bf16 h;
  std::memcpy(&h, &bytes[i * 2], 2);
  return bf16_to_f32(h);
}

}  // namespace hlx::matmul_test
