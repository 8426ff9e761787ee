// hlx.rotary (rotate_half convention). cos/sin are computed once per row for all heads, in f32
// from float(position) * inv_freq[i]. `out` may alias `x`: each (i, i + R/2) pair is read before
// either is written.
#include "runtime/kernels/rotary.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "runtime/kernels/internal.h"
#include "runtime/kernels/parallel.h"

namespace hlx::kernels {

Status rotary(int64_t rows, int64_t heads, int64_t head_dim, int64_t rotary_dim, DType x_type,
              const void* x, const int32_t* positions, const float* inv_freq, void* out) {
  if (rows < 0 || heads < 0 || head_dim <= 0 || rotary_dim < 0 || rotary_dim > head_dim || rotary_dim % 2)
    return make_error(ErrorKind::kInvalidArgument, "rotary: rows=", rows, " heads=", heads, " head_dim=", head_dim,
                      " rotary_dim=", rotary_dim, " (need even rotary_dim <= head_dim)");
  if (x_type != DType::kF32 && x_type != DType::kBF16)
    return make_error(ErrorKind::kUnsupported, "rotary: x type ", dtype_name(x_type), " (expected f32 or bf16)");
  const int64_t half = rotary_dim / 2;
  const int64_t row_elems = heads * head_dim;
  auto do_row = [&](int64_t r, float* cs, float* sn, float* buf) {
    const float pos = float(positions[r]);
    for (int64_t i = 0; i < half; ++i) {
      const float angle = pos * inv_freq[i];
      cs[i] = std::cos(angle);
      sn[i] = std::sin(angle);
    }
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t base = r * row_elems + h * head_dim;
      if (x_type == DType::kF32) {
        const float* xs = static_cast<const float*>(x) + base;
        float* os = static_cast<float*>(out) + base;
#pragma omp simd
        for (int64_t i = 0; i < half; ++i) {
          const float a = xs[i], b = xs[i + half];
          os[i] = a * cs[i] - b * sn[i];
          os[i + half] = b * cs[i] + a * sn[i];
        }
        if (os != xs)
          for (int64_t i = rotary_dim; i < head_dim; ++i) os[i] = xs[i];
      } else {
        const uint16_t* xs = static_cast<const uint16_t*>(x) + base;
#pragma omp simd
        for (int64_t i = 0; i < half; ++i) {
          const float a = f32_from_bits(uint32_t(xs[i]) << 16), b = f32_from_bits(uint32_t(xs[i + half]) << 16);
          buf[i] = a * cs[i] - b * sn[i];
          buf[i + half] = b * cs[i] + a * sn[i];
        }
        bf16* os = static_cast<bf16*>(out) + base;
        internal::f32_to_bf16_n(buf, rotary_dim, os);
        if (static_cast<const void*>(os) != static_cast<const void*>(xs))
          for (int64_t i = rotary_dim; i < head_dim; ++i) os[i] = bf16{xs[i]};
      }
    }
  };
  // One decode row (16 heads x 128) is ~2k elements: below 32k the OpenMP fork costs more than it saves.
  const bool parallel = rows >= 2 && rows * row_elems >= (1 << 15);
  auto run_rows = [&](int64_t r0, int64_t r1) {
    internal::FtzDazScope ftz_daz;
    thread_local std::vector<float> cs, sn, buf;
    if (cs.size() < size_t(half)) cs.resize(size_t(half));
    if (sn.size() < size_t(half)) sn.resize(size_t(half));
    if (buf.size() < size_t(rotary_dim)) buf.resize(size_t(rotary_dim));
    for (int64_t r = r0; r < r1; ++r) do_row(r, cs.data(), sn.data(), buf.data());
  };
  if (parallel) {
    parallel_for(rows, std::max<int64_t>(1, (int64_t(1) << 14) / row_elems), run_rows);  // on the runtime pool
  } else {
    run_rows(0, rows);
  }
  return ok_status();
}

}  // namespace hlx::kernels
