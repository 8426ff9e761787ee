// Shape kernels without run-time indices: constant, iota, reshape, broadcast_in_dim, transpose,
// slice, concatenate, pad. All element types: copies are byte-wise, keyed by element size.
#include <cstring>

#include "runtime/op_kernel.h"
#include "runtime/ops/elementwise_convert.h"
#include "runtime/ops/shape_copy.h"
#include "runtime/ops/shape_kernels.h"

namespace hlx::rt {
namespace shape {
namespace {

// ---- constant: the Dense bytes, copied out on every run ----

class ConstantKernel final : public OpKernel {
 public:
  ConstantKernel(shlo::TensorType t, std::shared_ptr<const shlo::DenseElements> v)
      : t_(std::move(t)), v_(std::move(v)) {}
  Status run(const std::vector<const Tensor*>& inputs, const std::vector<Tensor*>& outputs) override {
    HLX_RETURN_IF_ERROR(check_buffers("stablehlo.constant", inputs, outputs, {}, {t_}));
    if (!v_->bytes.empty()) std::memcpy(outputs[0]->raw(), v_->bytes.data(), v_->bytes.size());
    return ok_status();
  }

 private:
  shlo::TensorType t_;
  std::shared_ptr<const shlo::DenseElements> v_;
};

Result<std::unique_ptr<OpKernel>> constant_factory(const shlo::Op& op, const shlo::Function& fn) {
  HLX_ASSIGN_OR_RETURN(OpTypes t, op_types(op, fn, 0, 0));
  const shlo::Attr* a = op.attr("value");
  if (!a || a->kind != shlo::Attr::Kind::kDense || !a->dense) return bad(op, fn, "missing dense 'value' attribute");
  const auto& out = t.out[0];
  if (a->dense->type.dtype != out.dtype ||
      a->dense->bytes.size() != size_t(num_elements(out.shape)) * dtype_size(out.dtype))
    return bad(op, fn,
               str_cat("value ", a->dense->type.to_string(), " with ", a->dense->bytes.size(),
                       " bytes does not fill the result type"));
  return std::unique_ptr<OpKernel>(new ConstantKernel(out, a->dense));
}

// ---- iota ----

class IotaKernel final : public OpKernel {
 public:
  IotaKernel(shlo::TensorType t, int64_t dim, std::vector<uint8_t> table) : t_(std::move(t)), table_(std::move(table)) {
    stride_ = row_major_strides(t_.shape)[size_t(dim)];
    dim_size_ = t_.shape[size_t(dim)];
  }
  Status run(const std::vector<const Tensor*>& inputs, const std::vector<Tensor*>& outputs) override {
    HLX_RETURN_IF_ERROR(check_buffers("stablehlo.iota", inputs, outputs, {}, {t_}));
    const int64_t n = num_elements(t_.shape);
    const size_t es = dtype_size(t_.dtype);
    // Element i holds table[(i / stride) % dim]: one run of `stride` equal values per step.
    const int64_t runs = n / std::max<int64_t>(stride_, 1);
    std::vector<int64_t> dst_st{stride_ * dim_size_, stride_, 1}, src_st{0, 1, 0};
    strided_copy(outputs[0]->raw(), dst_st, table_.data(), src_st,
                 {runs / std::max<int64_t>(dim_size_, 1), dim_size_, stride_}, es);
    return ok_status();
  }

 private:
  shlo::TensorType t_;
  std::vector<uint8_t> table_;  // the converted values 0..dim-1
  int64_t stride_ = 1, dim_size_ = 1;
};

Result<std::unique_ptr<OpKernel>> iota_factory(const shlo::Op& op, const shlo::Function& fn) {
  HLX_ASSIGN_OR_RETURN(OpTypes t, op_types(op, fn, 0, 0));
  HLX_ASSIGN_OR_RETURN(int64_t dim, ew::int_attr(op, "iota_dimension"));
  const auto& out = t.out[0];
  if (dim < 0 || dim >= out.rank()) return bad(op, fn, str_cat("iota_dimension ", dim, " out of range (iota_c1)"));
  int64_t n = out.shape[size_t(dim)];
  size_t es = dtype_size(out.dtype);
  std::vector<uint8_t> table(size_t(n) * es);
  ew::dispatch(out.dtype, [&](auto d) {
    constexpr DType D = decltype(d)::value;
    for (int64_t i = 0; i < n; ++i) {
      ew::St<D> v = ew::convert_scalar<DType::kI64, D>(i);
      std::memcpy(&table[size_t(i) * es], &v, es);
    }
  });
  return std::unique_ptr<OpKernel>(new IotaKernel(out, dim, std::move(table)));
}

// ---- reshape: the same bytes; a no-op when the executor aliases the buffers ----

class ReshapeKernel final : public OpKernel {
 public:
  explicit ReshapeKernel(OpTypes t) : t_(std::move(t)) {}
  Status run(const std::vector<const Tensor*>& inputs, const std::vector<Tensor*>& outputs) override {
    HLX_RETURN_IF_ERROR(check_buffers("stablehlo.reshape", inputs, outputs, t_.in, t_.out));
    if (outputs[0]->raw() != inputs[0]->raw() && inputs[0]->nbytes())
      std::memcpy(outputs[0]->raw(), inputs[0]->raw(), inputs[0]->nbytes());
    return ok_status();
  }
  bool can_run_in_place(int index) const override { return index == 0; }

