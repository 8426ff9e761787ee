// Helpers shared by the kernel files (not a public API).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace hlx::kernels::internal {

// Sets flush-to-zero and denormals-are-zero in this thread's MXCSR for the guard's lifetime and
// restores the previous mode after. Declared at the top of every OpenMP region, so the kernels run
// with FTZ/DAZ on every thread while the caller's own floating-point mode is left as it was.
class FtzDazScope {
 public:
  FtzDazScope() {
    __asm__ volatile("stmxcsr %0" : "=m"(saved_));
    unsigned csr = saved_ | 0x8040u;  // FTZ (bit 15) | DAZ (bit 6)
    __asm__ volatile("ldmxcsr %0" : : "m"(csr));
  }
  ~FtzDazScope() { __asm__ volatile("ldmxcsr %0" : : "m"(saved_)); }
  FtzDazScope(const FtzDazScope&) = delete;
  FtzDazScope& operator=(const FtzDazScope&) = delete;

 private:
  unsigned saved_ = 0;
};

inline float load_f32(DType t, const void* p, int64_t i) {
  switch (t) {
    case DType::kBF16:
      return bf16_to_f32(static_cast<const bf16*>(p)[i]);
    case DType::kF16:
      return f16_to_f32(static_cast<const f16*>(p)[i]);
    default:
      return static_cast<const float*>(p)[i];
  }
}

// A growable scratch buffer (64-byte aligned) that keeps its largest allocation; kernels hold
// them thread_local for operand conversions and tiles (get() is in matmul.cc).
struct ScratchBuffer {
  std::shared_ptr<void> buf;
  size_t size = 0;
  void* get(size_t bytes);
};

// Converts n elements of `t` (f32, bf16, f16) to f32.
void to_f32(DType t, const void* src, int64_t n, float* dst);
// Converts n f32 values to bf16 (round to nearest even).
void f32_to_bf16_n(const float* src, int64_t n, bf16* dst);

// The operand types and M the quantized weights (int8, int4) multiply: A f32/bf16/f16, C f32/bf16,
// M >= 0; `format` names the weight in the error.
Status check_quantized_multiply(const char* format, int64_t m, DType a_type, DType c_type);

// ---- AVX-512 entry points (defined in *_avx512.cc; call only when cpu_features() allows) ----

// Weight-streaming product for small M over oneDNN's avx512_core_bf16 weight layout
// BA16a64b2a: blocks of 64 output columns, each [Kp/2][64][2] bf16 with Kp = K padded (with
// zeros) to a multiple of 32, block stride Kp * 64 elements, 64-byte aligned.
// C[m, n] (f32 or bf16, row stride N) = sum_k A[m, k] * W[k, n]; A bf16 [M, K] contiguous.
// Parallel over column blocks on the hlx pool (parallel.h).
void gemv_vnni_bf16_avx512(int64_t m, int64_t n, int64_t k, int64_t kp, const bf16* a, const bf16* w_packed,
                           DType c_type, void* c);

// One product of a grouped call: its own packed weight (as above) and output [M, n].
struct GemvTarget {
  int64_t n = 0, kp = 0;
  const bf16* w_packed = nullptr;
  void* c = nullptr;
};
// Numbering across consecutive parts: first[t] is part t's first index, first.back() the total.
// block_starts: the parts are the targets' 64-column blocks, in target order.
std::vector<int64_t> block_starts(const GemvTarget* targets, int count);
// The part t holding index i (first[t] <= i < first[t + 1]).
int part_of(const std::vector<int64_t>& first, int64_t i);

// C_t = A · W_t for `count` products sharing A (and so M and K), as ONE parallel_for over the
// union of their column blocks: sibling products (q/k/v, gate/up) pay one pool start and one
// tail instead of one each. Every output gets exactly gemv_vnni_bf16_avx512's bits.
void gemv_vnni_bf16_avx512_grouped(int64_t m, int64_t k, const bf16* a, const GemvTarget* targets, int count,
                                   DType c_type);

// The same product for prefill-sized M (gemm_avx512.cc): register tiles of 6 rows x 64 columns,
// C written in place. Each output is computed with exactly gemv_vnni_bf16_avx512's arithmetic, so
// a row's bits do not depend on M, the tiling or the thread count. Parallel on the hlx pool.
void gemm_bf16_avx512(int64_t m, int64_t n, int64_t k, int64_t kp, const bf16* a, const bf16* w_packed, DType c_type,
                      void* c);
// gemm_bf16_avx512 for `count` products sharing A: A packed once, one parallel_for over the union
// of their column blocks. Every output gets exactly gemm_bf16_avx512's bits.
void gemm_bf16_avx512_grouped(int64_t m, int64_t k, const bf16* a, const GemvTarget* targets, int count, DType c_type);

// f32 -> bf16 conversion with AVX-512 BF16 (vcvtne2ps2bf16).
void f32_to_bf16_avx512(const float* src, int64_t n, bf16* dst);

}  // namespace hlx::kernels::internal
