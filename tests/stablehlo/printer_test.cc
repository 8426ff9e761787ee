// Printer: IR built by hand prints in stablehlo-opt's pretty form, with canonical value names,
// sorted attribute dictionaries and float spellings that re-parse to the same bits.
#include <gtest/gtest.h>

#include <cstring>

#include "stablehlo/parser.h"
#include "stablehlo/printer.h"
#include "stablehlo/text_float.h"

using namespace hlx;
using namespace hlx::shlo;

namespace {

TensorType T(DType d, Shape s) { return TensorType{d, std::move(s)}; }

Attr dense_f32(Shape shape, std::vector<float> v) {
  DenseElements d;
  d.type = T(DType::kF32, std::move(shape));
  d.bytes.resize(v.size() * 4);
  std::memcpy(d.bytes.data(), v.data(), d.bytes.size());
  return Attr::dense_elements(std::move(d));
}

// A function with one op `name(args...) -> result` followed by return.
Module single_op(const std::string& name, std::vector<TensorType> arg_types, TensorType result, AttrDict attrs) {
  Module m;
  m.name = "m";
  Function f;
  f.name = "main";
  for (TensorType& t : arg_types) {
    f.args.push_back(f.new_value(t));
    f.arg_attrs.emplace_back();
  }
  Op op;
  op.name = name;
  op.operands = f.args;
  op.results = {f.new_value(result)};
  op.attrs = std::move(attrs);
  Op ret;
  ret.name = "func.return";
  ret.operands = op.results;
  f.result_types = {result};
  f.result_attrs.emplace_back();
  f.body = {op, ret};
  m.functions.push_back(std::move(f));
  return m;
}

std::string body_line(const std::string& printed, int line) {
  size_t pos = 0;
  for (int i = 0; i < line; ++i) pos = printed.find('\n', pos) + 1;
  return printed.substr(pos, printed.find('\n', pos) - pos);
}

void expect_stable(const Module& m) {
  std::string first = print_module(m);
  Result<Module> again = parse_module(first, "printed");
  ASSERT_TRUE(again.ok()) << again.status().to_string() << "\n" << first;
  EXPECT_EQ(print_module(*again), first);
}

}  // namespace

TEST(Printer, Types) {
  EXPECT_EQ(print_type(T(DType::kBF16, {2, 3})), "tensor<2x3xbf16>");
  EXPECT_EQ(print_type(T(DType::kI1, {})), "tensor<i1>");
  EXPECT_EQ(print_type(T(DType::kU8, {0, 4})), "tensor<0x4xui8>");
}

TEST(Printer, ModuleFunctionAndArgumentAttributes) {
  Module m = single_op("stablehlo.abs", {T(DType::kBF16, {4})}, T(DType::kBF16, {4}), {});
  m.attrs = {{"hlx.identity", Attr::string("00ff")}, {"a.first", Attr::integer(1, DType::kI32)}};
  m.functions[0].arg_attrs[0] = {{"tf.aliasing_output", Attr::integer(0, DType::kI32)},
                                 {"hlx.name", Attr::string("model.embed_tokens.weight")}};
  std::string s = print_module(m);
  EXPECT_EQ(s,
            "module @m attributes {a.first = 1 : i32, hlx.identity = \"00ff\"} {\n"
            "  func.func public @main(%arg0: tensor<4xbf16> {hlx.name = \"model.embed_tokens.weight\", "
            "tf.aliasing_output = 0 : i32}) -> tensor<4xbf16> {\n"
            "    %0 = stablehlo.abs %arg0 : tensor<4xbf16>\n"
            "    return %0 : tensor<4xbf16>\n"
            "  }\n"
            "}\n");
  expect_stable(m);
}