 private:
  OpTypes t_;
};

Result<std::unique_ptr<OpKernel>> reshape_factory(const shlo::Op& op, const shlo::Function& fn) {
  HLX_ASSIGN_OR_RETURN(OpTypes t, op_types(op, fn, 1, 1));
  if (t.in[0].dtype != t.out[0].dtype || num_elements(t.in[0].shape) != num_elements(t.out[0].shape))
    return bad(op, fn, "element type and count must match (reshape_c1)");
  return std::unique_ptr<OpKernel>(new ReshapeKernel(std::move(t)));
}

// ---- a single strided copy with fixed strides: broadcast_in_dim, transpose, slice ----

class CopyKernel final : public OpKernel {
 public:
  CopyKernel(std::string name, OpTypes t, int64_t src_offset, std::vector<int64_t> src_st)
      : name_(std::move(name)), t_(std::move(t)), off_(src_offset), src_st_(std::move(src_st)) {}
  Status run(const std::vector<const Tensor*>& inputs, const std::vector<Tensor*>& outputs) override {
    HLX_RETURN_IF_ERROR(check_buffers(name_, inputs, outputs, t_.in, t_.out));
    size_t es = dtype_size(t_.out[0].dtype);
    const auto* src = static_cast<const uint8_t*>(inputs[0]->raw()) + off_ * int64_t(es);
    strided_copy(outputs[0]->raw(), row_major_strides(t_.out[0].shape), src, src_st_, t_.out[0].shape, es);
    return ok_status();
  }

