// rms_norm / layer_norm against double-precision loops written here, on inputs already rounded to
// their storage types. f32 results: 1e-5 relative (+1e-6 absolute; the f32 row reductions over
// D <= 1024 terms are accurate to ~1e-6). bf16 results: one bf16 rounding of the result (2^-8
// relative), plus the same f32 slack.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "matmul_test_util.h"
#include "runtime/kernels/norms.h"
#include "runtime/op_kernel.h"

namespace hlx {
namespace {

using matmul_test::load;
using matmul_test::rand_vec;
using matmul_test::store;

void expect_close(DType t, const std::vector<uint8_t>& got, const std::vector<double>& want, const std::string& what) {
  int bad = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    double tol = 1e-5 * std::fabs(want[i]) + 1e-6 + (t == DType::kBF16 ? std::ldexp(std::fabs(want[i]), -8) : 0.0);
    double g = load(t, got, i);
    if (!(std::fabs(g - want[i]) <= tol) && bad++ < 5)
      ADD_FAILURE() << what << " element " << i << ": got " << g << " want " << want[i];
  }
}

TEST(Norms, RmsNormMatchesReference) {
  uint32_t seed = 1;
  for (int64_t rows : {1, 3, 17, 64})  // 64 x 1024 crosses the parallel threshold
    for (int64_t dim : {1, 7, 128, 1000, 1024})
      for (DType xt : {DType::kF32, DType::kBF16})
        for (DType wt : {DType::kF32, DType::kBF16, DType::kF16})
          for (float offset : {0.f, 1.f}) {
            auto x = rand_vec(size_t(rows * dim), seed++, -3.f, 3.f);
            auto w = rand_vec(size_t(dim), seed++, -1.5f, 1.5f);
            auto xb = store(xt, x);
            auto wb = store(wt, w);
            const float eps = 1e-6f;
            std::vector<uint8_t> out(xb.size());
            ASSERT_TRUE(kernels::rms_norm(rows, dim, xt, xb.data(), wt, wb.data(), eps, offset, out.data()).ok());
            std::vector<double> want(x.size());
            for (int64_t r = 0; r < rows; ++r) {
              double ss = 0;
              for (int64_t i = 0; i < dim; ++i) ss += double(x[size_t(r * dim + i)]) * x[size_t(r * dim + i)];
              double inv = 1.0 / std::sqrt(ss / double(dim) + double(eps));
              for (int64_t i = 0; i < dim; ++i)
                want[size_t(r * dim + i)] = x[size_t(r * dim + i)] * inv * (double(w[size_t(i)]) + offset);
            }
            expect_close(
                xt, out, want,
                str_cat("rms rows ", rows, " dim ", dim, " ", dtype_name(xt), "/", dtype_name(wt), " off ", offset));
          }
}

TEST(Norms, LayerNormMatchesReferenceIncludingLargeMean) {
  uint32_t seed = 500;
  for (int64_t rows : {1, 3, 40})
    for (int64_t dim : {1, 5, 768, 1024})
      for (DType xt : {DType::kF32, DType::kBF16})
        for (DType wt : {DType::kF32, DType::kBF16, DType::kF16}) {
          // Mean 20 with unit spread: a one-pass E[x^2] - E[x]^2 in f32 would lose ~3 digits.
          auto x = rand_vec(size_t(rows * dim), seed++, 19.f, 21.f);
          auto w = rand_vec(size_t(dim), seed++, -1.5f, 1.5f);
          auto bias = rand_vec(size_t(dim), seed++, -0.5f, 0.5f);
          auto xb = store(xt, x);
          auto wb = store(wt, w);
          auto bb = store(wt, bias);
          const float eps = 1e-5f;
          std::vector<uint8_t> out(xb.size());
          ASSERT_TRUE(kernels::layer_norm(rows, dim, xt, xb.data(), wt, wb.data(), bb.data(), eps, out.data()).ok());
          std::vector<double> want(x.size());
          for (int64_t r = 0; r < rows; ++r) {
            double mean = 0, var = 0;
            for (int64_t i = 0; i < dim; ++i) mean += x[size_t(r * dim + i)];
            mean /= double(dim);
            for (int64_t i = 0; i < dim; ++i) var += std::pow(x[size_t(r * dim + i)] - mean, 2);
            var /= double(dim);
            for (int64_t i = 0; i < dim; ++i)
              want[size_t(r * dim + i)] =
                  (x[size_t(r * dim + i)] - mean) / std::sqrt(var + eps) * w[size_t(i)] + bias[size_t(i)];
          }
          // Normalised values have magnitude ~1 but come from differences of ~20: allow 1e-5 of
          // the input magnitude (f32 rounding of x - mean) on top of the output-relative bound.
          std::vector<uint8_t> got = out;
          int bad = 0;
          for (size_t i = 0; i < want.size(); ++i) {
            double tol = 2e-5 * 20 / std::sqrt(1.0 / 3) * 1.5 + 1e-6 +
                         (xt == DType::kBF16 ? std::ldexp(std::fabs(want[i]), -8) : 0.0);
            if (!(std::fabs(load(xt, got, i) - want[i]) <= tol) && bad++ < 5)
              ADD_FAILURE() << "layer_norm rows " << rows << " dim " << dim << " " << i << ": got " << load(xt, got, i)
                            << " want " << want[i];
          }
        }
}

TEST(Norms, InPlaceAndErrors) {
  std::vector<float> x = {1, 2, 3, 4, -1, -2, -3, -4};
  std::vector<float> w = {1, 1, 1, 1};
  std::vector<float> copy = x;
  std::vector<float> sep(8);
  ASSERT_TRUE(kernels::rms_norm(2, 4, DType::kF32, x.data(), DType::kF32, w.data(), 1e-6f, 0.f, sep.data()).ok());
  ASSERT_TRUE(kernels::rms_norm(2, 4, DType::kF32, x.data(), DType::kF32, w.data(), 1e-6f, 0.f, x.data()).ok());
  EXPECT_EQ(x, sep);
  EXPECT_EQ(kernels::rms_norm(2, 4, DType::kI32, copy.data(), DType::kF32, w.data(), 0, 0, sep.data()).kind(),
            ErrorKind::kUnsupported);
  EXPECT_EQ(kernels::rms_norm(2, 4, DType::kF32, copy.data(), DType::kI8, w.data(), 0, 0, sep.data()).kind(),
            ErrorKind::kUnsupported);
  EXPECT_EQ(kernels::layer_norm(2, 0, DType::kF32, copy.data(), DType::kF32, w.data(), w.data(), 0, sep.data()).kind(),
            ErrorKind::kInvalidArgument);
}

// ---- the composites through the runtime registry ----

shlo::Op norm_op(shlo::Function& fn, const char* name, shlo::TensorType x, shlo::TensorType w, bool with_bias,
                 shlo::AttrDict attrs) {
  shlo::Op op;
  op.name = "stablehlo.composite";
  op.operands = {fn.new_value(x), fn.new_value(w)};
  if (with_bias) op.operands.push_back(fn.new_value(w));
  op.results = {fn.new_value(x)};
  op.attrs.push_back({"name", shlo::Attr::string(name)});
  op.attrs.push_back({"composite_attributes", shlo::Attr::dictionary(std::move(attrs))});
  op.attrs.push_back({"decomposition", shlo::Attr::symbol("impl")});
  return op;
}

TEST(NativeNorms, RmsNormComposite) {
  shlo::Function fn;
  shlo::Op op = norm_op(fn, "hlx.rms_norm", {DType::kBF16, {2, 3, 64}}, {DType::kBF16, {64}}, false,
                        {{"epsilon", shlo::Attr::floating(1e-6)}, {"weight_offset", shlo::Attr::floating(1.0)}});
  auto kernel = rt::KernelRegistry::builtin().compile("composite:hlx.rms_norm", op, fn);
  ASSERT_TRUE(kernel.ok()) << kernel.status().to_string();
  EXPECT_TRUE((*kernel)->can_run_in_place(0));
  auto x = rand_vec(6 * 64, 3, -2.f, 2.f), w = rand_vec(64, 4, -1.f, 1.f);
  auto xb = store(DType::kBF16, x), wb = store(DType::kBF16, w);
  Tensor xt = Tensor::empty(DType::kBF16, {2, 3, 64}), wt = Tensor::empty(DType::kBF16, {64});
  std::memcpy(xt.raw(), xb.data(), xb.size());
  std::memcpy(wt.raw(), wb.data(), wb.size());
  Tensor out = Tensor::zeros(DType::kBF16, {2, 3, 64});
  ASSERT_TRUE((*kernel)->run({&xt, &wt}, {&out}).ok());
  std::vector<uint8_t> got(out.nbytes());
  std::memcpy(got.data(), out.raw(), got.size());
  std::vector<double> want(x.size());
  for (int r = 0; r < 6; ++r) {
    double ss = 0;
    for (int i = 0; i < 64; ++i) ss += double(x[size_t(r * 64 + i)]) * x[size_t(r * 64 + i)];
    for (int i = 0; i < 64; ++i)
      want[size_t(r * 64 + i)] = x[size_t(r * 64 + i)] / std::sqrt(ss / 64 + 1e-6) * (1.0 + w[size_t(i)]);
  }
  expect_close(DType::kBF16, got, want, "composite rms_norm");
}

TEST(NativeNorms, LayerNormCompositeAndChecks) {
  {
    shlo::Function fn;
    shlo::Op op = norm_op(fn, "hlx.layer_norm", {DType::kF32, {4, 32}}, {DType::kF16, {32}}, true,
                          {{"epsilon", shlo::Attr::floating(1e-5)}});
    auto kernel = rt::KernelRegistry::builtin().compile("composite:hlx.layer_norm", op, fn);
    ASSERT_TRUE(kernel.ok()) << kernel.status().to_string();
    auto x = rand_vec(128, 5, -2.f, 2.f), w = rand_vec(32, 6, -1.f, 1.f), b = rand_vec(32, 7, -1.f, 1.f);
    auto wb = store(DType::kF16, w), bb = store(DType::kF16, b);
    Tensor xt = Tensor::empty(DType::kF32, {4, 32}), wt = Tensor::empty(DType::kF16, {32}),
           bt = Tensor::empty(DType::kF16, {32});
    std::memcpy(xt.raw(), x.data(), 512);
    std::memcpy(wt.raw(), wb.data(), 64);
    std::memcpy(bt.raw(), bb.data(), 64);
    Tensor out = Tensor::zeros(DType::kF32, {4, 32});
    ASSERT_TRUE((*kernel)->run({&xt, &wt, &bt}, {&out}).ok());
    for (int r = 0; r < 4; ++r) {
      double mean = 0, var = 0;
      for (int i = 0; i < 32; ++i) mean += x[size_t(r * 32 + i)];
      mean /= 32;
      for (int i = 0; i < 32; ++i) var += std::pow(x[size_t(r * 32 + i)] - mean, 2);
      var /= 32;
      for (int i = 0; i < 32; ++i) {
        double want = (x[size_t(r * 32 + i)] - mean) / std::sqrt(var + 1e-5) * w[size_t(i)] + b[size_t(i)];
        EXPECT_NEAR(out.data<float>()[r * 32 + i], want, 1e-5 * std::fabs(want) + 1e-6);
      }
    }
  }
  {  // weight of the wrong length
    shlo::Function fn;
    shlo::Op op = norm_op(fn, "hlx.layer_norm", {DType::kF32, {4, 32}}, {DType::kF32, {31}}, true,
                          {{"epsilon", shlo::Attr::floating(1e-5)}});
    EXPECT_EQ(rt::KernelRegistry::builtin().compile("composite:hlx.layer_norm", op, fn).status().kind(),
              ErrorKind::kInvalidArgument);
  }
  {  // rms_norm without weight_offset
    shlo::Function fn;
    shlo::Op op = norm_op(fn, "hlx.rms_norm", {DType::kF32, {4, 32}}, {DType::kF32, {32}}, false,
                          {{"epsilon", shlo::Attr::floating(1e-5)}});
    auto r = rt::KernelRegistry::builtin().compile("composite:hlx.rms_norm", op, fn);
    EXPECT_EQ(r.status().kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(r.status().message().find("weight_offset"), std::string::npos);
  }
}

}  // namespace
}  // namespace hlx
