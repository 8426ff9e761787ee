// Result types computed by shape inference, on shapes worked out by hand (several from the
// official StableHLO test corpus), and round trips of the dimension-number attributes.
#include <gtest/gtest.h>

#include "stablehlo/shape_inference.h"
#include "verify_test_util.h"

namespace hlx::shlo {
namespace {

using namespace hlx::shlo::testing;

template <class R>
TensorType value_of(const R& r) {
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? *r : TensorType{};
}

TEST(ShapeInference, DotGeneral) {
  // Batched attention scores: q [B=2, H=4, T=3, D=8] x k [2, 4, S=5, 8] over D -> [2, 4, 3, 5].
  DotDims d{{0, 1}, {0, 1}, {3}, {3}};
  EXPECT_EQ(value_of(infer_dot_general(T(BF16, {2, 4, 3, 8}), T(BF16, {2, 4, 5, 8}), d, F32)), T(F32, {2, 4, 3, 5}));
  // Free dims of lhs come before those of rhs, after the batch dims.
  EXPECT_EQ(value_of(infer_dot_general(T(F32, {7, 3}), T(F32, {3, 6, 2}), DotDims{{}, {}, {1}, {0}})),
            T(F32, {7, 6, 2}));
  EXPECT_EQ(value_of(infer_dot_general(T(F32, {2, 5, 3}), T(F32, {2, 3, 4}), DotDims::matmul(3, 3, 1))),
            T(F32, {2, 5, 4}));
  EXPECT_TRUE(FailsWith(infer_dot_general(T(F32, {7, 3}), T(F32, {4, 6}), DotDims::matmul(2, 2)), "dot_general_c10"));
}

TEST(ShapeInference, GatherCorpusExample) {
  // gather from the corpus: operand 10x10x10x10, indices 1x1x4x3, index_vector_dim 3.
  GatherDims d{{1, 2, 3, 4}, {}, {}, {}, {1, 2, 3}, 3};
  EXPECT_EQ(value_of(infer_gather(T(F32, {10, 10, 10, 10}), T(I64, {1, 1, 4, 3}), d, {10, 2, 2, 2})),
            T(F32, {1, 10, 2, 2, 2, 1, 4}));
  // From the corpus with index_vector_dim omitted (0): indices [1] is one index vector.
  GatherDims d2{{0, 1}, {2}, {}, {}, {2}, 0};
  EXPECT_EQ(value_of(infer_gather(T(F32, {10, 10, 10}), T(I64, {1}), d2, {10, 10, 1})), T(F32, {10, 10}));
  // Implicit trailing index vector (index_vector_dim = rank(indices)): indices [3] are 3 scalars.
  GatherDims d2b{{0, 1}, {2}, {}, {}, {2}, 1};
  EXPECT_EQ(value_of(infer_gather(T(F32, {10, 10, 10}), T(I64, {3}), d2b, {10, 10, 1})), T(F32, {10, 10, 3}));
  GatherDims d3{{}, {0}, {}, {}, {0}, 1};
  EXPECT_EQ(value_of(infer_gather(T(I64, {3}), T(I32, {1, 1}), d3, {1})), T(I64, {1}));
}

TEST(ShapeInference, Scatter) {
  // Corpus: index_vector_dim omitted (0), so indices [1] hold a single index vector.
  ScatterDims d{{0, 1}, {0}, {}, {}, {0}, 0};
  auto r = infer_scatter({T(BF16, {1, 1, 1})}, T(I64, {1}), {T(BF16, {1, 1})}, d, {BF16});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ((*r)[0], T(BF16, {1, 1, 1}));
  // The result takes the body's (promoted) element type.
  auto p = infer_scatter({T(BF16, {1, 1, 1})}, T(I64, {1}), {T(BF16, {1, 1})}, d, {F32});
  ASSERT_TRUE(p.ok());
  EXPECT_EQ((*p)[0], T(F32, {1, 1, 1}));
}

TEST(ShapeInference, ConvolutionCorpusExamples) {
  // [b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f], pad [[1, 1], [2, 2]], lhs_dilate [2, 2].
  ConvDims nhwc{0, 3, {1, 2}, 2, 3, {0, 1}, 0, 3, {1, 2}};
  ConvWindow w;
  w.padding = {{1, 1}, {2, 2}};
  w.lhs_dilation = {2, 2};
  EXPECT_EQ(value_of(infer_convolution(T(F32, {1, 16, 16, 2}), T(F32, {2, 3, 2, 2}), nhwc, w)), T(F32, {1, 32, 33, 2}));
  // [b, f, 0, 1]x[0, 1, i, o]->[b, f, 0, 1], rhs_dilate [1, 2].
  ConvDims nchw{0, 1, {2, 3}, 2, 3, {0, 1}, 0, 1, {2, 3}};
  ConvWindow w2;
  w2.rhs_dilation = {1, 2};
  EXPECT_EQ(value_of(infer_convolution(T(F32, {1, 1, 28, 28}), T(F32, {3, 3, 1, 16}), nchw, w2)),
            T(F32, {1, 16, 26, 24}));
  // 1-D, pad [[1, 2]]: 1 + 16 + 2 - 4 + 1 = 16.
  ConvDims one{0, 3, {1, 2}, 2, 3, {0, 1}, 0, 3, {1, 2}};
  ConvWindow w3;
  w3.padding = {{0, 0}, {1, 2}};
  EXPECT_EQ(value_of(infer_convolution(T(F32, {1, 1, 16, 1}), T(F32, {1, 4, 1, 2}), one, w3)), T(F32, {1, 1, 16, 2}));
  // Window larger than the padded input: empty output dimension.
  EXPECT_EQ(value_of(infer_convolution(T(F32, {1, 2, 2, 1}), T(F32, {3, 3, 1, 1}), nhwc, {})), T(F32, {1, 0, 0, 1}));
}

TEST(ShapeInference, ShapeOps) {
  EXPECT_EQ(value_of(infer_slice(T(F32, {10}), {1}, {10}, {3})), T(F32, {3}));  // ceil(9 / 3)
  EXPECT_EQ(value_of(infer_slice(T(F32, {10}), {1}, {9}, {3})), T(F32, {3}));   // ceil(8 / 3)
  EXPECT_EQ(value_of(infer_slice(T(F32, {10}), {4}, {4}, {1})), T(F32, {0}));
  EXPECT_EQ(value_of(infer_pad(T(F32, {0, 3}), T(F32), {1, 0}, {1, 0}, {5, 2})), T(F32, {2, 7}));
  EXPECT_EQ(value_of(infer_concatenate({T(I8, {2, 1}), T(I8, {2, 0}), T(I8, {2, 4})}, 1)), T(I8, {2, 5}));
  EXPECT_EQ(value_of(infer_transpose(T(F32, {2, 3, 4}), {1, 2, 0})), T(F32, {3, 4, 2}));
  EXPECT_EQ(value_of(infer_broadcast_in_dim(T(F32, {3}), {1}, {2, 3})), T(F32, {2, 3}));
  EXPECT_EQ(value_of(infer_broadcast_in_dim(T(F32), {}, {2, 3})), T(F32, {2, 3}));
  EXPECT_EQ(value_of(infer_reshape(T(F32, {2, 3}), {6})), T(F32, {6}));
  EXPECT_EQ(value_of(infer_dynamic_slice(T(F32, {4, 5}), {T(I32), T(I32)}, {1, 5})), T(F32, {1, 5}));
  EXPECT_EQ(value_of(infer_compare(T(BF16, {2}), T(BF16, {2}), "LT", "")), T(I1, {2}));
  EXPECT_EQ(value_of(infer_convert(T(F32, {2}), U8)), T(U8, {2}));
  EXPECT_TRUE(FailsWith(infer_reshape(T(F32, {2, 3}), {-1, 6}), "reshape_c2"));
  EXPECT_TRUE(FailsWith(infer_broadcast_in_dim(T(F32), {}, {-2}), "broadcast_in_dim_c5"));
}

TEST(ShapeInference, Reduce) {
  auto body = check_reduction_body("reduce", {T(F32, {2, 3}), T(I32, {2, 3})}, {T(F32), T(I32), T(F32), T(I32)},
                                   {T(F32), T(I32)});
  ASSERT_TRUE(body.ok()) << body.status().to_string();
  auto r = infer_reduce({T(F32, {2, 3}), T(I32, {2, 3})}, {T(F32), T(I32)}, {0, 1}, *body);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ((*r)[0], T(F32));
  EXPECT_EQ((*r)[1], T(I32));
  EXPECT_TRUE(FailsWith(check_reduction_body("reduce", {T(F32, {2})}, {T(F32)}, {T(F32)}), "reduce_c6"));
  EXPECT_TRUE(
      FailsWith(check_reduction_body("scatter", {T(F32, {2})}, {T(F32), T(F32)}, {T(F32, {1})}), "scatter_c23"));
}

TEST(ShapeInference, Promotable) {
  EXPECT_TRUE(is_promotable(BF16, F32));
  EXPECT_TRUE(is_promotable(I8, I32));
  EXPECT_TRUE(is_promotable(I1, I1));
  EXPECT_FALSE(is_promotable(F32, BF16));
  EXPECT_FALSE(is_promotable(I32, F32));
  EXPECT_FALSE(is_promotable(I1, I8));
}

TEST(ShapeInference, AttrRoundTrips) {
  DotDims d{{0}, {0}, {2}, {1}};
  auto d2 = dot_dims_from_attr(to_attr(d));
  ASSERT_TRUE(d2.ok());
  EXPECT_EQ(d2->lhs_batching, d.lhs_batching);
  EXPECT_EQ(d2->rhs_contracting, d.rhs_contracting);

  GatherDims g{{2}, {1}, {0}, {0}, {1}, 2};
  auto g2 = gather_dims_from_attr(to_attr(g));
  ASSERT_TRUE(g2.ok());
  EXPECT_EQ(g2->offset_dims, g.offset_dims);
  EXPECT_EQ(g2->operand_batching_dims, g.operand_batching_dims);
  EXPECT_EQ(g2->start_indices_batching_dims, g.start_indices_batching_dims);
  EXPECT_EQ(g2->index_vector_dim, 2);

  ScatterDims s{{1}, {0}, {}, {}, {0}, 1};
  auto s2 = scatter_dims_from_attr(to_attr(s));
  ASSERT_TRUE(s2.ok());
  EXPECT_EQ(s2->update_window_dims, s.update_window_dims);
  EXPECT_EQ(s2->index_vector_dim, 1);
  // An omitted index_vector_dim means 0.
  auto s3 = scatter_dims_from_attr(Attr::structure("scatter", {}));
  ASSERT_TRUE(s3.ok());
  EXPECT_EQ(s3->index_vector_dim, 0);

  ConvDims c{0, 3, {1, 2}, 2, 3, {0, 1}, 0, 3, {1, 2}};
  auto c2 = conv_dims_from_attr(to_attr(c));
  ASSERT_TRUE(c2.ok());
  EXPECT_EQ(c2->input_feature, 3);
  EXPECT_EQ(c2->kernel_spatial, c.kernel_spatial);
  EXPECT_EQ(c2->output_spatial, c.output_spatial);

  ConvWindow w;
  w.window_strides = {2, 1};
  w.padding = {{1, 2}, {3, 4}};
  w.window_reversal = {true, false};
  w.feature_group_count = 2;
  AttrDict attrs;
  set_conv_window_attrs(attrs, w);
  auto w2 = conv_window_from_attrs(attrs);
  ASSERT_TRUE(w2.ok());
  EXPECT_EQ(w2->window_strides, w.window_strides);
  EXPECT_EQ(w2->padding, w.padding);
  EXPECT_EQ(w2->window_reversal, w.window_reversal);
  EXPECT_EQ(w2->feature_group_count, 2);
  EXPECT_EQ(w2->batch_group_count, 1);
  // Missing required conv fields are errors, not defaults.
  EXPECT_TRUE(FailsWith(conv_dims_from_attr(Attr::structure("conv", {})), "conv_attr"));
}

}  // namespace
}  // namespace hlx::shlo