// f32 1e-6 prints as 9.99999997E-7: APFloat truncates before rounding, so the 6-digit form
// (9.999990e-07) does not round-trip and MLIR falls back to 9 significant digits.
TEST(Printer, CompositeMatchesStablehloOptSyntax) {
  Module m = single_op("stablehlo.composite", {T(DType::kBF16, {2, 8}), T(DType::kBF16, {8})}, T(DType::kBF16, {2, 8}),
                       {{"name", Attr::string("hlx.rms_norm")},
                        {"decomposition", Attr::symbol("rms_norm_impl")},
                        {"composite_attributes", Attr::dictionary({{"eps", Attr::floating(1e-6, DType::kF32)}})},
                        {"version", Attr::integer(1, DType::kI32)}});
  EXPECT_EQ(body_line(print_module(m), 2),
            "    %0 = stablehlo.composite \"hlx.rms_norm\" %arg0, %arg1 {composite_attributes = {eps = "
            "9.99999997E-7 : f32}, decomposition = @rms_norm_impl, version = 1 : i32} : (tensor<2x8xbf16>, "
            "tensor<8xbf16>) -> tensor<2x8xbf16>");
  expect_stable(m);
}

TEST(Printer, PrettyForms) {
  Module cmp = single_op("stablehlo.compare", {T(DType::kF32, {2}), T(DType::kF32, {2})}, T(DType::kI1, {2}),
                         {{"compare_type", Attr::enumeration("comparison_type", "FLOAT")},
                          {"comparison_direction", Attr::enumeration("comparison_direction", "GE")}});
  EXPECT_EQ(body_line(print_module(cmp), 2),
            "    %0 = stablehlo.compare  GE, %arg0, %arg1,  FLOAT : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xi1>");
  Module dot = single_op(
      "stablehlo.dot_general", {T(DType::kF32, {2, 3, 4}), T(DType::kF32, {2, 4, 5})}, T(DType::kF32, {2, 3, 5}),
      {{"dot_dimension_numbers", Attr::structure("dot", {{"lhs_batching_dimensions", Attr::i64_array({0})},
                                                         {"rhs_batching_dimensions", Attr::i64_array({0})},
                                                         {"lhs_contracting_dimensions", Attr::i64_array({2})},
                                                         {"rhs_contracting_dimensions", Attr::i64_array({1})}})},
       {"precision_config",
        Attr::array({Attr::enumeration("precision", "DEFAULT"), Attr::enumeration("precision", "DEFAULT")})}});
  EXPECT_EQ(body_line(print_module(dot), 2),
            "    %0 = stablehlo.dot_general %arg0, %arg1, batching_dims = [0] x [0], contracting_dims = [2] x [1], "
            "precision = [DEFAULT, DEFAULT] : (tensor<2x3x4xf32>, tensor<2x4x5xf32>) -> tensor<2x3x5xf32>");
  Module bcast = single_op("stablehlo.broadcast_in_dim", {T(DType::kF32, {3})}, T(DType::kF32, {2, 3}),
                           {{"broadcast_dimensions", Attr::i64_array({1})}});
  EXPECT_EQ(body_line(print_module(bcast), 2),
            "    %0 = stablehlo.broadcast_in_dim %arg0, dims = [1] : (tensor<3xf32>) -> tensor<2x3xf32>");
  Module slice = single_op("stablehlo.slice", {T(DType::kF32, {4, 6})}, T(DType::kF32, {2, 2}),
                           {{"start_indices", Attr::i64_array({0, 1})},
                            {"limit_indices", Attr::i64_array({2, 5})},
                            {"strides", Attr::i64_array({1, 2})}});
  EXPECT_EQ(body_line(print_module(slice), 2),
            "    %0 = stablehlo.slice %arg0 [0:2, 1:5:2] : (tensor<4x6xf32>) -> tensor<2x2xf32>");
  Module conv = single_op("stablehlo.convert", {T(DType::kF32, {2})}, T(DType::kBF16, {2}), {});
  EXPECT_EQ(body_line(print_module(conv), 2), "    %0 = stablehlo.convert %arg0 : (tensor<2xf32>) -> tensor<2xbf16>");
  for (const Module* m : {&cmp, &dot, &bcast, &slice, &conv}) expect_stable(*m);
}

