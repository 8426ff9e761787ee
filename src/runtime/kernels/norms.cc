// hlx.rms_norm / hlx.layer_norm: each row is widened to f32 once, reduced with `omp simd`
// reductions (vectorised under the x86-64-v2 baseline), and written back in x's type.
// `out` may alias `x` (the row is fully read before it is written).
#include "runtime/kernels/norms.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "runtime/kernels/internal.h"
#include "runtime/kernels/parallel.h"

namespace hlx::kernels {
namespace {

// Rows per call below which the work (rows * dim elements) stays on the calling thread: an
// OpenMP fork costs a few microseconds, more than normalising one 1024-wide decode row.
constexpr int64_t kParallelMinElements = 1 << 15;

Status check(const char* what, int64_t rows, int64_t dim, DType x_type, DType w_type) {
  if (rows < 0 || dim <= 0)
    return make_error(ErrorKind::kInvalidArgument, what, ": rows=", rows, " dim=", dim,
                      " (need rows >= 0, dim > 0)");
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

template <class RowFn>
void for_rows(int64_t rows, int64_t dim, RowFn fn) {
  if (rows * dim < kParallelMinElements || rows < 2) {
    float* buf = scratch(0, dim);
    for (int64_t r = 0; r < rows; ++r) fn(r, buf);
    return;
  }
  // Rows on the runtime pool (parallel.h), chunks of ~kParallelMinElements / 2 elements.
  const int64_t grain = std::max<int64_t>(1, kParallelMinElements / 2 / dim);
  parallel_for(rows, grain, [&](int64_t r0, int64_t r1) {
    internal::FtzDazScope ftz_daz;
    float* buf = scratch(0, dim);
    for (int64_t r = r0; r < r1; ++r) fn(r, buf);
  });
}

}  // namespace

Status rms_norm(int64_t rows, int64_t dim, DType x_type, const void* x, DType w_type, const void* weight,
                float epsilon, float weight_offset, void* out) {
  HLX_RETURN_IF_ERROR(check("rms_norm", rows, dim, x_type, w_type));
  float* wp = scratch(1, dim);
  internal::to_f32(w_type, weight, dim, wp);
  for (int64_t i = 0; i < dim; ++i) wp[i] += weight_offset;
  for_rows(rows, dim, [&](int64_t r, float* row) {
    load_row(x_type, x, r, dim, row);
    float ss = 0.f;
#pragma omp simd reduction(+ : ss)
    for (int64_t i = 0; i < dim; ++i) ss += row[i] * row[i];
    const float inv = 1.f / std::sqrt(ss / float(dim) + epsilon);
#pragma omp simd
    for (int64_t i = 0; i < dim; ++i) row[i] = row[i] * inv * wp[i];
    store_row(x_type, row, r, dim, out);
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
