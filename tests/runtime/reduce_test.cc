// stablehlo.reduce against plain loops: fast-path bodies for every type family, bf16 accumulation
// in f32, empty reduced dims, and the argmax-style variadic reduce through the region evaluator.
#include "structured_test_util.h"

namespace hlx {
namespace {

using namespace hlx::testing;

struct ReduceCase {
  IrBuilder b;
  shlo::Op* op = nullptr;
  ReduceCase(DType d, Shape in, std::vector<int64_t> dims, const std::string& body, Shape out) {
    auto x = b.arg(tt(d, in)), init = b.arg(tt(d, {}));
    shlo::Block region = b.binary_region(body, d);
    op = &b.op("stablehlo.reduce", {x, init}, {tt(d, out)});
    op->attrs.push_back({"dimensions", ints(dims)});
    op->regions.push_back(std::move(region));
  }
};

TEST(Reduce, SumF32OverMiddleAndOuterDims) {
  ReduceCase c(DType::kF32, {3, 4, 5}, {0, 2}, "stablehlo.add", {4});
  Tensor x = random_tensor(DType::kF32, {3, 4, 5}, 1);
  Tensor init = from_vector<float>(DType::kF32, {}, {0.5f});
  auto out = run_op(*c.op, c.b.fn, {x, init});
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  for (int j = 0; j < 4; ++j) {
    double acc = 0.5;
    for (int i = 0; i < 3; ++i)
      for (int k = 0; k < 5; ++k) acc += x.data<float>()[(i * 4 + j) * 5 + k];
    EXPECT_NEAR((*out)[0].data<float>()[j], acc, 1e-5);
  }
}

TEST(Reduce, Bf16SumAccumulatesInF32ThenRoundsOnce) {
  // 256 values of 1.0 plus 0.0039: bf16 accumulation would stall at 256; f32 does not.
  ReduceCase c(DType::kBF16, {2, 300}, {1}, "stablehlo.add", {2});
  Tensor x = Tensor::empty(DType::kBF16, {2, 300});
  for (int i = 0; i < 600; ++i) set_f(x, i, 1.0f);
  Tensor init = from_vector<float>(DType::kBF16, {}, {0.f});
  auto out = run_op(*c.op, c.b.fn, {x, init});
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(get_f((*out)[0], 0), bf16_to_f32(f32_to_bf16(300.f)));
  EXPECT_EQ(get_f((*out)[0], 1), bf16_to_f32(f32_to_bf16(300.f)));
}

TEST(Reduce, MaxMinMulAndLogicalForIntegers) {
  struct K {
    DType d;
    std::string body;
  };
  for (K k : {K{DType::kI32, "stablehlo.maximum"}, K{DType::kU8, "stablehlo.minimum"},
              K{DType::kI64, "stablehlo.multiply"}, K{DType::kI1, "stablehlo.and"}, K{DType::kI1, "stablehlo.or"},
              K{DType::kI16, "stablehlo.add"}, K{DType::kI8, "stablehlo.maximum"}}) {
    ReduceCase c(k.d, {4, 6}, {1}, k.body, {4});
    Tensor x = random_tensor(k.d, {4, 6}, 3, k.d == DType::kU8 ? 0 : -9, 9);
    int64_t init_v = k.body == "stablehlo.multiply" || k.body == "stablehlo.and" ? 1
                     : k.body == "stablehlo.minimum"                             ? 255
                     : k.body == "stablehlo.maximum"                             ? -100
                                                                                 : 0;
    Tensor init = from_vector<int64_t>(k.d, {}, {init_v});
    auto out = run_op(*c.op, c.b.fn, {x, init});
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    for (int i = 0; i < 4; ++i) {
      int64_t acc = get_i(init, 0);
      for (int j = 0; j < 6; ++j) {
        int64_t v = get_i(x, i * 6 + j);
        if (k.body == "stablehlo.maximum") acc = std::max(acc, v);
        if (k.body == "stablehlo.minimum") acc = std::min(acc, v);
        if (k.body == "stablehlo.multiply") acc *= v;
        if (k.body == "stablehlo.add") acc += v;
        if (k.body == "stablehlo.and") acc = acc && v;
        if (k.body == "stablehlo.or") acc = acc || v;
      }
      Tensor want = Tensor::empty(k.d, {});
      set_i(want, 0, acc);
      EXPECT_EQ(get_i((*out)[0], i), get_i(want, 0)) << k.body << " " << dtype_name(k.d) << " row " << i;
    }
  }
}

TEST(Reduce, MaxF16PropagatesNaN) {
  ReduceCase c(DType::kF16, {3}, {0}, "stablehlo.maximum", {});
  Tensor x = from_vector<float>(DType::kF16, {3}, {1.f, NAN, 2.f});
  auto out = run_op(*c.op, c.b.fn, {x, from_vector<float>(DType::kF16, {}, {-INFINITY})});
  ASSERT_TRUE(out.ok());
  EXPECT_TRUE(std::isnan(get_f((*out)[0], 0)));
}

TEST(Reduce, EmptyReducedDimGivesInit) {
  ReduceCase c(DType::kF32, {3, 0}, {1}, "stablehlo.add", {3});
  auto out = run_op(*c.op, c.b.fn, {Tensor::empty(DType::kF32, {3, 0}), from_vector<float>(DType::kF32, {}, {7.f})});
  ASSERT_TRUE(out.ok());
  for (int i = 0; i < 3; ++i) EXPECT_EQ((*out)[0].data<float>()[i], 7.f);
}

TEST(Reduce, RejectsBadDimension) {
  ReduceCase c(DType::kF32, {3, 4}, {2}, "stablehlo.add", {3, 4});
  auto k = structured_registry().compile("stablehlo.reduce", *c.op, c.b.fn);
  ASSERT_FALSE(k.ok());
  EXPECT_EQ(k.status().kind(), ErrorKind::kInvalidArgument);
}

// The argmax reducer of the official corpus (argmax_*.mlir), evaluated on scalars.
TEST(Reduce, VariadicArgmaxThroughRegion) {
  for (const char* needed : {"stablehlo.compare", "stablehlo.select", "stablehlo.or", "stablehlo.and"})
    if (!have_kernel(needed)) GTEST_SKIP() << needed << " kernel not available yet";
  IrBuilder b;
  auto x = b.arg(tt(DType::kBF16, {3, 7})), idx = b.arg(tt(DType::kI32, {3, 7}));
  auto ix = b.arg(tt(DType::kBF16, {})), ii = b.arg(tt(DType::kI32, {}));
  shlo::Block r;
  auto a1 = b.fn.new_value(tt(DType::kBF16, {})), a2 = b.fn.new_value(tt(DType::kI32, {}));
  auto a3 = b.fn.new_value(tt(DType::kBF16, {})), a4 = b.fn.new_value(tt(DType::kI32, {}));
  r.args = {a1, a2, a3, a4};
  auto mk = [&](std::string name, std::vector<shlo::ValueId> in, DType d, shlo::AttrDict attrs = {}) {
    shlo::Op o;
    o.name = std::move(name);
    o.operands = std::move(in);
    o.results = {b.fn.new_value(tt(d, {}))};
    o.attrs = std::move(attrs);
    r.ops.push_back(o);
    return o.results[0];
  };
  auto cmp = [&](const char* dir, shlo::ValueId p, shlo::ValueId q, const char* type) {
    return mk("stablehlo.compare", {p, q}, DType::kI1,
              {{"comparison_direction", shlo::Attr::enumeration("comparison_direction", dir)},
               {"compare_type", shlo::Attr::enumeration("comparison_type", type)}});
  };
  auto v2 = cmp("GT", a1, a3, "FLOAT");
  auto v3 = cmp("NE", a1, a1, "FLOAT");
  auto v4 = mk("stablehlo.or", {v2, v3}, DType::kI1);
  auto v5 = cmp("EQ", a1, a3, "FLOAT");
  auto v6 = cmp("LT", a2, a4, "SIGNED");
  auto v7 = mk("stablehlo.and", {v5, v6}, DType::kI1);
  auto v8 = mk("stablehlo.or", {v4, v7}, DType::kI1);
  auto v9 = mk("stablehlo.select", {v4, a1, a3}, DType::kBF16);
  auto v10 = mk("stablehlo.select", {v8, a2, a4}, DType::kI32);
  shlo::Op ret;
  ret.name = "stablehlo.return";
  ret.operands = {v9, v10};
  r.ops.push_back(ret);
  auto& op = b.op("stablehlo.reduce", {x, idx, ix, ii}, {tt(DType::kBF16, {3}), tt(DType::kI32, {3})});
  op.attrs.push_back({"dimensions", ints({1})});
  op.regions.push_back(std::move(r));
  // Row 1 has a tie (first index wins), row 2 has a NaN (NaN wins).
  Tensor xv =
      from_vector<float>(DType::kBF16, {3, 7}, {1, 5, 2, 9, 3, 0, -1, 4, 8, 8, 1, 0, 2, 8, 1, 2, NAN, 3, 9, 0, 0});
  Tensor iv = Tensor::empty(DType::kI32, {3, 7});
  for (int i = 0; i < 21; ++i) iv.data<int32_t>()[i] = i % 7;
  auto out = run_op(
      op, b.fn, {xv, iv, from_vector<float>(DType::kBF16, {}, {-INFINITY}), from_vector<int>(DType::kI32, {}, {0})});
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  EXPECT_EQ((*out)[1].data<int32_t>()[0], 3);
  EXPECT_EQ((*out)[1].data<int32_t>()[1], 1);
  EXPECT_EQ((*out)[1].data<int32_t>()[2], 2);
  EXPECT_EQ(get_f((*out)[0], 0), 9.f);
  EXPECT_TRUE(std::isnan(get_f((*out)[0], 2)));
}

}  // namespace
}  // namespace hlx
