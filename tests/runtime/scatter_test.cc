// stablehlo.scatter against loops: add with duplicate indices, replace in bf16, out-of-bounds
// updates skipped, batching dims, in-place on the operand, and a generic update region.
#include "structured_test_util.h"

namespace hlx {
namespace {

using namespace hlx::testing;

shlo::Op& add_scatter(IrBuilder& b, DType d, shlo::ValueId x, shlo::ValueId idx, shlo::ValueId upd,
                      const std::string& body, std::vector<int64_t> uwd, std::vector<int64_t> iwd,
                      std::vector<int64_t> sd2od, int64_t ivd, std::vector<int64_t> ibd = {},
                      std::vector<int64_t> sibd = {}) {
  shlo::Block region = b.binary_region(body, d);
  auto& op = b.op("stablehlo.scatter", {x, idx, upd}, {b.fn.type_of(x)});
  op.attrs.push_back({"scatter_dimension_numbers",
                      shlo::Attr::structure("scatter", {{"update_window_dims", ints(uwd)},
                                                        {"inserted_window_dims", ints(iwd)},
                                                        {"input_batching_dims", ints(ibd)},
                                                        {"scatter_indices_batching_dims", ints(sibd)},
                                                        {"scatter_dims_to_operand_dims", ints(sd2od)},
                                                        {"index_vector_dim", shlo::Attr::integer(ivd)}})});
  op.regions.push_back(std::move(region));
  return op;
}

TEST(Scatter, AddRowsWithDuplicatesAndOutOfBounds) {
  IrBuilder b;
  auto x = b.arg(tt(DType::kF32, {5, 3})), idx = b.arg(tt(DType::kI32, {4, 1})), u = b.arg(tt(DType::kF32, {4, 3}));
  auto& op = add_scatter(b, DType::kF32, x, idx, u, "stablehlo.add", {1}, {0}, {0}, 1);
  Tensor xt = random_tensor(DType::kF32, {5, 3}, 1), ut = random_tensor(DType::kF32, {4, 3}, 2);
  Tensor it = from_vector<int>(DType::kI32, {4, 1}, {2, 7, 2, -1});
  auto out = run_op(op, b.fn, {xt, it, ut});
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  Tensor want = xt.clone();
  for (int n = 0; n < 4; ++n) {
    int r = it.data<int32_t>()[n];
    if (r < 0 || r >= 5) continue;
    for (int c = 0; c < 3; ++c) want.data<float>()[r * 3 + c] += ut.data<float>()[n * 3 + c];
  }
  for (int i = 0; i < 15; ++i) EXPECT_FLOAT_EQ((*out)[0].data<float>()[i], want.data<float>()[i]) << i;
}

TEST(Scatter, ReplaceBf16PartiallyOutOfBoundsWindowSkipsOnlyOutsideElements) {
  IrBuilder b;
  // indices [1] with index_vector_dim 0: one index vector [4]; updates [3] form one window.
  auto x = b.arg(tt(DType::kBF16, {6})), idx = b.arg(tt(DType::kI64, {1})), u = b.arg(tt(DType::kBF16, {3}));
  auto& op = add_scatter(b, DType::kBF16, x, idx, u, "", {0}, {}, {0}, 0);
  Tensor xt = from_vector<float>(DType::kBF16, {6}, {0, 1, 2, 3, 4, 5});
  Tensor ut = from_vector<float>(DType::kBF16, {3}, {-1, -2, -3});
  Tensor it = from_vector<int64_t>(DType::kI64, {1}, {4});
  auto out = run_op(op, b.fn, {xt, it, ut});
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  // Elements 4, 5 are written; the third lands at 6, outside, and is skipped (reference interpreter).
  float want[6] = {0, 1, 2, 3, -1, -2};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(get_f((*out)[0], i), want[i]) << i;
}

TEST(Scatter, MaxIntoI8AndMinIntoU8) {
  for (auto [d, body] : {std::pair{DType::kI8, "stablehlo.maximum"}, std::pair{DType::kU8, "stablehlo.minimum"}}) {
    IrBuilder b;
    auto x = b.arg(tt(d, {4})), idx = b.arg(tt(DType::kI32, {6, 1})), u = b.arg(tt(d, {6}));
    auto& op = add_scatter(b, d, x, idx, u, body, {}, {0}, {0}, 1);
    Tensor xt = random_tensor(d, {4}, 5, 0, 100), ut = random_tensor(d, {6}, 6, 0, 100);
    Tensor it = from_vector<int>(DType::kI32, {6, 1}, {0, 3, 3, 1, 0, 2});
    auto out = run_op(op, b.fn, {xt, it, ut});
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    std::vector<int64_t> want(4);
    for (int i = 0; i < 4; ++i) want[size_t(i)] = get_i(xt, i);
    for (int n = 0; n < 6; ++n) {
      int64_t& w = want[size_t(it.data<int32_t>()[n])];
      w = std::string(body) == "stablehlo.maximum" ? std::max(w, get_i(ut, n)) : std::min(w, get_i(ut, n));
    }
    for (int i = 0; i < 4; ++i) EXPECT_EQ(get_i((*out)[0], i), want[size_t(i)]);
  }
}

TEST(Scatter, BatchingDimsWriteKvRows) {
  IrBuilder b;
  // cache [B=2, S=5, H=2]; positions [B=2, T=2]; updates [2, 2, 2] -> cache[b, pos[b,t], :] = upd[b, t, :]
  auto x = b.arg(tt(DType::kF32, {2, 5, 2})), idx = b.arg(tt(DType::kI32, {2, 2})),
       u = b.arg(tt(DType::kF32, {2, 2, 2}));
  auto& op = add_scatter(b, DType::kF32, x, idx, u, "", {2}, {1}, {1}, 2, {0}, {0});
  Tensor xt = random_tensor(DType::kF32, {2, 5, 2}, 7), ut = random_tensor(DType::kF32, {2, 2, 2}, 8);
  Tensor it = from_vector<int>(DType::kI32, {2, 2}, {0, 3, 4, 1});
  auto out = run_op(op, b.fn, {xt, it, ut});
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  Tensor want = xt.clone();
  for (int bb = 0; bb < 2; ++bb)
    for (int t = 0; t < 2; ++t)
      for (int h = 0; h < 2; ++h)
        want.data<float>()[(bb * 5 + it.data<int32_t>()[bb * 2 + t]) * 2 + h] = ut.data<float>()[(bb * 2 + t) * 2 + h];
  for (int i = 0; i < 20; ++i) EXPECT_EQ((*out)[0].data<float>()[i], want.data<float>()[i]) << i;
}

TEST(Scatter, RunsInPlaceOnOperand) {
  IrBuilder b;
  auto x = b.arg(tt(DType::kI32, {4})), idx = b.arg(tt(DType::kI32, {1, 1})), u = b.arg(tt(DType::kI32, {1}));
  auto& op = add_scatter(b, DType::kI32, x, idx, u, "stablehlo.add", {}, {0}, {0}, 1);
  auto k = structured_registry().compile(op.name, op, b.fn);
  ASSERT_TRUE(k.ok());
  EXPECT_TRUE((*k)->can_run_in_place(0));
  Tensor xt = from_vector<int>(DType::kI32, {4}, {1, 2, 3, 4});
  Tensor it = from_vector<int>(DType::kI32, {1, 1}, {2});
  Tensor ut = from_vector<int>(DType::kI32, {1}, {10});
  std::vector<const Tensor*> in{&xt, &it, &ut};
  std::vector<Tensor*> out{&xt};
  ASSERT_TRUE((*k)->run(in, out).ok());
  EXPECT_EQ(xt.data<int32_t>()[2], 13);
  EXPECT_EQ(xt.data<int32_t>()[1], 2);
}

TEST(Scatter, GenericRegionSubtract) {
  if (!have_kernel("stablehlo.subtract")) GTEST_SKIP() << "subtract kernel not available yet";
  IrBuilder b;
  auto x = b.arg(tt(DType::kF32, {3})), idx = b.arg(tt(DType::kI32, {2, 1})), u = b.arg(tt(DType::kF32, {2}));
  auto& op = add_scatter(b, DType::kF32, x, idx, u, "stablehlo.subtract", {}, {0}, {0}, 1);
  Tensor xt = from_vector<float>(DType::kF32, {3}, {10, 20, 30});
  auto out = run_op(op, b.fn,
                    {xt, from_vector<int>(DType::kI32, {2, 1}, {1, 1}), from_vector<float>(DType::kF32, {2}, {1, 2})});
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  EXPECT_EQ((*out)[0].data<float>()[1], 17.f);  // (20 - 1) - 2, current value on the left
  EXPECT_EQ((*out)[0].data<float>()[0], 10.f);
}

}  // namespace
}  // namespace hlx
