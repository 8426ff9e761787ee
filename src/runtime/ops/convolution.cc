// stablehlo.convolution reference loop: any dimension layout, window strides, (negative) padding,
// lhs (base) and rhs (window) dilation, window reversal, feature and batch groups. Floats
// accumulate in f32 and round once; integers wrap in the result type. Used for vision patch
// embeddings, where it runs once per image, so clarity wins over speed.
#include <algorithm>

#include "runtime/ops/structured_util.h"

namespace hlx::rt {
namespace {

using namespace structured;

struct ConvPlan {
  int64_t ib, ifd, kif, kof, ob, of;  // batch / feature dims
  std::vector<int64_t> is, ks, os;    // spatial dims of input, kernel, output
  std::vector<int64_t> stride, pad_lo, lhs_dil, rhs_dil;
  std::vector<bool> reverse;
  int64_t fgc = 1, bgc = 1;
  Shape in_shape, k_shape, out_shape;
};

class Convolution : public OpKernel {
 public:
  explicit Convolution(ConvPlan p) : p_(std::move(p)) {}
  Status run(const std::vector<const Tensor*>& in, const std::vector<Tensor*>& out) override {
    const Tensor& x = *in[0];
    const Tensor& w = *in[1];
    Tensor& y = *out[0];
    bool fl = is_float(y.dtype());
    auto xs = row_major_strides(p_.in_shape), ws = row_major_strides(p_.k_shape), ys = row_major_strides(p_.out_shape);
    size_t ns = p_.is.size();
    int64_t N = p_.in_shape[size_t(p_.ib)], Cin = p_.k_shape[size_t(p_.kif)];
    int64_t O = p_.k_shape[size_t(p_.kof)];
    int64_t OB = p_.out_shape[size_t(p_.ob)];
    int64_t o_per_fg = O / p_.fgc, o_per_bg = O / p_.bgc;
    int64_t b_per_bg = N / p_.bgc;
    Shape out_sp, k_sp;
    for (size_t s = 0; s < ns; ++s) {
      out_sp.push_back(p_.out_shape[size_t(p_.os[s])]);
      k_sp.push_back(p_.k_shape[size_t(p_.ks[s])]);
    }
    int64_t n_out_sp = num_elements(out_sp), n_k_sp = num_elements(k_sp);
    std::vector<int64_t> oi(ns), ki(ns);
    for (int64_t b = 0; b < OB; ++b)
      for (int64_t o = 0; o < O; ++o) {
        int64_t g = o / o_per_fg;
        int64_t in_b = (o / o_per_bg) * b_per_bg + b;
        std::fill(oi.begin(), oi.end(), 0);
        for (int64_t sp = 0; sp < n_out_sp; ++sp) {
          float accf = 0.f;
          uint64_t acci = 0;
          std::fill(ki.begin(), ki.end(), 0);
          for (int64_t kk = 0; kk < n_k_sp; ++kk) {
            int64_t xoff = in_b * xs[size_t(p_.ib)];
            int64_t woff = o * ws[size_t(p_.kof)];
            bool valid = true;
            for (size_t s = 0; s < ns && valid; ++s) {
              // Position in the padded, base-dilated input.
              int64_t pos = oi[s] * p_.stride[s] + ki[s] * p_.rhs_dil[s] - p_.pad_lo[s];
              if (pos < 0 || pos % p_.lhs_dil[s] != 0) {
                valid = false;
                break;
              }
              int64_t ip = pos / p_.lhs_dil[s];
              if (ip >= p_.in_shape[size_t(p_.is[s])]) {
                valid = false;
                break;
              }
              xoff += ip * xs[size_t(p_.is[s])];
              int64_t kidx = p_.reverse[s] ? k_sp[s] - 1 - ki[s] : ki[s];
              woff += kidx * ws[size_t(p_.ks[s])];
            }
            if (valid) {
              for (int64_t c = 0; c < Cin; ++c) {
                int64_t xo = xoff + (g * Cin + c) * xs[size_t(p_.ifd)];
                int64_t wo = woff + c * ws[size_t(p_.kif)];
                if (fl)
                  accf += load_f32(x.raw(), x.dtype(), xo) * load_f32(w.raw(), w.dtype(), wo);
                else
                  acci += uint64_t(load_i64(x.raw(), x.dtype(), xo)) * uint64_t(load_i64(w.raw(), w.dtype(), wo));
              }
            }
            for (size_t s = ns; s-- > 0;) {
              if (++ki[s] < k_sp[s]) break;
              ki[s] = 0;
            }
          }
          int64_t yoff = b * ys[size_t(p_.ob)] + o * ys[size_t(p_.of)];
          for (size_t s = 0; s < ns; ++s) yoff += oi[s] * ys[size_t(p_.os[s])];
          if (fl)
            store_f32(y.raw(), y.dtype(), yoff, accf);
          else
            store_i64(y.raw(), y.dtype(), yoff, int64_t(acci));
          for (size_t s = ns; s-- > 0;) {
            if (++oi[s] < out_sp[s]) break;
            oi[s] = 0;
          }
        }
      }
    return ok_status();
  }

