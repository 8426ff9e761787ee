// Dispatch for ew_vec.h: AVX-512 bodies when the CPU has them, else the scalar definitions.
#include "runtime/kernels/ew_vec.h"

#include "runtime/kernels/cpu.h"

namespace hlx::kernels {
namespace {
// The bodies use AVX512BW for the 16-bit masked loads/stores.
bool use_avx512() {
  static const bool v = cpu_features().avx512f && cpu_features().avx512bw;
  return v;
}
}  // namespace

void f32_to_bf16_exact(const float* x, bf16* y, int64_t n) {
  if (use_avx512()) return internal::f32_to_bf16_exact_avx512(x, y, n);
  for (int64_t i = 0; i < n; ++i) y[i] = f32_to_bf16(x[i]);
}

void bf16_to_f32_n(const bf16* x, float* y, int64_t n) {
  if (use_avx512()) return internal::bf16_to_f32_avx512(x, y, n);
  for (int64_t i = 0; i < n; ++i) y[i] = bf16_to_f32(x[i]);
}

void round_to_bf16(const float* x, float* y, int64_t n) {
  if (use_avx512()) return internal::round_to_bf16_avx512(x, y, n);
  for (int64_t i = 0; i < n; ++i) y[i] = bf16_to_f32(f32_to_bf16(x[i]));
}

void binary_f32(VecBinOp op, const float* a, const float* b, float* y, int64_t n) {
  if (use_avx512()) return internal::binary_f32_avx512(op, a, b, y, n);
  switch (op) {
    case VecBinOp::kAdd:
      for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
      return;
    case VecBinOp::kSub:
      for (int64_t i = 0; i < n; ++i) y[i] = a[i] - b[i];
      return;
    case VecBinOp::kMul:
      for (int64_t i = 0; i < n; ++i) y[i] = a[i] * b[i];
      return;
    case VecBinOp::kDiv:
      for (int64_t i = 0; i < n; ++i) y[i] = a[i] / b[i];
      return;
  }
}

}  // namespace hlx::kernels
