// stablehlo.dot_general reference kernel for every element type, including mixed operand types
// (e.g. bf16 x f16). As XLA does: float results accumulate in f32 and round once to the result
// type; integer results accumulate with wrap-around in the result type (computed in 64 bits and
// truncated, which is the same modulo 2^n). The native oneDNN path overrides f32/bf16 matmuls.
//
// Both operands are gathered into [B, M, K] / [B, N, K] panels of the accumulation type, so the
// inner loop is a contiguous dot product. Constant operands (weights) are gathered once.
#include <algorithm>

#include "runtime/ops/structured_util.h"

namespace hlx::rt {
namespace {

using namespace structured;

// Offsets (in elements) of an operand laid out as [batch..., free..., contract...] panels.
struct Panel {
  std::vector<int64_t> b_off, f_off, k_off;  // per batch / free / contracting index
};

std::vector<int64_t> offsets_of(const Shape& shape, const std::vector<int64_t>& dims) {
  auto str = row_major_strides(shape);
  int64_t n = 1;
  for (int64_t d : dims) n *= shape[size_t(d)];
  std::vector<int64_t> out(static_cast<size_t>(n));
  std::vector<int64_t> idx(dims.size(), 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t off = 0;
    for (size_t j = 0; j < dims.size(); ++j) off += idx[j] * str[size_t(dims[j])];
    out[size_t(i)] = off;
    for (size_t j = dims.size(); j-- > 0;) {
      if (++idx[j] < shape[size_t(dims[j])]) break;
      idx[j] = 0;
    }
  }
  return out;
}

template <class Acc>
void gather_panel(const Tensor& t, const Panel& p, std::vector<Acc>& out) {
  size_t B = p.b_off.size(), F = p.f_off.size(), K = p.k_off.size();
  out.resize(B * F * K);
  size_t i = 0;
  for (int64_t b : p.b_off)
    for (int64_t f : p.f_off)
      for (int64_t k : p.k_off) {
        if constexpr (std::is_same_v<Acc, float>)
          out[i++] = load_f32(t.raw(), t.dtype(), b + f + k);
        else
          out[i++] = load_i64(t.raw(), t.dtype(), b + f + k);
      }
}

template <class Acc>
class DotGeneral : public OpKernel {
 public:
  DotGeneral(Panel l, Panel r) : l_(std::move(l)), r_(std::move(r)) {}
  Status set_constant_input(int index, const Tensor& v) override {
    if (index == 0) {
      gather_panel(v, l_, lc_);
      l_const_ = true;
    }
    if (index == 1) {
      gather_panel(v, r_, rc_);
      r_const_ = true;
    }
    return ok_status();
  }
  Status run(const std::vector<const Tensor*>& in, const std::vector<Tensor*>& out) override {
    if (!l_const_) gather_panel(*in[0], l_, lp_);
    if (!r_const_) gather_panel(*in[1], r_, rp_);
    const std::vector<Acc>& L = l_const_ ? lc_ : lp_;
    const std::vector<Acc>& R = r_const_ ? rc_ : rp_;
    size_t B = l_.b_off.size(), M = l_.f_off.size(), N = r_.f_off.size(), K = l_.k_off.size();
    Tensor& y = *out[0];
    int64_t o = 0;
    for (size_t b = 0; b < B; ++b)
      for (size_t m = 0; m < M; ++m) {
        const Acc* lrow = L.data() + (b * M + m) * K;
        for (size_t n = 0; n < N; ++n, ++o) {
          const Acc* rrow = R.data() + (b * N + n) * K;
          if constexpr (std::is_same_v<Acc, float>) {
            float acc = 0.f;
            for (size_t k = 0; k < K; ++k) acc += lrow[k] * rrow[k];
            store_f32(y.raw(), y.dtype(), o, acc);
          } else {
            uint64_t acc = 0;
            for (size_t k = 0; k < K; ++k) acc += uint64_t(lrow[k]) * uint64_t(rrow[k]);
            store_i64(y.raw(), y.dtype(), o, int64_t(acc));
          }
        }
      }
    return ok_status();
  }

