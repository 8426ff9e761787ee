#include "stablehlo/ir.h"

namespace hlx::shlo {

std::string TensorType::to_string() const {
  std::string s = "tensor<";
  for (int64_t d : shape) s += std::to_string(d) + "x";
  s += dtype_name(dtype);
  return s + ">";
}

Attr Attr::unit() { return Attr{}; }
Attr Attr::boolean(bool v) {
  Attr a;
  a.kind = Kind::kBool;
  a.b = v;
  return a;
}
Attr Attr::integer(int64_t v, DType t) {
  Attr a;
  a.kind = Kind::kInt;
  a.i = v;
  a.dtype = t;
  return a;
}
Attr Attr::floating(double v, DType t) {
  Attr a;
  a.kind = Kind::kFloat;
  a.f = v;
  a.dtype = t;
  return a;
}
Attr Attr::string(std::string v) {
  Attr a;
  a.kind = Kind::kString;
  a.str = std::move(v);
  return a;
}
Attr Attr::symbol(std::string v) {
  Attr a;
  a.kind = Kind::kSymbol;
  a.str = std::move(v);
  return a;
}
Attr Attr::i64_array(std::vector<int64_t> v) {
  Attr a;
  a.kind = Kind::kI64Array;
  a.ints = std::move(v);
  return a;
}
Attr Attr::bool_array(std::vector<bool> v) {
  Attr a;
  a.kind = Kind::kBoolArray;
  for (bool x : v) a.ints.push_back(x ? 1 : 0);
  return a;
}
Attr Attr::dense_elements(DenseElements v) {
  Attr a;
  a.kind = Kind::kDense;
  a.dense = std::make_shared<const DenseElements>(std::move(v));
  return a;
}
Attr Attr::array(std::vector<Attr> v) {
  Attr a;
  a.kind = Kind::kArray;
  a.list = std::move(v);
  return a;
}
Attr Attr::dictionary(AttrDict v) {
  Attr a;
  a.kind = Kind::kDict;
  a.dict = std::move(v);
  return a;
}
Attr Attr::enumeration(std::string enum_name, std::string value) {
  Attr a;
  a.kind = Kind::kEnum;
  a.name = std::move(enum_name);
  a.str = std::move(value);
  return a;
}
Attr Attr::structure(std::string struct_name, AttrDict fields) {
  Attr a;
  a.kind = Kind::kStruct;
  a.name = std::move(struct_name);
  a.dict = std::move(fields);
  return a;
}
Attr Attr::type_attr(TensorType t) {
  Attr a;
  a.kind = Kind::kType;
  a.type = std::move(t);
  return a;
}

const Attr* Attr::find(std::string_view key) const { return find_attr(dict, key); }

bool Attr::operator==(const Attr& o) const {
  if (kind != o.kind) return false;
  switch (kind) {
    case Kind::kUnit:
      return true;
    case Kind::kBool:
      return b == o.b;
    case Kind::kInt:
      return i == o.i && dtype == o.dtype;
    case Kind::kFloat:
      return f == o.f && dtype == o.dtype;
    case Kind::kString:
    case Kind::kSymbol:
      return str == o.str;
    case Kind::kI64Array:
    case Kind::kBoolArray:
      return ints == o.ints;
    case Kind::kDense:
      return dense->type == o.dense->type && dense->bytes == o.dense->bytes;
    case Kind::kArray:
      return list == o.list;
    case Kind::kEnum:
      return name == o.name && str == o.str;
    case Kind::kDict:
    case Kind::kStruct: {
      if (name != o.name || dict.size() != o.dict.size()) return false;
      for (size_t k = 0; k < dict.size(); ++k)
        if (dict[k].name != o.dict[k].name || !(dict[k].value == o.dict[k].value)) return false;
      return true;
    }
    case Kind::kType:
      return type == o.type;
  }
  return false;
}

const Attr* find_attr(const AttrDict& dict, std::string_view name) {
  for (const NamedAttr& a : dict)
    if (a.name == name) return &a.value;
  return nullptr;
}

void set_attr(AttrDict& dict, std::string name, Attr value) {
  for (NamedAttr& a : dict)
    if (a.name == name) {
      a.value = std::move(value);
      return;
    }
  dict.push_back({std::move(name), std::move(value)});
}

const Function* Module::find_function(std::string_view name) const {
  for (const Function& f : functions)
    if (f.name == name) return &f;
  return nullptr;
}
Function* Module::find_function(std::string_view name) {
  for (Function& f : functions)
    if (f.name == name) return &f;
  return nullptr;
}

}  // namespace hlx::shlo
