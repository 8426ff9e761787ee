#include "stablehlo/text_attr_printer.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/tensor.h"
#include "stablehlo/shape_inference.h"
#include "stablehlo/text_float.h"
#include "stablehlo/text_lexer.h"

namespace hlx::shlo::text {

bool is_bare_id(std::string_view s) {
  if (s.empty() || !is_id_start(s[0])) return false;
  for (char c : s)
    if (!is_id_char(c)) return false;
  return true;
}

std::string escape_string(std::string_view s) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out = "\"";
  for (char ch : s) {
    unsigned char c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += char(c);
    } else if (c >= 0x20 && c < 0x7f) {
      out += char(c);
    } else {
      out += '\\';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out + "\"";
}

std::string symbol_ref(std::string_view s) {
  return std::string("@").append(is_bare_id(s) ? std::string(s) : escape_string(s));
}

namespace {

uint64_t load_le(const std::vector<uint8_t>& bytes, size_t index, size_t size) {
  uint64_t v = 0;
  for (size_t b = 0; b < size; ++b) v |= uint64_t(bytes[index * size + b]) << (8 * b);
  return v;
}

std::string element(const DenseElements& d, size_t index) {
  DType t = d.type.dtype;
  size_t es = dtype_size(t);
  uint64_t raw = load_le(d.bytes, index, es);
  if (t == DType::kI1) return raw ? "true" : "false";
  if (is_float(t)) return format_float(raw, t);
  if (is_unsigned(t)) return std::to_string(raw);
  int bits = int(es * 8);
  int64_t v = bits == 64 ? int64_t(raw) : int64_t(raw << (64 - bits)) >> (64 - bits);
  return std::to_string(v);
}

std::string int_list(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

// "comparison_direction" -> ("stablehlo", "comparison_direction"); "chlo.x" -> ("chlo", "x").
std::pair<std::string, std::string> split_dialect(const std::string& name) {
  size_t dot = name.find('.');
  if (dot == std::string::npos) return {"stablehlo", name};
  return {name.substr(0, dot), name.substr(dot + 1)};
}

}  // namespace

std::string dense_literal(const DenseElements& d) {
  size_t es = dtype_size(d.type.dtype);
  size_t n = es ? d.bytes.size() / es : 0;
  Result<int64_t> expected = checked_num_elements(d.type.shape);
  // Malformed IR (byte count disagrees with the type): print the raw bytes, which the parser
  // rejects with a message naming both sizes, instead of reading out of bounds.
  bool consistent = expected.ok() && d.bytes.size() == size_t(*expected) * es;
  if (n == 0 && consistent) return "dense<>";
  if (!consistent) n = SIZE_MAX;
  bool splat = n != SIZE_MAX;
  for (size_t i = 1; i < n && splat; ++i) splat = std::memcmp(&d.bytes[i * es], d.bytes.data(), es) == 0;
  if (splat) return "dense<" + element(d, 0) + ">";
  if (n > 100) {
    // stablehlo-opt switches to the raw little-endian hex form above 100 elements.
    static const char* kHex = "0123456789ABCDEF";
    std::string s = "dense<\"0x";
    s.reserve(d.bytes.size() * 2 + 12);
    for (uint8_t b : d.bytes) {
      s += kHex[b >> 4];
      s += kHex[b & 15];
    }
    return s + "\">";
  }
  std::string s = "dense<";
  size_t next = 0;
  auto rec = [&](auto&& self, size_t dim) -> void {
    s += '[';
    for (int64_t i = 0; i < d.type.shape[dim]; ++i) {
      if (i) s += ", ";
      if (dim + 1 < d.type.shape.size())
        self(self, dim + 1);
      else
        s += element(d, next++);
    }
    s += ']';
  };
  rec(rec, 0);
  return s + ">";
}

std::string attr_dict(const AttrDict& dict, std::initializer_list<std::string_view> elided) {
  std::vector<const NamedAttr*> entries;
  for (const NamedAttr& a : dict)
    if (std::find(elided.begin(), elided.end(), a.name) == elided.end()) entries.push_back(&a);
  if (entries.empty()) return "";
  std::stable_sort(entries.begin(), entries.end(),
                   [](const NamedAttr* a, const NamedAttr* b) { return a->name < b->name; });
  std::string s = "{";
  for (size_t i = 0; i < entries.size(); ++i) {
    if (i) s += ", ";
    s += is_bare_id(entries[i]->name) ? entries[i]->name : escape_string(entries[i]->name);
    if (entries[i]->value.kind != Attr::Kind::kUnit) s += " = " + print_attr(entries[i]->value);
  }
  return s + "}";
}

namespace {

const char* const kConvFields[] = {
    "input_batch_dimension",          "input_feature_dimension",         "input_spatial_dimensions",
    "kernel_input_feature_dimension", "kernel_output_feature_dimension", "kernel_spatial_dimensions",
    "output_batch_dimension",         "output_feature_dimension",        "output_spatial_dimensions"};

// Fills `slots` (size 2 + spatial) with -1/-2 for the letters and spatial indices; false if the
// numbers do not form a permutation.
bool conv_slots(const Attr& dims, const char* a, const char* b, const char* sp, std::vector<int64_t>& slots) {
  const Attr* fa = dims.find(a);
  const Attr* fb = dims.find(b);
  const Attr* fs = dims.find(sp);
  if (!fa || !fb || !fs || fa->kind != Attr::Kind::kInt || fb->kind != Attr::Kind::kInt ||
      fs->kind != Attr::Kind::kI64Array)
    return false;
  size_t n = fs->ints.size() + 2;
  slots.assign(n, INT64_MIN);
  auto put = [&](int64_t pos, int64_t v) {
    if (pos < 0 || pos >= int64_t(n) || slots[size_t(pos)] != INT64_MIN) return false;
    slots[size_t(pos)] = v;
    return true;
  };
  if (!put(fa->i, -1) || !put(fb->i, -2)) return false;
  for (size_t k = 0; k < fs->ints.size(); ++k)
    if (!put(fs->ints[k], int64_t(k))) return false;
  return true;
}

std::string slots_str(const std::vector<int64_t>& slots, char a, char b) {
  std::string s = "[";
  for (size_t i = 0; i < slots.size(); ++i) {
    if (i) s += ", ";
    if (slots[i] == -1)
      s += a;
    else if (slots[i] == -2)
      s += b;
    else
      s += std::to_string(slots[i]);
  }
  return s + "]";
}

}  // namespace

bool conv_dims_printable(const Attr& dims) {
  if (dims.kind != Attr::Kind::kStruct || dims.name != "conv" || dims.dict.size() != 9) return false;
  std::vector<int64_t> s;
  return conv_slots(dims, kConvFields[0], kConvFields[1], kConvFields[2], s) &&
         conv_slots(dims, kConvFields[3], kConvFields[4], kConvFields[5], s) &&
         conv_slots(dims, kConvFields[6], kConvFields[7], kConvFields[8], s);
}

std::string conv_dims_compact(const Attr& dims) {
  std::vector<int64_t> in, k, out;
  conv_slots(dims, kConvFields[0], kConvFields[1], kConvFields[2], in);
  conv_slots(dims, kConvFields[3], kConvFields[4], kConvFields[5], k);
  conv_slots(dims, kConvFields[6], kConvFields[7], kConvFields[8], out);
  return slots_str(in, 'b', 'f') + "x" + slots_str(k, 'i', 'o') + "->" + slots_str(out, 'b', 'f');
}

std::string print_attr(const Attr& a) {
  switch (a.kind) {
    case Attr::Kind::kUnit:
      return "unit";
    case Attr::Kind::kBool:
      return a.b ? "true" : "false";
    case Attr::Kind::kInt:
      if (a.dtype == DType::kI1) return a.i ? "true" : "false";
      return std::to_string(a.i) + " : " + std::string(dtype_name(a.dtype));
    case Attr::Kind::kFloat: {
      DType t = is_float(a.dtype) ? a.dtype : DType::kF32;
      return format_float(double_to_float_bits(a.f, t), t) + " : " + std::string(dtype_name(t));
    }
    case Attr::Kind::kString:
      return escape_string(a.str);
    case Attr::Kind::kSymbol:
      return symbol_ref(a.str);
    case Attr::Kind::kI64Array: {
      if (a.ints.empty()) return "array<i64>";
      std::string s = "array<i64: ";
      for (size_t i = 0; i < a.ints.size(); ++i) s += (i ? ", " : "") + std::to_string(a.ints[i]);
      return s + ">";
    }
    case Attr::Kind::kBoolArray: {
      if (a.ints.empty()) return "array<i1>";
      std::string s = "array<i1: ";
      for (size_t i = 0; i < a.ints.size(); ++i) s += std::string(i ? ", " : "") + (a.ints[i] ? "true" : "false");
      return s + ">";
    }
    case Attr::Kind::kDense:
      if (!a.dense) return "dense<>";
      return dense_literal(*a.dense) + " : " + a.dense->type.to_string();
    case Attr::Kind::kArray: {
      std::string s = "[";
      for (size_t i = 0; i < a.list.size(); ++i) s += (i ? ", " : "") + print_attr(a.list[i]);
      return s + "]";
    }
    case Attr::Kind::kDict: {
      std::string s = attr_dict(a.dict);
      return s.empty() ? "{}" : s;
    }
    case Attr::Kind::kEnum: {
      auto [dialect, name] = split_dialect(a.name);
      return "#" + dialect + "<" + name + " " + a.str + ">";
    }
    case Attr::Kind::kStruct: {
      auto [dialect, name] = split_dialect(a.name);
      std::string s = "#" + dialect + "." + name + "<";
      if (dialect == "stablehlo" && name == "conv") {
        if (conv_dims_printable(a)) return s + conv_dims_compact(a) + ">";
        s += "raw ";
      }
      // gather/scatter/dot: MLIR's field order with empty arrays and zero integers left out, so
      // IR built with explicit empty fields prints the same as its re-parse.
      std::vector<const NamedAttr*> fields;
      const std::vector<std::string>* order = dimension_field_names(name);
      if (dialect == "stablehlo" && order) {
        for (const std::string& key : *order)
          for (const NamedAttr& f : a.dict)
            if (f.name == key && !(f.value.kind == Attr::Kind::kI64Array && f.value.ints.empty()) &&
                !(f.value.kind == Attr::Kind::kInt && f.value.i == 0))
              fields.push_back(&f);
        for (const NamedAttr& f : a.dict)
          if (std::find(order->begin(), order->end(), f.name) == order->end()) fields.push_back(&f);
      } else {
        for (const NamedAttr& f : a.dict) fields.push_back(&f);
      }
      for (size_t i = 0; i < fields.size(); ++i) {
        const Attr& v = fields[i]->value;
        s += (i ? ", " : "") + fields[i]->name + " = ";
        if (v.kind == Attr::Kind::kI64Array)
          s += int_list(v.ints);
        else if (v.kind == Attr::Kind::kInt)
          s += std::to_string(v.i);
        else
          s += print_attr(v);
      }
      return s + ">";
    }
    case Attr::Kind::kType:
      return a.type.to_string();
  }
  return "unit";
}

}  // namespace hlx::shlo::text
