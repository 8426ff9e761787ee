// Which pretty syntax each op uses (shared by the parser and the printer), following the
// assemblyFormat / custom printers of openxla/stablehlo's StablehloOps.td and ChloOps.td.
#pragma once

#include <string_view>
#include <vector>

namespace hlx::shlo::text {

enum class Syntax {
  kGeneric,         // "dialect.op"(%a) <{props}> ({regions}) {attrs} : (T) -> T
  kSameType,        // %a, %b attr-dict : T  (or a functional type when types differ)
  kFunctional,      // %a, %b attr-dict : (T, T) -> T
  kChloUnary,       // %a attr-dict : T -> T
  kConstant,        // attr-dict dense<...> : T
  kIota,            // dim = 0 attr-dict : T
  kCompare,         // DIR, %a, %b(, TYPE)? attr-dict : (T, T) -> T
  kSelect,          // %p, %a, %b attr-dict : P, T   (or functional)
  kSlice,           // %a [0:2, 1:3:2] attr-dict : (T) -> T
  kDynamicSlice,    // %a, %i, %j, sizes = [..] attr-dict : (..) -> T
  kBroadcastInDim,  // %a, dims = [..] attr-dict : (T) -> T
  kTranspose,       // %a, dims = [..] attr-dict : (T) -> T
  kConcatenate,     // %a, %b, dim = 0 attr-dict : (..) -> T
  kPad,             // %a, %v, low = [..], high = [..], interior = [..] attr-dict : (..) -> T
  kReduce,          // (%a init: %b), ... applies op | reducer(...) {...}
  kDotGeneral,      // %a, %b, batching_dims = [..] x [..], contracting_dims = .., precision = [..]
  kConvolution,     // (%a, %b) dim_numbers = .., window = {..} attr-dict : (..) -> T
  kCustomCall,      // @target(%a, %b) attr-dict : (..) -> (..)
  kComposite,       // "name" %a, %b attr-dict : (..) -> (..)
  kCall,            // @callee(%a) attr-dict : (..) -> (..)
  kReturn,          // %a, %b attr-dict : T, T
};

Syntax syntax_of(std::string_view op_name);

// Binary commutative stablehlo ops: the only ones reduce's `applies` short form may name.
bool is_commutative_binary(std::string_view op_name);

// Inherent attributes of ops hlx prints in generic form, in declaration order (they go inside
// `<{...}>`, as stablehlo-opt prints them); other attributes are printed in the trailing `{...}`.
const std::vector<std::string_view>& inherent_attrs(std::string_view op_name);

}  // namespace hlx::shlo::text
