// Parser: every pretty and generic syntax form lands in the right IR fields, and malformed or
// hostile input fails with a located message naming what was expected.
#include <gtest/gtest.h>

#include <cstring>

#include "stablehlo/parser.h"

using namespace hlx;
using namespace hlx::shlo;

namespace {

// Wraps ops in `func.func @main(args) -> results { ... }` and parses.
Result<Module> parse_body(const std::string& args, const std::string& results, const std::string& body) {
  std::string text = "module @m {\n  func.func public @main(" + args + ") -> " + results + " {\n" + body + "\n  }\n}\n";
  return parse_module(text, "t.mlir");
}

const Op& op_at(const Module& m, size_t i) { return m.functions.at(0).body.at(i); }

std::vector<int64_t> ints(const Attr* a) {
  EXPECT_NE(a, nullptr);
  return a ? a->ints : std::vector<int64_t>{};
}

template <class T>
T elem(const Attr* a, size_t i) {
  T v;
  std::memcpy(&v, a->dense->bytes.data() + i * sizeof(T), sizeof(T));
  return v;
}

void expect_error(const std::string& text, const std::string& fragment, ErrorKind kind = ErrorKind::kParse) {
  Result<Module> m = parse_module(text, "bad.mlir");
  ASSERT_FALSE(m.ok()) << "parsed unexpectedly: " << text;
  EXPECT_EQ(m.status().kind(), kind) << m.status().to_string();
  EXPECT_NE(m.status().message().find(fragment), std::string::npos)
      << "message: " << m.status().message() << "\nexpected fragment: " << fragment;
  EXPECT_EQ(m.status().message().rfind("bad.mlir:", 0), 0u) << m.status().message();
}

void expect_body_error(const std::string& args, const std::string& results, const std::string& body,
                       const std::string& fragment, ErrorKind kind = ErrorKind::kParse) {
  expect_error("func.func @main(" + args + ") -> " + results + " {\n" + body + "\n}\n", fragment, kind);
}

}  // namespace

TEST(Parser, ModuleFunctionsAndAttributes) {
  const char* text = R"(
// comment
module @jit_main attributes {mhlo.num_partitions = 1 : i32, hlx.identity = "abc"} {
  func.func public @main(%arg0: tensor<2x3xbf16> {hlx.name = "model.embed_tokens.weight", tf.aliasing_output = 0 : i32}, %x: tensor<i1>) -> (tensor<2x3xbf16> {jax.result_info = ""}) {
    return %arg0 : tensor<2x3xbf16>
  }
  func.func private @f() -> tensor<f32> {
    %cst = stablehlo.constant dense<1.5> : tensor<f32>
    func.return %cst : tensor<f32>
  }
}
)";
  Result<Module> m = parse_module(text);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(m->name, "jit_main");
  ASSERT_NE(find_attr(m->attrs, "hlx.identity"), nullptr);
  EXPECT_EQ(find_attr(m->attrs, "hlx.identity")->str, "abc");
  EXPECT_EQ(find_attr(m->attrs, "mhlo.num_partitions")->dtype, DType::kI32);
  ASSERT_EQ(m->functions.size(), 2u);
  const Function& f = m->functions[0];
  EXPECT_TRUE(f.is_public);
  EXPECT_FALSE(m->functions[1].is_public);
  ASSERT_EQ(f.args.size(), 2u);
  EXPECT_EQ(f.type_of(f.args[0]), (TensorType{DType::kBF16, {2, 3}}));
  EXPECT_EQ(f.type_of(f.args[1]), (TensorType{DType::kI1, {}}));
  EXPECT_EQ(find_attr(f.arg_attrs[0], "hlx.name")->str, "model.embed_tokens.weight");
  EXPECT_EQ(find_attr(f.arg_attrs[0], "tf.aliasing_output")->i, 0);
  EXPECT_TRUE(f.arg_attrs[1].empty());
  ASSERT_EQ(f.result_types.size(), 1u);
  EXPECT_EQ(find_attr(f.result_attrs[0], "jax.result_info")->str, "");
  EXPECT_EQ(f.body.back().name, "func.return");
  EXPECT_EQ(f.body.back().operands, std::vector<ValueId>{f.args[0]});
  EXPECT_EQ(m->functions[1].body.back().name, "func.return");
}

