// Round trips of a module exercising every syntax form, and spot checks that attributes of real
// corpus programs land in the right IR fields.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "stablehlo/parser.h"
#include "stablehlo/printer.h"

using namespace hlx;
using namespace hlx::shlo;

namespace {

const char* kAllForms = R"(module @all attributes {hlx.identity = "0123abcd"} {
  func.func public @main(%arg0: tensor<2x3xbf16> {hlx.name = "model.embed_tokens.weight", tf.aliasing_output = 0 : i32}, %arg1: tensor<3xi64>, %arg2: tensor<4x6xf32>) -> (tensor<2x3xbf16> {jax.result_info = ""}) {
    %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %c = stablehlo.constant dense<[true, false]> : tensor<2xi1>
    %cst_0 = stablehlo.constant dense<[[1.000000e+00, 0x7FC0, 0xFF80]]> : tensor<1x3xbf16>
    %c_1 = stablehlo.constant dense<[0, 255]> : tensor<2xui8>
    %0 = stablehlo.iota dim = 0 : tensor<4xi32>
    %1 = stablehlo.add %arg0, %arg0 : tensor<2x3xbf16>
    %2 = stablehlo.compare  LT, %arg2, %arg2,  FLOAT : (tensor<4x6xf32>, tensor<4x6xf32>) -> tensor<4x6xi1>
    %3 = stablehlo.select %2, %arg2, %arg2 : tensor<4x6xi1>, tensor<4x6xf32>
    %4 = stablehlo.slice %arg2 [0:2, 1:5:2] : (tensor<4x6xf32>) -> tensor<2x2xf32>
    %5 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<4x6xf32>
    %6 = stablehlo.transpose %arg2, dims = [1, 0] : (tensor<4x6xf32>) -> tensor<6x4xf32>
    %7 = stablehlo.pad %arg2, %cst, low = [1, 0], high = [0, 0], interior = [0, 1] : (tensor<4x6xf32>, tensor<f32>) -> tensor<5x11xf32>
    %8 = stablehlo.concatenate %arg2, %5, dim = 0 : (tensor<4x6xf32>, tensor<4x6xf32>) -> tensor<8x6xf32>
    %9 = stablehlo.reduce(%arg2 init: %cst) applies stablehlo.maximum across dimensions = [1] : (tensor<4x6xf32>, tensor<f32>) -> tensor<4xf32>
    %10 = stablehlo.dot_general %arg2, %6, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<4x6xf32>, tensor<6x4xf32>) -> tensor<4x4xf32>
    %11 = stablehlo.convert %1 : (tensor<2x3xbf16>) -> tensor<2x3xf32>
    %12 = chlo.erf %11 : tensor<2x3xf32> -> tensor<2x3xf32>
    %13 = stablehlo.clamp %cst, %11, %cst : (tensor<f32>, tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>
    %14 = stablehlo.composite "hlx.rms_norm" %1 {composite_attributes = {eps = 9.99999997E-7 : f32}, decomposition = @rms, version = 1 : i32} : (tensor<2x3xbf16>) -> tensor<2x3xbf16>
    %15 = "stablehlo.gather"(%arg2, %arg1) <{dimension_numbers = #stablehlo.gather<offset_dims = [0], collapsed_slice_dims = [1], start_index_map = [1], index_vector_dim = 1>, slice_sizes = array<i64: 4, 1>}> : (tensor<4x6xf32>, tensor<3xi64>) -> tensor<4x3xf32>
    %16 = stablehlo.dynamic_slice %arg2, %0, %0, sizes = [1, 2] : (tensor<4x6xf32>, tensor<4xi32>, tensor<4xi32>) -> tensor<1x2xf32>
    %17:2 = call @pair(%arg2) : (tensor<4x6xf32>) -> (tensor<4x6xf32>, tensor<4x6xf32>)
    stablehlo.custom_call @check.expect_close(%17#0, %17#1) {has_side_effect = true} : (tensor<4x6xf32>, tensor<4x6xf32>) -> ()
    return %14 : tensor<2x3xbf16>
  }
  func.func private @pair(%arg0: tensor<4x6xf32>) -> (tensor<4x6xf32>, tensor<4x6xf32>) {
    return %arg0, %arg0 : tensor<4x6xf32>, tensor<4x6xf32>
  }
  func.func private @rms(%arg0: tensor<2x3xbf16>) -> tensor<2x3xbf16> {
    return %arg0 : tensor<2x3xbf16>
  }
}
)";

Result<Module> parse_corpus(const char* name) { return parse_module_file(std::string(HLX_TESTDATA_DIR) + "/" + name); }

const Op* find_op(const Module& m, std::string_view name) {
  for (const Function& f : m.functions)
    for (const Op& op : f.body)
      if (op.name == name) return &op;
  return nullptr;
}

const Op* find_constant(const Module& m, std::string_view function) {
  const Function* f = m.find_function(function);
  if (!f) return nullptr;
  for (const Op& op : f->body)
    if (op.name == "stablehlo.constant") return &op;
  return nullptr;
}

#define SKIP_WITHOUT_CORPUS()                           \
  if (!std::filesystem::is_directory(HLX_TESTDATA_DIR)) \
  GTEST_SKIP() << "StableHLO corpus not found at " << HLX_TESTDATA_DIR

}  // namespace

