// stablehlo.gather against loops written from the spec's examples: embedding lookup with
// index_vector_dim == rank, multi-dim start indices, clamping, and batching dims.
#include "structured_test_util.h"

namespace hlx {
namespace {

using namespace hlx::testing;

shlo::Op& add_gather(IrBuilder& b, shlo::ValueId x, shlo::ValueId idx, shlo::TensorType out,
                     std::vector<int64_t> offset_dims, std::vector<int64_t> collapsed,
                     std::vector<int64_t> start_index_map, int64_t ivd, std::vector<int64_t> slice_sizes,
                     std::vector<int64_t> op_batch = {}, std::vector<int64_t> si_batch = {}) {
  auto& op = b.op("stablehlo.gather", {x, idx}, {out});
  op.attrs.push_back(
      {"dimension_numbers", shlo::Attr::structure("gather", {{"offset_dims", ints(offset_dims)},
                                                             {"collapsed_slice_dims", ints(collapsed)},
                                                             {"operand_batching_dims", ints(op_batch)},
                                                             {"start_indices_batching_dims", ints(si_batch)},
                                                             {"start_index_map", ints(start_index_map)},
                                                             {"index_vector_dim", shlo::Attr::integer(ivd)}})});
  op.attrs.push_back({"slice_sizes", ints(slice_sizes)});
  return op;
}

TEST(Gather, EmbeddingLookupBf16) {
  IrBuilder b;
  auto w = b.arg(tt(DType::kBF16, {10, 6})), ids = b.arg(tt(DType::kI32, {4}));
  auto& op = add_gather(b, w, ids, tt(DType::kBF16, {4, 6}), {1}, {0}, {0}, 1, {1, 6});
  Tensor wt = random_tensor(DType::kBF16, {10, 6}, 1);
  Tensor it = from_vector<int>(DType::kI32, {4}, {3, 0, 9, 3});
  auto out = run_op(op, b.fn, {wt, it});
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  for (int t = 0; t < 4; ++t)
    for (int h = 0; h < 6; ++h)
      EXPECT_EQ((*out)[0].data<bf16>()[t * 6 + h].bits, wt.data<bf16>()[it.data<int32_t>()[t] * 6 + h].bits);
}

TEST(Gather, StartIndicesAreClamped) {
  IrBuilder b;
  auto x = b.arg(tt(DType::kF32, {5, 4})), idx = b.arg(tt(DType::kI64, {3, 2}));
  // Slices of 2x3 at (row, col) pairs; result [3, 2, 3].
  auto& op = add_gather(b, x, idx, tt(DType::kF32, {3, 2, 3}), {1, 2}, {}, {0, 1}, 1, {2, 3});
  Tensor xt = random_tensor(DType::kF32, {5, 4}, 2);
  Tensor it = from_vector<int64_t>(DType::kI64, {3, 2}, {1, 1, -4, 7, 4, 2});
  auto out = run_op(op, b.fn, {xt, it});
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  int64_t want_start[3][2] = {{1, 1}, {0, 1}, {3, 1}};  // clamp to [0, 5-2] x [0, 4-3]
  for (int n = 0; n < 3; ++n)
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 3; ++j)
        EXPECT_EQ((*out)[0].data<float>()[(n * 2 + i) * 3 + j],
                  xt.data<float>()[(want_start[n][0] + i) * 4 + want_start[n][1] + j])
            << n << i << j;
}

TEST(Gather, OffsetDimsBeforeBatchDimsAndIndexVectorDimZero) {
  IrBuilder b;
  auto x = b.arg(tt(DType::kI32, {4, 5, 6})), idx = b.arg(tt(DType::kI32, {2, 3}));
  // Index vectors along dim 0 of idx: 3 positions, each (d0, d2); slices [1, 5, 2] with d0 collapsed.
  // offset_dims = [0, 2] -> result [5, 3, 2].
  auto& op = add_gather(b, x, idx, tt(DType::kI32, {5, 3, 2}), {0, 2}, {0}, {0, 2}, 0, {1, 5, 2});
  Tensor xt = random_tensor(DType::kI32, {4, 5, 6}, 3, -1000, 1000);
  Tensor it = from_vector<int>(DType::kI32, {2, 3}, {0, 3, 2, 4, 0, 1});
  auto out = run_op(op, b.fn, {xt, it});
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  for (int j = 0; j < 5; ++j)
    for (int p = 0; p < 3; ++p)
      for (int k = 0; k < 2; ++k) {
        int64_t d0 = it.data<int32_t>()[p], d2 = it.data<int32_t>()[3 + p];
        EXPECT_EQ((*out)[0].data<int32_t>()[(j * 3 + p) * 2 + k], xt.data<int32_t>()[(d0 * 5 + j) * 6 + d2 + k]);
      }
}

TEST(Gather, BatchingDims) {
  IrBuilder b;
  // operand [B=2, N=5, H=3], indices [B=2, T=4] (scalar indices, ivd = 2) -> [2, 4, 3]
  auto x = b.arg(tt(DType::kF16, {2, 5, 3})), idx = b.arg(tt(DType::kI32, {2, 4}));
  auto& op = add_gather(b, x, idx, tt(DType::kF16, {2, 4, 3}), {2}, {1}, {1}, 2, {1, 1, 3}, {0}, {0});
  Tensor xt = random_tensor(DType::kF16, {2, 5, 3}, 4);
  Tensor it = from_vector<int>(DType::kI32, {2, 4}, {0, 4, 2, 2, 1, 3, 0, 4});
  auto out = run_op(op, b.fn, {xt, it});
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  for (int bb = 0; bb < 2; ++bb)
    for (int t = 0; t < 4; ++t)
      for (int h = 0; h < 3; ++h)
        EXPECT_EQ((*out)[0].data<f16>()[(bb * 4 + t) * 3 + h].bits,
                  xt.data<f16>()[(bb * 5 + it.data<int32_t>()[bb * 4 + t]) * 3 + h].bits);
}

TEST(Gather, EmptyIndicesAndBadSliceSizes) {
  IrBuilder b;
  auto x = b.arg(tt(DType::kF32, {5, 4})), idx = b.arg(tt(DType::kI32, {0}));
  auto& op = add_gather(b, x, idx, tt(DType::kF32, {0, 4}), {1}, {0}, {0}, 1, {1, 4});
  auto out = run_op(op, b.fn, {Tensor::empty(DType::kF32, {5, 4}), Tensor::empty(DType::kI32, {0})});
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  IrBuilder b2;
  auto x2 = b2.arg(tt(DType::kF32, {5, 4})), idx2 = b2.arg(tt(DType::kI32, {2}));
  auto& bad = add_gather(b2, x2, idx2, tt(DType::kF32, {2, 9}), {1}, {0}, {0}, 1, {1, 9});
  auto k = structured_registry().compile(bad.name, bad, b2.fn);
  ASSERT_FALSE(k.ok());
  EXPECT_EQ(k.status().kind(), ErrorKind::kInvalidArgument);
}

}  // namespace
}  // namespace hlx