TEST(Printer, MalformedAttributesFallBackToGenericForm) {
  // A slice with mismatched index lists cannot use `[a:b]`; it must still print as valid text.
  Module m = single_op("stablehlo.slice", {T(DType::kF32, {4})}, T(DType::kF32, {2}),
                       {{"start_indices", Attr::i64_array({0})}, {"limit_indices", Attr::i64_array({2, 3})}});
  std::string line = body_line(print_module(m), 2);
  EXPECT_EQ(line,
            "    %0 = \"stablehlo.slice\"(%arg0) {limit_indices = array<i64: 2, 3>, start_indices = array<i64: 0>} : "
            "(tensor<4xf32>) -> tensor<2xf32>");
  expect_stable(m);
}

TEST(Printer, ConstantsNamesAndFloatSpellings) {
  Module m = single_op("stablehlo.constant", {}, T(DType::kF32, {4}),
                       {{"value", dense_f32({4}, {1.0f, 0.1f, -0.0f, 3.14159265f})}});
  std::string s = print_module(m);
  EXPECT_EQ(
      body_line(s, 2),
      "    %cst = stablehlo.constant dense<[1.000000e+00, 1.000000e-01, -0.000000e+00, 3.14159274]> : tensor<4xf32>");
  float nan_payload;
  uint32_t bits = 0x7FC00001u;
  std::memcpy(&nan_payload, &bits, 4);
  Module n = single_op("stablehlo.constant", {}, T(DType::kF32, {2}),
                       {{"value", dense_f32({2}, {nan_payload, -std::numeric_limits<float>::infinity()})}});
  EXPECT_EQ(body_line(print_module(n), 2),
            "    %cst = stablehlo.constant dense<[0x7FC00001, 0xFF800000]> : tensor<2xf32>");
  expect_stable(m);
  expect_stable(n);
  // Large constants use the hex form, splats a single value.
  std::vector<float> big(101);
  for (size_t i = 0; i < big.size(); ++i) big[i] = float(i);
  Module h = single_op("stablehlo.constant", {}, T(DType::kF32, {101}), {{"value", dense_f32({101}, big)}});
  EXPECT_NE(print_module(h).find("dense<\"0x000000000000803F"), std::string::npos);
  Module sp = single_op("stablehlo.constant", {}, T(DType::kF32, {3}), {{"value", dense_f32({3}, {2, 2, 2})}});
  EXPECT_NE(print_module(sp).find("dense<2.000000e+00> : tensor<3xf32>"), std::string::npos);
  expect_stable(h);
}

TEST(Printer, FloatSpellingsRoundTripEveryBf16AndF16) {
  // Every one of the 65,536 bit patterns of the 16-bit floats re-parses to itself (NaN payloads
  // included, through the hex spelling).
  for (DType t : {DType::kBF16, DType::kF16}) {
    for (uint32_t b = 0; b < 0x10000; ++b) {
      std::string s = text::format_float(b, t);
      std::optional<uint64_t> back = text::parse_float_bits(s, t);
      ASSERT_TRUE(back.has_value()) << s;
      ASSERT_EQ(*back, b) << dtype_name(t) << " " << s;
    }
  }
  for (uint32_t b : {0x00000001u, 0x00800000u, 0x7F7FFFFFu, 0x3DCCCCCDu, 0x4A36FA94u, 0xC0490FDBu}) {
    std::string s = text::format_float(b, DType::kF32);
    EXPECT_EQ(text::parse_float_bits(s, DType::kF32), std::optional<uint64_t>(b)) << s;
  }
  // MLIR's spellings: %.6e-like when it round-trips, 9 digits otherwise, hex without a '.'.
  EXPECT_EQ(text::format_float(0x3F800000u, DType::kF32), "1.000000e+00");
  EXPECT_EQ(text::format_float(0x40490FDBu, DType::kF32), "3.14159274");
  EXPECT_EQ(text::format_float(0x4A36FA94u, DType::kF32), "0x4A36FA94");
  EXPECT_EQ(text::format_float(0x7FC0u, DType::kBF16), "0x7FC0");
}