TEST(RoundTrip, AllFormsPrintExactlyAsWritten) {
  Result<Module> m = parse_module(kAllForms, "all.mlir");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  std::string printed = print_module(*m);
  EXPECT_EQ(printed, kAllForms);
  Result<Module> again = parse_module(printed);
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_EQ(print_module(*again), printed);
}

TEST(RoundTrip, CorpusGatherDims) {
  SKIP_WITHOUT_CORPUS();
  Result<Module> m = parse_corpus("gather_float32_10_10_10_10_int64_1_1_4_3.mlir");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const Op* g = find_op(*m, "stablehlo.gather");
  ASSERT_NE(g, nullptr);
  const Attr* d = g->attr("dimension_numbers");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->name, "gather");
  EXPECT_EQ(d->find("offset_dims")->ints, (std::vector<int64_t>{1, 2, 3, 4}));
  EXPECT_EQ(d->find("start_index_map")->ints, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(d->find("index_vector_dim")->i, 3);
  EXPECT_EQ(d->find("collapsed_slice_dims"), nullptr);
  EXPECT_EQ(g->attr("slice_sizes")->ints, (std::vector<int64_t>{10, 2, 2, 2}));
}

TEST(RoundTrip, CorpusConvDims) {
  SKIP_WITHOUT_CORPUS();
  Result<Module> m = parse_corpus("conv_general_dilated_float32_2_3_9_10_float32_3_3_4_5_t2.mlir");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const Op* c = find_op(*m, "stablehlo.convolution");
  ASSERT_NE(c, nullptr);
  const Attr* d = c->attr("dimension_numbers");
  // [b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1]
  EXPECT_EQ(d->find("input_batch_dimension")->i, 0);
  EXPECT_EQ(d->find("input_feature_dimension")->i, 1);
  EXPECT_EQ(d->find("input_spatial_dimensions")->ints, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(d->find("kernel_output_feature_dimension")->i, 0);
  EXPECT_EQ(d->find("kernel_input_feature_dimension")->i, 1);
  EXPECT_EQ(d->find("kernel_spatial_dimensions")->ints, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(c->attr("window_strides")->ints, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(c->attr("padding"), nullptr);
  EXPECT_EQ(c->attr("batch_group_count")->i, 1);
}

TEST(RoundTrip, CorpusCompareAndDenseValues) {
  SKIP_WITHOUT_CORPUS();
  Result<Module> m = parse_corpus("argmax_uint8_15.mlir");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const Op* r = find_op(*m, "stablehlo.reduce");
  ASSERT_NE(r, nullptr);
  const Op& cmp = r->regions.at(0).ops.at(0);
  EXPECT_EQ(*cmp.attr("comparison_direction"), Attr::enumeration("comparison_direction", "GT"));
  EXPECT_EQ(*cmp.attr("compare_type"), Attr::enumeration("comparison_type", "UNSIGNED"));

  Result<Module> half = parse_corpus("add_any_float16_2_float16_2.mlir");
  ASSERT_TRUE(half.ok()) << half.status().to_string();
  const Op* c16 = find_constant(*half, "inputs");
  ASSERT_NE(c16, nullptr);
  const DenseElements& d16 = *c16->attr("value")->dense;
  uint16_t h;
  std::memcpy(&h, d16.bytes.data(), 2);
  EXPECT_NEAR(f16_to_f32(hlx::f16{h}), 1.77148f, 1e-3f);  // dense<[1.771480e+00, ...]>

  Result<Module> bf = parse_corpus("abs_bfloat16_20_20.mlir");
  ASSERT_TRUE(bf.ok()) << bf.status().to_string();
  const DenseElements& dbf = *find_constant(*bf, "inputs")->attr("value")->dense;
  EXPECT_EQ(dbf.type, (TensorType{DType::kBF16, {20, 20}}));
  ASSERT_EQ(dbf.bytes.size(), 800u);
  EXPECT_EQ(dbf.bytes[0], 0x29);  // dense<"0x29C0...">: raw little-endian bytes
  EXPECT_EQ(dbf.bytes[1], 0xC0);

  Result<Module> b = parse_corpus("convert_element_type_bool_100_100.mlir");
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  const DenseElements& di1 = *find_constant(*b, "inputs")->attr("value")->dense;
  EXPECT_EQ(di1.type.dtype, DType::kI1);
  EXPECT_EQ(di1.bytes.size(), 10000u);

  Result<Module> u8 = parse_corpus("add_any_uint8_2_uint8_2.mlir");
  ASSERT_TRUE(u8.ok()) << u8.status().to_string();
  const DenseElements& du8 = *find_constant(*u8, "inputs")->attr("value")->dense;
  EXPECT_EQ(du8.type, (TensorType{DType::kU8, {2}}));
  EXPECT_EQ(du8.bytes, (std::vector<uint8_t>{6, 6}));  // splat dense<6> is expanded
}
