// Byte-wise strided block copies and fills shared by the shape kernels. Every shape op
// (broadcast, transpose, slice, pad, concatenate, dynamic_(update_)slice) is one or more
// copies of a box of elements between two strided views; only the element size matters.
#pragma once

#include <cstdint>
#include <algorithm>
#include <cstring>
#include <vector>

#include "runtime/ops/elementwise_common.h"

namespace hlx::rt::shape {

// Calls f(E{}) with E the unsigned integer of `esize` bytes (1, 2, 4, else 8): the copies only
// move bits, so one loop per element size serves every dtype.
template <class F>
inline void with_element_of_size(size_t esize, F&& f) {
  switch (esize) {
    case 1:
      return f(uint8_t{});
    case 2:
      return f(uint16_t{});
    case 4:
      return f(uint32_t{});
    default:
      return f(uint64_t{});
  }
}

// Copies the box `dims`: dst[sum i_k * dst_st_k] = src[sum i_k * src_st_k]; strides in elements
// (src strides may be 0 for broadcasting).
inline void strided_copy(void* dst_v, std::vector<int64_t> dst_st, const void* src_v, std::vector<int64_t> src_st,
                         std::vector<int64_t> dims, size_t esize) {
  for (int64_t d : dims)
    if (d <= 0) return;
  // Drop size-1 dims, then merge neighbours that are contiguous in both views.
  std::vector<int64_t> D, S, T;
  for (size_t k = 0; k < dims.size(); ++k) {
    if (dims[k] == 1) continue;
    if (!D.empty() && S.back() == src_st[k] * dims[k] && T.back() == dst_st[k] * dims[k]) {
      D.back() *= dims[k];
      S.back() = src_st[k];
      T.back() = dst_st[k];
    } else {
      D.push_back(dims[k]);
      S.push_back(src_st[k]);
      T.push_back(dst_st[k]);
    }
  }
  if (D.empty()) {
    D = {1};
    S = {1};
    T = {1};
  }
  const int r = int(D.size());
  const int64_t inner = D[r - 1], s_in = S[r - 1], t_in = T[r - 1];
  int64_t rows = 1;
  for (int k = 0; k < r - 1; ++k) rows *= D[k];
  auto* dst = static_cast<uint8_t*>(dst_v);
  const auto* src = static_cast<const uint8_t*>(src_v);
  const bool par = rows > 1 && rows * inner >= ew::kParallelThreshold;
  auto copy_rows = [&](int64_t row_begin, int64_t row_end) {
    for (int64_t row = row_begin; row < row_end; ++row) {
      int64_t so = 0, to = 0, rem = row;
      for (int k = r - 2; k >= 0; --k) {
        int64_t i = rem % D[k];
        rem /= D[k];
        so += i * S[k];
        to += i * T[k];
      }
      uint8_t* dp = dst + to * int64_t(esize);
      const uint8_t* sp = src + so * int64_t(esize);
      if (s_in == 1 && t_in == 1) {
        std::memmove(dp, sp, size_t(inner) * esize);
        continue;
      }
      auto loop = [&](auto tag) {
        using E = decltype(tag);
        auto* d = reinterpret_cast<E*>(dp);
        const auto* s = reinterpret_cast<const E*>(sp);
        for (int64_t i = 0; i < inner; ++i) d[i * t_in] = s[i * s_in];
      };
      with_element_of_size(esize, loop);
    }
  };
  if (par) {
    // Rows claimed in chunks of about kParallelThreshold elements on the runtime pool.
    const int64_t grain = std::max<int64_t>(1, ew::kParallelThreshold / std::max<int64_t>(inner, 1));
    kernels::parallel_for(rows, grain, copy_rows);
  } else {
    copy_rows(0, rows);
  }
}

// Fills n elements with the element at `value`.
inline void fill(void* dst_v, int64_t n, const void* value, size_t esize) {
  auto loop = [&](auto tag) {
    using E = decltype(tag);
    E v;
    std::memcpy(&v, value, sizeof(E));
    E* d = static_cast<E*>(dst_v);
    ew::parallel_for(n, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) d[i] = v;
    });
  };
  with_element_of_size(esize, loop);
}

// Reads a scalar integer of any integer type as int64 (start indices of dynamic slices).
inline int64_t read_index(const Tensor& t) {
  switch (t.dtype()) {
    case DType::kI64:
      return *t.data<int64_t>();
    case DType::kI32:
      return *t.data<int32_t>();
    case DType::kI16:
      return *t.data<int16_t>();
    case DType::kI8:
      return *t.data<int8_t>();
    case DType::kU8:
    case DType::kI1:
      return *t.data<uint8_t>();
    default:
      return 0;
  }
}

}  // namespace hlx::rt::shape