TEST(Parser, BareFunctionsFormAnImplicitModule) {
  Result<Module> m = parse_module("func.func @a(%x: tensor<f32>) -> tensor<f32> { return %x : tensor<f32> }");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(m->name, "");
  EXPECT_EQ(m->functions[0].name, "a");
}

TEST(Parser, MultiResultCallsAndHashUses) {
  const char* text = R"(
func.func private @inputs() -> (tensor<2xf32>, tensor<2xi32>) {
  %cst = stablehlo.constant dense<[1.0, 2.0]> : tensor<2xf32>
  %c = stablehlo.constant dense<[3, 4]> : tensor<2xi32>
  return %cst, %c : tensor<2xf32>, tensor<2xi32>
}
func.func public @main() -> tensor<2xi32> {
  %0:2 = call @inputs() : () -> (tensor<2xf32>, tensor<2xi32>)
  %1 = stablehlo.add %0#1, %0#1 : tensor<2xi32>
  return %1 : tensor<2xi32>
}
)";
  Result<Module> m = parse_module(text);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const Function& f = m->functions[1];
  const Op& call = f.body[0];
  EXPECT_EQ(call.name, "func.call");
  EXPECT_EQ(call.attr("callee")->kind, Attr::Kind::kSymbol);
  EXPECT_EQ(call.attr("callee")->str, "inputs");
  ASSERT_EQ(call.results.size(), 2u);
  EXPECT_EQ(f.body[1].operands, (std::vector<ValueId>{call.results[1], call.results[1]}));
}

TEST(Parser, ElementwiseCompareSelectClampConvertErf) {
  Result<Module> m = parse_body("%a: tensor<4xf32>, %b: tensor<4xf32>", "tensor<4xbf16>", R"(
    %0 = stablehlo.compare  GT, %a, %b,  FLOAT : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
    %1 = stablehlo.compare EQ, %a, %b : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
    %2 = stablehlo.select %0, %a, %b : tensor<4xi1>, tensor<4xf32>
    %3 = stablehlo.clamp %a, %2, %b : tensor<4xf32>
    %4 = chlo.erf %3 : tensor<4xf32> -> tensor<4xf32>
    %5 = stablehlo.convert %4 : (tensor<4xf32>) -> tensor<4xbf16>
    %6 = stablehlo.negate %5 : tensor<4xbf16>
    return %6 : tensor<4xbf16>)");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const Op& cmp = op_at(*m, 0);
  EXPECT_EQ(*cmp.attr("comparison_direction"), Attr::enumeration("comparison_direction", "GT"));
  EXPECT_EQ(*cmp.attr("compare_type"), Attr::enumeration("comparison_type", "FLOAT"));
  EXPECT_EQ(op_at(*m, 1).attr("compare_type"), nullptr);
  EXPECT_EQ(m->functions[0].type_of(cmp.results[0]), (TensorType{DType::kI1, {4}}));
  EXPECT_EQ(op_at(*m, 2).name, "stablehlo.select");
  EXPECT_EQ(op_at(*m, 3).operands.size(), 3u);
  EXPECT_EQ(op_at(*m, 4).name, "chlo.erf");
  EXPECT_EQ(m->functions[0].type_of(op_at(*m, 5).results[0]).dtype, DType::kBF16);
}

