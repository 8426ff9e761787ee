// Result-type inference for the StableHLO ops hlx emits and runs. Every function checks the op's
// constraints from the StableHLO spec (docs/spec.md) and returns either the inferred result type or
// an ErrorKind::kVerify Status whose message starts with the spec label, e.g.
// "dot_general_c10: lhs contracting dim 1 has size 3 but rhs contracting dim 0 has size 4".
// The verifier compares an op's declared result types to these; the builder uses them to type ops.
// Functions never abort: any attribute value (negative, out of range) yields an error.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"
#include "stablehlo/ir.h"

namespace hlx::shlo {

using Dims = std::vector<int64_t>;

// "[1, 2, 3]"
std::string dims_to_string(const Dims& dims);

// ---- Dimension-number structs, with conversions to/from their IR attributes. ----

// `dot_dimension_numbers = #stablehlo.dot<...>`: Attr struct "dot".
struct DotDims {
  Dims lhs_batching, rhs_batching, lhs_contracting, rhs_contracting;
  // [.., M, K] x [.., K, N] with `batch` leading batch dims on both sides.
  static DotDims matmul(int64_t lhs_rank, int64_t rhs_rank, int64_t batch = 0);
};
Result<DotDims> dot_dims_from_attr(const Attr& attr);
Attr to_attr(const DotDims& d);

// `dimension_numbers = #stablehlo.gather<...>`: Attr struct "gather".
struct GatherDims {
  Dims offset_dims, collapsed_slice_dims, operand_batching_dims, start_indices_batching_dims, start_index_map;
  int64_t index_vector_dim = 0;
};
Result<GatherDims> gather_dims_from_attr(const Attr& attr);
Attr to_attr(const GatherDims& d);

// `scatter_dimension_numbers = #stablehlo.scatter<...>`: Attr struct "scatter".
struct ScatterDims {
  Dims update_window_dims, inserted_window_dims, input_batching_dims, scatter_indices_batching_dims,
      scatter_dims_to_operand_dims;
  int64_t index_vector_dim = 0;
};
Result<ScatterDims> scatter_dims_from_attr(const Attr& attr);
Attr to_attr(const ScatterDims& d);

// The field names of the "dot", "gather" or "scatter" struct in MLIR's order (the printer's
// and the text parser's canonical order); null for any other struct.
const std::vector<std::string>* dimension_field_names(std::string_view struct_name);

// `dimension_numbers = #stablehlo.conv<...>`: Attr struct "conv".
struct ConvDims {
  int64_t input_batch = 0, input_feature = 0;
  Dims input_spatial;
  int64_t kernel_input_feature = 0, kernel_output_feature = 0;
  Dims kernel_spatial;
  int64_t output_batch = 0, output_feature = 0;
  Dims output_spatial;
};
Result<ConvDims> conv_dims_from_attr(const Attr& attr);
Attr to_attr(const ConvDims& d);

// The window attributes of convolution. An empty vector means "attribute absent" (the spec's
// defaults: strides and dilations 1, padding 0, no reversal).
struct ConvWindow {
  Dims window_strides, lhs_dilation, rhs_dilation;
  std::vector<std::pair<int64_t, int64_t>> padding;  // (low, high) per spatial dim
  std::vector<bool> window_reversal;
  int64_t feature_group_count = 1;
  int64_t batch_group_count = 1;
};
// Reads window_strides / padding / lhs_dilation / rhs_dilation / window_reversal / *_group_count.
Result<ConvWindow> conv_window_from_attrs(const AttrDict& attrs);
// Writes the non-default ones.
void set_conv_window_attrs(AttrDict& attrs, const ConvWindow& w);

// ---- Element-type classes used by the spec's input tables. ----
bool is_signed_int(DType t);  // i8..i64 (not ui8, not i1)
bool is_bool(DType t);        // i1
// Spec `is_promotable(x, y)`: same kind (bool/int/float) and bitwidth(x) <= bitwidth(y).
bool is_promotable(DType x, DType y);

// ---- Inference. `op` arguments are short names without the dialect ("add", "exponential"). ----

// True for every elementwise op this module knows (unary and binary), incl. "erf" (chlo.erf).
bool is_elementwise_unary(std::string_view op);
bool is_elementwise_binary(std::string_view op);
Result<TensorType> infer_unary(std::string_view op, const TensorType& x);
Result<TensorType> infer_binary(std::string_view op, const TensorType& lhs, const TensorType& rhs);

// direction: EQ NE GE GT LE LT. compare_type: FLOAT TOTALORDER SIGNED UNSIGNED, or empty (absent).
Result<TensorType> infer_compare(const TensorType& lhs, const TensorType& rhs, std::string_view direction,
                                 std::string_view compare_type);
// The compare_type the spec requires for `t` (FLOAT for floats, SIGNED, UNSIGNED for ui/i1).
std::string_view default_compare_type(DType t);
Result<TensorType> infer_select(const TensorType& pred, const TensorType& on_true, const TensorType& on_false);
Result<TensorType> infer_clamp(const TensorType& min, const TensorType& operand, const TensorType& max);
Result<TensorType> infer_convert(const TensorType& operand, DType to);

// Ops whose result shape is not a function of the operands take it as an argument and check it.
Result<TensorType> infer_iota(const TensorType& result, int64_t iota_dimension);
Result<TensorType> infer_constant(const DenseElements& value);
Result<TensorType> infer_broadcast_in_dim(const TensorType& operand, const Dims& broadcast_dimensions,
                                          const Shape& result_shape);
Result<TensorType> infer_reshape(const TensorType& operand, const Shape& result_shape);
Result<TensorType> infer_transpose(const TensorType& operand, const Dims& permutation);
Result<TensorType> infer_slice(const TensorType& operand, const Dims& start, const Dims& limit, const Dims& strides);
Result<TensorType> infer_dynamic_slice(const TensorType& operand, const std::vector<TensorType>& start_indices,
                                       const Dims& slice_sizes);
Result<TensorType> infer_dynamic_update_slice(const TensorType& operand, const TensorType& update,
                                              const std::vector<TensorType>& start_indices);
Result<TensorType> infer_concatenate(const std::vector<TensorType>& inputs, int64_t dimension);
Result<TensorType> infer_pad(const TensorType& operand, const TensorType& padding_value, const Dims& low,
                             const Dims& high, const Dims& interior);

// Checks a reduction body (reduce or scatter): 2N scalar block args `(E0..EN-1, E0..EN-1)`, N
// returned values of types `tensor<Ei>`, is_promotable(element_type(inputs[i]), Ei).
// `op` is "reduce" or "scatter" and selects the labels. Returns the Ei.
Result<std::vector<DType>> check_reduction_body(std::string_view op, const std::vector<TensorType>& inputs,
                                                const std::vector<TensorType>& block_args,
                                                const std::vector<TensorType>& returned);
// Results of reduce, given the body's element types Ei (from check_reduction_body).
Result<std::vector<TensorType>> infer_reduce(const std::vector<TensorType>& inputs,
                                             const std::vector<TensorType>& init_values, const Dims& dimensions,
                                             const std::vector<DType>& body_types);

// `result_dtype` defaults to lhs's element type. lhs and rhs element types may differ (mixed
// precision: bf16 activations x f16 weights); the reference verifier does not enforce
// dot_general_c13 for non-quantized types and neither do we.
Result<TensorType> infer_dot_general(const TensorType& lhs, const TensorType& rhs, const DotDims& d,
                                     std::optional<DType> result_dtype = std::nullopt);
Result<TensorType> infer_gather(const TensorType& operand, const TensorType& start_indices, const GatherDims& d,
                                const Dims& slice_sizes);
Result<std::vector<TensorType>> infer_scatter(const std::vector<TensorType>& inputs, const TensorType& scatter_indices,
                                              const std::vector<TensorType>& updates, const ScatterDims& d,
                                              const std::vector<DType>& body_types);
// lhs and rhs element types must match (convolution_c27); the result's may differ.
Result<TensorType> infer_convolution(const TensorType& lhs, const TensorType& rhs, const ConvDims& d,
                                     const ConvWindow& w, std::optional<DType> result_dtype = std::nullopt);

}  // namespace hlx::shlo