 private:
  std::string name_;
  OpTypes t_;
  int64_t off_;
  std::vector<int64_t> src_st_;  // per output dim, in input elements
};

Result<std::unique_ptr<OpKernel>> broadcast_factory(const shlo::Op& op, const shlo::Function& fn) {
  HLX_ASSIGN_OR_RETURN(OpTypes t, op_types(op, fn, 1, 1));
  HLX_ASSIGN_OR_RETURN(auto dims, ew::i64_array_attr(op, "broadcast_dimensions"));
  const auto &in = t.in[0], &out = t.out[0];
  if (in.dtype != out.dtype) return bad(op, fn, "element types must match (broadcast_in_dim_c1)");
  if (int64_t(dims.size()) != in.rank())
    return bad(op, fn, "broadcast_dimensions size must equal operand rank (broadcast_in_dim_c2)");
  std::vector<int64_t> src_st(out.shape.size(), 0), in_st = row_major_strides(in.shape);
  std::vector<bool> used(out.shape.size(), false);
  for (size_t i = 0; i < dims.size(); ++i) {
    int64_t d = dims[i];
    if (d < 0 || d >= out.rank() || used[size_t(d)])
      return bad(
          op, fn,
          str_cat("broadcast_dimensions[", i, "] = ", d, " is out of range or repeated (broadcast_in_dim_c3/c4)"));
    used[size_t(d)] = true;
    if (in.shape[i] != 1 && in.shape[i] != out.shape[size_t(d)])
      return bad(op, fn,
                 str_cat("operand dim ", i, " (", in.shape[i], ") must be 1 or ", out.shape[size_t(d)],
                         " (broadcast_in_dim_c5)"));
    src_st[size_t(d)] = in.shape[i] == 1 ? 0 : in_st[i];
  }
  return std::unique_ptr<OpKernel>(new CopyKernel(op.name, std::move(t), 0, std::move(src_st)));
}

Result<std::unique_ptr<OpKernel>> transpose_factory(const shlo::Op& op, const shlo::Function& fn) {
  HLX_ASSIGN_OR_RETURN(OpTypes t, op_types(op, fn, 1, 1));
  HLX_ASSIGN_OR_RETURN(auto perm, ew::i64_array_attr(op, "permutation"));
  const auto &in = t.in[0], &out = t.out[0];
  if (in.dtype != out.dtype || int64_t(perm.size()) != in.rank() || out.rank() != in.rank())
    return bad(op, fn, "permutation size and element type must match the operand (transpose_c2)");
  std::vector<int64_t> src_st(perm.size()), in_st = row_major_strides(in.shape);
  std::vector<bool> used(perm.size(), false);
  for (size_t i = 0; i < perm.size(); ++i) {
    int64_t p = perm[i];
    if (p < 0 || p >= in.rank() || used[size_t(p)])
      return bad(op, fn, "permutation is not a permutation (transpose_c2)");
    used[size_t(p)] = true;
    if (out.shape[i] != in.shape[size_t(p)])
      return bad(op, fn, "result shape does not match the permutation (transpose_c4)");
    src_st[i] = in_st[size_t(p)];
  }
  return std::unique_ptr<OpKernel>(new CopyKernel(op.name, std::move(t), 0, std::move(src_st)));
}

Result<std::unique_ptr<OpKernel>> slice_factory(const shlo::Op& op, const shlo::Function& fn) {
  HLX_ASSIGN_OR_RETURN(OpTypes t, op_types(op, fn, 1, 1));
  HLX_ASSIGN_OR_RETURN(auto start, ew::i64_array_attr(op, "start_indices"));
  HLX_ASSIGN_OR_RETURN(auto limit, ew::i64_array_attr(op, "limit_indices"));
  HLX_ASSIGN_OR_RETURN(auto step, ew::i64_array_attr(op, "strides"));
  const auto &in = t.in[0], &out = t.out[0];
  size_t r = in.shape.size();
  if (in.dtype != out.dtype || start.size() != r || limit.size() != r || step.size() != r || out.shape.size() != r)
    return bad(op, fn, "start/limit/strides sizes must equal operand rank (slice_c2)");
  std::vector<int64_t> src_st(r), in_st = row_major_strides(in.shape);
  int64_t off = 0;
  for (size_t k = 0; k < r; ++k) {
    if (start[k] < 0 || start[k] > limit[k] || limit[k] > in.shape[k] || step[k] <= 0)
      return bad(op, fn,
                 str_cat("dim ", k, ": need 0 <= start ", start[k], " <= limit ", limit[k], " <= ", in.shape[k],
                         " and stride ", step[k], " > 0 (slice_c3/c4)"));
    if (out.shape[k] != (limit[k] - start[k] + step[k] - 1) / step[k])
      return bad(op, fn, str_cat("result dim ", k, " does not match the slice (slice_c5)"));
    off += start[k] * in_st[k];
    src_st[k] = in_st[k] * step[k];
  }
  return std::unique_ptr<OpKernel>(new CopyKernel(op.name, std::move(t), off, std::move(src_st)));
}

// ---- concatenate ----

class ConcatKernel final : public OpKernel {
 public:
  ConcatKernel(OpTypes t, int64_t dim) : t_(std::move(t)), dim_(dim) {}
  Status run(const std::vector<const Tensor*>& inputs, const std::vector<Tensor*>& outputs) override {
    HLX_RETURN_IF_ERROR(check_buffers("stablehlo.concatenate", inputs, outputs, t_.in, t_.out));
    const auto& out = t_.out[0];
    size_t es = dtype_size(out.dtype);
    auto out_st = row_major_strides(out.shape);
    int64_t pos = 0;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const auto& s = t_.in[i].shape;
      auto* dst = static_cast<uint8_t*>(outputs[0]->raw()) + pos * out_st[size_t(dim_)] * int64_t(es);
      strided_copy(dst, out_st, inputs[i]->raw(), row_major_strides(s), s, es);
      pos += s[size_t(dim_)];
    }
    return ok_status();
  }

 private:
  OpTypes t_;
  int64_t dim_;
};

Result<std::unique_ptr<OpKernel>> concatenate_factory(const shlo::Op& op, const shlo::Function& fn) {
  HLX_ASSIGN_OR_RETURN(OpTypes t, op_types(op, fn, 1, 1 << 20));
  HLX_ASSIGN_OR_RETURN(int64_t dim, ew::int_attr(op, "dimension"));
  const auto& out = t.out[0];
  if (dim < 0 || dim >= out.rank()) return bad(op, fn, str_cat("dimension ", dim, " out of range (concatenate_c4)"));
  int64_t total = 0;
  for (const auto& in : t.in) {
    if (in.dtype != out.dtype || in.rank() != out.rank())
      return bad(op, fn, "operands must share element type and rank (concatenate_c1/c2)");
    for (int64_t k = 0; k < out.rank(); ++k)
      if (k != dim && in.shape[size_t(k)] != out.shape[size_t(k)])
        return bad(op, fn, str_cat("operand dim ", k, " differs from the result (concatenate_c3)"));
    total += in.shape[size_t(dim)];
  }
  if (total != out.shape[size_t(dim)])
    return bad(op, fn, "result dimension is not the sum of the operands' (concatenate_c6)");
  return std::unique_ptr<OpKernel>(new ConcatKernel(std::move(t), dim));
}

// ---- pad: fill with the padding value, then copy the operand's visible part ----

class PadKernel final : public OpKernel {
 public:
  PadKernel(OpTypes t, int64_t src_off, int64_t dst_off, std::vector<int64_t> src_st, std::vector<int64_t> dst_st,
            std::vector<int64_t> box)
      : t_(std::move(t)),
        src_off_(src_off),
        dst_off_(dst_off),
        src_st_(std::move(src_st)),
        dst_st_(std::move(dst_st)),
        box_(std::move(box)) {}
  Status run(const std::vector<const Tensor*>& inputs, const std::vector<Tensor*>& outputs) override {
    HLX_RETURN_IF_ERROR(check_buffers("stablehlo.pad", inputs, outputs, t_.in, t_.out));
    size_t es = dtype_size(t_.out[0].dtype);
    fill(outputs[0]->raw(), outputs[0]->num_elements(), inputs[1]->raw(), es);
    strided_copy(static_cast<uint8_t*>(outputs[0]->raw()) + dst_off_ * int64_t(es), dst_st_,
                 static_cast<const uint8_t*>(inputs[0]->raw()) + src_off_ * int64_t(es), src_st_, box_, es);
    return ok_status();
  }