TEST(Parser, ShapeOps) {
  Result<Module> m = parse_body("%a: tensor<4x6xf32>, %i: tensor<i32>, %v: tensor<f32>", "tensor<6x4xf32>", R"(
    %0 = stablehlo.iota dim = 1 : tensor<4x6xi32>
    %1 = stablehlo.broadcast_in_dim %v, dims = [] : (tensor<f32>) -> tensor<4x6xf32>
    %2 = stablehlo.transpose %a, dims = [1, 0] : (tensor<4x6xf32>) -> tensor<6x4xf32>
    %3 = stablehlo.slice %a [0:2, 1:5:2] : (tensor<4x6xf32>) -> tensor<2x2xf32>
    %4 = stablehlo.dynamic_slice %a, %i, %i, sizes = [2, 3] : (tensor<4x6xf32>, tensor<i32>, tensor<i32>) -> tensor<2x3xf32>
    %5 = stablehlo.pad %a, %v, low = [1, 0], high = [0, -1], interior = [1, 0] : (tensor<4x6xf32>, tensor<f32>) -> tensor<8x5xf32>
    %6 = stablehlo.concatenate %a, %1, dim = 0 : (tensor<4x6xf32>, tensor<4x6xf32>) -> tensor<8x6xf32>
    %7 = stablehlo.reshape %2 : (tensor<6x4xf32>) -> tensor<24xf32>
    %8 = stablehlo.dynamic_update_slice %a, %4, %i, %i : (tensor<4x6xf32>, tensor<2x3xf32>, tensor<i32>, tensor<i32>) -> tensor<4x6xf32>
    return %2 : tensor<6x4xf32>)");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(*op_at(*m, 0).attr("iota_dimension"), Attr::integer(1));
  EXPECT_EQ(ints(op_at(*m, 1).attr("broadcast_dimensions")), std::vector<int64_t>{});
  EXPECT_EQ(op_at(*m, 1).attr("broadcast_dimensions")->kind, Attr::Kind::kI64Array);
  EXPECT_EQ(ints(op_at(*m, 2).attr("permutation")), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(ints(op_at(*m, 3).attr("start_indices")), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(ints(op_at(*m, 3).attr("limit_indices")), (std::vector<int64_t>{2, 5}));
  EXPECT_EQ(ints(op_at(*m, 3).attr("strides")), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(op_at(*m, 4).operands.size(), 3u);
  EXPECT_EQ(ints(op_at(*m, 4).attr("slice_sizes")), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(ints(op_at(*m, 5).attr("edge_padding_low")), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(ints(op_at(*m, 5).attr("edge_padding_high")), (std::vector<int64_t>{0, -1}));
  EXPECT_EQ(ints(op_at(*m, 5).attr("interior_padding")), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(*op_at(*m, 6).attr("dimension"), Attr::integer(0));
  EXPECT_EQ(op_at(*m, 6).operands.size(), 2u);
  EXPECT_EQ(op_at(*m, 8).operands.size(), 4u);
}

TEST(Parser, ReduceShortFormExpandsToRegion) {
  Result<Module> m = parse_body("%a: tensor<4x6xf32>, %z: tensor<f32>", "tensor<6xf32>", R"(
    %0 = stablehlo.reduce(%a init: %z) applies stablehlo.add across dimensions = [0] : (tensor<4x6xf32>, tensor<f32>) -> tensor<6xf32>
    return %0 : tensor<6xf32>)");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const Function& f = m->functions[0];
  const Op& r = op_at(*m, 0);
  EXPECT_EQ(ints(r.attr("dimensions")), std::vector<int64_t>{0});
  ASSERT_EQ(r.regions.size(), 1u);
  const Block& b = r.regions[0];
  ASSERT_EQ(b.args.size(), 2u);
  EXPECT_EQ(f.type_of(b.args[0]), (TensorType{DType::kF32, {}}));
  ASSERT_EQ(b.ops.size(), 2u);
  EXPECT_EQ(b.ops[0].name, "stablehlo.add");
  EXPECT_EQ(b.ops[0].operands, b.args);
  EXPECT_EQ(b.ops[1].name, "stablehlo.return");
  EXPECT_EQ(b.ops[1].operands, b.ops[0].results);
}

TEST(Parser, ReduceRegionFormOrdersBlockArguments) {
  Result<Module> m =
      parse_body("%a: tensor<15xbf16>, %i: tensor<15xi32>, %z: tensor<bf16>, %c: tensor<i32>", "tensor<i32>", R"(
    %1:2 = stablehlo.reduce(%a init: %z), (%i init: %c) across dimensions = [0] : (tensor<15xbf16>, tensor<15xi32>, tensor<bf16>, tensor<i32>) -> (tensor<bf16>, tensor<i32>)
     reducer(%arg1: tensor<bf16>, %arg3: tensor<bf16>) (%arg2: tensor<i32>, %arg4: tensor<i32>)  {
      %2 = stablehlo.compare  GT, %arg1, %arg3,  FLOAT : (tensor<bf16>, tensor<bf16>) -> tensor<i1>
      %9 = stablehlo.select %2, %arg1, %arg3 : tensor<i1>, tensor<bf16>
      %10 = stablehlo.select %2, %arg2, %arg4 : tensor<i1>, tensor<i32>
      stablehlo.return %9, %10 : tensor<bf16>, tensor<i32>
    }
    return %1#1 : tensor<i32>)");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const Function& f = m->functions[0];
  const Op& r = op_at(*m, 0);
  ASSERT_EQ(r.operands.size(), 4u);
  EXPECT_EQ(r.operands[1], f.args[1]);  // inputs first, then inits
  EXPECT_EQ(r.operands[2], f.args[2]);
  const Block& b = r.regions[0];
  ASSERT_EQ(b.args.size(), 4u);
  // Block arguments: (acc0, acc1, x0, x1) = (%arg1, %arg2, %arg3, %arg4).
  EXPECT_EQ(f.type_of(b.args[0]).dtype, DType::kBF16);
  EXPECT_EQ(f.type_of(b.args[1]).dtype, DType::kI32);
  EXPECT_EQ(b.ops[0].operands, (std::vector<ValueId>{b.args[0], b.args[2]}));
  EXPECT_EQ(b.ops[2].operands[1], b.args[1]);
}

TEST(Parser, DotGeneralAndConvolution) {
  Result<Module> m =
      parse_body("%a: tensor<2x3x4xf32>, %b: tensor<2x4x5xf32>, %x: tensor<1x8x8x3xf32>, %k: tensor<3x3x3x16xf32>",
                 "tensor<2x3x5xf32>", R"(
    %0 = stablehlo.dot_general %a, %b, batching_dims = [0] x [0], contracting_dims = [2] x [1], precision = [DEFAULT, HIGHEST] : (tensor<2x3x4xf32>, tensor<2x4x5xf32>) -> tensor<2x3x5xf32>
    %1 = stablehlo.dot_general %a, %b, contracting_dims = [2] x [1] : (tensor<2x3x4xf32>, tensor<2x4x5xf32>) -> tensor<2x3x2x5xf32>
    %2 = stablehlo.convolution(%x, %k) dim_numbers = [b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f], window = {stride = [2, 1], pad = [[1, 1], [0, 2]], lhs_dilate = [1, 1], rhs_dilate = [2, 1], reverse = [false, true]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<1x8x8x3xf32>, tensor<3x3x3x16xf32>) -> tensor<1x4x6x16xf32>
    return %0 : tensor<2x3x5xf32>)");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const Attr* dims = op_at(*m, 0).attr("dot_dimension_numbers");
  ASSERT_NE(dims, nullptr);
  EXPECT_EQ(dims->kind, Attr::Kind::kStruct);
  EXPECT_EQ(dims->name, "dot");
  EXPECT_EQ(ints(dims->find("lhs_batching_dimensions")), std::vector<int64_t>{0});
  EXPECT_EQ(ints(dims->find("rhs_batching_dimensions")), std::vector<int64_t>{0});
  EXPECT_EQ(ints(dims->find("lhs_contracting_dimensions")), std::vector<int64_t>{2});
  EXPECT_EQ(ints(dims->find("rhs_contracting_dimensions")), std::vector<int64_t>{1});
  const Attr* prec = op_at(*m, 0).attr("precision_config");
  ASSERT_NE(prec, nullptr);
  ASSERT_EQ(prec->list.size(), 2u);
  EXPECT_EQ(prec->list[1], Attr::enumeration("precision", "HIGHEST"));
  // Empty batching dims are omitted, as MLIR omits them.
  const Attr* dims1 = op_at(*m, 1).attr("dot_dimension_numbers");
  EXPECT_EQ(dims1->find("lhs_batching_dimensions"), nullptr);
  EXPECT_EQ(dims1->dict.size(), 2u);

  const Op& conv = op_at(*m, 2);
  const Attr* cd = conv.attr("dimension_numbers");
  ASSERT_NE(cd, nullptr);
  EXPECT_EQ(cd->name, "conv");
  EXPECT_EQ(*cd->find("input_batch_dimension"), Attr::integer(0));
  EXPECT_EQ(*cd->find("input_feature_dimension"), Attr::integer(3));
  EXPECT_EQ(ints(cd->find("input_spatial_dimensions")), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(*cd->find("kernel_input_feature_dimension"), Attr::integer(2));
  EXPECT_EQ(*cd->find("kernel_output_feature_dimension"), Attr::integer(3));
  EXPECT_EQ(ints(cd->find("kernel_spatial_dimensions")), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(*cd->find("output_feature_dimension"), Attr::integer(3));
  EXPECT_EQ(ints(conv.attr("window_strides")), (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(ints(conv.attr("rhs_dilation")), (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(conv.attr("window_reversal")->kind, Attr::Kind::kBoolArray);
  EXPECT_EQ(ints(conv.attr("window_reversal")), (std::vector<int64_t>{0, 1}));
  const Attr* pad = conv.attr("padding");
  ASSERT_EQ(pad->kind, Attr::Kind::kDense);
  EXPECT_EQ(pad->dense->type, (TensorType{DType::kI64, {2, 2}}));
  EXPECT_EQ(elem<int64_t>(pad, 3), 2);
  EXPECT_EQ(*conv.attr("feature_group_count"), Attr::integer(1));
}

TEST(Parser, GenericGatherScatterCustomCallComposite) {
  Result<Module> m =
      parse_body("%a: tensor<5x3xbf16>, %i: tensor<2x1xi64>, %u: tensor<2x3xbf16>", "tensor<2x3xbf16>", R"(
    %0 = "stablehlo.gather"(%a, %i) <{dimension_numbers = #stablehlo.gather<offset_dims = [1], collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 1>, indices_are_sorted = true, slice_sizes = array<i64: 1, 3>}> : (tensor<5x3xbf16>, tensor<2x1xi64>) -> tensor<2x3xbf16>
    %1 = "stablehlo.scatter"(%a, %i, %u) <{scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [1], inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>, indices_are_sorted = true, unique_indices = true}> ({
    ^bb0(%arg0: tensor<bf16>, %arg1: tensor<bf16>):
      %3 = stablehlo.add %arg0, %arg1 : tensor<bf16>
      stablehlo.return %3 : tensor<bf16>
    }) : (tensor<5x3xbf16>, tensor<2x1xi64>, tensor<2x3xbf16>) -> tensor<5x3xbf16>
    stablehlo.custom_call @check.expect_close(%0, %u) {has_side_effect = true} : (tensor<2x3xbf16>, tensor<2x3xbf16>) -> ()
    %2 = stablehlo.composite "hlx.rms_norm" %u, %u {composite_attributes = {eps = 1.000000e-06 : f32}, decomposition = @rms, version = 1 : i32} : (tensor<2x3xbf16>, tensor<2x3xbf16>) -> tensor<2x3xbf16>
    %4 = "mydialect.unknown"(%2) {foo = [1, "x"]} : (tensor<2x3xbf16>) -> tensor<2x3xbf16>
    return %0 : tensor<2x3xbf16>)");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const Op& g = op_at(*m, 0);
  const Attr* gd = g.attr("dimension_numbers");
  EXPECT_EQ(gd->name, "gather");
  EXPECT_EQ(ints(gd->find("offset_dims")), std::vector<int64_t>{1});
  EXPECT_EQ(ints(gd->find("collapsed_slice_dims")), std::vector<int64_t>{0});
  EXPECT_EQ(ints(gd->find("start_index_map")), std::vector<int64_t>{0});
  EXPECT_EQ(*gd->find("index_vector_dim"), Attr::integer(1));
  EXPECT_EQ(gd->find("operand_batching_dims"), nullptr);
  EXPECT_EQ(ints(g.attr("slice_sizes")), (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(*g.attr("indices_are_sorted"), Attr::boolean(true));
  const Op& s = op_at(*m, 1);
  EXPECT_EQ(s.attr("scatter_dimension_numbers")->name, "scatter");
  EXPECT_EQ(ints(s.attr("scatter_dimension_numbers")->find("update_window_dims")), std::vector<int64_t>{1});
  ASSERT_EQ(s.regions.size(), 1u);
  EXPECT_EQ(s.regions[0].args.size(), 2u);
  EXPECT_EQ(s.regions[0].ops[0].name, "stablehlo.add");
  const Op& cc = op_at(*m, 2);
  EXPECT_EQ(cc.name, "stablehlo.custom_call");
  EXPECT_EQ(*cc.attr("call_target_name"), Attr::string("check.expect_close"));
  EXPECT_EQ(*cc.attr("has_side_effect"), Attr::boolean(true));
  EXPECT_TRUE(cc.results.empty());
  const Op& comp = op_at(*m, 3);
  EXPECT_EQ(*comp.attr("name"), Attr::string("hlx.rms_norm"));
  EXPECT_EQ(*comp.attr("decomposition"), Attr::symbol("rms"));
  EXPECT_EQ(*comp.attr("version"), Attr::integer(1, DType::kI32));
  const Attr* ca = comp.attr("composite_attributes");
  ASSERT_EQ(ca->kind, Attr::Kind::kDict);
  EXPECT_EQ(ca->find("eps")->dtype, DType::kF32);
  EXPECT_FLOAT_EQ(float(ca->find("eps")->f), 1e-6f);
  EXPECT_EQ(op_at(*m, 4).name, "mydialect.unknown");
  EXPECT_EQ(op_at(*m, 4).attr("foo")->list.size(), 2u);
}

TEST(Parser, DenseValues) {
  Result<Module> m = parse_body("", "tensor<2x2xf32>", R"(
    %0 = stablehlo.constant dense<[[1.0, -2.5], [0x7FC00000, 3]]> : tensor<2x2xf32>
    %1 = stablehlo.constant dense<0xFF80> : tensor<3xbf16>
    %2 = stablehlo.constant dense<"0x0000803F00000040"> : tensor<2xf32>
    %3 = stablehlo.constant dense<[true, false, true]> : tensor<3xi1>
    %4 = stablehlo.constant dense<[0, 255, 7]> : tensor<3xui8>
    %5 = stablehlo.constant dense<[1.000000e+00, 6.550400e+04]> : tensor<2xf16>
    %6 = stablehlo.constant dense<-3> : tensor<2x2xi64>
    %7 = stablehlo.constant dense<"0x0001"> : tensor<2xi1>
    %8 = stablehlo.constant dense<"0x3412"> : tensor<3xi16>
    %9 = stablehlo.constant dense<> : tensor<0x3xf32>
    %10 = stablehlo.constant dense<[-1.000000e+00, 3.140630e+00]> : tensor<2xbf16>
    return %0 : tensor<2x2xf32>)");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  auto v = [&](size_t i) { return op_at(*m, i).attr("value"); };
  EXPECT_EQ(elem<float>(v(0), 1), -2.5f);
  EXPECT_EQ(elem<uint32_t>(v(0), 2), 0x7FC00000u);
  EXPECT_EQ(elem<float>(v(0), 3), 3.0f);
  EXPECT_EQ(v(1)->dense->bytes.size(), 6u);
  EXPECT_EQ(elem<uint16_t>(v(1), 2), 0xFF80);
  EXPECT_EQ(elem<float>(v(2), 0), 1.0f);
  EXPECT_EQ(elem<float>(v(2), 1), 2.0f);
  EXPECT_EQ(v(3)->dense->bytes, (std::vector<uint8_t>{1, 0, 1}));
  EXPECT_EQ(v(4)->dense->bytes, (std::vector<uint8_t>{0, 255, 7}));
  EXPECT_EQ(elem<uint16_t>(v(5), 0), 0x3C00);  // f16 1.0
  EXPECT_EQ(elem<uint16_t>(v(5), 1), 0x7BFF);  // f16 max
  EXPECT_EQ(elem<int64_t>(v(6), 3), -3);
  EXPECT_EQ(v(7)->dense->bytes, (std::vector<uint8_t>{0, 1}));
  EXPECT_EQ(elem<int16_t>(v(8), 2), 0x1234);
  EXPECT_TRUE(v(9)->dense->bytes.empty());
  EXPECT_EQ(elem<uint16_t>(v(10), 0), 0xBF80);  // bf16 -1.0
  EXPECT_EQ(elem<uint16_t>(v(10), 1), 0x4049);  // bf16 3.140625
}

TEST(Parser, LocationsAndAliasesAreSkipped) {
  const char* text = R"(#loc = loc("x.py":1:2)
module @m {
  func.func @main(%arg0: tensor<f32> loc("a")) -> tensor<f32> {
    %0 = stablehlo.abs %arg0 : tensor<f32> loc(#loc)
    return %0 : tensor<f32> loc(fused["a", "b"](#loc))
  } loc(#loc)
} loc(#loc)
#loc1 = loc("y.py":3:4)
)";
  Result<Module> m = parse_module(text);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(m->functions[0].body.size(), 2u);
}

TEST(ParserErrors, LocatedMessages) {
  expect_error("module {\n  func.func @main() -> tensor<f32> {\n    %0 = stablehlo.add %x, %x : tensor<f32>\n",
               "bad.mlir:3:24: use of undefined value %x");
  expect_body_error("%a: tensor<f32>", "tensor<f32>", "%a = stablehlo.abs %a : tensor<f32>\nreturn %a : tensor<f32>",
                    "redefinition of value %a");
  expect_body_error("%a: tensor<f32>", "tensor<f32>", "%0:2 = stablehlo.abs %a : tensor<f32>\nreturn %a : tensor<f32>",
                    "produces 1 results but 2 are named");
  expect_body_error("%a: tensor<f32>", "tensor<f32>",
                    "%0 = stablehlo.abs %a : tensor<2xf32>\nreturn %0 : tensor<2xf32>",
                    "operand #0 of 'stablehlo.abs' has type tensor<f32> but the op's type says tensor<2xf32>");
  expect_body_error("", "tensor<2xf32>",
                    "%0 = stablehlo.constant dense<[1.0, 2.0, 3.0]> : tensor<2xf32>\nreturn %0 : tensor<2xf32>",
                    "more than 2 elements in dimension 0");
  expect_body_error("", "tensor<3xf32>",
                    "%0 = stablehlo.constant dense<[1.0, 2.0]> : tensor<3xf32>\nreturn %0 : tensor<3xf32>",
                    "has 2 elements in dimension 0, expected 3");
  expect_body_error("", "tensor<2xf32>",
                    "%0 = stablehlo.constant dense<\"0x0000\"> : tensor<2xf32>\nreturn %0 : tensor<2xf32>",
                    "dense hex literal has 2 bytes, expected 8");
  expect_body_error("", "tensor<2xi8>",
                    "%0 = stablehlo.constant dense<[1, 300]> : tensor<2xi8>\nreturn %0 : tensor<2xi8>",
                    "value 300 does not fit i8");
  expect_body_error("", "tensor<2xui8>",
                    "%0 = stablehlo.constant dense<[1, -1]> : tensor<2xui8>\nreturn %0 : tensor<2xui8>",
                    "value -1 does not fit ui8");
  expect_body_error(
      "", "tensor<1000000000000xf32>",
      "%0 = stablehlo.constant dense<0.0> : tensor<1000000000000xf32>\nreturn %0 : tensor<1000000000000xf32>",
      "byte limit");
  expect_body_error("%a: tensor<99999999999x99999999999x99999999999xf32>", "tensor<f32>", "return",
                    "invalid tensor type");
  // Valid StableHLO that hlx does not implement is kUnsupported (conformance counts it as such);
  // an identifier that is no element type at all stays a parse error.
  const ErrorKind unsupported = ErrorKind::kUnsupported;
  expect_body_error("%a: tensor<?xf32>", "tensor<f32>", "return", "dynamic dimensions", unsupported);
  expect_body_error("%a: tensor<2xf64>", "tensor<f32>", "return", "unsupported element type 'f64'", unsupported);
  expect_body_error("%a: tensor<2xui64>", "tensor<f32>", "return", "unsupported element type 'ui64'", unsupported);
  expect_body_error("%a: tensor<2xcomplex<f32>>", "tensor<f32>", "return", "unsupported element type 'complex'",
                    unsupported);
  expect_body_error("%a: tensor<2xfoo>", "tensor<f32>", "return", "unsupported element type 'foo'");
  expect_body_error("%a: tensor<f32>", "tensor<f32>", "%0 = stablehlo.frobnicate %a : tensor<f32>",
                    "op 'stablehlo.frobnicate' has no pretty syntax");
  expect_body_error("%a: tensor<f32>", "(tensor<f32>, tensor<f32>)",
                    "%0:2 = call @g() : () -> (tensor<f32>, tensor<f32>)\nreturn %0 : tensor<f32>",
                    "names 2 results; use %0#N");
  expect_body_error("%a: tensor<f32>", "tensor<f32>",
                    "%0:2 = call @g() : () -> (tensor<f32>, tensor<f32>)\nreturn %0#2 : tensor<f32>",
                    "result number 2 out of range");
  expect_body_error("%a: tensor<f32>", "tensor<f32>",
                    "%0 = stablehlo.compare %a, %a : (tensor<f32>, tensor<f32>) -> tensor<i1>",
                    "expected comparison direction");
  expect_body_error("%a: tensor<f32>", "tensor<f32>", "%0 = \"x.y\"(%a) {k = 1, k = 2} : (tensor<f32>) -> tensor<f32>",
                    "duplicate attribute 'k'");
  expect_body_error("%a: tensor<f32>", "tensor<f32>",
                    "%0 = \"stablehlo.gather\"(%a, %a) <{dimension_numbers = #stablehlo.gather<bogus = [1]>}> : "
                    "(tensor<f32>, tensor<f32>) -> tensor<f32>",
                    "unknown field 'bogus'");
  expect_error("func.func @f(%a: tensor<f32>) -> tensor<f32> {\n  %0 = stablehlo.abs %a : tensor<f32>\n",
               "expected '}' to close a region");
  expect_error("module { func.func @main() { return } } trailing", "expected end of input");
  expect_error("module { func.func @f() { return }\n func.func @f() { return } }", "redefinition of function @f");
  expect_error("module { func.func @f() { %c = stablehlo.constant dense<1> : tensor<i32> } }",
               "must end with 'return'");
  expect_error("module {}", "module has no functions");
  expect_error("module @m attributes {a = \"unterminated} {", "unterminated string literal");
}

TEST(ParserErrors, NestingIsBounded) {
  std::string deep = "module attributes {a = ";
  for (int i = 0; i < 10000; ++i) deep += "[";
  expect_error(deep, "nested deeper than");
  std::string regions = "func.func @f(%a: tensor<f32>) -> tensor<f32> {\n";
  for (int i = 0; i < 200; ++i) regions += "%r" + std::to_string(i) + " = \"x.y\"() ({\n";
  expect_error(regions, "nested deeper than");
}

TEST(ParserErrors, FileErrors) {
  Result<Module> m = parse_module_file("/nonexistent/dir/model.mlir");
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().kind(), ErrorKind::kIo);
  EXPECT_NE(m.status().message().find("/nonexistent/dir/model.mlir"), std::string::npos);
}
