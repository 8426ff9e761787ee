// A dense, row-major tensor: dtype + shape + a shared handle to bytes it owns or borrows
// (e.g. a memory-mapped weight). Copies share the same storage.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace hlx {

using Shape = std::vector<int64_t>;

std::string shape_to_string(const Shape& shape);  // "2x3x4", "" for a scalar
// Product of dims, or an error when a dim is negative or the product overflows `max_elements`.
Result<int64_t> checked_num_elements(const Shape& shape, int64_t max_elements = int64_t(1) << 48);
inline int64_t num_elements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}
// Row-major strides in elements.
std::vector<int64_t> row_major_strides(const Shape& shape);

// Memory allocated 64-byte aligned; from 1 MiB up it is 2 MiB-aligned, rounded up to whole 2 MiB
// pages and advised for huge pages.
std::shared_ptr<void> allocate_aligned(size_t bytes);
// Memory for packed weights (read-only after packing, freed with their model): 4 KiB-aligned
// pieces of shared huge-page slabs, so a 1 MiB weight shares its 2 MiB page with the next one
// instead of being padded to a page of its own. Thread-safe.
std::shared_ptr<void> allocate_packed(size_t bytes);

class Tensor {
 public:
  Tensor() = default;
  // Zero-filled owned storage.
  static Tensor zeros(DType dtype, Shape shape);
  // Uninitialised owned storage (for outputs that are fully written).
  static Tensor empty(DType dtype, Shape shape);
  // Views `data` without copying; `keepalive` holds whatever owns it (an mmap, a parent tensor).
  static Tensor borrow(DType dtype, Shape shape, void* data, std::shared_ptr<void> keepalive);

  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t rank() const { return int64_t(shape_.size()); }
  int64_t dim(int64_t i) const { return shape_[size_t(i)]; }
  int64_t num_elements() const { return hlx::num_elements(shape_); }
  size_t nbytes() const { return size_t(num_elements()) * dtype_size(dtype_); }
  bool defined() const { return data_ != nullptr || num_elements() == 0; }

  void* raw() { return data_; }
  const void* raw() const { return data_; }
  template <class T>
  T* data() {
    return static_cast<T*>(data_);
  }
  template <class T>
  const T* data() const {
    return static_cast<const T*>(data_);
  }
  const std::shared_ptr<void>& storage() const { return storage_; }

  // Same bytes, new shape with the same element count.
  Result<Tensor> reshaped(Shape shape) const;
  // Deep copy into fresh owned storage.
  Tensor clone() const;
  // "bf16[2x3]"
  std::string type_string() const;

 private:
  DType dtype_ = DType::kF32;
  Shape shape_;
  void* data_ = nullptr;
  std::shared_ptr<void> storage_;
};

}  // namespace hlx