 private:
  OpTypes t_;
  int64_t src_off_, dst_off_;
  std::vector<int64_t> src_st_, dst_st_, box_;
};

Result<std::unique_ptr<OpKernel>> pad_factory(const shlo::Op& op, const shlo::Function& fn) {
  HLX_ASSIGN_OR_RETURN(OpTypes t, op_types(op, fn, 2, 2));
  HLX_ASSIGN_OR_RETURN(auto lo, ew::i64_array_attr(op, "edge_padding_low"));
  HLX_ASSIGN_OR_RETURN(auto hi, ew::i64_array_attr(op, "edge_padding_high"));
  HLX_ASSIGN_OR_RETURN(auto interior, ew::i64_array_attr(op, "interior_padding"));
  const auto &in = t.in[0], &out = t.out[0];
  size_t r = in.shape.size();
  if (t.in[1].rank() != 0 || t.in[1].dtype != in.dtype || out.dtype != in.dtype)
    return bad(op, fn, "padding_value must be a scalar of the operand's element type (pad_c1)");
  if (lo.size() != r || hi.size() != r || interior.size() != r || out.shape.size() != r)
    return bad(op, fn, "padding sizes must equal operand rank (pad_c2)");
  auto in_st = row_major_strides(in.shape), out_st = row_major_strides(out.shape);
  std::vector<int64_t> src_st(r), dst_st(r), box(r);
  int64_t src_off = 0, dst_off = 0;
  for (size_t k = 0; k < r; ++k) {
    if (interior[k] < 0) return bad(op, fn, str_cat("interior_padding[", k, "] is negative (pad_c3)"));
    int64_t n = in.shape[k], s = interior[k] + 1;
    int64_t want = lo[k] + hi[k] + n + std::max<int64_t>(n - 1, 0) * interior[k];
    if (want < 0 || out.shape[k] != want)
      return bad(op, fn, str_cat("result dim ", k, " should be ", want, " (pad_c4)"));
    // Operand element i lands at lo + i*s; keep those inside [0, out).
    int64_t first = lo[k] >= 0 ? 0 : (-lo[k] + s - 1) / s;
    int64_t last = n;  // exclusive
    if (out.shape[k] > lo[k])
      last = std::min(n, (out.shape[k] - 1 - lo[k]) / s + 1);
    else
      last = 0;
    box[k] = std::max<int64_t>(0, last - first);
    src_off += first * in_st[k];
    dst_off += (lo[k] + first * s) * out_st[k];
    src_st[k] = in_st[k];
    dst_st[k] = out_st[k] * s;
  }
  for (int64_t b : box)
    if (b == 0) {
      src_off = dst_off = 0;
      break;
    }  // nothing visible; offsets may be out of range
  return std::unique_ptr<OpKernel>(new PadKernel(std::move(t), src_off, dst_off, src_st, dst_st, box));
}

}  // namespace

void register_static_shape_kernels(KernelRegistry& r) {
  r.add("stablehlo.constant", &constant_factory);
  r.add("stablehlo.iota", &iota_factory);
  r.add("stablehlo.reshape", &reshape_factory);
  r.add("stablehlo.broadcast_in_dim", &broadcast_factory);
  r.add("stablehlo.transpose", &transpose_factory);
  r.add("stablehlo.slice", &slice_factory);
  r.add("stablehlo.concatenate", &concatenate_factory);
  r.add("stablehlo.pad", &pad_factory);
}

}  // namespace shape

void register_shape_kernels(KernelRegistry& r) {
  shape::register_static_shape_kernels(r);
  shape::register_dynamic_shape_kernels(r);
}

}  // namespace hlx::rt
