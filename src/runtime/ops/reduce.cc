// stablehlo.reduce: fast paths for single-op bodies (add/multiply/max/min/and/or), a generic path
// that evaluates the reducer region on scalars (argmax-style variadic reductions).
// Order: each output element folds its reduced elements in row-major order, starting from the
// init value (acc = body(acc, x)); the same on every run.
#include <algorithm>

#include "runtime/ops/structured_util.h"

namespace hlx::rt {
namespace {

using namespace structured;

struct ReduceGeometry {
  int64_t out_n = 0, red_n = 0;
  std::vector<int64_t> base;     // input offset of each output element's first reduced element
  std::vector<int64_t> red_off;  // offsets of the reduced elements, row-major over reduced dims
};

ReduceGeometry make_geometry(const Shape& in, const std::vector<int64_t>& dims) {
  ReduceGeometry g;
  auto strides = row_major_strides(in);
  std::vector<bool> red(in.size(), false);
  for (int64_t d : dims) red[size_t(d)] = true;
  Shape kept_shape, red_shape;
  std::vector<int64_t> kept_str, red_str;
  for (size_t d = 0; d < in.size(); ++d) {
    (red[d] ? red_shape : kept_shape).push_back(in[d]);
    (red[d] ? red_str : kept_str).push_back(strides[d]);
  }
  auto offsets = [](const Shape& shape, const std::vector<int64_t>& str) {
    int64_t n = num_elements(shape);
    std::vector<int64_t> out(size_t(std::max<int64_t>(n, 0)));
    std::vector<int64_t> idx(shape.size(), 0);
    for (int64_t i = 0; i < n; ++i) {
      int64_t off = 0;
      for (size_t d = 0; d < shape.size(); ++d) off += idx[d] * str[d];
      out[size_t(i)] = off;
      for (size_t d = shape.size(); d-- > 0;) {
        if (++idx[d] < shape[d]) break;
        idx[d] = 0;
      }
    }
    return out;
  };
  g.base = offsets(kept_shape, kept_str);
  g.red_off = offsets(red_shape, red_str);
  g.out_n = int64_t(g.base.size());
  g.red_n = int64_t(g.red_off.size());
  return g;
}

class FastReduce : public OpKernel {
 public:
  FastReduce(BinaryBody body, ReduceGeometry g) : body_(body), g_(std::move(g)) {}
  Status run(const std::vector<const Tensor*>& in, const std::vector<Tensor*>& out) override {
    const Tensor& x = *in[0];
    const Tensor& init = *in[1];
    Tensor& y = *out[0];
    DType t = x.dtype();
    if (is_float(t)) {
      // f16/bf16 accumulate in f32 and round once at the end.
      float i0 = load_f32(init.raw(), t, 0);
      for (int64_t o = 0; o < g_.out_n; ++o) {
        float acc = i0;
        int64_t b = g_.base[size_t(o)];
        if (t == DType::kF32) {
          const float* p = x.data<float>() + b;
          for (int64_t r : g_.red_off) acc = apply_f(body_, acc, p[r]);
        } else {
          for (int64_t r : g_.red_off) acc = apply_f(body_, acc, load_f32(x.raw(), t, b + r));
        }
        store_f32(y.raw(), t, o, acc);
      }
    } else {
      int64_t i0 = load_i64(init.raw(), t, 0);
      for (int64_t o = 0; o < g_.out_n; ++o) {
        int64_t acc = i0;
        int64_t b = g_.base[size_t(o)];
        for (int64_t r : g_.red_off) acc = apply_i(body_, acc, load_i64(x.raw(), t, b + r));
        store_i64(y.raw(), t, o, acc);
      }
    }
    return ok_status();
  }

