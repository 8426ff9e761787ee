#include "engine/quantized_weight.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <numeric>
#include <vector>

#include "runtime/kernels/parallel.h"

namespace hlx::engine {

Result<std::unique_ptr<kernels::PackedWeight>> pack_quantized_linear(const Int4Linear& l) {
  const int64_t k = l.k(), group = l.group_size(), groups = l.groups();
  kernels::Int4Source src;
  src.k = k;
  src.n = l.n();
  src.group = group;
  std::vector<int32_t> order(static_cast<size_t>(k));
  std::iota(order.begin(), order.end(), 0);
  if (l.has_g_idx()) {
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return l.group_of(a) < l.group_of(b); });
    for (int64_t i = 0; i < k; ++i)
      if (l.group_of(order[size_t(i)]) != i / group)
        return make_error(ErrorKind::kUnsupported, "g_idx: group ", i / group, " does not hold ", group,
                          " inputs (packed position ", i, " is input ", order[size_t(i)], " of group ",
                          l.group_of(order[size_t(i)]), "); only equal-size groups are supported");
    bool identity = true;
    for (int64_t i = 0; i < k && identity; ++i) identity = order[size_t(i)] == i;
    if (!identity) src.perm = order;
  }
  // Codes in packed order (q[k'] = code(n, order[k'])); m = -s * z per group.
  src.column = [&l, k, groups, order](int64_t n, uint8_t* q, float* s, float* m) -> Status {
    for (int64_t i = 0; i < k; ++i) q[i] = l.code(n, order[size_t(i)]);
    for (int64_t g = 0; g < groups; ++g) {
      s[g] = l.scale(g, n);
      m[g] = -(s[g] * float(l.zero(g, n)));
    }
    return ok_status();
  };
  return kernels::pack_int4(src);
}

Result<std::unique_ptr<kernels::PackedWeight>> pack_fp8_linear(const Fp8Linear& l, kernels::WeightFormat format,
                                                               std::vector<float>& w) {
  const int64_t n = l.n(), k = l.k();
  // One layer's f32 copy at a time: at Qwen3-0.6B's largest, 3072 x 1024, 12 MiB. Rows in parallel
  // (the dequantization was ~40 % of an FP8 model's load on one thread): each thread writes only
  // its own rows of w; the lowest row holding a NaN code is kept by an atomic minimum.
  w.resize(static_cast<size_t>(n * k));
  std::atomic<int64_t> first_nan_row{n};
  kernels::parallel_for(n, 16, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      float* row = w.data() + r * k;
      l.dequantize_row(r, row);
      bool nan = false;
      for (int64_t i = 0; i < k; ++i) nan |= std::isnan(row[i]);
      if (nan) {
        int64_t seen = first_nan_row.load();
        while (r < seen && !first_nan_row.compare_exchange_weak(seen, r)) {
        }
        return;
      }
    }
  });
  if (const int64_t r = first_nan_row.load(); r < n) {
    const float* row = w.data() + r * k;
    const int64_t i = std::find_if(row, row + k, [](float x) { return std::isnan(x); }) - row;
    return make_error(ErrorKind::kInvalidArgument, "weight[", r, ", ", i, "] is the F8_E4M3 NaN code");
  }
  return kernels::PackedWeight::pack(
      DType::kF32, k, n, /*transposed=*/true, w.data(),
      format == kernels::WeightFormat::kInt4 ? kernels::WeightFormat::kInt4 : kernels::WeightFormat::kInt8);
}

}  // namespace hlx::engine
