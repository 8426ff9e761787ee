#include "stablehlo/text_ops.h"

#include <string>
#include <unordered_map>

namespace hlx::shlo::text {

namespace {

const std::unordered_map<std::string, Syntax>& table() {
  static const auto* t = [] {
    auto* m = new std::unordered_map<std::string, Syntax>;
    // Unary and binary elementwise ops: custom<SameOperandsAndResultType>.
    for (std::string_view n : {"abs",
                               "cbrt",
                               "ceil",
                               "convert",
                               "count_leading_zeros",
                               "cosine",
                               "exponential",
                               "exponential_minus_one",
                               "floor",
                               "log",
                               "log_plus_one",
                               "logistic",
                               "not",
                               "negate",
                               "popcnt",
                               "round_nearest_afz",
                               "round_nearest_even",
                               "rsqrt",
                               "sign",
                               "sine",
                               "sqrt",
                               "tan",
                               "tanh",
                               "add",
                               "atan2",
                               "divide",
                               "maximum",
                               "minimum",
                               "multiply",
                               "power",
                               "remainder",
                               "shift_left",
                               "shift_right_arithmetic",
                               "shift_right_logical",
                               "subtract",
                               "and",
                               "or",
                               "xor",
                               "clamp"})
      (*m)["stablehlo." + std::string(n)] = Syntax::kSameType;
    for (std::string_view n : {"reshape", "dynamic_update_slice", "bitcast_convert", "is_finite"})
      (*m)["stablehlo." + std::string(n)] = Syntax::kFunctional;
    for (std::string_view n :
         {"acos", "acosh", "asin", "asinh", "atan", "atanh", "bessel_i1e", "cosh", "sinh", "tan", "digamma", "erf",
          "erf_inv", "erfc", "is_inf", "is_neg_inf", "is_pos_inf", "lgamma", "square"})
      (*m)["chlo." + std::string(n)] = Syntax::kChloUnary;
    m->insert({{"stablehlo.constant", Syntax::kConstant},
               {"stablehlo.iota", Syntax::kIota},
               {"stablehlo.compare", Syntax::kCompare},
               {"stablehlo.select", Syntax::kSelect},
               {"stablehlo.slice", Syntax::kSlice},
               {"stablehlo.dynamic_slice", Syntax::kDynamicSlice},
               {"stablehlo.broadcast_in_dim", Syntax::kBroadcastInDim},
               {"stablehlo.transpose", Syntax::kTranspose},
               {"stablehlo.concatenate", Syntax::kConcatenate},
               {"stablehlo.pad", Syntax::kPad},
               {"stablehlo.reduce", Syntax::kReduce},
               {"stablehlo.dot_general", Syntax::kDotGeneral},
               {"stablehlo.convolution", Syntax::kConvolution},
               {"stablehlo.custom_call", Syntax::kCustomCall},
               {"stablehlo.composite", Syntax::kComposite},
               {"func.call", Syntax::kCall},
               {"func.return", Syntax::kReturn},
               {"stablehlo.return", Syntax::kReturn}});
    return m;
  }();
  return *t;
}

}  // namespace

Syntax syntax_of(std::string_view op_name) {
  auto it = table().find(std::string(op_name));
  return it == table().end() ? Syntax::kGeneric : it->second;
}

bool is_commutative_binary(std::string_view op_name) {
  return op_name == "stablehlo.add" || op_name == "stablehlo.multiply" || op_name == "stablehlo.maximum" ||
         op_name == "stablehlo.minimum" || op_name == "stablehlo.and" || op_name == "stablehlo.or" ||
         op_name == "stablehlo.xor";
}

const std::vector<std::string_view>& inherent_attrs(std::string_view op_name) {
  static const std::vector<std::string_view> none;
  static const std::unordered_map<std::string_view, std::vector<std::string_view>> known = {
      {"stablehlo.gather", {"dimension_numbers", "slice_sizes", "indices_are_sorted"}},
      {"stablehlo.scatter", {"scatter_dimension_numbers", "indices_are_sorted", "unique_indices"}},
      {"stablehlo.dynamic_gather", {"dimension_numbers", "indices_are_sorted"}},
      {"stablehlo.sort", {"dimension", "is_stable"}},
      {"stablehlo.reduce_window",
       {"window_dimensions", "window_strides", "base_dilations", "window_dilations", "padding"}},
      {"stablehlo.select_and_scatter", {"window_dimensions", "window_strides", "padding"}},
      {"stablehlo.map", {"dimensions"}},
      {"stablehlo.reverse", {"dimensions"}},
      {"stablehlo.get_tuple_element", {"index"}},
      {"stablehlo.batch_norm_inference", {"epsilon", "feature_index"}},
      {"stablehlo.batch_norm_training", {"epsilon", "feature_index"}},
      {"stablehlo.batch_norm_grad", {"epsilon", "feature_index"}},
      {"stablehlo.rng_bit_generator", {"rng_algorithm"}},
      {"stablehlo.all_gather", {"all_gather_dim", "replica_groups", "channel_handle", "use_global_device_ids"}},
      {"stablehlo.all_reduce", {"replica_groups", "channel_handle", "use_global_device_ids"}},
  };
  auto it = known.find(op_name);
  return it == known.end() ? none : it->second;
}

}  // namespace hlx::shlo::text
