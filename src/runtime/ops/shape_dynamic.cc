// dynamic_slice and dynamic_update_slice: start indices are scalar tensors of any integer type,
// read at run time and clamped into range as the spec says (never an error, never out of bounds).
#include <cstring>

#include "runtime/op_kernel.h"
#include "runtime/ops/shape_copy.h"
#include "runtime/ops/shape_kernels.h"

namespace hlx::rt::shape {
namespace {

Status check_indices(const shlo::Op& op, const shlo::Function& fn, const OpTypes& t, size_t first, int64_t rank) {
  if (int64_t(t.in.size() - first) != rank)
    return bad(op, fn, str_cat("expected ", rank, " start indices, got ", t.in.size() - first));
  for (size_t i = first; i < t.in.size(); ++i)
    if (t.in[i].rank() != 0 || !is_integer(t.in[i].dtype))
      return bad(op, fn, str_cat("start index ", i - first, " must be an integer scalar"));
  return ok_status();
}

// Offset (in elements) of the clamped start corner: clamp(start, 0, dim - size) per dimension.
int64_t clamped_offset(const std::vector<const Tensor*>& inputs, size_t first, const Shape& full, const Shape& box) {
  auto st = row_major_strides(full);
  int64_t off = 0;
  for (size_t k = 0; k < full.size(); ++k) {
    int64_t s = read_index(*inputs[first + k]);
    s = std::min(std::max<int64_t>(s, 0), full[k] - box[k]);
    off += s * st[k];
  }
  return off;
}

class DynamicSliceKernel final : public OpKernel {
 public:
  explicit DynamicSliceKernel(OpTypes t) : t_(std::move(t)) {}
  Status run(const std::vector<const Tensor*>& inputs, const std::vector<Tensor*>& outputs) override {
    HLX_RETURN_IF_ERROR(check_buffers("stablehlo.dynamic_slice", inputs, outputs, t_.in, t_.out));
    const auto &in = t_.in[0].shape, &out = t_.out[0].shape;
    if (num_elements(out) == 0) return ok_status();
    size_t es = dtype_size(t_.out[0].dtype);
    int64_t off = clamped_offset(inputs, 1, in, out);
    strided_copy(outputs[0]->raw(), row_major_strides(out),
                 static_cast<const uint8_t*>(inputs[0]->raw()) + off * int64_t(es), row_major_strides(in), out, es);
    return ok_status();
  }

 private:
  OpTypes t_;
};

Result<std::unique_ptr<OpKernel>> dynamic_slice_factory(const shlo::Op& op, const shlo::Function& fn) {
  HLX_ASSIGN_OR_RETURN(OpTypes t, op_types(op, fn, 1, 1 << 20));
  HLX_ASSIGN_OR_RETURN(auto sizes, ew::i64_array_attr(op, "slice_sizes"));
  const auto &in = t.in[0], &out = t.out[0];
  HLX_RETURN_IF_ERROR(check_indices(op, fn, t, 1, in.rank()));
  if (in.dtype != out.dtype || int64_t(sizes.size()) != in.rank() || out.shape != Shape(sizes))
    return bad(op, fn, "slice_sizes must have the operand's rank and equal the result shape (dynamic_slice_c2/c5)");
  for (size_t k = 0; k < sizes.size(); ++k)
    if (sizes[k] < 0 || sizes[k] > in.shape[k])
      return bad(op, fn,
                 str_cat("slice_sizes[", k, "] = ", sizes[k], " outside [0, ", in.shape[k], "] (dynamic_slice_c4)"));
  return std::unique_ptr<OpKernel>(new DynamicSliceKernel(std::move(t)));
}

class DynamicUpdateSliceKernel final : public OpKernel {
 public:
  explicit DynamicUpdateSliceKernel(OpTypes t) : t_(std::move(t)) {}
  Status run(const std::vector<const Tensor*>& inputs, const std::vector<Tensor*>& outputs) override {
    HLX_RETURN_IF_ERROR(check_buffers("stablehlo.dynamic_update_slice", inputs, outputs, t_.in, t_.out));
    const auto &full = t_.out[0].shape, &upd = t_.in[1].shape;
    size_t es = dtype_size(t_.out[0].dtype);
    // In place (output aliases operand): only the update region is written.
    if (outputs[0]->raw() != inputs[0]->raw() && inputs[0]->nbytes()) {
      auto st = row_major_strides(full);
      strided_copy(outputs[0]->raw(), st, inputs[0]->raw(), st, full, es);
    }
    if (num_elements(upd) == 0) return ok_status();
    int64_t off = clamped_offset(inputs, 2, full, upd);
    strided_copy(static_cast<uint8_t*>(outputs[0]->raw()) + off * int64_t(es), row_major_strides(full),
                 inputs[1]->raw(), row_major_strides(upd), upd, es);
    return ok_status();
  }
  bool can_run_in_place(int index) const override { return index == 0; }

 private:
  OpTypes t_;
};

Result<std::unique_ptr<OpKernel>> dynamic_update_slice_factory(const shlo::Op& op, const shlo::Function& fn) {
  HLX_ASSIGN_OR_RETURN(OpTypes t, op_types(op, fn, 2, 1 << 20));
  const auto &in = t.in[0], &upd = t.in[1], &out = t.out[0];
  HLX_RETURN_IF_ERROR(check_indices(op, fn, t, 2, in.rank()));
  if (in != out) return bad(op, fn, "operand and result types must match (dynamic_update_slice_c1)");
  if (upd.dtype != in.dtype || upd.rank() != in.rank())
    return bad(op, fn, "update must share the operand's element type and rank (dynamic_update_slice_c2/c3)");
  for (int64_t k = 0; k < in.rank(); ++k)
    if (upd.shape[size_t(k)] > in.shape[size_t(k)])
      return bad(
          op, fn,
          str_cat("update dim ", k, " (", upd.shape[size_t(k)], ") exceeds the operand's (dynamic_update_slice_c4)"));
  return std::unique_ptr<OpKernel>(new DynamicUpdateSliceKernel(std::move(t)));
}

}  // namespace

void register_dynamic_shape_kernels(KernelRegistry& r) {
  r.add("stablehlo.dynamic_slice", &dynamic_slice_factory);
  r.add("stablehlo.dynamic_update_slice", &dynamic_update_slice_factory);
}

}  // namespace hlx::rt::shape
