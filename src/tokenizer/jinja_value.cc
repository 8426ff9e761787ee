// Values of the template language (Value, Dict) and what every part does with them: truthiness,
// equality, str()/repr()/tojson written as Python writes them; plus the UTF-8 code-point helpers.
#include <utf8proc.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "tokenizer/jinja_internal.h"

namespace hlx::jinja::internal {

std::string at(Pos p) { return str_cat("line ", p.line, ", column ", p.col, ": "); }

// ------------------------------------------------------------------------------------------------
// UTF-8 helpers: Python strings index by code point, so length/slicing/strip work on code points.

std::vector<int32_t> decode_utf8(const std::string& s) {
  std::vector<int32_t> out;
  out.reserve(s.size());
  const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(s.data());
  utf8proc_ssize_t n = static_cast<utf8proc_ssize_t>(s.size()), i = 0;
  while (i < n) {
    utf8proc_int32_t cp;
    utf8proc_ssize_t len = utf8proc_iterate(p + i, n - i, &cp);
    if (len <= 0) {  // invalid byte: keep it as a Latin-1-ish code unit so nothing is lost
      out.push_back(0xDC00 | p[i]);
      ++i;
      continue;
    }
    out.push_back(cp);
    i += len;
  }
  return out;
}

void append_utf8(std::string& out, int32_t cp) {
  if (cp >= 0xDC80 && cp <= 0xDCFF) {  // an undecodable byte carried through decode_utf8
    out.push_back(static_cast<char>(cp & 0xFF));
    return;
  }
  utf8proc_uint8_t buf[4];
  utf8proc_ssize_t n = utf8proc_encode_char(cp, buf);
  out.append(reinterpret_cast<char*>(buf), static_cast<size_t>(n));
}

std::string encode_utf8(const std::vector<int32_t>& cps, size_t b, size_t e) {
  std::string out;
  e = std::min(e, cps.size());
  for (size_t i = b; i < e; ++i) append_utf8(out, cps[i]);
  return out;
}

// Python's str.isspace() set.
bool py_space(int32_t c) {
  return (c >= 9 && c <= 13) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// ------------------------------------------------------------------------------------------------
// Values

Value make_dict(Dict d, Value::K k) {
  Value v = Value::make(k);
  v.dict = std::make_shared<Dict>(std::move(d));
  return v;
}

const char* type_name(const Value& v) {
  switch (v.k) {
    case Value::K::Undef:
      return "undefined";
    case Value::K::None:
      return "NoneType";
    case Value::K::Bool:
      return "bool";
    case Value::K::Int:
      return "int";
    case Value::K::Float:
      return "float";
    case Value::K::Str:
      return "str";
    case Value::K::List:
      return "list";
    case Value::K::Dict:
      return "dict";
    case Value::K::Ns:
      return "Namespace";
    case Value::K::Func:
      return "function";
  }
  return "?";
}

Value from_json(const nlohmann::ordered_json& j) {
  using J = nlohmann::ordered_json;
  switch (j.type()) {
    case J::value_t::null:
      return Value::none();
    case J::value_t::boolean:
      return Value::boolean(j.get<bool>());
    case J::value_t::number_integer:
      return Value::integer(j.get<int64_t>());
    case J::value_t::number_unsigned: {
      uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value::floating(static_cast<double>(u));
      return Value::integer(static_cast<int64_t>(u));
    }
    case J::value_t::number_float:
      return Value::floating(j.get<double>());
    case J::value_t::string:
      return Value::str(j.get<std::string>());
    case J::value_t::array: {
      List l;
      l.reserve(j.size());
      for (const auto& e : j) l.push_back(from_json(e));
      return Value::of_list(std::move(l));
    }
    case J::value_t::object: {
      Dict d;
      for (auto it = j.begin(); it != j.end(); ++it) d.items.emplace_back(it.key(), from_json(*it));
      return make_dict(std::move(d));
    }
    default:
      return Value::none();
  }
}

namespace {

// Python float repr: shortest digits that round-trip; fixed notation for 1e-4 <= |x| < 1e16.
std::string py_float(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  if (x == 0) return std::signbit(x) ? "-0.0" : "0.0";
  char buf[64];
  int prec = 1;
  for (; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof buf, "%.*e", prec - 1, x);
    if (std::strtod(buf, nullptr) == x) break;
  }
  std::string s(buf);
  bool neg = s[0] == '-';
  if (neg) s.erase(0, 1);
  size_t epos = s.find('e');
  int exp = std::atoi(s.c_str() + epos + 1);
  std::string digits;
  for (size_t i = 0; i < epos; ++i)
    if (s[i] != '.') digits.push_back(s[i]);
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  std::string out;
  if (exp >= -5 && exp < 16) {  // Python: repr uses 'r' format, scientific when exp < -4 or >= 16
    if (exp < -4) goto sci;
    if (exp >= 0) {
      if (static_cast<int>(digits.size()) <= exp + 1) {
        out = digits + std::string(static_cast<size_t>(exp + 1) - digits.size(), '0') + ".0";
      } else {
        out = digits.substr(0, static_cast<size_t>(exp + 1)) + "." + digits.substr(static_cast<size_t>(exp + 1));
      }
    } else {
      out = "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
    }
    return neg ? "-" + out : out;
  }
sci:
  out = digits.substr(0, 1);
  if (digits.size() > 1) {
    out += '.';
    out += digits.substr(1);
  }
  char eb[16];
  std::snprintf(eb, sizeof eb, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
  out += eb;
  return neg ? "-" + out : out;
}

std::string py_repr_str(const std::string& s) {
  bool has_sq = s.find('\'') != std::string::npos, has_dq = s.find('"') != std::string::npos;
  char q = (has_sq && !has_dq) ? '"' : '\'';
  std::string out(1, q);
  for (unsigned char c : s) {
    if (c == '\\')
      out += "\\\\";
    else if (c == static_cast<unsigned char>(q))
      out += std::string("\\") + q;
    else if (c == '\n')
      out += "\\n";
    else if (c == '\r')
      out += "\\r";
    else if (c == '\t')
      out += "\\t";
    else if (c < 0x20 || c == 0x7f) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      out += b;
    } else
      out.push_back(static_cast<char>(c));
  }
  out.push_back(q);
  return out;
}

}  // namespace

// str(v) as Python/Jinja render it.
std::string to_str(const Value& v) {
  switch (v.k) {
    case Value::K::Undef:
      return "";
    case Value::K::None:
      return "None";
    case Value::K::Bool:
      return v.b ? "True" : "False";
    case Value::K::Int:
      return std::to_string(v.i);
    case Value::K::Float:
      return py_float(v.f);
    case Value::K::Str:
      return v.s;
    case Value::K::List: {
      std::string out = "[";
      for (size_t i = 0; i < v.list->size(); ++i) {
        if (i) out += ", ";
        out += repr((*v.list)[i]);
      }
      return out + "]";
    }
    case Value::K::Dict: {
      std::string out = "{";
      bool first = true;
      for (const auto& kv : v.dict->items) {
        if (!first) out += ", ";
        first = false;
        out += py_repr_str(kv.first) + ": " + repr(kv.second);
      }
      return out + "}";
    }
    case Value::K::Ns: {
      std::string out = "<Namespace {";
      bool first = true;
      for (const auto& kv : v.dict->items) {
        if (!first) out += ", ";
        first = false;
        out += py_repr_str(kv.first) + ": " + repr(kv.second);
      }
      return out + "}>";
    }
    case Value::K::Func:
      return "<function>";
  }
  return "";
}

std::string repr(const Value& v) { return v.k == Value::K::Str ? py_repr_str(v.s) : to_str(v); }

bool truthy(const Value& v) {
  switch (v.k) {
    case Value::K::Undef:
    case Value::K::None:
      return false;
    case Value::K::Bool:
      return v.b;
    case Value::K::Int:
      return v.i != 0;
    case Value::K::Float:
      return v.f != 0;
    case Value::K::Str:
      return !v.s.empty();
    case Value::K::List:
      return !v.list->empty();
    case Value::K::Dict:
      return !v.dict->items.empty();
    default:
      return true;
  }
}

bool equal(const Value& a, const Value& b) {
  if (a.is_num() && b.is_num()) {
    if (a.is_intlike() && b.is_intlike()) return a.as_int() == b.as_int();
    return a.as_double() == b.as_double();
  }
  if (a.k != b.k) return false;
  switch (a.k) {
    case Value::K::Undef:
    case Value::K::None:
      return true;
    case Value::K::Str:
      return a.s == b.s;
    case Value::K::List:
      if (a.list->size() != b.list->size()) return false;
      for (size_t i = 0; i < a.list->size(); ++i)
        if (!equal((*a.list)[i], (*b.list)[i])) return false;
      return true;
    case Value::K::Dict:
      if (a.dict->items.size() != b.dict->items.size()) return false;
      for (const auto& kv : a.dict->items) {
        const Value* o = b.dict->find(kv.first);
        if (!o || !equal(kv.second, *o)) return false;
      }
      return true;
    default:
      return a.dict == b.dict && a.fn == b.fn;
  }
}

// JSON as Python's json.dumps(ensure_ascii=False) writes it (HF's tojson filter).
Status to_json(const Value& v, int indent, int level, bool sort_keys, std::string& out, int depth) {
  if (depth > 200) return make_error(ErrorKind::kOutOfRange, "tojson: value nested too deeply");
  auto newline = [&](int lvl) {
    if (indent < 0) return;
    out.push_back('\n');
    out.append(static_cast<size_t>(indent) * static_cast<size_t>(lvl), ' ');
  };
  auto str = [&](const std::string& s) {
    out.push_back('"');
    for (unsigned char c : s) {
      switch (c) {
        case '"':
          out += "\\\"";
          break;
        case '\\':
          out += "\\\\";
          break;
        case '\n':
          out += "\\n";
          break;
        case '\r':
          out += "\\r";
          break;
        case '\t':
          out += "\\t";
          break;
        case '\b':
          out += "\\b";
          break;
        case '\f':
          out += "\\f";
          break;
        default:
          if (c < 0x20) {
            char b[8];
            std::snprintf(b, sizeof b, "\\u%04x", c);
            out += b;
          } else
            out.push_back(static_cast<char>(c));
      }
    }
    out.push_back('"');
  };
  const char* item_sep = indent < 0 ? ", " : ",";
  switch (v.k) {
    case Value::K::None:
      out += "null";
      return ok_status();
    case Value::K::Bool:
      out += v.b ? "true" : "false";
      return ok_status();
    case Value::K::Int:
      out += std::to_string(v.i);
      return ok_status();
    case Value::K::Float:
      if (std::isnan(v.f))
        out += "NaN";
      else if (std::isinf(v.f))
        out += v.f > 0 ? "Infinity" : "-Infinity";
      else
        out += py_float(v.f);
      return ok_status();
    case Value::K::Str:
      str(v.s);
      return ok_status();
    case Value::K::List: {
      if (v.list->empty()) {
        out += "[]";
        return ok_status();
      }
      out.push_back('[');
      for (size_t i = 0; i < v.list->size(); ++i) {
        if (i) out += item_sep;
        newline(level + 1);
        HLX_RETURN_IF_ERROR(to_json((*v.list)[i], indent, level + 1, sort_keys, out, depth + 1));
      }
      newline(level);
      out.push_back(']');
      return ok_status();
    }
    case Value::K::Dict: {
      if (v.dict->items.empty()) {
        out += "{}";
        return ok_status();
      }
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& kv : v.dict->items) items.push_back(&kv);
      if (sort_keys) std::stable_sort(items.begin(), items.end(), [](auto* a, auto* b) { return a->first < b->first; });
      out.push_back('{');
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += item_sep;
        newline(level + 1);
        str(items[i]->first);
        out += ": ";
        HLX_RETURN_IF_ERROR(to_json(items[i]->second, indent, level + 1, sort_keys, out, depth + 1));
      }
      newline(level);
      out.push_back('}');
      return ok_status();
    }
    default:
      return make_error(ErrorKind::kInvalidArgument, "tojson: object of type ", type_name(v),
                        " is not JSON serializable");
  }
}

}  // namespace hlx::jinja::internal
