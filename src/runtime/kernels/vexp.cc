// Dispatch for vexp.h: AVX-512 when the CPU has it, else <cmath> (the pre-vector semantics).
#include "runtime/kernels/vexp.h"

#include <cmath>

#include "runtime/kernels/cpu.h"

namespace hlx::kernels {

void exp_f32(const float* x, float* y, int64_t n) {
  if (cpu_features().avx512f) return internal::exp_f32_avx512(x, y, n);
  for (int64_t i = 0; i < n; ++i) y[i] = std::exp(x[i]);
}

void logistic_f32(const float* x, float* y, int64_t n) {
  if (cpu_features().avx512f) return internal::logistic_f32_avx512(x, y, n);
  for (int64_t i = 0; i < n; ++i) {  // as the AVX-512 body: e^-|x| never overflows
    const float e = std::exp(-std::fabs(x[i]));
    y[i] = (x[i] >= 0.0f ? 1.0f : e) / (1.0f + e);
  }
}

void tanh_f32(const float* x, float* y, int64_t n) {
  if (cpu_features().avx512f) return internal::tanh_f32_avx512(x, y, n);
  for (int64_t i = 0; i < n; ++i) y[i] = std::tanh(x[i]);
}

}  // namespace hlx::kernels
