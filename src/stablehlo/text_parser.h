// Internal: the recursive-descent parser behind parse_module. Types and attributes are in
// text_attr_parser.cc, modules, functions and ops in parser.cc.
#pragma once

#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "stablehlo/ir.h"
#include "stablehlo/text_lexer.h"

namespace hlx::shlo::text {

// Limits that keep hostile input from exhausting the stack or memory.
inline constexpr int kMaxNesting = 64;                       // attributes, regions, dense lists
inline constexpr int64_t kMaxDenseBytes = int64_t(1) << 28;  // one expanded dense<...> (256 MiB)

struct FunctionSig {
  std::vector<TensorType> inputs;
  std::vector<TensorType> results;
};

class TextParser {
 public:
  TextParser(std::string_view text, std::string_view filename) : sc_(text, filename) {}
  Result<Module> parse();

  // ---- types and attributes (text_attr_parser.cc) ----
  Result<DType> parse_element_type();
  Result<TensorType> parse_tensor_type();
  // `(T, ...) -> T` or `(T, ...) -> (T, ...)`.
  Result<FunctionSig> parse_function_type();
  // Either a function type or a single tensor type (nullopt inputs); used by same-type syntaxes.
  Result<std::vector<TensorType>> parse_result_types();  // `T` or `(T, ...)`
  Result<Attr> parse_attr();
  // After '{' has been consumed: `name = attr, name, ...}`.
  Result<AttrDict> parse_attr_dict_body();
  // Optional `{...}`; appends to `dict`, rejecting duplicates.
  Status parse_optional_attr_dict(AttrDict& dict);
  Result<Attr> parse_dense_after_keyword(const TensorType* known_type);
  Result<std::vector<int64_t>> parse_int_list();  // `[1, 2]`
  Result<Attr> parse_hash_attr();                 // `#stablehlo<...>`, `#stablehlo.x<...>`, #alias
  Result<Attr> parse_conv_dims_compact();         // `[b, 0, f]x[0, i, o]->[b, 0, f]`
  Status skip_location();                         // optional `loc(...)`

  Scanner sc_;
  int depth_ = 0;
  std::map<std::string, Attr, std::less<>> aliases_;

  // ---- functions and ops (parser.cc) ----
  struct Scope {
    std::unordered_map<std::string, std::vector<ValueId>> names;
  };
  Function* fn_ = nullptr;
  std::vector<Scope> scopes_;

  Status parse_function(Module& m);
  Status parse_op(std::vector<Op>& out);
  Status parse_pretty_op(Op& op, size_t op_pos, std::vector<TensorType>& result_types);
  Status parse_generic_op(Op& op, std::vector<TensorType>& result_types);
  Status parse_region(Block& block, bool allow_label);
  Status parse_block_body(Block& block);
  Result<ValueId> parse_use();
  Status parse_uses(std::vector<ValueId>& out);  // `%a, %b` (possibly empty)
  Status define(std::string name, std::vector<ValueId> ids, size_t pos);
  Status check_operand_types(const Op& op, const std::vector<TensorType>& types, size_t pos);
};

}  // namespace hlx::shlo::text
