#include "core/tensor.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace hlx {

std::string shape_to_string(const Shape& shape) {
  std::string s;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += 'x';
    s += std::to_string(shape[i]);
  }
  return s;
}

Result<int64_t> checked_num_elements(const Shape& shape, int64_t max_elements) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0)
      return make_error(ErrorKind::kInvalidArgument, "negative dimension in shape [", shape_to_string(shape), "]");
    if (d != 0 && n > max_elements / d)
      return make_error(ErrorKind::kInvalidArgument, "shape [", shape_to_string(shape), "] has more than ",
                        max_elements, " elements");
    n *= d;
  }
  return n;
}

std::vector<int64_t> row_major_strides(const Shape& shape) {
  std::vector<int64_t> strides(shape.size());
  int64_t s = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = s;
    s *= shape[i];
  }
  return strides;
}

std::shared_ptr<void> allocate_aligned(size_t bytes) {
  constexpr size_t kHuge = size_t(2) << 20;
  // From 1 MiB up (rounded up to whole 2 MiB pages, so at most 1 MiB of padding per buffer): the
  // int8 k/v projections of a 0.6B model are 1 MiB each, and on 4 KiB pages their products
  // streamed at ~0.7x the bandwidth of the others.
  size_t align = bytes >= kHuge / 2 ? kHuge : 64;
  size_t rounded = (std::max<size_t>(bytes, 1) + align - 1) / align * align;
  void* p = std::aligned_alloc(align, rounded);
  if (!p) throw std::bad_alloc();
  // Huge pages cut TLB misses when streaming weights (worth up to 30% bandwidth here).
  if (align == kHuge) madvise(p, rounded, MADV_HUGEPAGE);
  return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
}

// A slab lives while any piece of it does (each piece holds it through an aliasing shared_ptr);
// the slab being carved is only watched (weak), so freeing a model's weights frees its slabs.
std::shared_ptr<void> allocate_packed(size_t bytes) {
  constexpr size_t kSlab = size_t(64) << 20, kAlign = 4096;
  const size_t rounded = (std::max<size_t>(bytes, 1) + kAlign - 1) / kAlign * kAlign;
  if (rounded > kSlab / 4) return allocate_aligned(bytes);
  static std::mutex mu;
  static std::weak_ptr<void> current;
  static size_t used = 0;
  std::lock_guard<std::mutex> lock(mu);
  std::shared_ptr<void> slab = current.lock();
  if (!slab || used + rounded > kSlab) {
    slab = allocate_aligned(kSlab);
    current = slab;
    used = 0;
  }
  void* p = static_cast<char*>(slab.get()) + used;
  used += rounded;
  return std::shared_ptr<void>(slab, p);
}

Tensor Tensor::empty(DType dtype, Shape shape) {
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.storage_ = allocate_aligned(t.nbytes());
  t.data_ = t.storage_.get();
  return t;
}

Tensor Tensor::zeros(DType dtype, Shape shape) {
  Tensor t = empty(dtype, std::move(shape));
  std::memset(t.data_, 0, t.nbytes());
  return t;
}

Tensor Tensor::borrow(DType dtype, Shape shape, void* data, std::shared_ptr<void> keepalive) {
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.data_ = data;
  t.storage_ = std::move(keepalive);
  return t;
}

Result<Tensor> Tensor::reshaped(Shape shape) const {
  HLX_ASSIGN_OR_RETURN(int64_t n, checked_num_elements(shape));
  if (n != num_elements())
    return make_error(ErrorKind::kInvalidArgument, "cannot reshape ", type_string(), " to [", shape_to_string(shape),
                      "]");
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::clone() const {
  Tensor t = empty(dtype_, shape_);
  if (nbytes()) std::memcpy(t.data_, data_, nbytes());
  return t;
}

std::string Tensor::type_string() const { return str_cat(dtype_name(dtype_), "[", shape_to_string(shape_), "]"); }

}  // namespace hlx
