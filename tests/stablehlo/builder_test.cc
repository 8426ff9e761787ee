// Builds small real programs with the builder and checks the emitted IR and the error model.
#include "stablehlo/builder.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "stablehlo/parser.h"
#include "stablehlo/printer.h"
#include "verify_test_util.h"

namespace hlx::shlo {
namespace {

using namespace hlx::shlo::testing;

const Op* find_op(const Function& f, const std::string& name) {
  for (const Op& op : f.body)
    if (op.name == name) return &op;
  return nullptr;
}

// The builder's attribute conventions must be the parser/printer's: print, parse back, verify,
// and print again to the same text.
::testing::AssertionResult RoundTrips(const Module& m) {
  std::string text = print_module(m);
  Result<Module> back = parse_module(text, "built");
  if (!back.ok()) return ::testing::AssertionFailure() << back.status().to_string() << "\n" << text;
  Status v = verify_module(*back);
  if (!v.ok()) return ::testing::AssertionFailure() << v.to_string() << "\n" << text;
  std::string again = print_module(*back);
  if (again != text) return ::testing::AssertionFailure() << "reprint differs:\n" << text << "\n---\n" << again;
  return ::testing::AssertionSuccess();
}

TEST(Builder, Softmax) {
  ModuleBuilder mb("softmax");
  FunctionBuilder& f = mb.function("main");
  Value x = f.arg(T(BF16, {2, 5}), "logits");
  Value xf = f.convert(x, F32);
  Value m = f.reduce_max(xf, {1});
  EXPECT_EQ(m.type(), T(F32, {2}));
  Value e = f.exp(f.sub(xf, f.broadcast_in_dim(m, {2, 5}, {0})));
  Value s = f.reduce_sum(e, {1});
  Value y = f.div(e, f.broadcast_in_dim(s, {2, 5}, {0}));
  f.ret({f.convert(y, BF16)});
  auto mod = mb.finish();
  ASSERT_TRUE(mod.ok()) << mod.status().to_string();
  EXPECT_TRUE(RoundTrips(*mod));
  const Function& fn = mod->functions[0];
  EXPECT_EQ(fn.result_types, std::vector<TensorType>{T(BF16, {2, 5})});
  EXPECT_EQ(fn.arg_attrs[0][0].name, kArgNameAttr);
  EXPECT_EQ(fn.arg_attrs[0][0].value.str, "logits");
  // The max reduction starts from -inf and its body is maximum.
  const Op* red = find_op(fn, "stablehlo.reduce");
  ASSERT_NE(red, nullptr);
  ASSERT_EQ(red->regions.size(), 1u);
  EXPECT_EQ(red->regions[0].ops[0].name, "stablehlo.maximum");
  EXPECT_EQ(red->regions[0].ops[1].name, "stablehlo.return");
  size_t ri = 0;
  while (fn.body[ri].name != "stablehlo.reduce") ++ri;
  ASSERT_GT(ri, 0u);
  const Op& init = fn.body[ri - 1];
  ASSERT_EQ(init.name, "stablehlo.constant");
  float v;
  std::memcpy(&v, init.attr("value")->dense->bytes.data(), 4);
  EXPECT_TRUE(std::isinf(v) && v < 0);
}

TEST(Builder, MatmulBiasWithAliasedArg) {
  ModuleBuilder mb;
  FunctionBuilder& f = mb.function("main");
  Value x = f.arg(T(BF16, {4, 8}), "x");
  Value w = f.arg(T(F16, {8, 16}), "w");
  Value y = f.dot_general(x, w, DotDims::matmul(2, 2), F32);  // bf16 x f16 -> f32
  Value b = f.arg(T(F32, {16}), "b", /*alias_output=*/0);     // arguments may come after ops
  EXPECT_EQ(y.type(), T(F32, {4, 16}));
  Value z = f.add(y, f.broadcast_to(b, {4, 16}));
  f.ret({z});
  auto mod = mb.finish();
  ASSERT_TRUE(mod.ok()) << mod.status().to_string();
  EXPECT_TRUE(RoundTrips(*mod));
  const Function& fn = mod->functions[0];
  ASSERT_EQ(fn.args.size(), 3u);
  EXPECT_EQ(fn.type_of(fn.args[2]), T(F32, {16}));
  const Attr* alias = find_attr(fn.arg_attrs[2], kAliasAttr);
  ASSERT_NE(alias, nullptr);
  EXPECT_EQ(alias->i, 0);
  EXPECT_EQ(alias->dtype, I32);
  const Op* dot = find_op(fn, "stablehlo.dot_general");
  ASSERT_NE(dot, nullptr);
  auto dims = dot_dims_from_attr(*dot->attr("dot_dimension_numbers"));
  ASSERT_TRUE(dims.ok());
  EXPECT_EQ(dims->lhs_contracting, Dims{1});
  EXPECT_EQ(dims->rhs_contracting, Dims{0});
  const Op* bc = find_op(fn, "stablehlo.broadcast_in_dim");
  EXPECT_EQ(bc->attr("broadcast_dimensions")->ints, Dims{1});
}

TEST(Builder, Argmax) {
  ModuleBuilder mb;
  FunctionBuilder& f = mb.function("main");
  Value x = f.arg(T(F32, {3, 7}));
  auto [vals, idx] = f.argmax(x, 1);
  EXPECT_EQ(vals.type(), T(F32, {3}));
  EXPECT_EQ(idx.type(), T(I32, {3}));
  f.ret({vals, idx});
  auto mod = mb.finish();
  ASSERT_TRUE(mod.ok()) << mod.status().to_string();
  EXPECT_TRUE(RoundTrips(*mod));
  const Op* red = find_op(mod->functions[0], "stablehlo.reduce");
  ASSERT_NE(red, nullptr);
  EXPECT_EQ(red->operands.size(), 4u);
  EXPECT_EQ(red->results.size(), 2u);
  const Block& body = red->regions[0];
  EXPECT_EQ(body.args.size(), 4u);
  EXPECT_EQ(body.ops.back().operands.size(), 2u);
  // NaN handling: the float body compares a value with itself.
  bool nan_check = false;
  for (const Op& op : body.ops)
    if (op.name == "stablehlo.compare" && op.operands[0] == op.operands[1]) nan_check = true;
  EXPECT_TRUE(nan_check);
  // Emission order is fixed (not left to argument evaluation order): GT, NE, or, EQ, LT, ...
  std::vector<std::string> dirs;
  for (const Op& op : body.ops)
    if (op.name == "stablehlo.compare") dirs.push_back(op.attr("comparison_direction")->str);
  EXPECT_EQ(dirs, (std::vector<std::string>{"GT", "NE", "EQ", "LT"}));
  EXPECT_NE(find_op(mod->functions[0], "stablehlo.iota"), nullptr);
}

TEST(Builder, EmbeddingGatherAndKvScatter) {
  ModuleBuilder mb;
  FunctionBuilder& f = mb.function("main");
  Value table = f.arg(T(BF16, {100, 8}), "embed_tokens.weight");
  Value ids = f.arg(T(I32, {5}), "tokens");
  Value cache = f.arg(T(BF16, {16, 8}), "k_cache", 0);
  Value pos = f.arg(T(I32, {5}), "positions");
  Value rows = f.gather(table, f.reshape(ids, {5, 1}), GatherDims{{1}, {0}, {}, {}, {0}, 1}, {1, 8});
  EXPECT_EQ(rows.type(), T(BF16, {5, 8}));
  Value updated = f.scatter(cache, f.reshape(pos, {5, 1}), rows, ScatterDims{{1}, {0}, {}, {}, {0}, 1},
                            Reducer::kReplace, false, true);
  EXPECT_EQ(updated.type(), T(BF16, {16, 8}));
  f.ret({updated});
  auto mod = mb.finish();
  ASSERT_TRUE(mod.ok()) << mod.status().to_string();
  EXPECT_TRUE(RoundTrips(*mod));
  const Op* sc = find_op(mod->functions[0], "stablehlo.scatter");
  ASSERT_NE(sc, nullptr);
  // kReplace returns the update (second block argument) unchanged.
  const Block& body = sc->regions[0];
  ASSERT_EQ(body.ops.size(), 1u);
  EXPECT_EQ(body.ops[0].operands, std::vector<ValueId>{body.args[1]});
  EXPECT_TRUE(sc->attr("unique_indices") && sc->attr("unique_indices")->b);
  EXPECT_EQ(sc->attr("indices_are_sorted"), nullptr);
}

TEST(Builder, ScatterWithLambdaAndShapeOps) {
  ModuleBuilder mb;
  FunctionBuilder& f = mb.function("main");
  Value x = f.arg(T(F32, {4, 6}));
  Value idx = f.ints({0, 2}, I32);
  Value upd = f.full(1.5, T(F32, {2, 6}));
  Value acc = f.scatter({x}, f.reshape(idx, {2, 1}), {upd}, ScatterDims{{1}, {0}, {}, {}, {0}, 1},
                        [](FunctionBuilder& b, const std::vector<Value>& a) -> std::vector<Value> {
                          return {b.mul(b.add(a[0], a[1]), b.scalar(2.0, F32))};
                        })[0];
  Value t = f.transpose(acc, {1, 0});
  Value s = f.slice(t, {0, 1}, {6, 4}, {2, 1});
  EXPECT_EQ(s.type(), T(F32, {3, 3}));
  Value p = f.pad(s, f.scalar(0, F32), {1, 0}, {0, 2});
  EXPECT_EQ(p.type(), T(F32, {4, 5}));
  Value c = f.concatenate({p, p}, 0);
  Value ds = f.dynamic_slice(c, {f.scalar(1, I32), f.scalar(0, I32)}, {2, 5});
  Value dus = f.dynamic_update_slice(c, ds, {f.scalar(3, I32), f.scalar(0, I32)});
  Value cl = f.clamp(f.scalar(-1, F32), dus, f.scalar(1, F32));
  Value sel = f.select(f.compare(CompareDir::kGT, cl, f.zeros(cl.type())), cl, f.neg(cl));
  Value io = f.convert(f.iota(T(I32, {8, 5}), 0), F32);
  f.ret({f.add(sel, io), f.erf(io)});
  auto mod = mb.finish();
  ASSERT_TRUE(mod.ok()) << mod.status().to_string();
  EXPECT_TRUE(RoundTrips(*mod));
  EXPECT_NE(find_op(mod->functions[0], "chlo.erf"), nullptr);
  const Op* cmp = find_op(mod->functions[0], "stablehlo.compare");
  EXPECT_EQ(cmp->attr("compare_type")->str, "FLOAT");
  EXPECT_EQ(cmp->attr("comparison_direction")->str, "GT");
}

TEST(Builder, ConvolutionPatchEmbedding) {
  ModuleBuilder mb;
  FunctionBuilder& f = mb.function("main");
  Value px = f.arg(T(F32, {1, 3, 32, 32}), "pixel_values");
  Value w = f.arg(T(F32, {16, 3, 8, 8}), "patch_embedding.weight");  // OIHW
  ConvDims d{0, 1, {2, 3}, 1, 0, {2, 3}, 0, 1, {2, 3}};
  ConvWindow win;
  win.window_strides = {8, 8};
  Value y = f.convolution(px, w, d, win);
  EXPECT_EQ(y.type(), T(F32, {1, 16, 4, 4}));
  f.ret({y});
  auto mod = mb.finish();
  ASSERT_TRUE(mod.ok()) << mod.status().to_string();
  EXPECT_TRUE(RoundTrips(*mod));
}

TEST(Builder, CompositeWithDecompositionAndCall) {
  ModuleBuilder mb;
  FunctionBuilder& helper = mb.function("double_it", false);
  Value hx = helper.arg(T(F32, {4}));
  helper.ret({helper.add(hx, hx)});

  FunctionBuilder& f = mb.function("main");
  Value x = f.arg(T(F32, {4}));
  Value y = f.call1("double_it", {x});
  auto rms = [](FunctionBuilder& d, const std::vector<Value>& a) -> std::vector<Value> {
    Value ms = d.div(d.reduce_sum(d.mul(a[0], a[0]), {0}), d.scalar(4, F32));
    Value r = d.rsqrt(d.add(ms, d.scalar(1e-6, F32)));
    return {d.mul(a[0], d.broadcast_in_dim(r, {4}, {}))};
  };
  AttrDict attrs = {{"epsilon", Attr::floating(1e-6)}};
  Value z = f.composite("hlx.rms_norm", {y}, attrs, "hlx_rms_norm_4", rms)[0];
  Value z2 = f.composite("hlx.rms_norm", {z}, attrs, "hlx_rms_norm_4", rms)[0];  // reuses it
  f.ret({z2});
  auto mod = mb.finish();
  ASSERT_TRUE(mod.ok()) << mod.status().to_string();
  EXPECT_TRUE(RoundTrips(*mod));
  ASSERT_EQ(mod->functions.size(), 3u);
  EXPECT_EQ(mod->functions[2].name, "hlx_rms_norm_4");
  EXPECT_FALSE(mod->functions[2].is_public);
  const Op* comp = find_op(mod->functions[1], "stablehlo.composite");
  ASSERT_NE(comp, nullptr);
  EXPECT_EQ(comp->attr("name")->str, "hlx.rms_norm");
  EXPECT_EQ(comp->attr("decomposition")->str, "hlx_rms_norm_4");
  EXPECT_EQ(comp->attr("composite_attributes")->kind, Attr::Kind::kDict);
  EXPECT_EQ(find_op(mod->functions[1], "func.call")->attr("callee")->str, "double_it");
}

TEST(Builder, FirstErrorIsReportedWithScope) {
  ModuleBuilder mb;
  FunctionBuilder& f = mb.function("main");
  Value a = f.arg(T(F32, {4, 8}));
  Value b = f.arg(T(F32, {7, 3}));
  f.set_scope("layer 3 mlp");
  Value bad = f.dot_general(a, b, DotDims::matmul(2, 2));
  EXPECT_FALSE(bad.valid());
  EXPECT_FALSE(f.ok());
  // Later ops on the invalid value are skipped; the first error stays.
  Value later = f.exp(f.add(bad, bad));
  EXPECT_FALSE(later.valid());
  f.ret({later});
  auto mod = mb.finish();
  ASSERT_FALSE(mod.ok());
  const std::string& msg = mod.status().message();
  EXPECT_EQ(mod.status().kind(), ErrorKind::kVerify);
  EXPECT_NE(msg.find("dot_general_c10"), std::string::npos) << msg;
  EXPECT_NE(msg.find("layer 3 mlp"), std::string::npos) << msg;
  EXPECT_NE(msg.find("@main"), std::string::npos) << msg;
}

TEST(Builder, MisuseIsReported) {
  {
    ModuleBuilder mb;
    FunctionBuilder& f = mb.function("main");
    f.arg(T(F32, {2}));
    auto mod = mb.finish();  // never ret()
    EXPECT_FALSE(mod.ok());
    EXPECT_NE(mod.status().message().find("ret()"), std::string::npos);
  }
  {
    ModuleBuilder mb;
    FunctionBuilder& f = mb.function("main");
    Value x = f.arg(T(F32, {2}));
    EXPECT_FALSE(f.call("missing", {x})[0].valid());  // indexing [0] is safe on error
    EXPECT_FALSE(f.composite("hlx.x", {x}, {}, "missing_decomposition")[0].valid());
    f.ret({x});
    auto mod = mb.finish();
    EXPECT_FALSE(mod.ok());
    EXPECT_NE(mod.status().message().find("call_c1"), std::string::npos);
  }
  {
    ModuleBuilder mb;
    FunctionBuilder& g = mb.function("g");
    Value gx = g.arg(T(F32, {2}));
    g.ret({gx});
    FunctionBuilder& f = mb.function("main");
    f.arg(T(F32, {2}));
    f.ret({f.neg(gx)});  // value of another function
    auto mod = mb.finish();
    EXPECT_FALSE(mod.ok());
    EXPECT_NE(mod.status().message().find("another function"), std::string::npos);
  }
  {
    ModuleBuilder mb;
    mb.function("f").ret({});
    mb.function("f").ret({});
    EXPECT_NE(mb.finish().status().message().find("symbol_unique"), std::string::npos);
  }
  {
    ModuleBuilder mb;
    FunctionBuilder& f = mb.function("main");
    Value x = f.arg(T(F32, {2}));
    f.add(x, Value());  // default-constructed Value before any error: a caller bug
    f.ret({x});
    EXPECT_EQ(mb.finish().status().kind(), ErrorKind::kInvalidArgument);
  }
}

TEST(Builder, ScalarEncodingAndConstants) {
  ModuleBuilder mb;
  FunctionBuilder& f = mb.function("main");
  Value a = f.scalar(1.0, BF16);
  Value b = f.scalar(-2.75, F16);
  Value c = f.lowest(I32);
  Value d = f.highest(I64);
  Value e = f.scalar(300.7, U8);  // saturates
  Tensor t = Tensor::zeros(I8, {2, 2});
  t.data<int8_t>()[3] = -5;
  Value g = f.constant(t);
  f.ret({a, b, c, d, e, g});
  auto mod = mb.finish();
  ASSERT_TRUE(mod.ok()) << mod.status().to_string();
  EXPECT_TRUE(RoundTrips(*mod));
  const Function& fn = mod->functions[0];
  auto bytes = [&](size_t i) { return fn.body[i].attr("value")->dense->bytes; };
  EXPECT_EQ(bytes(0), (std::vector<uint8_t>{0x80, 0x3F}));  // bf16 1.0 = 0x3F80
  EXPECT_EQ(bytes(1), (std::vector<uint8_t>{0x80, 0xC1}));  // f16 -2.75 = 0xC180
  int32_t lo;
  std::memcpy(&lo, bytes(2).data(), 4);
  EXPECT_EQ(lo, std::numeric_limits<int32_t>::min());
  int64_t hi;
  std::memcpy(&hi, bytes(3).data(), 8);
  EXPECT_EQ(hi, std::numeric_limits<int64_t>::max());
  EXPECT_EQ(bytes(4), std::vector<uint8_t>{255});
  EXPECT_EQ(fn.body[5].attr("value")->dense->type, T(I8, {2, 2}));
  EXPECT_EQ(int8_t(bytes(5)[3]), -5);
}

TEST(Builder, VariadicReduceWithCustomBody) {
  ModuleBuilder mb;
  FunctionBuilder& f = mb.function("main");
  Value x = f.arg(T(BF16, {4, 6}));
  // A reduce with a caller-written body.
  Value init = f.scalar(0, BF16);
  std::vector<Value> r = f.reduce({x}, {init}, {1}, [](FunctionBuilder& b, const std::vector<Value>& a) {
    return std::vector<Value>{b.add(a[0], a[1])};
  });
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].type(), T(BF16, {4}));
  Value any = f.reduce(f.compare(CompareDir::kGT, x, f.zeros(x.type())), f.scalar(0, I1), {0, 1}, Reducer::kOr);
  EXPECT_EQ(any.type(), T(I1));
  f.ret({r[0], any});
  auto mod = mb.finish();
  ASSERT_TRUE(mod.ok()) << mod.status().to_string();
  EXPECT_TRUE(RoundTrips(*mod));
}

}  // namespace
}  // namespace hlx::shlo