 private:
  BinaryBody body_;
  ReduceGeometry g_;
};

class GenericReduce : public OpKernel {
 public:
  GenericReduce(int n, ReduceGeometry g, std::unique_ptr<RegionEvaluator> ev, std::vector<size_t> esize)
      : n_(n), g_(std::move(g)), ev_(std::move(ev)), esize_(std::move(esize)) {}
  Status run(const std::vector<const Tensor*>& in, const std::vector<Tensor*>& out) override {
    for (int64_t o = 0; o < g_.out_n; ++o) {
      for (int j = 0; j < n_; ++j) std::memcpy(ev_->arg_data(j), in[size_t(n_ + j)]->raw(), esize_[size_t(j)]);
      int64_t b = g_.base[size_t(o)];
      for (int64_t r : g_.red_off) {
        for (int j = 0; j < n_; ++j)
          std::memcpy(ev_->arg_data(n_ + j),
                      static_cast<const uint8_t*>(in[size_t(j)]->raw()) + size_t(b + r) * esize_[size_t(j)],
                      esize_[size_t(j)]);
        HLX_RETURN_IF_ERROR(ev_->run());
        for (int j = 0; j < n_; ++j) std::memcpy(ev_->arg_data(j), ev_->result_data(j), esize_[size_t(j)]);
      }
      for (int j = 0; j < n_; ++j)
        std::memcpy(static_cast<uint8_t*>(out[size_t(j)]->raw()) + size_t(o) * esize_[size_t(j)], ev_->arg_data(j),
                    esize_[size_t(j)]);
    }
    return ok_status();
  }

 private:
  int n_;
  ReduceGeometry g_;
  std::unique_ptr<RegionEvaluator> ev_;
  std::vector<size_t> esize_;
};

Result<std::unique_ptr<OpKernel>> make_reduce(const shlo::Op& op, const shlo::Function& fn) {
  size_t n = op.results.size();
  if (n == 0 || op.operands.size() != 2 * n)
    return invalid(op, fn, "expects 2N operands (inputs, inits) for N results");
  if (op.regions.size() != 1) return invalid(op, fn, "expects one reducer region");
  HLX_ASSIGN_OR_RETURN(auto dims, i64_array_attr(op, "dimensions", true));
  const Shape& in_shape = fn.type_of(op.operands[0]).shape;
  std::vector<bool> seen(in_shape.size(), false);
  for (int64_t d : dims) {
    if (d < 0 || d >= int64_t(in_shape.size()) || seen[size_t(d)])
      return invalid(op, fn, str_cat("bad reduction dimension ", d));
    seen[size_t(d)] = true;
  }
  Shape out_shape;
  for (size_t d = 0; d < in_shape.size(); ++d)
    if (!seen[d]) out_shape.push_back(in_shape[d]);
  std::vector<size_t> esize;
  for (size_t j = 0; j < n; ++j) {
    const auto& it = fn.type_of(op.operands[j]);
    const auto& init = fn.type_of(op.operands[n + j]);
    const auto& rt = fn.type_of(op.results[j]);
    if (it.shape != in_shape) return invalid(op, fn, "inputs have different shapes");
    if (!init.shape.empty() || init.dtype != it.dtype || rt.dtype != it.dtype || rt.shape != out_shape)
      return invalid(op, fn,
                     str_cat("operand ", j, ": init must be a scalar and result [", shape_to_string(out_shape),
                             "] of the input's element type"));
    esize.push_back(dtype_size(it.dtype));
  }
  const shlo::Block& body = op.regions[0];
  if (body.args.size() != 2 * n) return invalid(op, fn, "reducer must take 2N scalar arguments");
  for (size_t j = 0; j < 2 * n; ++j) {
    const auto& at = fn.type_of(body.args[j]);
    if (!at.shape.empty() || at.dtype != fn.type_of(op.operands[j % n]).dtype)
      return invalid(op, fn, str_cat("reducer argument ", j, " must be a scalar of the input's type"));
  }
  auto geom = make_geometry(in_shape, dims);
  if (n == 1) {
    BinaryBody b = match_binary_body(body);
    DType t = fn.type_of(op.operands[0]).dtype;
    bool logical = b == BinaryBody::kAnd || b == BinaryBody::kOr;
    if (b != BinaryBody::kNone && b != BinaryBody::kReplace && !(logical && is_float(t)))
      return std::unique_ptr<OpKernel>(new FastReduce(b, std::move(geom)));
  }
  auto ev = RegionEvaluator::compile(body, fn);
  if (!ev.ok()) return ev.status().with_context(op_signature(op, fn) + " reducer");
  return std::unique_ptr<OpKernel>(new GenericReduce(int(n), std::move(geom), std::move(*ev), std::move(esize)));
}

}  // namespace

void register_reduce_kernels(KernelRegistry& r) { r.add("stablehlo.reduce", make_reduce); }

}  // namespace hlx::rt
