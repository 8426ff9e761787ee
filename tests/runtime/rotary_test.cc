// hlx.rotary against a double-precision loop written here. Angles follow the contract (f32
// product float(pos) * inv_freq, then cos/sin); the reference evaluates cos/sin of that same f32
// angle in double, so the kernel's only error is f32 cos/sin/FMA rounding: 1e-5 relative to the
// row's magnitude for f32, plus one bf16 rounding (2^-8 relative) for bf16.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "runtime/kernels/rotary.h"
#include "runtime/op_kernel.h"

namespace hlx {
namespace {

std::vector<double> reference(int64_t rows, int64_t heads, int64_t hd, int64_t rd, const std::vector<float>& x,
                              const std::vector<int32_t>& pos, const std::vector<float>& inv) {
  std::vector<double> y(x.begin(), x.end());
  const int64_t half = rd / 2;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < half; ++i) {
        const float angle = float(pos[size_t(r)]) * inv[size_t(i)];
        const size_t base = size_t((r * heads + h) * hd);
        const double a = x[base + size_t(i)], b = x[base + size_t(i + half)];
        y[base + size_t(i)] = a * std::cos(double(angle)) - b * std::sin(double(angle));
        y[base + size_t(i + half)] = b * std::cos(double(angle)) + a * std::sin(double(angle));
      }
  return y;
}

TEST(Rotary, MatchesReferenceF32AndBf16PartialRotary) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-2.f, 2.f);
  for (DType t : {DType::kF32, DType::kBF16})
    for (int64_t rows : {1, 3, 17, 300})  // 300 x 16 x 128 takes the parallel path
      for (auto [hd, rd] : {std::pair<int64_t, int64_t>{128, 128}, {64, 32}, {10, 6}, {8, 0}}) {
        const int64_t heads = rows == 300 ? 16 : 3;
        std::vector<float> x(static_cast<size_t>(rows * heads * hd));
        for (auto& v : x) v = u(rng);
        std::vector<uint8_t> xb(x.size() * dtype_size(t));
        for (size_t i = 0; i < x.size(); ++i) {
          if (t == DType::kF32) {
            std::memcpy(&xb[i * 4], &x[i], 4);
          } else {
            bf16 h = f32_to_bf16(x[i]);
            x[i] = bf16_to_f32(h);
            std::memcpy(&xb[i * 2], &h, 2);
          }
        }
        std::vector<int32_t> pos(static_cast<size_t>(rows));
        for (int64_t r = 0; r < rows; ++r) pos[size_t(r)] = int32_t((r * 977) % 40000);  // up to long contexts
        std::vector<float> inv(static_cast<size_t>(rd / 2));
        for (int64_t i = 0; i < rd / 2; ++i) inv[size_t(i)] = std::pow(1e6f, -2.f * float(i) / float(rd));
        for (bool in_place : {false, true}) {
          std::vector<uint8_t> out = in_place ? xb : std::vector<uint8_t>(xb.size());
          Status s = kernels::rotary(rows, heads, hd, rd, t, in_place ? out.data() : xb.data(), pos.data(), inv.data(),
                                     out.data());
          ASSERT_TRUE(s.ok()) << s.to_string();
          auto want = reference(rows, heads, hd, rd, x, pos, inv);
          int bad = 0;
          for (size_t i = 0; i < want.size(); ++i) {
            double got;
            if (t == DType::kF32) {
              float f;
              std::memcpy(&f, &out[i * 4], 4);
              got = f;
            } else {
              bf16 h;
              std::memcpy(&h, &out[i * 2], 2);
              got = bf16_to_f32(h);
            }
            // |y| <= |a| + |b| <= 4; f32 cos/sin ~1 ulp each.
            double tol = 4e-6 * 4 + (t == DType::kBF16 ? std::ldexp(std::fabs(want[i]), -8) : 0.0);
            if (!(std::fabs(got - want[i]) <= tol) && bad++ < 5)
              ADD_FAILURE() << dtype_name(t) << " rows " << rows << " hd " << hd << " rd " << rd << " in_place "
                            << in_place << " element " << i << ": got " << got << " want " << want[i];
          }
        }
      }
}

TEST(Rotary, Errors) {
  float x[8] = {}, inv[4] = {};
  int32_t pos[1] = {0};
  EXPECT_EQ(kernels::rotary(1, 1, 8, 10, DType::kF32, x, pos, inv, x).kind(), ErrorKind::kInvalidArgument);
  EXPECT_EQ(kernels::rotary(1, 1, 8, 3, DType::kF32, x, pos, inv, x).kind(), ErrorKind::kInvalidArgument);
  EXPECT_EQ(kernels::rotary(1, 1, 8, 8, DType::kF16, x, pos, inv, x).kind(), ErrorKind::kUnsupported);
}

TEST(NativeRotary, CompositeRunsKernelAndChecksTypes) {
  shlo::Function fn;
  shlo::Op op;
  op.name = "stablehlo.composite";
  op.operands = {fn.new_value({DType::kF32, {5, 2, 16}}), fn.new_value({DType::kI32, {5}}),
                 fn.new_value({DType::kF32, {4}})};
  op.results = {fn.new_value({DType::kF32, {5, 2, 16}})};
  op.attrs.push_back({"name", shlo::Attr::string("hlx.rotary")});
  op.attrs.push_back({"composite_attributes", shlo::Attr::dictionary({})});
  op.attrs.push_back({"decomposition", shlo::Attr::symbol("impl")});
  auto kernel = rt::KernelRegistry::builtin().compile("composite:hlx.rotary", op, fn);
  ASSERT_TRUE(kernel.ok()) << kernel.status().to_string();
  std::vector<float> x(160);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(float(i));
  std::vector<int32_t> pos = {0, 1, 7, 100, 4095};
  std::vector<float> inv = {1.f, 0.1f, 0.01f, 0.001f};
  Tensor xt = Tensor::empty(DType::kF32, {5, 2, 16}), pt = Tensor::empty(DType::kI32, {5}),
         it = Tensor::empty(DType::kF32, {4});
  std::memcpy(xt.raw(), x.data(), 640);
  std::memcpy(pt.raw(), pos.data(), 20);
  std::memcpy(it.raw(), inv.data(), 16);
  Tensor out = Tensor::zeros(DType::kF32, {5, 2, 16});
  ASSERT_TRUE((*kernel)->run({&xt, &pt, &it}, {&out}).ok());
  auto want = reference(5, 2, 16, 8, x, pos, inv);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(out.data<float>()[i], want[i], 2e-6) << i;
  // positions of the wrong type
  fn.value_types[size_t(op.operands[1])].dtype = DType::kI64;
  EXPECT_EQ(rt::KernelRegistry::builtin().compile("composite:hlx.rotary", op, fn).status().kind(),
            ErrorKind::kInvalidArgument);
}

}  // namespace
}  // namespace hlx