TEST(Printer, ValueNamingFollowsMlir) {
  const char* text = R"(
func.func @main(%x: tensor<3xf32>, %i: tensor<3xi32>) -> tensor<f32> {
  %a = stablehlo.constant dense<0.0> : tensor<f32>
  %b = stablehlo.constant dense<1> : tensor<i32>
  %c = stablehlo.constant dense<2.0> : tensor<f32>
  %d:2 = stablehlo.reduce(%x init: %a), (%i init: %b) across dimensions = [0] : (tensor<3xf32>, tensor<3xi32>, tensor<f32>, tensor<i32>) -> (tensor<f32>, tensor<i32>)
   reducer(%p: tensor<f32>, %q: tensor<f32>) (%r: tensor<i32>, %s: tensor<i32>) {
    %k = stablehlo.constant dense<1.0> : tensor<f32>
    %e = stablehlo.add %p, %q : tensor<f32>
    %f = stablehlo.add %r, %s : tensor<i32>
    stablehlo.return %e, %f : tensor<f32>, tensor<i32>
  }
  %g = stablehlo.add %d#0, %c : tensor<f32>
  return %g : tensor<f32>
}
)";
  Result<Module> m = parse_module(text);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  std::string s = print_module(*m);
  EXPECT_NE(s.find("%cst = stablehlo.constant dense<0.000000e+00>"), std::string::npos) << s;
  EXPECT_NE(s.find("%c = stablehlo.constant dense<1> : tensor<i32>"), std::string::npos) << s;
  EXPECT_NE(s.find("%cst_0 = stablehlo.constant dense<2.000000e+00>"), std::string::npos) << s;
  EXPECT_NE(s.find("%0:2 = stablehlo.reduce(%arg0 init: %cst), (%arg1 init: %c)"), std::string::npos) << s;
  EXPECT_NE(s.find("     reducer(%arg2: tensor<f32>, %arg4: tensor<f32>) (%arg3: tensor<i32>, %arg5: tensor<i32>)  {"),
            std::string::npos)
      << s;
  // Region values continue after the whole parent block: %1 is the add after the reduce.
  EXPECT_NE(s.find("%cst_1 = stablehlo.constant dense<1.000000e+00>"), std::string::npos) << s;
  EXPECT_NE(s.find("%2 = stablehlo.add %arg2, %arg4 : tensor<f32>"), std::string::npos) << s;
  EXPECT_NE(s.find("%1 = stablehlo.add %0#0, %cst_0 : tensor<f32>"), std::string::npos) << s;
  expect_stable(*m);
}

TEST(Printer, StructsWithExplicitEmptyFieldsPrintCanonically) {
  Module m = single_op("stablehlo.gather", {T(DType::kF32, {5, 3}), T(DType::kI64, {2, 1})}, T(DType::kF32, {2, 3}),
                       {{"slice_sizes", Attr::i64_array({1, 3})},
                        {"dimension_numbers", Attr::structure("gather", {{"index_vector_dim", Attr::integer(1)},
                                                                         {"offset_dims", Attr::i64_array({1})},
                                                                         {"operand_batching_dims", Attr::i64_array({})},
                                                                         {"collapsed_slice_dims", Attr::i64_array({0})},
                                                                         {"start_index_map", Attr::i64_array({0})}})}});
  EXPECT_EQ(
      body_line(print_module(m), 2),
      "    %0 = \"stablehlo.gather\"(%arg0, %arg1) <{dimension_numbers = #stablehlo.gather<offset_dims = [1], "
      "collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 1>, slice_sizes = array<i64: 1, 3>}> : "
      "(tensor<5x3xf32>, tensor<2x1xi64>) -> tensor<2x3xf32>");
  expect_stable(m);
}

TEST(Printer, InconsistentDenseDoesNotReadOutOfBounds) {
  DenseElements d;
  d.type = T(DType::kF32, {2, 3});
  d.bytes.assign(8, 0);  // 2 elements for a 6-element type
  Module m = single_op("stablehlo.constant", {}, T(DType::kF32, {2, 3}), {{"value", Attr::dense_elements(d)}});
  std::string s = print_module(m);
  Result<Module> again = parse_module(s);
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.status().message().find("has 8 bytes, expected 24"), std::string::npos) << again.status().message();
}