 private:
  ConvPlan p_;
};

Result<std::unique_ptr<OpKernel>> make_convolution(const shlo::Op& op, const shlo::Function& fn) {
  if (op.operands.size() != 2 || op.results.size() != 1) return invalid(op, fn, "expects 2 operands, 1 result");
  HLX_ASSIGN_OR_RETURN(shlo::ConvDims dn, dimension_numbers(op, "dimension_numbers", shlo::conv_dims_from_attr));
  ConvPlan p;
  p.ib = dn.input_batch, p.ifd = dn.input_feature, p.is = dn.input_spatial;
  p.kif = dn.kernel_input_feature, p.kof = dn.kernel_output_feature, p.ks = dn.kernel_spatial;
  p.ob = dn.output_batch, p.of = dn.output_feature, p.os = dn.output_spatial;
  HLX_ASSIGN_OR_RETURN(p.fgc, int_attr(op, "feature_group_count", 1));
  HLX_ASSIGN_OR_RETURN(p.bgc, int_attr(op, "batch_group_count", 1));
  const auto& xt = fn.type_of(op.operands[0]);
  const auto& wt = fn.type_of(op.operands[1]);
  const auto& yt = fn.type_of(op.results[0]);
  p.in_shape = xt.shape;
  p.k_shape = wt.shape;
  p.out_shape = yt.shape;
  size_t ns = p.is.size();
  int64_t rank = xt.rank();
  if (p.ks.size() != ns || p.os.size() != ns || rank != int64_t(ns) + 2 || wt.rank() != rank || yt.rank() != rank)
    return invalid(op, fn, "spatial dimension counts and ranks disagree");
  auto in_range = [&](int64_t d) { return d >= 0 && d < rank; };
  for (int64_t d : {p.ib, p.ifd, p.kif, p.kof, p.ob, p.of})
    if (!in_range(d)) return invalid(op, fn, "dimension number out of range");
  for (size_t s = 0; s < ns; ++s)
    if (!in_range(p.is[s]) || !in_range(p.ks[s]) || !in_range(p.os[s]))
      return invalid(op, fn, "spatial dimension out of range");
  auto vec_attr = [&](const char* name, int64_t fallback) -> Result<std::vector<int64_t>> {
    HLX_ASSIGN_OR_RETURN(auto v, i64_array_attr(op, name, false));
    if (v.empty()) v.assign(ns, fallback);
    if (v.size() != ns) return invalid(op, fn, str_cat(name, " must have ", ns, " entries"));
    return v;
  };
  HLX_ASSIGN_OR_RETURN(p.stride, vec_attr("window_strides", 1));
  HLX_ASSIGN_OR_RETURN(p.lhs_dil, vec_attr("lhs_dilation", 1));
  HLX_ASSIGN_OR_RETURN(p.rhs_dil, vec_attr("rhs_dilation", 1));
  HLX_ASSIGN_OR_RETURN(auto pad, i64_array_attr(op, "padding", false));
  if (pad.empty()) pad.assign(2 * ns, 0);
  if (pad.size() != 2 * ns) return invalid(op, fn, str_cat("padding must be [", ns, ", 2]"));
  HLX_ASSIGN_OR_RETURN(auto rev, i64_array_attr(op, "window_reversal", false));
  if (rev.empty()) rev.assign(ns, 0);
  if (rev.size() != ns) return invalid(op, fn, "window_reversal size mismatch");
  for (size_t s = 0; s < ns; ++s) {
    p.pad_lo.push_back(pad[2 * s]);
    p.reverse.push_back(rev[s] != 0);
    if (p.stride[s] < 1 || p.lhs_dil[s] < 1 || p.rhs_dil[s] < 1)
      return invalid(op, fn, "strides and dilations must be positive");
  }
  int64_t N = xt.shape[size_t(p.ib)], C = xt.shape[size_t(p.ifd)];
  int64_t Ci = wt.shape[size_t(p.kif)], O = wt.shape[size_t(p.kof)];
  if (p.fgc < 1 || p.bgc < 1 || C != Ci * p.fgc || O % p.fgc != 0 || O % p.bgc != 0 || N % p.bgc != 0)
    return invalid(op, fn, "feature/batch group counts do not divide the dimensions");
  // Output spatial sizes per the spec: (padded dilated input - dilated window) / stride + 1.
  Shape expect(static_cast<size_t>(rank), 0);
  expect[size_t(p.ob)] = N / p.bgc;
  expect[size_t(p.of)] = O;
  for (size_t s = 0; s < ns; ++s) {
    int64_t in = xt.shape[size_t(p.is[s])], k = wt.shape[size_t(p.ks[s])];
    int64_t din = in == 0 ? 0 : (in - 1) * p.lhs_dil[s] + 1;
    int64_t padded = din + pad[2 * s] + pad[2 * s + 1];
    int64_t dk = k == 0 ? 0 : (k - 1) * p.rhs_dil[s] + 1;
    expect[size_t(p.os[s])] = (padded < dk || padded <= 0) ? 0 : (padded - dk) / p.stride[s] + 1;
  }
  if (expect != yt.shape) return invalid(op, fn, str_cat("result shape must be [", shape_to_string(expect), "]"));
  if (is_float(yt.dtype) != is_float(xt.dtype) && !is_float(yt.dtype))
    return unsupported(op, fn, "float operands with an integer result");
  return std::unique_ptr<OpKernel>(new Convolution(std::move(p)));
}

}  // namespace

void register_convolution_kernels(KernelRegistry& r) { r.add("stablehlo.convolution", make_convolution); }

}  // namespace hlx::rt
