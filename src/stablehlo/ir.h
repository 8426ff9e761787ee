// The in-memory form of a StableHLO module. It mirrors MLIR's generic model: every op is a name,
// operands, results, a dictionary of attributes and optional single-block regions. Pretty syntax
// (e.g. `stablehlo.dot_general %a, %b, contracting_dims = [1] x [0]`) is a printer/parser concern
// only; inside, that op holds the attribute `dot_dimension_numbers` exactly as the generic form does.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"

namespace hlx::shlo {

// Every SSA value is a ranked, statically shaped tensor (rank 0 for scalars).
struct TensorType {
  DType dtype = DType::kF32;
  Shape shape;
  bool operator==(const TensorType& o) const { return dtype == o.dtype && shape == o.shape; }
  bool operator!=(const TensorType& o) const { return !(*this == o); }
  int64_t rank() const { return int64_t(shape.size()); }
  std::string to_string() const;  // "tensor<2x3xbf16>"
};

struct Attr;
struct NamedAttr;
using AttrDict = std::vector<NamedAttr>;  // insertion order; the printer sorts by name like MLIR

// Element data of `dense<...>` constants, stored as raw little-endian bytes in `type`'s dtype
// (i1 as one byte per element). Always fully expanded, even when printed as a splat.
struct DenseElements {
  TensorType type;
  std::vector<uint8_t> bytes;
};

struct Attr {
  enum class Kind {
    kUnit,       // `has_side_effect` with no value
    kBool,       // true / false
    kInt,        // 3 : i64   (dtype says which integer type; i64 when untyped)
    kFloat,      // 1.0 : f32
    kString,     // "text"
    kSymbol,     // @callee
    kI64Array,   // array<i64: 1, 2>
    kBoolArray,  // array<i1: true, false>
    kDense,      // dense<...> : tensor<...>
    kArray,      // [attr, attr]
    kDict,       // {name = attr, ...}
    kEnum,       // #stablehlo<comparison_direction GT>: enum_name="comparison_direction", str="GT"
    kStruct,     // #stablehlo.gather<offset_dims = [1], ...>: struct_name="gather", fields in dict
    kType,       // a type used as an attribute, e.g. tensor<f32>
  };
  Kind kind = Kind::kUnit;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  DType dtype = DType::kI64;    // for kInt / kFloat
  std::string str;              // kString, kSymbol (without '@'), kEnum value
  std::string name;             // kEnum enum name, kStruct struct name
  std::vector<int64_t> ints;    // kI64Array, kBoolArray (0/1)
  std::vector<Attr> list;       // kArray
  std::vector<NamedAttr> dict;  // kDict, kStruct fields (values are kI64Array or kInt)
  // kStruct convention (what the parser produces and stablehlo-opt prints): "gather", "scatter"
  // and "dot" keep MLIR's field order and OMIT empty arrays and zero integers (index_vector_dim = 0),
  // so readers treat a missing field as [] / 0. "conv" always has all nine fields
  // (input_batch_dimension ... output_spatial_dimensions). Enum/struct names from a dialect other
  // than stablehlo carry it as a prefix ("chlo.comparison_direction").
  std::shared_ptr<const DenseElements> dense;  // kDense
  TensorType type;                             // kType

  static Attr unit();
  static Attr boolean(bool v);
  static Attr integer(int64_t v, DType t = DType::kI64);
  static Attr floating(double v, DType t = DType::kF32);
  static Attr string(std::string v);
  static Attr symbol(std::string v);
  static Attr i64_array(std::vector<int64_t> v);
  static Attr bool_array(std::vector<bool> v);
  static Attr dense_elements(DenseElements v);
  static Attr array(std::vector<Attr> v);
  static Attr dictionary(AttrDict v);
  static Attr enumeration(std::string enum_name, std::string value);
  static Attr structure(std::string struct_name, AttrDict fields);
  static Attr type_attr(TensorType t);

  // Field of a kDict/kStruct; nullptr when missing.
  const Attr* find(std::string_view key) const;
  bool operator==(const Attr& o) const;
};

struct NamedAttr {
  std::string name;
  Attr value;
};

const Attr* find_attr(const AttrDict& dict, std::string_view name);
void set_attr(AttrDict& dict, std::string name, Attr value);  // replaces an existing entry

// Values are numbered per function (including values defined inside regions).
using ValueId = int32_t;

struct Op;

// A single-block region (reduce bodies, scatter update computations, ...).
struct Block {
  std::vector<ValueId> args;
  std::vector<Op> ops;
};

struct Op {
  std::string name;  // full name: "stablehlo.add", "chlo.erf", "func.call", "func.return"
  std::vector<ValueId> operands;
  std::vector<ValueId> results;
  AttrDict attrs;  // inherent and discardable attributes together
  std::vector<Block> regions;

  const Attr* attr(std::string_view key) const { return find_attr(attrs, key); }
};

struct Function {
  std::string name;  // without '@'
  bool is_public = true;
  std::vector<ValueId> args;        // body's entry block arguments
  std::vector<AttrDict> arg_attrs;  // one per arg (may be empty dicts), e.g. hlx.name, tf.aliasing_output
  std::vector<TensorType> result_types;
  std::vector<AttrDict> result_attrs;
  AttrDict attrs;                       // `attributes {...}` after the signature (rare; kept for round trips)
  std::vector<Op> body;                 // ends with func.return
  std::vector<TensorType> value_types;  // indexed by ValueId

  ValueId new_value(TensorType t) {
    value_types.push_back(std::move(t));
    return ValueId(value_types.size() - 1);
  }
  const TensorType& type_of(ValueId v) const { return value_types[size_t(v)]; }
};

struct Module {
  std::string name;  // without '@'; may be empty
  AttrDict attrs;    // module attributes, e.g. hlx.identity
  std::vector<Function> functions;

  const Function* find_function(std::string_view name) const;
  Function* find_function(std::string_view name);
};

// Canonical attribute names used by hlx itself.
inline constexpr const char* kIdentityAttr = "hlx.identity";     // module: SHA-256 hex of its description
inline constexpr const char* kArgNameAttr = "hlx.name";          // argument: input name (tokens, positions, ...)
inline constexpr const char* kWeightAttr = "hlx.weight";         // argument: checkpoint tensor bound once at load
inline constexpr const char* kAliasAttr = "tf.aliasing_output";  // argument: donated, aliases result #i

}  // namespace hlx::shlo
