// dot_general against numpy einsum (f32, bf16, f16 x bf16 mixed) and integer loops (wrap-around).
#include "structured_test_util.h"

namespace hlx {
namespace {

using namespace hlx::testing;

shlo::Attr dot_dims(std::vector<int64_t> lb, std::vector<int64_t> rb, std::vector<int64_t> lc,
                    std::vector<int64_t> rc) {
  return shlo::Attr::structure("dot", {{"lhs_batching_dimensions", ints(lb)},
                                       {"rhs_batching_dimensions", ints(rb)},
                                       {"lhs_contracting_dimensions", ints(lc)},
                                       {"rhs_contracting_dimensions", ints(rc)}});
}

struct DotCase {
  IrBuilder b;
  shlo::Op* op = nullptr;
  DotCase(shlo::TensorType l, shlo::TensorType r, shlo::TensorType o, shlo::Attr dims) {
    auto a0 = b.arg(l), a1 = b.arg(r);
    op = &b.op("stablehlo.dot_general", {a0, a1}, {o});
    op->attrs.push_back({"dot_dimension_numbers", std::move(dims)});
  }
};

void expect_close(const Tensor& got, const Tensor& want, float tol) {
  ASSERT_EQ(got.shape(), want.shape());
  for (int64_t i = 0; i < got.num_elements(); ++i)
    ASSERT_NEAR(get_f(got, i), get_f(want, i), tol * (1 + std::fabs(get_f(want, i)))) << "element " << i;
}

TEST(DotGeneral, BatchedMatmulF32MatchesNumpy) {
  DotCase c(tt(DType::kF32, {2, 3, 4}), tt(DType::kF32, {2, 4, 5}), tt(DType::kF32, {2, 3, 5}),
            dot_dims({0}, {0}, {2}, {1}));
  Tensor a = random_tensor(DType::kF32, {2, 3, 4}, 1), bb = random_tensor(DType::kF32, {2, 4, 5}, 2);
  auto out = run_op(*c.op, c.b.fn, {a, bb});
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  auto want = numpy_eval({a, bb}, "out = np.einsum('bmk,bkn->bmn', a0, a1).astype(np.float32)");
  ASSERT_TRUE(want.ok());
  expect_close((*out)[0], *want, 1e-5f);
}

TEST(DotGeneral, TransposedRhsAndPermutedBatchMatchNumpy) {
  // lhs [K=4, B=2, M=3], rhs [N=5, B=2, K=4] -> [B, M, N]
  DotCase c(tt(DType::kF32, {4, 2, 3}), tt(DType::kF32, {5, 2, 4}), tt(DType::kF32, {2, 3, 5}),
            dot_dims({1}, {1}, {0}, {2}));
  Tensor a = random_tensor(DType::kF32, {4, 2, 3}, 3), bb = random_tensor(DType::kF32, {5, 2, 4}, 4);
  auto out = run_op(*c.op, c.b.fn, {a, bb});
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  auto want = numpy_eval({a, bb}, "out = np.einsum('kbm,nbk->bmn', a0, a1).astype(np.float32)");
  ASSERT_TRUE(want.ok());
  expect_close((*out)[0], *want, 1e-5f);
}

TEST(DotGeneral, MixedBf16F16AccumulatesInF32) {
  DotCase c(tt(DType::kBF16, {3, 64}), tt(DType::kF16, {64, 2}), tt(DType::kF32, {3, 2}), dot_dims({}, {}, {1}, {0}));
  Tensor a = random_tensor(DType::kBF16, {3, 64}, 5), bb = random_tensor(DType::kF16, {64, 2}, 6);
  auto out = run_op(*c.op, c.b.fn, {a, bb});
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  Tensor af = Tensor::empty(DType::kF32, {3, 64}), bf = Tensor::empty(DType::kF32, {64, 2});
  for (int64_t i = 0; i < 192; ++i) af.data<float>()[i] = get_f(a, i);
  for (int64_t i = 0; i < 128; ++i) bf.data<float>()[i] = get_f(bb, i);
  auto want = numpy_eval({af, bf}, "out = (a0.astype(np.float64) @ a1.astype(np.float64)).astype(np.float32)");
  ASSERT_TRUE(want.ok());
  expect_close((*out)[0], *want, 1e-5f);
}

TEST(DotGeneral, Bf16ResultRoundsOnce) {
  DotCase c(tt(DType::kBF16, {2, 8}), tt(DType::kBF16, {8, 3}), tt(DType::kBF16, {2, 3}), dot_dims({}, {}, {1}, {0}));
  Tensor a = random_tensor(DType::kBF16, {2, 8}, 7), bb = random_tensor(DType::kBF16, {8, 3}, 8);
  auto out = run_op(*c.op, c.b.fn, {a, bb});
  ASSERT_TRUE(out.ok());
  for (int64_t m = 0; m < 2; ++m)
    for (int64_t n = 0; n < 3; ++n) {
      double acc = 0;
      for (int64_t k = 0; k < 8; ++k) acc += double(get_f(a, m * 8 + k)) * get_f(bb, k * 3 + n);
      EXPECT_EQ((*out)[0].data<bf16>()[m * 3 + n].bits, f32_to_bf16(float(acc)).bits) << m << "," << n;
    }
}

TEST(DotGeneral, IntegersWrapInResultType) {
  DotCase c(tt(DType::kI8, {2, 3}), tt(DType::kI8, {3, 2}), tt(DType::kI8, {2, 2}), dot_dims({}, {}, {1}, {0}));
  Tensor a = from_vector<int>(DType::kI8, {2, 3}, {100, 100, 100, -7, 3, 1});
  Tensor bb = from_vector<int>(DType::kI8, {3, 2}, {2, 1, 1, -1, 1, 5});
  auto out = run_op(*c.op, c.b.fn, {a, bb});
  ASSERT_TRUE(out.ok());
  int32_t want[4] = {400, 500, -10, -5};
  for (int i = 0; i < 4; ++i) EXPECT_EQ((*out)[0].data<int8_t>()[i], int8_t(uint8_t(uint32_t(want[i])))) << i;
}

TEST(DotGeneral, I32AndEmptyContraction) {
  DotCase c(tt(DType::kI32, {2, 0}), tt(DType::kI32, {0, 3}), tt(DType::kI32, {2, 3}), dot_dims({}, {}, {1}, {0}));
  auto out = run_op(*c.op, c.b.fn, {Tensor::empty(DType::kI32, {2, 0}), Tensor::empty(DType::kI32, {0, 3})});
  ASSERT_TRUE(out.ok());
  for (int i = 0; i < 6; ++i) EXPECT_EQ((*out)[0].data<int32_t>()[i], 0);
}

TEST(DotGeneral, ConstantRhsIsPackedOnce) {
  DotCase c(tt(DType::kF32, {3, 4}), tt(DType::kF16, {4, 2}), tt(DType::kF32, {3, 2}), dot_dims({}, {}, {1}, {0}));
  auto k = structured_registry().compile("stablehlo.dot_general", *c.op, c.b.fn);
  ASSERT_TRUE(k.ok());
  Tensor a = random_tensor(DType::kF32, {3, 4}, 9), w = random_tensor(DType::kF16, {4, 2}, 10);
  ASSERT_TRUE((*k)->set_constant_input(1, w).ok());
  Tensor got = Tensor::zeros(DType::kF32, {3, 2});
  std::vector<const Tensor*> in{&a, &w};
  std::vector<Tensor*> out{&got};
  ASSERT_TRUE((*k)->run(in, out).ok());
  for (int64_t m = 0; m < 3; ++m)
    for (int64_t n = 0; n < 2; ++n) {
      float acc = 0;
      for (int64_t kk = 0; kk < 4; ++kk) acc += get_f(a, m * 4 + kk) * get_f(w, kk * 2 + n);
      EXPECT_NEAR(got.data<float>()[m * 2 + n], acc, 1e-5f);
    }
}

TEST(DotGeneral, RejectsMismatchedContractingSizes) {
  DotCase c(tt(DType::kF32, {3, 4}), tt(DType::kF32, {5, 2}), tt(DType::kF32, {3, 2}), dot_dims({}, {}, {1}, {0}));
  auto k = structured_registry().compile("stablehlo.dot_general", *c.op, c.b.fn);
  ASSERT_FALSE(k.ok());
  EXPECT_NE(k.status().message().find("contracting"), std::string::npos) << k.status().message();
}

}  // namespace
}  // namespace hlx
