// Types (`tensor<2x3xbf16>`, function types) and attributes: builtin ones (integers, floats,
// strings, symbols, arrays, dictionaries, `array<i64: ...>`, `dense<...>`) and the StableHLO ones
// (`#stablehlo<comparison_direction GT>`, `#stablehlo.gather<...>`, `#stablehlo.conv<...>`).
#include <algorithm>
#include <cstring>

#include "core/tensor.h"
#include "stablehlo/shape_inference.h"
#include "stablehlo/text_float.h"
#include "stablehlo/text_parser.h"

namespace hlx::shlo::text {

namespace {

// RAII nesting counter; the parser checks `ok()` right after constructing it.
struct DepthGuard {
  int& d;
  explicit DepthGuard(int& depth) : d(depth) { ++d; }
  ~DepthGuard() { --d; }
  bool ok() const { return d <= kMaxNesting; }
};

void put_le(std::vector<uint8_t>& bytes, size_t index, uint64_t v, size_t size) {
  for (size_t b = 0; b < size; ++b) bytes[index * size + b] = uint8_t(v >> (8 * b));
}

}  // namespace

// Element types of the StableHLO spec (besides the ones hlx implements): refusing one of these is
// "unsupported", any other identifier is a parse error.
static bool is_stablehlo_element_type(std::string_view id) {
  static constexpr std::string_view kKnown[] = {
      "f64",      "ui16",       "ui32",          "ui64",     "i2",         "i4",        "ui2",    "ui4",
      "si8",      "complex",    "tf32",          "f4E2M1FN", "f6E2M3FN",   "f6E3M2FN",  "f8E3M4", "f8E4M3",
      "f8E4M3FN", "f8E4M3FNUZ", "f8E4M3B11FNUZ", "f8E5M2",   "f8E5M2FNUZ", "f8E8M0FNU", "index"};
  for (std::string_view k : kKnown)
    if (id == k) return true;
  return false;
}

Result<DType> TextParser::parse_element_type() {
  size_t at = sc_.pos();
  std::string_view id = sc_.bare_id();
  if (id.empty()) return sc_.error("expected element type, found ", sc_.found());
  if (std::optional<DType> t = dtype_from_name(id)) return *t;
  if (is_stablehlo_element_type(id))
    return sc_.unsupported_at(at, "unsupported element type '", id,
                              "' (hlx implements f32, f16, bf16, i64, i32, i16, i8, ui8, i1)");
  return sc_.error_at(at, "unsupported element type '", id,
                      "' (expected one of f32, f16, bf16, i64, i32, i16, i8, ui8, i1)");
}

Result<TensorType> TextParser::parse_tensor_type() {
  size_t at = sc_.pos();
  if (!sc_.try_keyword("tensor")) {
    std::string_view id = sc_.bare_id();
    sc_.set_pos(at);
    if (!id.empty() && dtype_from_name(id))
      return sc_.error("expected tensor type, found scalar type '", id, "' (use tensor<", id, ">)");
    return sc_.error("expected tensor type, found ", sc_.found());
  }
  HLX_RETURN_IF_ERROR(sc_.expect("<"));
  TensorType t;
  // Dimensions are `N x` prefixes; the element type follows the last 'x'.
  while (is_digit(sc_.peek()) || sc_.peek() == '?') {
    if (sc_.peek() == '?') return sc_.unsupported("dynamic dimensions ('?') are not supported");
    size_t dim_at = sc_.pos();
    int64_t d = 0;
    std::string_view text = sc_.text();
    size_t p = sc_.pos();
    while (p < text.size() && is_digit(text[p])) {
      if (d > (INT64_MAX - 9) / 10) return sc_.error_at(dim_at, "dimension size is too large");
      d = d * 10 + (text[p] - '0');
      ++p;
    }
    if (p >= text.size() || text[p] != 'x')
      return sc_.error_at(p, "expected 'x' after dimension ", d, " in tensor type");
    sc_.set_pos(p + 1);
    t.shape.push_back(d);
    if (t.shape.size() > 256) return sc_.error_at(dim_at, "tensor rank exceeds 256");
  }
  HLX_ASSIGN_OR_RETURN(t.dtype, parse_element_type());
  if (sc_.peek() == ',') return sc_.unsupported("tensor encodings are not supported");
  HLX_RETURN_IF_ERROR(sc_.expect(">"));
  Result<int64_t> n = checked_num_elements(t.shape);
  if (!n.ok()) return sc_.error_at(at, "invalid tensor type: ", n.status().message());
  return t;
}

Result<FunctionSig> TextParser::parse_function_type() {
  FunctionSig sig;
  HLX_RETURN_IF_ERROR(sc_.expect("("));
  if (!sc_.try_consume(")")) {
    do {
      HLX_ASSIGN_OR_RETURN(TensorType t, parse_tensor_type());
      sig.inputs.push_back(std::move(t));
    } while (sc_.try_consume(","));
    HLX_RETURN_IF_ERROR(sc_.expect(")"));
  }
  HLX_RETURN_IF_ERROR(sc_.expect("->"));
  HLX_ASSIGN_OR_RETURN(sig.results, parse_result_types());
  return sig;
}

Result<std::vector<TensorType>> TextParser::parse_result_types() {
  std::vector<TensorType> out;
  if (sc_.try_consume("(")) {
    if (sc_.try_consume(")")) return out;
    do {
      HLX_ASSIGN_OR_RETURN(TensorType t, parse_tensor_type());
      out.push_back(std::move(t));
    } while (sc_.try_consume(","));
    HLX_RETURN_IF_ERROR(sc_.expect(")"));
    return out;
  }
  HLX_ASSIGN_OR_RETURN(TensorType t, parse_tensor_type());
  out.push_back(std::move(t));
  return out;
}

Result<std::vector<int64_t>> TextParser::parse_int_list() {
  std::vector<int64_t> v;
  HLX_RETURN_IF_ERROR(sc_.expect("["));
  if (sc_.try_consume("]")) return v;
  do {
    HLX_ASSIGN_OR_RETURN(int64_t x, sc_.integer());
    v.push_back(x);
  } while (sc_.try_consume(","));
  HLX_RETURN_IF_ERROR(sc_.expect("]"));
  return v;
}

Status TextParser::skip_location() {
  if (!sc_.try_keyword("loc")) return ok_status();
  size_t at = sc_.pos();
  HLX_RETURN_IF_ERROR(sc_.expect("("));
  int level = 1;
  std::string_view text = sc_.text();
  size_t p = sc_.pos();
  while (p < text.size() && level > 0) {
    char c = text[p];
    if (c == '"') {
      sc_.set_pos(p);
      HLX_RETURN_IF_ERROR(sc_.string_literal().status());
      p = sc_.pos();
      continue;
    }
    if (c == '(') ++level;
    if (c == ')') --level;
    ++p;
  }
  if (level > 0) return sc_.error_at(at, "unterminated location 'loc('");
  sc_.set_pos(p);
  return ok_status();
}

Status TextParser::parse_optional_attr_dict(AttrDict& dict) {
  if (!sc_.try_consume("{")) return ok_status();
  HLX_ASSIGN_OR_RETURN(AttrDict more, parse_attr_dict_body());
  for (NamedAttr& a : more) {
    if (find_attr(dict, a.name)) return sc_.error("duplicate attribute '", a.name, "'");
    dict.push_back(std::move(a));
  }
  return ok_status();
}

Result<AttrDict> TextParser::parse_attr_dict_body() {
  DepthGuard g(depth_);
  if (!g.ok()) return sc_.error("attributes nested deeper than ", kMaxNesting);
  AttrDict dict;
  if (sc_.try_consume("}")) return dict;
  do {
    size_t at = sc_.pos();
    std::string name;
    if (sc_.peek() == '"') {
      HLX_ASSIGN_OR_RETURN(name, sc_.string_literal());
    } else {
      name = std::string(sc_.bare_id());
      if (name.empty()) return sc_.error("expected attribute name, found ", sc_.found());
    }
    if (find_attr(dict, name)) return sc_.error_at(at, "duplicate attribute '", name, "'");
    Attr value = Attr::unit();
    if (sc_.try_consume("=")) {
      HLX_ASSIGN_OR_RETURN(value, parse_attr());
    }
    dict.push_back({std::move(name), std::move(value)});
  } while (sc_.try_consume(","));
  HLX_RETURN_IF_ERROR(sc_.expect("}"));
  return dict;
}

Result<Attr> TextParser::parse_attr() {
  DepthGuard g(depth_);
  if (!g.ok()) return sc_.error("attributes nested deeper than ", kMaxNesting);
  size_t at = sc_.pos();
  char c = sc_.peek();
  if (sc_.try_keyword("true")) return Attr::boolean(true);
  if (sc_.try_keyword("false")) return Attr::boolean(false);
  if (sc_.try_keyword("unit")) return Attr::unit();
  if (c == '"') {
    HLX_ASSIGN_OR_RETURN(std::string s, sc_.string_literal());
    return Attr::string(std::move(s));
  }
  if (c == '@') {
    sc_.try_consume("@");
    if (sc_.pos() < sc_.text().size() && sc_.text()[sc_.pos()] == '"') {
      HLX_ASSIGN_OR_RETURN(std::string s, sc_.string_literal());
      return Attr::symbol(std::move(s));
    }
    std::string_view id = sc_.suffix_id();
    if (id.empty()) return sc_.error_at(at, "expected symbol name after '@'");
    if (sc_.starts_with("::")) return sc_.error("nested symbol references are not supported");
    return Attr::symbol(std::string(id));
  }
  if (c == '[') {
    sc_.try_consume("[");
    std::vector<Attr> list;
    if (!sc_.try_consume("]")) {
      do {
        HLX_ASSIGN_OR_RETURN(Attr a, parse_attr());
        list.push_back(std::move(a));
      } while (sc_.try_consume(","));
      HLX_RETURN_IF_ERROR(sc_.expect("]"));
    }
    return Attr::array(std::move(list));
  }
  if (c == '{') {
    sc_.try_consume("{");
    HLX_ASSIGN_OR_RETURN(AttrDict d, parse_attr_dict_body());
    return Attr::dictionary(std::move(d));
  }
  if (c == '#') return parse_hash_attr();
  if (sc_.try_keyword("dense")) return parse_dense_after_keyword(nullptr);
  if (sc_.try_keyword("array")) {
    HLX_RETURN_IF_ERROR(sc_.expect("<"));
    size_t type_at = sc_.pos();
    HLX_ASSIGN_OR_RETURN(DType t, parse_element_type());
    if (t != DType::kI64 && t != DType::kI1)
      return sc_.error_at(type_at, "only array<i64: ...> and array<i1: ...> are supported");
    std::vector<int64_t> v;
    if (sc_.try_consume(":")) {
      do {
        if (t == DType::kI1) {
          if (sc_.try_keyword("true"))
            v.push_back(1);
          else if (sc_.try_keyword("false"))
            v.push_back(0);
          else
            return sc_.error("expected true or false in array<i1: ...>, found ", sc_.found());
        } else {
          HLX_ASSIGN_OR_RETURN(int64_t x, sc_.integer());
          v.push_back(x);
        }
      } while (sc_.try_consume(","));
    }
    HLX_RETURN_IF_ERROR(sc_.expect(">"));
    Attr a = t == DType::kI64 ? Attr::i64_array(std::move(v)) : Attr::bool_array({});
    if (t == DType::kI1) a.ints = std::move(v);
    return a;
  }
  if (sc_.starts_with("tensor")) {
    HLX_ASSIGN_OR_RETURN(TensorType t, parse_tensor_type());
    return Attr::type_attr(std::move(t));
  }
  if (sc_.at_number()) {
    size_t num_at = sc_.pos();
    HLX_ASSIGN_OR_RETURN(std::string_view spelling, sc_.number_spelling());
    bool is_float_spelling = spelling.find('.') != std::string_view::npos;
    DType t = is_float_spelling ? DType::kF32 : DType::kI64;
    bool typed = false;
    if (sc_.try_consume(":")) {
      size_t type_at = sc_.pos();
      if (sc_.try_keyword("index")) {
        t = DType::kI64;
      } else if (sc_.try_keyword("f64")) {
        return sc_.unsupported_at(type_at, "f64 attributes are not supported");
      } else {
        HLX_ASSIGN_OR_RETURN(t, parse_element_type());
      }
      typed = true;
    }
    if (is_float_spelling && !is_float(t))
      return sc_.error_at(num_at, "float literal '", spelling, "' with integer type ", dtype_name(t));
    if (is_float(t)) {
      if (!typed && is_float_spelling)
        return sc_.unsupported_at(num_at, "untyped float attribute '", spelling, "' is f64, which is not supported");
      std::optional<uint64_t> bits = parse_float_bits(spelling, t);
      if (!bits) return sc_.error_at(num_at, "invalid ", dtype_name(t), " literal '", spelling, "'");
      return Attr::floating(float_bits_to_double(*bits, t), t);
    }
    size_t save = sc_.pos();
    sc_.set_pos(num_at);
    HLX_ASSIGN_OR_RETURN(int64_t v, sc_.integer());
    sc_.set_pos(save);
    if (t == DType::kI1) {
      if (v != 0 && v != 1) return sc_.error_at(num_at, "value ", v, " does not fit i1");
      return Attr::boolean(v != 0);
    }
    return Attr::integer(v, t);
  }
  return sc_.error("expected attribute value, found ", sc_.found());
}

Result<Attr> TextParser::parse_hash_attr() {
  size_t at = sc_.pos();
  HLX_RETURN_IF_ERROR(sc_.expect("#"));
  std::string_view id = sc_.suffix_id();
  if (id.empty()) return sc_.error_at(at, "expected attribute name after '#'");
  size_t dot = id.find('.');
  std::string dialect(id.substr(0, dot));
  std::string mnemonic = dot == std::string_view::npos ? "" : std::string(id.substr(dot + 1));
  // `#name` without `<...>` is an alias defined at the top of the file.
  if (sc_.text().substr(sc_.pos()).empty() || sc_.text()[sc_.pos()] != '<') {
    auto it = aliases_.find(id);
    if (it == aliases_.end()) return sc_.error_at(at, "undefined attribute alias '#", id, "'");
    return it->second;
  }
  // Names keep their dialect when it is not stablehlo: "chlo.comparison_direction".
  auto qualify = [&](std::string n) { return dialect == "stablehlo" ? n : dialect + "." + n; };
  sc_.try_consume("<");
  if (mnemonic.empty()) {
    // Enum: #stablehlo<comparison_direction GT>
    std::string enum_name(sc_.bare_id());
    if (enum_name.empty()) return sc_.error("expected enum name in '#", id, "<...>', found ", sc_.found());
    std::string value(sc_.bare_id());
    if (value.empty()) return sc_.error("expected value of enum '", enum_name, "', found ", sc_.found());
    HLX_RETURN_IF_ERROR(sc_.expect(">"));
    return Attr::enumeration(qualify(enum_name), value);
  }
  if (mnemonic == "conv" && dialect == "stablehlo") {
    if (!sc_.try_keyword("raw")) {
      HLX_ASSIGN_OR_RETURN(Attr a, parse_conv_dims_compact());
      HLX_RETURN_IF_ERROR(sc_.expect(">"));
      return a;
    }
  }
  // Struct: #stablehlo.gather<offset_dims = [1], index_vector_dim = 1>
  AttrDict fields;
  if (!sc_.try_consume(">")) {
    do {
      size_t field_at = sc_.pos();
      std::string key(sc_.bare_id());
      if (key.empty()) return sc_.error("expected field name in '#", id, "<...>', found ", sc_.found());
      if (find_attr(fields, key)) return sc_.error_at(field_at, "duplicated `", key, "` entry");
      HLX_RETURN_IF_ERROR(sc_.expect("="));
      Attr v;
      if (sc_.peek() == '[') {
        size_t save = sc_.pos();
        Result<std::vector<int64_t>> ints = parse_int_list();
        if (ints.ok()) {
          v = Attr::i64_array(std::move(ints).value());
        } else {
          sc_.set_pos(save);
          HLX_ASSIGN_OR_RETURN(v, parse_attr());
        }
      } else if (sc_.at_number()) {
        HLX_ASSIGN_OR_RETURN(int64_t x, sc_.integer());
        v = Attr::integer(x);
      } else {
        HLX_ASSIGN_OR_RETURN(v, parse_attr());
      }
      fields.push_back({std::move(key), std::move(v)});
    } while (sc_.try_consume(","));
    HLX_RETURN_IF_ERROR(sc_.expect(">"));
  }
  // Canonical form of the dimension-number structs: MLIR's field order, empty arrays and zero
  // integers omitted (exactly what stablehlo-opt prints).
  const std::vector<std::string>* order = dimension_field_names(mnemonic);
  if (dialect == "stablehlo" && order) {
    AttrDict canonical;
    for (const std::string& key : *order) {
      const Attr* v = find_attr(fields, key);
      if (!v) continue;
      bool is_index = key == "index_vector_dim";
      if (is_index ? v->kind != Attr::Kind::kInt : v->kind != Attr::Kind::kI64Array)
        return sc_.error_at(at, "field '", key, "' of #stablehlo.", mnemonic, " must be ",
                            is_index ? "an integer" : "a list of integers");
      if (is_index ? v->i == 0 : v->ints.empty()) continue;
      canonical.push_back({key, *v});
    }
    for (const NamedAttr& f : fields)
      if (std::find(order->begin(), order->end(), f.name) == order->end())
        return sc_.error_at(at, "unknown field '", f.name, "' in #stablehlo.", mnemonic);
    fields = std::move(canonical);
  }
  return Attr::structure(qualify(mnemonic), std::move(fields));
}

Result<Attr> TextParser::parse_conv_dims_compact() {
  // Each list holds the non-spatial letters plus spatial indices 0..n-1, each exactly once.
  struct Parsed {
    int64_t a = -1, b = -1;
    std::vector<int64_t> spatial;
  };
  auto one = [&](char la, char lb) -> Result<Parsed> {
    size_t at = sc_.pos();
    HLX_RETURN_IF_ERROR(sc_.expect("["));
    std::vector<int64_t> slots;  // -1 = la, -2 = lb, >= 0 spatial index
    if (!sc_.try_consume("]")) {
      do {
        if (slots.size() > 256) return sc_.error_at(at, "convolution dimension list is too long");
        if (sc_.at_number()) {
          HLX_ASSIGN_OR_RETURN(int64_t v, sc_.integer());
          slots.push_back(v);
        } else {
          std::string_view id = sc_.bare_id();
          if (id.size() == 1 && id[0] == la)
            slots.push_back(-1);
          else if (id.size() == 1 && id[0] == lb)
            slots.push_back(-2);
          else
            return sc_.error("expected '", la, "', '", lb, "' or a spatial index in convolution dimensions, found '",
                             id, "'");
        }
      } while (sc_.try_consume(","));
      HLX_RETURN_IF_ERROR(sc_.expect("]"));
    }
    Parsed p;
    size_t n_spatial = 0;
    for (int64_t s : slots) n_spatial += s >= 0;
    p.spatial.assign(n_spatial, -1);
    for (size_t pos = 0; pos < slots.size(); ++pos) {
      int64_t s = slots[pos];
      int64_t& dst = s == -1 ? p.a : s == -2 ? p.b : (s < int64_t(n_spatial) ? p.spatial[size_t(s)] : p.a);
      if (s >= int64_t(n_spatial))
        return sc_.error_at(at, "spatial index ", s, " out of range for ", n_spatial, " spatial dimensions");
      if (dst != -1) return sc_.error_at(at, "convolution dimension listed twice");
      dst = int64_t(pos);
    }
    if (p.a < 0 || p.b < 0) return sc_.error_at(at, "convolution dimensions must contain '", la, "' and '", lb, "'");
    return p;
  };
  HLX_ASSIGN_OR_RETURN(Parsed in, one('b', 'f'));
  HLX_RETURN_IF_ERROR(sc_.expect("x"));
  HLX_ASSIGN_OR_RETURN(Parsed k, one('i', 'o'));
  HLX_RETURN_IF_ERROR(sc_.expect("->"));
  HLX_ASSIGN_OR_RETURN(Parsed out, one('b', 'f'));
  return Attr::structure("conv", {{"input_batch_dimension", Attr::integer(in.a)},
                                  {"input_feature_dimension", Attr::integer(in.b)},
                                  {"input_spatial_dimensions", Attr::i64_array(in.spatial)},
                                  {"kernel_input_feature_dimension", Attr::integer(k.a)},
                                  {"kernel_output_feature_dimension", Attr::integer(k.b)},
                                  {"kernel_spatial_dimensions", Attr::i64_array(k.spatial)},
                                  {"output_batch_dimension", Attr::integer(out.a)},
                                  {"output_feature_dimension", Attr::integer(out.b)},
                                  {"output_spatial_dimensions", Attr::i64_array(out.spatial)}});
}

namespace {

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

// `dense<...> : tensor<...>`: a splat, a nested list matching the shape, `"0x..."` raw
// little-endian bytes (full or one element = splat), or `<>` for zero elements.
Result<Attr> TextParser::parse_dense_after_keyword(const TensorType* known_type) {
  size_t at = sc_.pos();
  HLX_RETURN_IF_ERROR(sc_.expect("<"));
  // The type comes after the literal, so remember where the literal is and parse it afterwards.
  size_t literal_at = sc_.pos();
  int level = 0;
  {
    std::string_view text = sc_.text();
    size_t p = literal_at;
    for (; p < text.size(); ++p) {
      char c = text[p];
      if (c == '"') {
        ++p;
        while (p < text.size() && text[p] != '"' && text[p] != '\n') ++p;
        continue;
      }
      if (c == '[') ++level;
      if (c == ']') --level;
      if (c == '>' && level <= 0) break;
      if (c == '<' || c == '{' || c == ';') return sc_.error_at(p, "unexpected '", c, "' in dense literal");
    }
    if (p >= text.size()) return sc_.error_at(at, "unterminated dense literal");
    sc_.set_pos(p + 1);
  }
  size_t literal_end = sc_.pos() - 1;
  TensorType type;
  if (known_type) {
    type = *known_type;
  } else {
    HLX_RETURN_IF_ERROR(sc_.expect(":"));
    HLX_ASSIGN_OR_RETURN(type, parse_tensor_type());
  }
  size_t after_type = sc_.pos();
  Result<int64_t> count = checked_num_elements(type.shape);
  if (!count.ok()) return sc_.error_at(at, count.status().message());
  int64_t n = *count;
  size_t esize = dtype_size(type.dtype);
  if (n > kMaxDenseBytes / int64_t(esize))
    return sc_.error_at(at, "dense constant of type ", type.to_string(), " exceeds the ", kMaxDenseBytes,
                        "-byte limit");
  DenseElements dense;
  dense.type = type;
  dense.bytes.assign(size_t(n) * esize, 0);

  // One element at the cursor into slot `index`.
  auto element = [&](size_t index) -> Status {
    size_t el_at = sc_.pos();
    DType t = type.dtype;
    if (t == DType::kI1) {
      uint64_t v;
      if (sc_.try_keyword("true"))
        v = 1;
      else if (sc_.try_keyword("false"))
        v = 0;
      else {
        HLX_ASSIGN_OR_RETURN(int64_t x, sc_.integer());
        if (x != 0 && x != 1) return sc_.error_at(el_at, "value ", x, " does not fit i1");
        v = uint64_t(x);
      }
      put_le(dense.bytes, index, v, 1);
      return ok_status();
    }
    if (is_float(t)) {
      std::string spelling;
      bool neg = sc_.try_consume("-");
      if (sc_.try_keyword("inf"))
        spelling = "inf";
      else if (sc_.try_keyword("nan"))
        spelling = "nan";
      else {
        if (neg) sc_.set_pos(sc_.pos() - 1);
        if (!sc_.at_number()) return sc_.error("expected ", dtype_name(t), " element, found ", sc_.found());
        HLX_ASSIGN_OR_RETURN(std::string_view s, sc_.number_spelling());
        spelling = std::string(s);
        neg = false;
      }
      if (neg) spelling = "-" + spelling;
      std::optional<uint64_t> bits = parse_float_bits(spelling, t);
      if (!bits) return sc_.error_at(el_at, "invalid ", dtype_name(t), " element '", spelling, "'");
      put_le(dense.bytes, index, *bits, esize);
      return ok_status();
    }
    if (sc_.try_keyword("true") || sc_.try_keyword("false"))
      return sc_.error_at(el_at, "boolean element for ", dtype_name(t), " constant");
    HLX_ASSIGN_OR_RETURN(int64_t x, sc_.integer());
    int bits = dtype_bits(t);
    bool fits = bits == 64 || (is_unsigned(t) ? (x >= 0 && x < (int64_t(1) << bits))
                                              : (x >= -(int64_t(1) << (bits - 1)) && x < (int64_t(1) << bits)));
    if (!fits) return sc_.error_at(el_at, "value ", x, " does not fit ", dtype_name(t));
    put_le(dense.bytes, index, uint64_t(x), esize);
    return ok_status();
  };

  sc_.set_pos(literal_at);
  char c = sc_.peek();
  if (sc_.pos() == literal_end) {
    if (n != 0) return sc_.error_at(at, "empty dense literal for ", type.to_string(), " with ", n, " elements");
  } else if (c == '"') {
    HLX_ASSIGN_OR_RETURN(std::string hex, sc_.string_literal());
    if (!hex.starts_with("0x")) return sc_.error_at(literal_at, "dense string literal must start with \"0x\"");
    size_t digits = hex.size() - 2;
    if (digits % 2) return sc_.error_at(literal_at, "odd number of hex digits in dense literal");
    size_t nbytes = digits / 2;
    std::vector<uint8_t> raw(nbytes);
    for (size_t i = 0; i < nbytes; ++i) {
      int hi = hex_digit(hex[2 + 2 * i]), lo = hex_digit(hex[3 + 2 * i]);
      if (hi < 0 || lo < 0) return sc_.error_at(literal_at, "invalid hex digit in dense literal");
      raw[i] = uint8_t(hi * 16 + lo);
    }
    if (nbytes == dense.bytes.size()) {
      dense.bytes = std::move(raw);
    } else if (nbytes == esize && n > 0) {
      for (int64_t i = 0; i < n; ++i) std::memcpy(&dense.bytes[size_t(i) * esize], raw.data(), esize);
    } else {
      return sc_.error_at(literal_at, "dense hex literal has ", nbytes, " bytes, expected ", dense.bytes.size(),
                          " for ", type.to_string(), " (or ", esize, " for a splat)");
    }
    if (type.dtype == DType::kI1)
      for (uint8_t& b : dense.bytes) b = b ? 1 : 0;
  } else if (c != '[') {
    if (n == 0) return sc_.error_at(literal_at, "splat value for zero-element type ", type.to_string());
    HLX_RETURN_IF_ERROR(element(0));
    for (int64_t i = 1; i < n; ++i) std::memcpy(&dense.bytes[size_t(i) * esize], dense.bytes.data(), esize);
  } else {
    // Nested list: depth == rank, each level's length == that dimension.
    size_t next = 0;
    auto list = [&](auto&& self, size_t dim) -> Status {
      size_t list_at = sc_.pos();
      if (dim >= type.shape.size())
        return sc_.error("dense literal nests deeper than the rank ", type.rank(), " of ", type.to_string());
      HLX_RETURN_IF_ERROR(sc_.expect("["));
      int64_t count = 0;
      if (!sc_.try_consume("]")) {
        do {
          if (count >= type.shape[dim])
            return sc_.error_at(list_at, "dense literal has more than ", type.shape[dim], " elements in dimension ",
                                dim, " of ", type.to_string());
          if (dim + 1 < type.shape.size()) {
            HLX_RETURN_IF_ERROR(self(self, dim + 1));
          } else {
            if (sc_.peek() == '[')
              return sc_.error("dense literal nests deeper than the rank ", type.rank(), " of ", type.to_string());
            HLX_RETURN_IF_ERROR(element(next++));
          }
          ++count;
        } while (sc_.try_consume(","));
        HLX_RETURN_IF_ERROR(sc_.expect("]"));
      }
      if (count != type.shape[dim])
        return sc_.error_at(list_at, "dense literal has ", count, " elements in dimension ", dim, ", expected ",
                            type.shape[dim], " for ", type.to_string());
      return ok_status();
    };
    if (type.shape.empty()) return sc_.error("list literal for rank-0 type ", type.to_string());
    HLX_RETURN_IF_ERROR(list(list, 0));
  }
  if (sc_.pos() != literal_end) {
    sc_.skip_ws();
    if (sc_.pos() != literal_end) return sc_.error("expected '>' to end dense literal, found ", sc_.found());
  }
  sc_.set_pos(after_type);
  return Attr::dense_elements(std::move(dense));
}

}  // namespace hlx::shlo::text