 private:
  Panel l_, r_;
  std::vector<Acc> lp_, rp_, lc_, rc_;
  bool l_const_ = false, r_const_ = false;
};

Status check_dims(const shlo::Op& op, const shlo::Function& fn, const char* what, const std::vector<int64_t>& dims,
                  int64_t rank, std::vector<bool>& used) {
  for (int64_t d : dims) {
    if (d < 0 || d >= rank || used[size_t(d)])
      return invalid(op, fn, str_cat(what, " dimension ", d, " is out of range or repeated"));
    used[size_t(d)] = true;
  }
  return ok_status();
}

Result<std::unique_ptr<OpKernel>> make_dot_general(const shlo::Op& op, const shlo::Function& fn) {
  if (op.operands.size() != 2 || op.results.size() != 1) return invalid(op, fn, "expects 2 operands, 1 result");
  HLX_ASSIGN_OR_RETURN(shlo::DotDims dn, dimension_numbers(op, "dot_dimension_numbers", shlo::dot_dims_from_attr));
  const auto &lb = dn.lhs_batching, &rb = dn.rhs_batching;
  const auto &lc = dn.lhs_contracting, &rc = dn.rhs_contracting;
  const auto& lt = fn.type_of(op.operands[0]);
  const auto& rt = fn.type_of(op.operands[1]);
  const auto& ot = fn.type_of(op.results[0]);
  if (lb.size() != rb.size() || lc.size() != rc.size())
    return invalid(op, fn, "batching/contracting dimension lists differ in length");
  std::vector<bool> lu(lt.shape.size(), false), ru(rt.shape.size(), false);
  HLX_RETURN_IF_ERROR(check_dims(op, fn, "lhs batching", lb, lt.rank(), lu));
  HLX_RETURN_IF_ERROR(check_dims(op, fn, "lhs contracting", lc, lt.rank(), lu));
  HLX_RETURN_IF_ERROR(check_dims(op, fn, "rhs batching", rb, rt.rank(), ru));
  HLX_RETURN_IF_ERROR(check_dims(op, fn, "rhs contracting", rc, rt.rank(), ru));
  Shape expect;
  for (size_t i = 0; i < lb.size(); ++i) {
    if (lt.shape[size_t(lb[i])] != rt.shape[size_t(rb[i])]) return invalid(op, fn, "batch dimension sizes differ");
    expect.push_back(lt.shape[size_t(lb[i])]);
  }
  for (size_t i = 0; i < lc.size(); ++i)
    if (lt.shape[size_t(lc[i])] != rt.shape[size_t(rc[i])])
      return invalid(op, fn, "contracting dimension sizes differ");
  std::vector<int64_t> lf, rf;
  for (int64_t d = 0; d < lt.rank(); ++d)
    if (!lu[size_t(d)]) {
      lf.push_back(d);
      expect.push_back(lt.shape[size_t(d)]);
    }
  for (int64_t d = 0; d < rt.rank(); ++d)
    if (!ru[size_t(d)]) {
      rf.push_back(d);
      expect.push_back(rt.shape[size_t(d)]);
    }
  if (expect != ot.shape) return invalid(op, fn, str_cat("result shape must be [", shape_to_string(expect), "]"));
  Panel l{offsets_of(lt.shape, lb), offsets_of(lt.shape, lf), offsets_of(lt.shape, lc)};
  Panel r{offsets_of(rt.shape, rb), offsets_of(rt.shape, rf), offsets_of(rt.shape, rc)};
  if (is_float(ot.dtype)) return std::unique_ptr<OpKernel>(new DotGeneral<float>(std::move(l), std::move(r)));
  if (is_float(lt.dtype) || is_float(rt.dtype)) return unsupported(op, fn, "float operands with an integer result");
  // Integers and i1 (store_i64 maps a nonzero sum of products to true, i.e. or-of-ands).
  return std::unique_ptr<OpKernel>(new DotGeneral<int64_t>(std::move(l), std::move(r)));
}

}  // namespace

void register_dot_general_kernels(KernelRegistry& r) { r.add("stablehlo.dot_general", make_dot_general); }

}  // namespace hlx::rt
