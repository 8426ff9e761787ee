// hlx.rms_norm / hlx.layer_norm: each row is widened to f32 once, reduced with `omp simd`
// reductions (vectorised under the x86-64-v2 baseline), and written back in x's type.
// `out` may alias `x` (the row is fully read before it is written).
#include "runtime/kernels/norms.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "runtime/kernels/cpu.h"
#include "runtime/kernels/ew_vec.h"
#include "runtime/kernels/internal.h"
#include "runtime/kernels/norms_internal.h"
#include "runtime/kernels/parallel.h"

namespace hlx::kernels {
namespace {

// Rows per call below which the work (rows * dim elements) stays on the calling thread: an
// OpenMP fork costs a few microseconds, more than normalising one 1024-wide decode row.
constexpr int64_t kParallelMinElements = 1 << 15;

Status check(const char* what, int64_t rows, int64_t dim, DType x_type, DType w_type) {
  if (rows < 0 || dim <= 0)
    return make_error(ErrorKind::kInvalidArgument, what, ": rows=", rows, " dim=", dim, " (need rows >= 0, dim > 0)");
  if (x_type != DType::kF32 && x_type != DType::kBF16)
    return make_error(ErrorKind::kUnsupported, what, ": x type ", dtype_name(x_type), " (expected f32 or bf16)");
  if (w_type != DType::kF32 && w_type != DType::kBF16 && w_type != DType::kF16)
    return make_error(ErrorKind::kUnsupported, what, ": weight type ", dtype_name(w_type),
                      " (expected f32, bf16 or f16)");
  return ok_status();
}

void load_row(DType t, const void* x, int64_t row, int64_t dim, float* dst) {
  if (t == DType::kF32) {
    const float* s = static_cast<const float*>(x) + row * dim;
#pragma omp simd
    for (int64_t i = 0; i < dim; ++i) dst[i] = s[i];
  } else {
    const uint16_t* s = static_cast<const uint16_t*>(x) + row * dim;
#pragma omp simd
    for (int64_t i = 0; i < dim; ++i) dst[i] = f32_from_bits(uint32_t(s[i]) << 16);
  }
}

void store_row(DType t, const float* src, int64_t row, int64_t dim, void* out) {
  if (t == DType::kF32) {
    float* d = static_cast<float*>(out) + row * dim;
#pragma omp simd
    for (int64_t i = 0; i < dim; ++i) d[i] = src[i];
  } else {
    internal::f32_to_bf16_n(src, dim, static_cast<bf16*>(out) + row * dim);
  }
}

// Per-thread scratch rows: a decode-sized norm (one 1024-wide row) is ~0.1 us of arithmetic,
// less than a heap allocation pair.
float* scratch(int which, int64_t n) {
  thread_local std::vector<float> bufs[3];
  auto& b = bufs[which];
  if (b.size() < size_t(n)) b.resize(size_t(n));
  return b.data();
}

// Calls fn(r0, r1, buf) over ranges of rows, buf holding `buf_rows` rows of scratch.
template <class RangeFn>
void for_row_ranges(int64_t rows, int64_t dim, int64_t buf_rows, RangeFn fn) {
  if (rows * dim < kParallelMinElements || rows < 2) {
    fn(int64_t(0), rows, scratch(0, buf_rows * dim));
    return;
  }
  // Rows on the runtime pool (parallel.h), chunks of ~kParallelMinElements / 2 elements.
  const int64_t grain = std::max<int64_t>(1, kParallelMinElements / 2 / dim);
  parallel_for(rows, grain, [&](int64_t r0, int64_t r1) {
    internal::FtzDazScope ftz_daz;
    fn(r0, r1, scratch(0, buf_rows * dim));
  });
}

template <class RowFn>
void for_rows(int64_t rows, int64_t dim, RowFn fn) {
  for_row_ranges(rows, dim, 1, [&](int64_t r0, int64_t r1, float* buf) {
    for (int64_t r = r0; r < r1; ++r) fn(r, buf);
  });
}

}  // namespace

namespace internal {

Status rms_norm_portable(int64_t rows, int64_t dim, DType x_type, const void* x, DType w_type, const void* weight,
                         float epsilon, float weight_offset, void* out) {
  HLX_RETURN_IF_ERROR(check("rms_norm", rows, dim, x_type, w_type));
  float* wp = scratch(1, dim);
  internal::to_f32(w_type, weight, dim, wp);
  for (int64_t i = 0; i < dim; ++i) wp[i] += weight_offset;
  for_rows(rows, dim, [&](int64_t r, float* row) {
    load_row(x_type, x, r, dim, row);
    // Four running sums (element i into sum i % 4), the last dim % 4 squares added to sum 0, then
    // the sums in order: written out so that the order, and so the bits, do not depend on how a
    // compiler vectorises (norms_avx512.cc computes the same order).
    float lane[4] = {0.f, 0.f, 0.f, 0.f};
    const int64_t dim4 = dim & ~int64_t(3);
    for (int64_t i = 0; i < dim4; i += 4)
      for (int j = 0; j < 4; ++j) {
        const float sq = row[i + j] * row[i + j];
        lane[j] = lane[j] + sq;
      }
    for (int64_t i = dim4; i < dim; ++i) {
      const float sq = row[i] * row[i];
      lane[0] = sq + lane[0];
    }
    const float ss = (((0.f + lane[0]) + lane[1]) + lane[2]) + lane[3];
    const float inv = 1.f / std::sqrt(ss / float(dim) + epsilon);
#pragma omp simd
    for (int64_t i = 0; i < dim; ++i) row[i] = row[i] * inv * wp[i];
    store_row(x_type, row, r, dim, out);
  });
  return ok_status();
}

}  // namespace internal

Status rms_norm(int64_t rows, int64_t dim, DType x_type, const void* x, DType w_type, const void* weight, float epsilon,
                float weight_offset, void* out) {
  static const bool avx512 = cpu_features().avx512f && cpu_features().avx512bw;
  if (!avx512) return internal::rms_norm_portable(rows, dim, x_type, x, w_type, weight, epsilon, weight_offset, out);
  HLX_RETURN_IF_ERROR(check("rms_norm", rows, dim, x_type, w_type));
  float* wp = scratch(1, dim);
  internal::to_f32(w_type, weight, dim, wp);
  for (int64_t i = 0; i < dim; ++i) wp[i] += weight_offset;
  // f32 rows are normalised straight from x to out; bf16 rows go through f32 scratch, kBlock
  // rows at a time.
  constexpr int64_t kBlock = 8;
  for_row_ranges(rows, dim, kBlock, [&](int64_t r0, int64_t r1, float* buf) {
    if (x_type == DType::kF32) {
      internal::rms_norm_rows_avx512(static_cast<const float*>(x) + r0 * dim, r1 - r0, wp, dim, epsilon,
                                     static_cast<float*>(out) + r0 * dim);
      return;
    }
    for (int64_t b = r0; b < r1; b += kBlock) {
      const int64_t nb = std::min(kBlock, r1 - b);
      bf16_to_f32_n(static_cast<const bf16*>(x) + b * dim, buf, nb * dim);
      internal::rms_norm_rows_avx512(buf, nb, wp, dim, epsilon, buf);
      internal::f32_to_bf16_n(buf, nb * dim, static_cast<bf16*>(out) + b * dim);
    }
  });
  return ok_status();
}

Status layer_norm(int64_t rows, int64_t dim, DType x_type, const void* x, DType w_type, const void* weight,
                  const void* bias, float epsilon, void* out) {
  HLX_RETURN_IF_ERROR(check("layer_norm", rows, dim, x_type, w_type));
  float* wp = scratch(1, dim);
  float* bp = scratch(2, dim);
  internal::to_f32(w_type, weight, dim, wp);
  internal::to_f32(w_type, bias, dim, bp);
  for_rows(rows, dim, [&](int64_t r, float* row) {
    load_row(x_type, x, r, dim, row);
    float sum = 0.f;
#pragma omp simd reduction(+ : sum)
    for (int64_t i = 0; i < dim; ++i) sum += row[i];
    const float mean = sum / float(dim);
    float var = 0.f;  // two-pass: no cancellation when |mean| >> std
#pragma omp simd reduction(+ : var)
    for (int64_t i = 0; i < dim; ++i) var += (row[i] - mean) * (row[i] - mean);
    const float inv = 1.f / std::sqrt(var / float(dim) + epsilon);
#pragma omp simd
    for (int64_t i = 0; i < dim; ++i) row[i] = (row[i] - mean) * inv * wp[i] + bp[i];
    store_row(x_type, row, r, dim, out);
  });
  return ok_status();
}

}  // namespace hlx::kernels
