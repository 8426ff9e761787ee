// Attribute spelling shared by the printer: the exact forms stablehlo-opt prints.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>

#include "stablehlo/ir.h"

namespace hlx::shlo::text {

bool is_bare_id(std::string_view s);
std::string escape_string(std::string_view s);  // with the quotes
std::string symbol_ref(std::string_view s);     // @name or @"name"
std::string print_attr(const Attr& a);
// "dense<...>" without the type.
std::string dense_literal(const DenseElements& d);
// `{a = 1 : i64, b}` sorted by name (as MLIR's DictionaryAttr), skipping `elided`; "" when empty.
std::string attr_dict(const AttrDict& dict, std::initializer_list<std::string_view> elided = {});
// True when a conv dimension-numbers struct is a valid permutation that the compact
// `[b, 0, f]x[0, i, o]->[b, 0, f]` syntax can express.
bool conv_dims_printable(const Attr& dims);
std::string conv_dims_compact(const Attr& dims);

}  // namespace hlx::shlo::text
