// stablehlo.convolution against an independent reference that materialises the dilated, padded
// input and the (reversed, dilated) kernel explicitly, then correlates. Covers NCHW/OIHW, NHWC/HWIO,
// strides, padding (incl. negative), lhs/rhs dilation, window reversal, feature and batch groups.
#include "structured_test_util.h"

namespace hlx {
namespace {

using namespace hlx::testing;

struct Conv2d {
  // Logical layout used by the reference: x[N][C][H][W], w[O][I][KH][KW], y[N'][O][OH][OW].
  int64_t N, C, H, W, O, KH, KW;
  int64_t sh = 1, sw = 1, plh = 0, phh = 0, plw = 0, phw = 0, ldh = 1, ldw = 1, rdh = 1, rdw = 1;
  bool rev_h = false, rev_w = false;
  int64_t fgc = 1, bgc = 1;
};

// y[n][o][i][j] = sum over c in o's group, kh, kw of X'[n'][c][i*sh + kh][j*sw + kw] * W'[o][c][kh][kw]
std::vector<float> reference(const Conv2d& p, const std::vector<float>& x, const std::vector<float>& w, int64_t* oh_out,
                             int64_t* ow_out) {
  int64_t DH = (p.H - 1) * p.ldh + 1 + p.plh + p.phh, DW = (p.W - 1) * p.ldw + 1 + p.plw + p.phw;
  // Materialise the dilated+padded input.
  std::vector<float> X(size_t(p.N * p.C * DH * DW), 0.f);
  for (int64_t n = 0; n < p.N; ++n)
    for (int64_t c = 0; c < p.C; ++c)
      for (int64_t h = 0; h < p.H; ++h)
        for (int64_t ww = 0; ww < p.W; ++ww) {
          int64_t hh = h * p.ldh + p.plh, wv = ww * p.ldw + p.plw;
          if (hh < 0 || hh >= DH || wv < 0 || wv >= DW) continue;
          X[size_t(((n * p.C + c) * DH + hh) * DW + wv)] = x[size_t(((n * p.C + c) * p.H + h) * p.W + ww)];
        }
  int64_t Ci = p.C / p.fgc;
  int64_t EKH = (p.KH - 1) * p.rdh + 1, EKW = (p.KW - 1) * p.rdw + 1;
  std::vector<float> K(size_t(p.O * Ci * EKH * EKW), 0.f);
  for (int64_t o = 0; o < p.O; ++o)
    for (int64_t c = 0; c < Ci; ++c)
      for (int64_t kh = 0; kh < p.KH; ++kh)
        for (int64_t kw = 0; kw < p.KW; ++kw) {
          int64_t sh = p.rev_h ? p.KH - 1 - kh : kh, sw = p.rev_w ? p.KW - 1 - kw : kw;
          K[size_t(((o * Ci + c) * EKH + kh * p.rdh) * EKW + kw * p.rdw)] =
              w[size_t(((o * Ci + c) * p.KH + sh) * p.KW + sw)];
        }
  int64_t OH = DH < EKH ? 0 : (DH - EKH) / p.sh + 1, OW = DW < EKW ? 0 : (DW - EKW) / p.sw + 1;
  int64_t ON = p.N / p.bgc;
  std::vector<float> y(size_t(ON * p.O * OH * OW), 0.f);
  for (int64_t n = 0; n < ON; ++n)
    for (int64_t o = 0; o < p.O; ++o) {
      int64_t g = o / (p.O / p.fgc), bg = o / (p.O / p.bgc);
      int64_t src_n = bg * ON + n;
      for (int64_t i = 0; i < OH; ++i)
        for (int64_t j = 0; j < OW; ++j) {
          double acc = 0;
          for (int64_t c = 0; c < Ci; ++c)
            for (int64_t kh = 0; kh < EKH; ++kh)
              for (int64_t kw = 0; kw < EKW; ++kw)
                acc += double(X[size_t(((src_n * p.C + g * Ci + c) * DH + i * p.sh + kh) * DW + j * p.sw + kw)]) *
                       K[size_t(((o * Ci + c) * EKH + kh) * EKW + kw)];
          y[size_t(((n * p.O + o) * OH + i) * OW + j)] = float(acc);
        }
    }
  *oh_out = OH;
  *ow_out = OW;
  return y;
}

// Runs the kernel with NCHW/OIHW/NCHW or NHWC/HWIO/NHWC dimension numbers.
void check(const Conv2d& p, bool nhwc, DType d = DType::kF32, float tol = 1e-4f) {
  int64_t Ci = p.C / p.fgc;
  Tensor xl = random_tensor(DType::kF32, {p.N, p.C, p.H, p.W}, 11);
  Tensor wl = random_tensor(DType::kF32, {p.O, Ci, p.KH, p.KW}, 12);
  std::vector<float> xv(xl.data<float>(), xl.data<float>() + xl.num_elements());
  std::vector<float> wv(wl.data<float>(), wl.data<float>() + wl.num_elements());
  if (d == DType::kBF16) {
    for (auto& v : xv) v = bf16_to_f32(f32_to_bf16(v));
    for (auto& v : wv) v = bf16_to_f32(f32_to_bf16(v));
  }
  int64_t OH, OW;
  auto want = reference(p, xv, wv, &OH, &OW);
  int64_t ON = p.N / p.bgc;
  Shape xs = nhwc ? Shape{p.N, p.H, p.W, p.C} : Shape{p.N, p.C, p.H, p.W};
  Shape ws = nhwc ? Shape{p.KH, p.KW, Ci, p.O} : Shape{p.O, Ci, p.KH, p.KW};
  Shape ys = nhwc ? Shape{ON, OH, OW, p.O} : Shape{ON, p.O, OH, OW};
  Tensor xt = Tensor::empty(d, xs), wt = Tensor::empty(d, ws);
  for (int64_t n = 0; n < p.N; ++n)
    for (int64_t c = 0; c < p.C; ++c)
      for (int64_t h = 0; h < p.H; ++h)
        for (int64_t w = 0; w < p.W; ++w)
          set_f(xt, nhwc ? ((n * p.H + h) * p.W + w) * p.C + c : ((n * p.C + c) * p.H + h) * p.W + w,
                xv[size_t(((n * p.C + c) * p.H + h) * p.W + w)]);
  for (int64_t o = 0; o < p.O; ++o)
    for (int64_t c = 0; c < Ci; ++c)
      for (int64_t h = 0; h < p.KH; ++h)
        for (int64_t w = 0; w < p.KW; ++w)
          set_f(wt, nhwc ? ((h * p.KW + w) * Ci + c) * p.O + o : ((o * Ci + c) * p.KH + h) * p.KW + w,
                wv[size_t(((o * Ci + c) * p.KH + h) * p.KW + w)]);
  IrBuilder b;
  auto x = b.arg(tt(d, xs)), w = b.arg(tt(d, ws));
  auto& op = b.op("stablehlo.convolution", {x, w}, {tt(d, ys)});
  auto I = [](int64_t v) { return shlo::Attr::integer(v); };
  if (nhwc)
    op.attrs.push_back(
        {"dimension_numbers", shlo::Attr::structure("conv", {{"input_batch_dimension", I(0)},
                                                             {"input_feature_dimension", I(3)},
                                                             {"input_spatial_dimensions", ints({1, 2})},
                                                             {"kernel_input_feature_dimension", I(2)},
                                                             {"kernel_output_feature_dimension", I(3)},
                                                             {"kernel_spatial_dimensions", ints({0, 1})},
                                                             {"output_batch_dimension", I(0)},
                                                             {"output_feature_dimension", I(3)},
                                                             {"output_spatial_dimensions", ints({1, 2})}})});
  else
    op.attrs.push_back(
        {"dimension_numbers", shlo::Attr::structure("conv", {{"input_batch_dimension", I(0)},
                                                             {"input_feature_dimension", I(1)},
                                                             {"input_spatial_dimensions", ints({2, 3})},
                                                             {"kernel_input_feature_dimension", I(1)},
                                                             {"kernel_output_feature_dimension", I(0)},
                                                             {"kernel_spatial_dimensions", ints({2, 3})},
                                                             {"output_batch_dimension", I(0)},
                                                             {"output_feature_dimension", I(1)},
                                                             {"output_spatial_dimensions", ints({2, 3})}})});
  op.attrs.push_back({"window_strides", ints({p.sh, p.sw})});
  shlo::DenseElements pad{tt(DType::kI64, {2, 2}), {}};
  for (int64_t v : {p.plh, p.phh, p.plw, p.phw}) {
    const size_t at = pad.bytes.size();
    pad.bytes.resize(at + 8);
    std::memcpy(pad.bytes.data() + at, &v, 8);
  }
  op.attrs.push_back({"padding", shlo::Attr::dense_elements(pad)});
  op.attrs.push_back({"lhs_dilation", ints({p.ldh, p.ldw})});
  op.attrs.push_back({"rhs_dilation", ints({p.rdh, p.rdw})});
  op.attrs.push_back({"window_reversal", shlo::Attr::bool_array({p.rev_h, p.rev_w})});
  op.attrs.push_back({"feature_group_count", I(p.fgc)});
  op.attrs.push_back({"batch_group_count", I(p.bgc)});
  auto out = run_op(op, b.fn, {xt, wt});
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  const Tensor& y = (*out)[0];
  for (int64_t n = 0; n < ON; ++n)
    for (int64_t o = 0; o < p.O; ++o)
      for (int64_t i = 0; i < OH; ++i)
        for (int64_t j = 0; j < OW; ++j) {
          float r = want[size_t(((n * p.O + o) * OH + i) * OW + j)];
          float g = get_f(y, nhwc ? ((n * OH + i) * OW + j) * p.O + o : ((n * p.O + o) * OH + i) * OW + j);
          if (d == DType::kBF16) r = bf16_to_f32(f32_to_bf16(r));
          ASSERT_NEAR(g, r, tol * (1 + std::fabs(r))) << "n" << n << " o" << o << " i" << i << " j" << j;
        }
}

TEST(Convolution, PlainNchw) { check({2, 3, 7, 6, 4, 3, 2}, false); }
TEST(Convolution, PlainNhwc) { check({2, 3, 7, 6, 4, 3, 2}, true); }

TEST(Convolution, StridePadDilation) {
  Conv2d p{1, 2, 9, 8, 3, 3, 3};
  p.sh = 2;
  p.sw = 3;
  p.plh = 1;
  p.phh = 2;
  p.plw = -1;
  p.phw = 1;
  p.rdh = 2;
  p.ldw = 2;
  check(p, false);
  check(p, true);
}

TEST(Convolution, LhsDilationAndReversal) {
  Conv2d p{1, 2, 5, 5, 2, 2, 3};
  p.ldh = 2;
  p.ldw = 2;
  p.plh = 1;
  p.phh = 1;
  p.plw = 2;
  p.phw = 2;
  p.rev_h = true;
  p.rev_w = true;
  check(p, true);
}

TEST(Convolution, FeatureGroupsDepthwise) {
  Conv2d p{2, 3, 6, 6, 12, 3, 3};
  p.fgc = 3;
  check(p, false);
}

TEST(Convolution, BatchGroups) {
  Conv2d p{4, 2, 5, 5, 4, 2, 2};
  p.bgc = 2;
  check(p, false);
}

TEST(Convolution, Bf16PatchEmbedding) {
  Conv2d p{1, 3, 8, 8, 4, 4, 4};
  p.sh = 4;
  p.sw = 4;
  check(p, false, DType::kBF16, 1e-2f);
}

TEST(Convolution, EmptySpatialOutput) {
  Conv2d p{1, 1, 3, 3, 2, 4, 2};  // kernel taller than the input
  check(p, false);
}

}  // namespace
}  // namespace hlx
