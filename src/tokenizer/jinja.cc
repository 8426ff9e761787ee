// Jinja2 subset: lexer -> token list -> statement/expression tree -> tree-walking renderer.
// Behaviour is checked byte-for-byte against python3-jinja2 (tests/tokenizer/
// test_chat_template_reference.py); comments cite the jinja2 behaviour being mirrored.
#include "tokenizer/jinja.h"

#include <utf8proc.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <unordered_map>
#include <vector>

namespace hlx::jinja {

bool is_raised_exception(const Status& status) {
  return !status.ok() && status.message().rfind(kRaisedPrefix, 0) == 0;
}

namespace {

struct Pos {
  int line = 1, col = 1;
};

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

std::string encode_utf8(const std::vector<int32_t>& cps, size_t b = 0, size_t e = SIZE_MAX) {
  std::string out;
  e = std::min(e, cps.size());
  for (size_t i = b; i < e; ++i) append_utf8(out, cps[i]);
  return out;
}

// Python's str.isspace() set.
bool py_space(int32_t c) {
  return (c >= 9 && c <= 13) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
         c == 0x202F || c == 0x205F || c == 0x3000;
}

// ------------------------------------------------------------------------------------------------
// Values

struct Value;
using List = std::vector<Value>;
struct Dict;
struct CallArgs;
class Renderer;
using Func = std::function<Result<Value>(Renderer&, CallArgs&, Pos)>;

struct Value {
  enum class K { Undef, None, Bool, Int, Float, Str, List, Dict, Ns, Func };
  K k = K::Undef;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;  // Str; for Undef, why it is undefined (for error messages)
  std::shared_ptr<const List> list;
  std::shared_ptr<Dict> dict;  // Dict (never mutated after construction) or Ns (mutable)
  std::shared_ptr<const Func> fn;

  static Value undef(std::string why) {
    Value v;
    v.s = std::move(why);
    return v;
  }
  static Value none() { return make(K::None); }
  static Value boolean(bool x) {
    Value v = make(K::Bool);
    v.b = x;
    return v;
  }
  static Value integer(int64_t x) {
    Value v = make(K::Int);
    v.i = x;
    return v;
  }
  static Value floating(double x) {
    Value v = make(K::Float);
    v.f = x;
    return v;
  }
  static Value str(std::string x) {
    Value v = make(K::Str);
    v.s = std::move(x);
    return v;
  }
  static Value of_list(List x) {
    Value v = make(K::List);
    v.list = std::make_shared<const List>(std::move(x));
    return v;
  }
  static Value func(Func x) {
    Value v = make(K::Func);
    v.fn = std::make_shared<const Func>(std::move(x));
    return v;
  }
  static Value make(K k) {
    Value v;
    v.k = k;
    return v;
  }
  bool is_num() const { return k == K::Int || k == K::Float || k == K::Bool; }
  bool is_intlike() const { return k == K::Int || k == K::Bool; }
  int64_t as_int() const { return k == K::Bool ? (b ? 1 : 0) : i; }
  double as_double() const { return k == K::Float ? f : static_cast<double>(as_int()); }
};

struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  const Value* find(const std::string& key) const {
    for (const auto& kv : items)
      if (kv.first == key) return &kv.second;
    return nullptr;
  }
  void set(const std::string& key, Value v) {
    for (auto& kv : items)
      if (kv.first == key) {
        kv.second = std::move(v);
        return;
      }
    items.emplace_back(key, std::move(v));
  }
};

Value make_dict(Dict d, Value::K k = Value::K::Dict) {
  Value v = Value::make(k);
  v.dict = std::make_shared<Dict>(std::move(d));
  return v;
}

struct CallArgs {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
  // Positional argument i, else keyword `name`, else nullptr.
  const Value* get(size_t i, const char* name) const {
    if (i < pos.size()) return &pos[i];
    for (const auto& kv : kw)
      if (kv.first == name) return &kv.second;
    return nullptr;
  }
};

const char* type_name(const Value& v) {
  switch (v.k) {
    case Value::K::Undef: return "undefined";
    case Value::K::None: return "NoneType";
    case Value::K::Bool: return "bool";
    case Value::K::Int: return "int";
    case Value::K::Float: return "float";
    case Value::K::Str: return "str";
    case Value::K::List: return "list";
    case Value::K::Dict: return "dict";
    case Value::K::Ns: return "Namespace";
    case Value::K::Func: return "function";
  }
  return "?";
}

Value from_json(const nlohmann::ordered_json& j) {
  using J = nlohmann::ordered_json;
  switch (j.type()) {
    case J::value_t::null: return Value::none();
    case J::value_t::boolean: return Value::boolean(j.get<bool>());
    case J::value_t::number_integer: return Value::integer(j.get<int64_t>());
    case J::value_t::number_unsigned: {
      uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value::floating(static_cast<double>(u));
      return Value::integer(static_cast<int64_t>(u));
    }
    case J::value_t::number_float: return Value::floating(j.get<double>());
    case J::value_t::string: return Value::str(j.get<std::string>());
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
    default: return Value::none();
  }
}

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
        out = digits.substr(0, static_cast<size_t>(exp + 1)) + "." +
              digits.substr(static_cast<size_t>(exp + 1));
      }
    } else {
      out = "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
    }
    return neg ? "-" + out : out;
  }
sci:
  out = digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
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
    if (c == '\\') out += "\\\\";
    else if (c == static_cast<unsigned char>(q)) out += std::string("\\") + q;
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7f) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      out += b;
    } else out.push_back(static_cast<char>(c));
  }
  out.push_back(q);
  return out;
}

std::string repr(const Value& v);

// str(v) as Python/Jinja render it.
std::string to_str(const Value& v) {
  switch (v.k) {
    case Value::K::Undef: return "";
    case Value::K::None: return "None";
    case Value::K::Bool: return v.b ? "True" : "False";
    case Value::K::Int: return std::to_string(v.i);
    case Value::K::Float: return py_float(v.f);
    case Value::K::Str: return v.s;
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
    case Value::K::Func: return "<function>";
  }
  return "";
}

std::string repr(const Value& v) { return v.k == Value::K::Str ? py_repr_str(v.s) : to_str(v); }

bool truthy(const Value& v) {
  switch (v.k) {
    case Value::K::Undef:
    case Value::K::None: return false;
    case Value::K::Bool: return v.b;
    case Value::K::Int: return v.i != 0;
    case Value::K::Float: return v.f != 0;
    case Value::K::Str: return !v.s.empty();
    case Value::K::List: return !v.list->empty();
    case Value::K::Dict: return !v.dict->items.empty();
    default: return true;
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
    case Value::K::None: return true;
    case Value::K::Str: return a.s == b.s;
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
    default: return a.dict == b.dict && a.fn == b.fn;
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
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        case '\b': out += "\\b"; break;
        case '\f': out += "\\f"; break;
        default:
          if (c < 0x20) {
            char b[8];
            std::snprintf(b, sizeof b, "\\u%04x", c);
            out += b;
          } else out.push_back(static_cast<char>(c));
      }
    }
    out.push_back('"');
  };
  const char* item_sep = indent < 0 ? ", " : ",";
  switch (v.k) {
    case Value::K::None: out += "null"; return ok_status();
    case Value::K::Bool: out += v.b ? "true" : "false"; return ok_status();
    case Value::K::Int: out += std::to_string(v.i); return ok_status();
    case Value::K::Float:
      if (std::isnan(v.f)) out += "NaN";
      else if (std::isinf(v.f)) out += v.f > 0 ? "Infinity" : "-Infinity";
      else out += py_float(v.f);
      return ok_status();
    case Value::K::Str: str(v.s); return ok_status();
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
      if (sort_keys)
        std::stable_sort(items.begin(), items.end(),
                         [](auto* a, auto* b) { return a->first < b->first; });
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

// ------------------------------------------------------------------------------------------------
// Lexer

enum class T { Text, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, Str, Int, Float, Op, Eof };

struct Token {
  T type;
  std::string text;  // Text data, name, string value, operator
  int64_t i = 0;
  double f = 0;
  Pos pos;
};

class Lexer {
 public:
  Lexer(std::string src, const Options& opt) : src_(std::move(src)), opt_(opt) {
    for (size_t i = 0; i < src_.size(); ++i)
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
  }

  Result<std::vector<Token>> run() {
    size_t p = 0, n = src_.size();
    while (p < n) {
      size_t tag = p;
      while (true) {
        tag = src_.find('{', tag);
        if (tag == std::string::npos || tag + 1 >= n) {
          tag = std::string::npos;
          break;
        }
        char c = src_[tag + 1];
        if (c == '{' || c == '%' || c == '#') break;
        ++tag;
      }
      if (tag == std::string::npos) {
        emit_text(src_.substr(p), p);
        break;
      }
      std::string text = src_.substr(p, tag - p);
      char kind = src_[tag + 1];
      size_t q = tag + 2;
      char mod = (q < n && (src_[q] == '-' || src_[q] == '+')) ? src_[q] : 0;
      if (mod) ++q;
      if (mod == '-') {
        text = rstrip_ws(text);
      } else if (mod != '+' && opt_.lstrip_blocks && kind != '{') {
        // jinja2: strip spaces before the tag when only whitespace precedes it on its line.
        size_t l = text.rfind('\n');
        size_t lpos = l == std::string::npos ? 0 : l + 1;
        bool line_starting = p == 0 || src_[p - 1] == '\n';
        if (lpos > 0 || line_starting) {
          bool all_ws = true;
          for (size_t i = lpos; i < text.size(); ++i)
            if (!(text[i] == ' ' || text[i] == '\t' || text[i] == '\r' || text[i] == '\v' ||
                  text[i] == '\f'))
              all_ws = false;
          if (all_ws) text.resize(lpos);
        }
      }
      emit_text(std::move(text), p);
      if (kind == '#') {
        size_t end = src_.find("#}", q);
        if (end == std::string::npos)
          return make_error(ErrorKind::kParse, at(pos(tag)), "unclosed comment '{#'");
        bool strip = end > q && src_[end - 1] == '-';
        p = end + 2;
        p = after_tag(p, strip);
        continue;
      }
      bool block = kind == '%';
      toks_.push_back({block ? T::BlockBegin : T::VarBegin, "", 0, 0, pos(tag)});
      HLX_ASSIGN_OR_RETURN(p, lex_tag(q, block));
    }
    toks_.push_back({T::Eof, "", 0, 0, pos(n)});
    return std::move(toks_);
  }

 private:
  Pos pos(size_t off) const {
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), off);
    Pos p;
    p.line = static_cast<int>(it - line_starts_.begin()) + 1;
    size_t ls = it == line_starts_.begin() ? 0 : *(it - 1);
    p.col = static_cast<int>(off - ls) + 1;
    return p;
  }

  static bool ascii_ws(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
  }

  static std::string rstrip_ws(const std::string& s) {
    std::vector<int32_t> cps = decode_utf8(s);
    size_t e = cps.size();
    while (e > 0 && py_space(cps[e - 1])) --e;
    return encode_utf8(cps, 0, e);
  }

  void emit_text(std::string text, size_t off) {
    if (!text.empty()) toks_.push_back({T::Text, std::move(text), 0, 0, pos(off)});
  }

  // After a closing tag: '-' strips all following whitespace, trim_blocks one newline.
  size_t after_tag(size_t p, bool strip, bool block = true) {
    if (strip) {
      while (p < src_.size() && ascii_ws(src_[p])) ++p;
    } else if (block && opt_.trim_blocks && p < src_.size() && src_[p] == '\n') {
      ++p;
    }
    return p;
  }

  Result<size_t> lex_tag(size_t p, bool block) {
    const std::string end = block ? "%}" : "}}";
    size_t n = src_.size();
    while (true) {
      while (p < n && ascii_ws(src_[p])) ++p;
      if (p >= n)
        return make_error(ErrorKind::kParse, at(pos(p)), "unexpected end of template, expected '",
                          end, "'");
      if (src_.compare(p, 2, end) == 0 || (src_[p] == '-' && src_.compare(p + 1, 2, end) == 0)) {
        bool strip = src_[p] == '-';
        toks_.push_back({block ? T::BlockEnd : T::VarEnd, "", 0, 0, pos(p)});
        return after_tag(p + (strip ? 3 : 2), strip, block);
      }
      char c = src_[p];
      Pos ps = pos(p);
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t b = p;
        while (p < n && (std::isalnum(static_cast<unsigned char>(src_[p])) || src_[p] == '_')) ++p;
        toks_.push_back({T::Name, src_.substr(b, p - b), 0, 0, ps});
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        size_t b = p;
        while (p < n && (std::isdigit(static_cast<unsigned char>(src_[p])) || src_[p] == '_')) ++p;
        bool is_float = false;
        if (p + 1 < n && src_[p] == '.' && std::isdigit(static_cast<unsigned char>(src_[p + 1]))) {
          is_float = true;
          ++p;
          while (p < n && std::isdigit(static_cast<unsigned char>(src_[p]))) ++p;
        }
        if (p < n && (src_[p] == 'e' || src_[p] == 'E')) {
          size_t e = p + 1;
          if (e < n && (src_[e] == '+' || src_[e] == '-')) ++e;
          if (e < n && std::isdigit(static_cast<unsigned char>(src_[e]))) {
            is_float = true;
            p = e;
            while (p < n && std::isdigit(static_cast<unsigned char>(src_[p]))) ++p;
          }
        }
        std::string lit;
        for (size_t i = b; i < p; ++i)
          if (src_[i] != '_') lit.push_back(src_[i]);
        Token t{is_float ? T::Float : T::Int, lit, 0, 0, ps};
        if (is_float) {
          t.f = std::strtod(lit.c_str(), nullptr);
        } else {
          errno = 0;
          char* endp = nullptr;
          long long v = std::strtoll(lit.c_str(), &endp, 10);
          if (errno == ERANGE)
            return make_error(ErrorKind::kUnsupported, at(ps), "integer literal ", lit,
                              " does not fit in 64 bits");
          t.i = v;
        }
        toks_.push_back(std::move(t));
      } else if (c == '\'' || c == '"') {
        HLX_ASSIGN_OR_RETURN(p, lex_string(p));
      } else {
        static const char* ops[] = {"**", "//", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%",
                                    "~",  "<",  ">",  "=",  ".",  ",",  ":", "|", "(", ")", "[",
                                    "]",  "{",  "}"};
        bool found = false;
        for (const char* op : ops) {
          size_t len = std::char_traits<char>::length(op);
          if (src_.compare(p, len, op) == 0) {
            toks_.push_back({T::Op, op, 0, 0, ps});
            p += len;
            found = true;
            break;
          }
        }
        if (!found)
          return make_error(ErrorKind::kParse, at(ps), "unexpected character '", c, "'");
      }
    }
  }

  // Python string literal escapes (jinja2 decodes with unicode-escape).
  Result<size_t> lex_string(size_t p) {
    Pos ps = pos(p);
    char q = src_[p++];
    std::string out;
    size_t n = src_.size();
    while (true) {
      if (p >= n) return make_error(ErrorKind::kParse, at(ps), "unterminated string literal");
      char c = src_[p];
      if (c == q) {
        ++p;
        break;
      }
      if (c != '\\') {
        out.push_back(c);
        ++p;
        continue;
      }
      if (p + 1 >= n) return make_error(ErrorKind::kParse, at(ps), "unterminated string literal");
      char e = src_[p + 1];
      p += 2;
      auto hex = [&](int digits) -> Result<int32_t> {
        if (p + static_cast<size_t>(digits) > n)
          return make_error(ErrorKind::kParse, at(ps), "truncated \\x/\\u escape in string");
        int32_t v = 0;
        for (int k = 0; k < digits; ++k) {
          char h = src_[p++];
          int d = std::isdigit(static_cast<unsigned char>(h)) ? h - '0'
                  : (h >= 'a' && h <= 'f')                    ? h - 'a' + 10
                  : (h >= 'A' && h <= 'F')                    ? h - 'A' + 10
                                                              : -1;
          if (d < 0) return make_error(ErrorKind::kParse, at(ps), "bad hex digit in escape");
          v = v * 16 + d;
        }
        return v;
      };
      switch (e) {
        case 'n': out.push_back('\n'); break;
        case 't': out.push_back('\t'); break;
        case 'r': out.push_back('\r'); break;
        case '\\': out.push_back('\\'); break;
        case '\'': out.push_back('\''); break;
        case '"': out.push_back('"'); break;
        case 'a': out.push_back('\a'); break;
        case 'b': out.push_back('\b'); break;
        case 'f': out.push_back('\f'); break;
        case 'v': out.push_back('\v'); break;
        case '\n': break;  // line continuation
        case 'x': {
          HLX_ASSIGN_OR_RETURN(int32_t v, hex(2));
          append_utf8(out, v);
          break;
        }
        case 'u': {
          HLX_ASSIGN_OR_RETURN(int32_t v, hex(4));
          append_utf8(out, v);
          break;
        }
        case 'U': {
          HLX_ASSIGN_OR_RETURN(int32_t v, hex(8));
          if (v > 0x10FFFF) return make_error(ErrorKind::kParse, at(ps), "\\U escape out of range");
          append_utf8(out, v);
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            int32_t v = e - '0';
            for (int k = 0; k < 2 && p < n && src_[p] >= '0' && src_[p] <= '7'; ++k)
              v = v * 8 + (src_[p++] - '0');
            append_utf8(out, v);
          } else {  // unknown escapes keep their backslash, as in Python
            out.push_back('\\');
            out.push_back(e);
          }
      }
    }
    toks_.push_back({T::Str, std::move(out), 0, 0, ps});
    return p;
  }

  std::string src_;
  Options opt_;
  std::vector<size_t> line_starts_;
  std::vector<Token> toks_;
};

}  // namespace

// ------------------------------------------------------------------------------------------------
// Tree

struct Expr {
  enum class K {
    Lit, Name, List, Dict, Tuple, Attr, Index, Slice, Call, Filter, Test, Neg, Pos, Not, And, Or,
    Bin, Compare, Cond
  } k;
  Pos pos;
  Value lit;
  std::string name;  // Name, Attr, Filter, Test, Bin operator
  bool negated = false;  // Test: `is not`
  std::vector<std::shared_ptr<Expr>> a;  // operands / items / args
  std::vector<std::pair<std::string, std::shared_ptr<Expr>>> kw;
  std::vector<std::string> ops;  // Compare operators
};
using ExprP = std::shared_ptr<Expr>;

struct Node {
  enum class K { Body, Text, Out, If, For, Set, SetAttr, SetBlock, Macro, Break, Continue } k;
  Pos pos;
  std::string text;                   // Text; SetAttr attribute; Macro name
  std::vector<std::string> targets;   // For/Set names; Macro params
  std::vector<ExprP> exprs;           // Out/Set value; If conditions; For iterable,filter; defaults
  std::vector<std::shared_ptr<Node>> bodies;  // If branches (+else); For body, else; Body children
};
using NodeP = std::shared_ptr<Node>;

namespace {

class Parser {
 public:
  explicit Parser(std::vector<Token> toks) : t_(std::move(toks)) {}

  Result<NodeP> parse_template() {
    std::string stop;
    HLX_ASSIGN_OR_RETURN(NodeP body, parse_body({}, stop));
    return body;
  }

 private:
  const Token& cur() const { return t_[i_]; }
  bool is_op(const char* op) const { return cur().type == T::Op && cur().text == op; }
  bool is_name(const char* n) const { return cur().type == T::Name && cur().text == n; }
  Status err(const std::string& what) const {
    return make_error(ErrorKind::kParse, at(cur().pos), what, describe(cur()));
  }
  static std::string describe(const Token& t) {
    switch (t.type) {
      case T::Eof: return " (found end of template)";
      case T::BlockEnd: return " (found '%}')";
      case T::VarEnd: return " (found '}}')";
      case T::Text: return " (found template text)";
      default: return " (found '" + t.text + "')";
    }
  }
  Status expect_op(const char* op) {
    if (!is_op(op)) return err(str_cat("expected '", op, "'"));
    ++i_;
    return ok_status();
  }
  Result<std::string> expect_name() {
    if (cur().type != T::Name) return err("expected a name");
    return t_[i_++].text;
  }
  Status expect_block_end() {
    if (cur().type != T::BlockEnd) return err("expected end of statement '%}'");
    ++i_;
    return ok_status();
  }

  // Parses statements until a block tag whose keyword is in `stops` (consumed up to and
  // including the keyword; it is stored in `stop`).
  Result<NodeP> parse_body(const std::vector<std::string>& stops, std::string& stop) {
    if (++depth_ > kMaxDepth) return err("template nested too deeply");
    auto body = std::make_shared<Node>();
    body->k = Node::K::Body;
    body->pos = cur().pos;
    while (true) {
      const Token& tk = cur();
      if (tk.type == T::Eof) {
        if (!stops.empty())
          return make_error(ErrorKind::kParse, at(tk.pos), "unexpected end of template, expected '",
                            stops.back(), "'");
        break;
      }
      if (tk.type == T::Text) {
        auto n = std::make_shared<Node>();
        n->k = Node::K::Text;
        n->pos = tk.pos;
        n->text = tk.text;
        body->bodies.push_back(n);
        ++i_;
        continue;
      }
      if (tk.type == T::VarBegin) {
        ++i_;
        auto n = std::make_shared<Node>();
        n->k = Node::K::Out;
        n->pos = tk.pos;
        HLX_ASSIGN_OR_RETURN(ExprP e, parse_expr());
        n->exprs.push_back(e);
        if (cur().type != T::VarEnd) return err("expected '}}'");
        ++i_;
        body->bodies.push_back(n);
        continue;
      }
      if (tk.type != T::BlockBegin) return err("unexpected token");
      ++i_;
      if (cur().type != T::Name) return err("expected a statement keyword");
      std::string kw = cur().text;
      if (std::find(stops.begin(), stops.end(), kw) != stops.end()) {
        ++i_;
        stop = kw;
        --depth_;
        return body;
      }
      HLX_ASSIGN_OR_RETURN(NodeP st, parse_statement());
      if (st) body->bodies.push_back(st);
    }
    --depth_;
    return body;
  }

  Result<NodeP> parse_statement() {
    const Token& kwt = cur();
    std::string kw = kwt.text;
    Pos p = kwt.pos;
    ++i_;
    auto n = std::make_shared<Node>();
    n->pos = p;
    if (kw == "if") {
      n->k = Node::K::If;
      while (true) {
        HLX_ASSIGN_OR_RETURN(ExprP c, parse_expr());
        HLX_RETURN_IF_ERROR(expect_block_end());
        n->exprs.push_back(c);
        std::string stop;
        HLX_ASSIGN_OR_RETURN(NodeP b, parse_body({"elif", "else", "endif"}, stop));
        n->bodies.push_back(b);
        if (stop == "elif") continue;
        if (stop == "else") {
          HLX_RETURN_IF_ERROR(expect_block_end());
          HLX_ASSIGN_OR_RETURN(NodeP eb, parse_body({"endif"}, stop));
          n->bodies.push_back(eb);
        }
        return finish(n);
      }
    }
    if (kw == "for") {
      n->k = Node::K::For;
      HLX_RETURN_IF_ERROR(parse_targets(n->targets));
      if (!is_name("in")) return err("expected 'in' in for loop");
      ++i_;
      HLX_ASSIGN_OR_RETURN(ExprP it, parse_expr(/*no_cond=*/true));
      n->exprs.push_back(it);
      if (is_name("if")) {
        ++i_;
        HLX_ASSIGN_OR_RETURN(ExprP f, parse_expr(true));
        n->exprs.push_back(f);
      }
      if (is_name("recursive"))
        return make_error(ErrorKind::kUnsupported, at(cur().pos), "recursive for loops are not supported");
      HLX_RETURN_IF_ERROR(expect_block_end());
      std::string stop;
      HLX_ASSIGN_OR_RETURN(NodeP b, parse_body({"else", "endfor"}, stop));
      n->bodies.push_back(b);
      if (stop == "else") {
        HLX_RETURN_IF_ERROR(expect_block_end());
        HLX_ASSIGN_OR_RETURN(NodeP eb, parse_body({"endfor"}, stop));
        n->bodies.push_back(eb);
      }
      return finish(n);
    }
    if (kw == "set") {
      HLX_ASSIGN_OR_RETURN(std::string first, expect_name());
      if (is_op(".")) {
        ++i_;
        n->k = Node::K::SetAttr;
        n->targets.push_back(first);
        HLX_ASSIGN_OR_RETURN(n->text, expect_name());
        HLX_RETURN_IF_ERROR(expect_op("="));
        HLX_ASSIGN_OR_RETURN(ExprP v, parse_expr());
        n->exprs.push_back(v);
        HLX_RETURN_IF_ERROR(expect_block_end());
        return n;
      }
      n->targets.push_back(first);
      while (is_op(",")) {
        ++i_;
        HLX_ASSIGN_OR_RETURN(std::string t, expect_name());
        n->targets.push_back(t);
      }
      if (cur().type == T::BlockEnd && n->targets.size() == 1) {  // {% set x %}...{% endset %}
        ++i_;
        n->k = Node::K::SetBlock;
        std::string stop;
        HLX_ASSIGN_OR_RETURN(NodeP b, parse_body({"endset"}, stop));
        n->bodies.push_back(b);
        return finish(n);
      }
      n->k = Node::K::Set;
      HLX_RETURN_IF_ERROR(expect_op("="));
      HLX_ASSIGN_OR_RETURN(ExprP v, parse_tuple_or_expr());
      n->exprs.push_back(v);
      HLX_RETURN_IF_ERROR(expect_block_end());
      return n;
    }
    if (kw == "macro") {
      n->k = Node::K::Macro;
      HLX_ASSIGN_OR_RETURN(n->text, expect_name());
      HLX_RETURN_IF_ERROR(expect_op("("));
      while (!is_op(")")) {
        HLX_ASSIGN_OR_RETURN(std::string param, expect_name());
        n->targets.push_back(param);
        ExprP def;
        if (is_op("=")) {
          ++i_;
          HLX_ASSIGN_OR_RETURN(def, parse_expr());
        }
        n->exprs.push_back(def);
        if (!is_op(",")) break;
        ++i_;
      }
      HLX_RETURN_IF_ERROR(expect_op(")"));
      HLX_RETURN_IF_ERROR(expect_block_end());
      std::string stop;
      HLX_ASSIGN_OR_RETURN(NodeP b, parse_body({"endmacro"}, stop));
      n->bodies.push_back(b);
      return finish(n);
    }
    if (kw == "break" || kw == "continue") {
      n->k = kw == "break" ? Node::K::Break : Node::K::Continue;
      HLX_RETURN_IF_ERROR(expect_block_end());
      return n;
    }
    if (kw == "generation") {  // HF's assistant-mask extension: renders its body unchanged
      HLX_RETURN_IF_ERROR(expect_block_end());
      std::string stop;
      HLX_ASSIGN_OR_RETURN(NodeP b, parse_body({"endgeneration"}, stop));
      HLX_RETURN_IF_ERROR(expect_block_end());
      return b;
    }
    return make_error(ErrorKind::kUnsupported, at(p), "unsupported template statement '", kw, "'");
  }

  Result<NodeP> finish(NodeP n) {  // after the end keyword: `%}`
    HLX_RETURN_IF_ERROR(expect_block_end());
    return n;
  }

  Status parse_targets(std::vector<std::string>& out) {
    bool paren = is_op("(");
    if (paren) ++i_;
    while (true) {
      HLX_ASSIGN_OR_RETURN(std::string t, expect_name());
      out.push_back(t);
      if (!is_op(",")) break;
      ++i_;
    }
    if (paren) HLX_RETURN_IF_ERROR(expect_op(")"));
    return ok_status();
  }

  ExprP node(Expr::K k, Pos p) {
    auto e = std::make_shared<Expr>();
    e->k = k;
    e->pos = p;
    return e;
  }

  // `a, b` at statement level (set x = 1, 2) becomes a tuple.
  Result<ExprP> parse_tuple_or_expr() {
    Pos p = cur().pos;
    HLX_ASSIGN_OR_RETURN(ExprP first, parse_expr());
    if (!is_op(",")) return first;
    ExprP t = node(Expr::K::Tuple, p);
    t->a.push_back(first);
    while (is_op(",")) {
      ++i_;
      if (cur().type == T::BlockEnd) break;
      HLX_ASSIGN_OR_RETURN(ExprP e, parse_expr());
      t->a.push_back(e);
    }
    return t;
  }

  struct DepthGuard {
    int& d;
    explicit DepthGuard(int& x) : d(x) { ++d; }
    ~DepthGuard() { --d; }
  };

  Result<ExprP> parse_expr(bool no_cond = false) {
    DepthGuard g(depth_);
    if (depth_ > kMaxDepth) return err("expression nested too deeply");
    HLX_ASSIGN_OR_RETURN(ExprP e, parse_or());
    if (no_cond) return e;
    while (is_name("if")) {
      Pos p = cur().pos;
      ++i_;
      HLX_ASSIGN_OR_RETURN(ExprP c, parse_or());
      ExprP n = node(Expr::K::Cond, p);
      n->a = {c, e, nullptr};
      if (is_name("else")) {
        ++i_;
        HLX_ASSIGN_OR_RETURN(n->a[2], parse_expr());
      }
      e = n;
    }
    return e;
  }

  Result<ExprP> parse_or() {
    HLX_ASSIGN_OR_RETURN(ExprP l, parse_and());
    while (is_name("or")) {
      ExprP n = node(Expr::K::Or, cur().pos);
      ++i_;
      HLX_ASSIGN_OR_RETURN(ExprP r, parse_and());
      n->a = {l, r};
      l = n;
    }
    return l;
  }
  Result<ExprP> parse_and() {
    HLX_ASSIGN_OR_RETURN(ExprP l, parse_not());
    while (is_name("and")) {
      ExprP n = node(Expr::K::And, cur().pos);
      ++i_;
      HLX_ASSIGN_OR_RETURN(ExprP r, parse_not());
      n->a = {l, r};
      l = n;
    }
    return l;
  }
  Result<ExprP> parse_not() {
    if (is_name("not")) {
      DepthGuard g(depth_);
      if (depth_ > kMaxDepth) return err("expression nested too deeply");
      ExprP n = node(Expr::K::Not, cur().pos);
      ++i_;
      HLX_ASSIGN_OR_RETURN(ExprP x, parse_not());
      n->a = {x};
      return n;
    }
    return parse_compare();
  }
  Result<ExprP> parse_compare() {
    Pos p = cur().pos;
    HLX_ASSIGN_OR_RETURN(ExprP l, parse_math1());
    ExprP cmp;
    while (true) {
      std::string op;
      if (cur().type == T::Op && (cur().text == "==" || cur().text == "!=" || cur().text == "<" ||
                                  cur().text == ">" || cur().text == "<=" || cur().text == ">=")) {
        op = cur().text;
        ++i_;
      } else if (is_name("in")) {
        op = "in";
        ++i_;
      } else if (is_name("not") && t_[i_ + 1].type == T::Name && t_[i_ + 1].text == "in") {
        op = "notin";
        i_ += 2;
      } else {
        break;
      }
      HLX_ASSIGN_OR_RETURN(ExprP r, parse_math1());
      if (!cmp) {
        cmp = node(Expr::K::Compare, p);
        cmp->a.push_back(l);
      }
      cmp->ops.push_back(op);
      cmp->a.push_back(r);
    }
    return cmp ? cmp : l;
  }
  Result<ExprP> binary_chain(Result<ExprP> (Parser::*next)(), std::initializer_list<const char*> ops) {
    HLX_ASSIGN_OR_RETURN(ExprP l, (this->*next)());
    while (true) {
      const char* hit = nullptr;
      for (const char* op : ops)
        if (is_op(op)) hit = op;
      if (!hit) return l;
      ExprP n = node(Expr::K::Bin, cur().pos);
      n->name = hit;
      ++i_;
      HLX_ASSIGN_OR_RETURN(ExprP r, (this->*next)());
      n->a = {l, r};
      l = n;
    }
  }
  // jinja2 precedence: + - < ~ < * / // % < ** < unary < postfix/filters.
  Result<ExprP> parse_math1() { return binary_chain(&Parser::parse_concat, {"+", "-"}); }
  Result<ExprP> parse_concat() { return binary_chain(&Parser::parse_math2, {"~"}); }
  Result<ExprP> parse_math2() { return binary_chain(&Parser::parse_pow, {"*", "/", "//", "%"}); }
  Result<ExprP> parse_pow() { return binary_chain(&Parser::parse_unary_f, {"**"}); }
  Result<ExprP> parse_unary_f() { return parse_unary(true); }

  Result<ExprP> parse_unary(bool with_filter) {
    DepthGuard g(depth_);
    if (depth_ > kMaxDepth) return err("expression nested too deeply");
    ExprP e;
    if (is_op("-") || is_op("+")) {
      e = node(is_op("-") ? Expr::K::Neg : Expr::K::Pos, cur().pos);
      ++i_;
      HLX_ASSIGN_OR_RETURN(ExprP x, parse_unary(false));
      e->a = {x};
    } else {
      HLX_ASSIGN_OR_RETURN(e, parse_primary());
    }
    HLX_ASSIGN_OR_RETURN(e, parse_postfix(e));
    if (with_filter) {
      HLX_ASSIGN_OR_RETURN(e, parse_filters(e));
    }
    return e;
  }

  Result<ExprP> parse_primary() {
    const Token& tk = cur();
    Pos p = tk.pos;
    switch (tk.type) {
      case T::Name: {
        ++i_;
        const std::string& s = tk.text;
        if (s == "true" || s == "True" || s == "false" || s == "False") {
          ExprP e = node(Expr::K::Lit, p);
          e->lit = Value::boolean(s[0] == 't' || s[0] == 'T');
          return e;
        }
        if (s == "none" || s == "None") {
          ExprP e = node(Expr::K::Lit, p);
          e->lit = Value::none();
          return e;
        }
        ExprP e = node(Expr::K::Name, p);
        e->name = s;
        return e;
      }
      case T::Str: {
        std::string s;
        while (cur().type == T::Str) s += t_[i_++].text;  // adjacent literals concatenate
        ExprP e = node(Expr::K::Lit, p);
        e->lit = Value::str(std::move(s));
        return e;
      }
      case T::Int: {
        ++i_;
        ExprP e = node(Expr::K::Lit, p);
        e->lit = Value::integer(tk.i);
        return e;
      }
      case T::Float: {
        ++i_;
        ExprP e = node(Expr::K::Lit, p);
        e->lit = Value::floating(tk.f);
        return e;
      }
      case T::Op: {
        if (tk.text == "(") {
          ++i_;
          if (is_op(")")) {
            ++i_;
            return node(Expr::K::Tuple, p);
          }
          HLX_ASSIGN_OR_RETURN(ExprP first, parse_expr());
          if (is_op(")")) {
            ++i_;
            return first;
          }
          ExprP t = node(Expr::K::Tuple, p);
          t->a.push_back(first);
          while (is_op(",")) {
            ++i_;
            if (is_op(")")) break;
            HLX_ASSIGN_OR_RETURN(ExprP e, parse_expr());
            t->a.push_back(e);
          }
          HLX_RETURN_IF_ERROR(expect_op(")"));
          return t;
        }
        if (tk.text == "[") {
          ++i_;
          ExprP l = node(Expr::K::List, p);
          while (!is_op("]")) {
            HLX_ASSIGN_OR_RETURN(ExprP e, parse_expr());
            l->a.push_back(e);
            if (!is_op(",")) break;
            ++i_;
          }
          HLX_RETURN_IF_ERROR(expect_op("]"));
          return l;
        }
        if (tk.text == "{") {
          ++i_;
          ExprP d = node(Expr::K::Dict, p);
          while (!is_op("}")) {
            HLX_ASSIGN_OR_RETURN(ExprP k, parse_expr());
            HLX_RETURN_IF_ERROR(expect_op(":"));
            HLX_ASSIGN_OR_RETURN(ExprP v, parse_expr());
            d->a.push_back(k);
            d->a.push_back(v);
            if (!is_op(",")) break;
            ++i_;
          }
          HLX_RETURN_IF_ERROR(expect_op("}"));
          return d;
        }
        break;
      }
      default: break;
    }
    return err("expected an expression");
  }

  Status parse_call_args(ExprP call) {
    // Current token is '('.
    ++i_;
    while (!is_op(")")) {
      if (cur().type == T::Name && t_[i_ + 1].type == T::Op && t_[i_ + 1].text == "=") {
        std::string k = cur().text;
        i_ += 2;
        HLX_ASSIGN_OR_RETURN(ExprP v, parse_expr());
        call->kw.emplace_back(k, v);
      } else {
        if (!call->kw.empty()) return err("positional argument follows keyword argument");
        HLX_ASSIGN_OR_RETURN(ExprP v, parse_expr());
        call->a.push_back(v);
      }
      if (!is_op(",")) break;
      ++i_;
    }
    return expect_op(")");
  }

  Result<ExprP> parse_postfix(ExprP e) {
    while (true) {
      if (is_op(".")) {
        Pos p = cur().pos;
        ++i_;
        if (cur().type == T::Int) {  // x.0 is x[0]
          ExprP n = node(Expr::K::Index, p);
          ExprP k = node(Expr::K::Lit, cur().pos);
          k->lit = Value::integer(cur().i);
          ++i_;
          n->a = {e, k};
          e = n;
          continue;
        }
        HLX_ASSIGN_OR_RETURN(std::string name, expect_name());
        ExprP n = node(Expr::K::Attr, p);
        n->name = name;
        n->a = {e};
        e = n;
      } else if (is_op("[")) {
        Pos p = cur().pos;
        ++i_;
        ExprP parts[3];
        bool slice = false;
        for (int k = 0; k < 3; ++k) {
          if (!is_op(":") && !is_op("]")) {
            HLX_ASSIGN_OR_RETURN(parts[k], parse_expr());
          }
          if (k < 2 && is_op(":")) {
            slice = true;
            ++i_;
            continue;
          }
          break;
        }
        HLX_RETURN_IF_ERROR(expect_op("]"));
        if (slice) {
          ExprP n = node(Expr::K::Slice, p);
          n->a = {e, parts[0], parts[1], parts[2]};
          e = n;
        } else {
          if (!parts[0]) return make_error(ErrorKind::kParse, at(p), "empty subscript");
          ExprP n = node(Expr::K::Index, p);
          n->a = {e, parts[0]};
          e = n;
        }
      } else if (is_op("(")) {
        ExprP n = node(Expr::K::Call, cur().pos);
        n->a.push_back(e);
        HLX_RETURN_IF_ERROR(parse_call_args(n));
        // a[0] is the callee; the rest are positional args.
        e = n;
      } else {
        return e;
      }
    }
  }

  Result<ExprP> parse_filters(ExprP e) {
    while (true) {
      if (is_op("|")) {
        Pos p = cur().pos;
        ++i_;
        HLX_ASSIGN_OR_RETURN(std::string name, expect_name());
        ExprP n = node(Expr::K::Filter, p);
        n->name = name;
        n->a.push_back(e);
        if (is_op("(")) HLX_RETURN_IF_ERROR(parse_call_args(n));
        e = n;
      } else if (is_name("is")) {
        Pos p = cur().pos;
        ++i_;
        ExprP n = node(Expr::K::Test, p);
        if (is_name("not")) {
          n->negated = true;
          ++i_;
        }
        if (cur().type != T::Name) return err("expected a test name after 'is'");
        n->name = cur().text;
        ++i_;
        n->a.push_back(e);
        if (is_op("(")) {
          HLX_RETURN_IF_ERROR(parse_call_args(n));
        } else if (cur().type == T::Str || cur().type == T::Int || cur().type == T::Float ||
                   (cur().type == T::Name && !is_name("and") && !is_name("or") &&
                    !is_name("else") && !is_name("if") && !is_name("in") && !is_name("not") &&
                    !is_name("is"))) {
          // `x is divisibleby 3`, `x is sameas false`: one argument without parentheses
          HLX_ASSIGN_OR_RETURN(ExprP arg, parse_primary());
          HLX_ASSIGN_OR_RETURN(arg, parse_postfix(arg));
          n->a.push_back(arg);
        }
        e = n;
      } else {
        return e;
      }
    }
  }

  static constexpr int kMaxDepth = 200;
  std::vector<Token> t_;
  size_t i_ = 0;
  int depth_ = 0;
};

}  // namespace

// ------------------------------------------------------------------------------------------------
// Renderer

namespace {

using Frame = std::vector<std::pair<std::string, Value>>;

enum class Flow { kNormal, kBreak, kContinue };

class Renderer {
 public:
  Renderer(const Options& opt) : opt_(opt) {}

  Options opt_;
  std::vector<Frame> frames_;
  std::string out_;
  int64_t iterations_ = 0;
  int depth_ = 0;
  Flow flow_ = Flow::kNormal;

  struct Guard {
    int& d;
    explicit Guard(int& x) : d(x) { ++d; }
    ~Guard() { --d; }
  };

  Value lookup(const std::string& name) const {
    for (auto f = frames_.rbegin(); f != frames_.rend(); ++f)
      for (const auto& kv : *f)
        if (kv.first == name) return kv.second;
    return Value::undef("'" + name + "' is undefined");
  }
  void assign(const std::string& name, Value v) {
    Frame& f = frames_.back();
    for (auto& kv : f)
      if (kv.first == name) {
        kv.second = std::move(v);
        return;
      }
    f.emplace_back(name, std::move(v));
  }

  Status undefined_error(const Value& v, Pos p) {
    return make_error(ErrorKind::kInvalidArgument, at(p), v.s.empty() ? "value is undefined" : v.s);
  }

  Status write(const std::string& s) {
    if (out_.size() + s.size() > opt_.max_output_bytes)
      return make_error(ErrorKind::kOutOfRange, "rendered output exceeds ", opt_.max_output_bytes,
                        " bytes");
    out_ += s;
    return ok_status();
  }

  Status count_iteration(Pos p) {
    if (++iterations_ > opt_.max_loop_iterations)
      return make_error(ErrorKind::kOutOfRange, at(p), "template exceeded ",
                        opt_.max_loop_iterations, " loop iterations");
    return ok_status();
  }

  // ---- statements
  Status exec(const Node& n) {
    Guard g(depth_);
    if (depth_ > opt_.max_depth)
      return make_error(ErrorKind::kOutOfRange, at(n.pos), "template recursion deeper than ",
                        opt_.max_depth);
    switch (n.k) {
      case Node::K::Body:
        for (const auto& c : n.bodies) {
          HLX_RETURN_IF_ERROR(exec(*c));
          if (flow_ != Flow::kNormal) break;
        }
        return ok_status();
      case Node::K::Text: return write(n.text);
      case Node::K::Out: {
        HLX_ASSIGN_OR_RETURN(Value v, eval(*n.exprs[0]));
        return write(to_str(v));
      }
      case Node::K::If:
        for (size_t i = 0; i < n.exprs.size(); ++i) {
          HLX_ASSIGN_OR_RETURN(Value c, eval(*n.exprs[i]));
          if (truthy(c)) return exec(*n.bodies[i]);
        }
        if (n.bodies.size() > n.exprs.size()) return exec(*n.bodies.back());
        return ok_status();
      case Node::K::For: return exec_for(n);
      case Node::K::Set: {
        HLX_ASSIGN_OR_RETURN(Value v, eval(*n.exprs[0]));
        if (n.targets.size() == 1) {
          assign(n.targets[0], std::move(v));
          return ok_status();
        }
        return unpack(n.targets, v, n.pos);
      }
      case Node::K::SetAttr: {
        Value ns = lookup(n.targets[0]);
        if (ns.k != Value::K::Ns)
          return make_error(ErrorKind::kInvalidArgument, at(n.pos), "cannot assign attribute '",
                            n.text, "' on '", n.targets[0], "' of type ", type_name(ns),
                            " (only namespace() objects are assignable)");
        HLX_ASSIGN_OR_RETURN(Value v, eval(*n.exprs[0]));
        ns.dict->set(n.text, std::move(v));
        return ok_status();
      }
      case Node::K::SetBlock: {
        std::string saved;
        saved.swap(out_);
        Status s = exec(*n.bodies[0]);
        std::string captured;
        captured.swap(out_);
        out_.swap(saved);
        HLX_RETURN_IF_ERROR(s);
        assign(n.targets[0], Value::str(std::move(captured)));
        return ok_status();
      }
      case Node::K::Macro: {
        const Node* def = &n;
        assign(n.text, Value::func([def](Renderer& r, CallArgs& args, Pos p) {
                 return r.call_macro(*def, args, p);
               }));
        return ok_status();
      }
      case Node::K::Break: flow_ = Flow::kBreak; return ok_status();
      case Node::K::Continue: flow_ = Flow::kContinue; return ok_status();
    }
    return ok_status();
  }

  Status unpack(const std::vector<std::string>& targets, const Value& v, Pos p) {
    HLX_ASSIGN_OR_RETURN(List items, iterate(v, p));
    if (items.size() != targets.size())
      return make_error(ErrorKind::kInvalidArgument, at(p), "cannot unpack ", items.size(),
                        " values into ", targets.size(), " names");
    for (size_t i = 0; i < targets.size(); ++i) assign(targets[i], items[i]);
    return ok_status();
  }

  Result<Value> call_macro(const Node& def, CallArgs& args, Pos p) {
    if (args.pos.size() > def.targets.size())
      return make_error(ErrorKind::kInvalidArgument, at(p), "macro '", def.text, "' takes ",
                        def.targets.size(), " arguments, got ", args.pos.size());
    // Macros see the globals and top-level variables, plus their own parameters.
    std::vector<Frame> saved;
    saved.swap(frames_);
    frames_.push_back(saved[0]);
    if (saved.size() > 1) frames_.push_back(saved[1]);
    frames_.emplace_back();
    Status s;
    for (size_t i = 0; i < def.targets.size() && s.ok(); ++i) {
      if (const Value* a = args.get(i, def.targets[i].c_str())) {
        assign(def.targets[i], *a);
      } else if (def.exprs[i]) {
        Result<Value> d = eval(*def.exprs[i]);
        if (!d.ok()) s = d.status();
        else assign(def.targets[i], *d);
      } else {
        assign(def.targets[i], Value::undef("macro parameter '" + def.targets[i] + "' is undefined"));
      }
    }
    std::string saved_out;
    saved_out.swap(out_);
    if (s.ok()) s = exec(*def.bodies[0]);
    flow_ = Flow::kNormal;
    std::string result;
    result.swap(out_);
    out_.swap(saved_out);
    frames_.swap(saved);
    HLX_RETURN_IF_ERROR(s);
    return Value::str(std::move(result));
  }

  Result<List> iterate(const Value& v, Pos p) {
    switch (v.k) {
      case Value::K::Undef: return List{};
      case Value::K::List: return *v.list;
      case Value::K::Dict: {
        List keys;
        for (const auto& kv : v.dict->items) keys.push_back(Value::str(kv.first));
        return keys;
      }
      case Value::K::Str: {
        List chars;
        for (int32_t c : decode_utf8(v.s)) {
          std::string s;
          append_utf8(s, c);
          chars.push_back(Value::str(std::move(s)));
        }
        return chars;
      }
      default:
        return make_error(ErrorKind::kInvalidArgument, at(p), "'", type_name(v),
                          "' object is not iterable");
    }
  }

  Status exec_for(const Node& n) {
    HLX_ASSIGN_OR_RETURN(Value seq, eval(*n.exprs[0]));
    HLX_ASSIGN_OR_RETURN(List items, iterate(seq, n.exprs[0]->pos));
    if (n.exprs.size() > 1) {  // `for x in xs if cond`: filter first, so loop.length counts kept items
      List kept;
      for (const Value& item : items) {
        HLX_RETURN_IF_ERROR(count_iteration(n.pos));
        frames_.emplace_back();
        Status s = bind_targets(n, item);
        Result<Value> c = s.ok() ? eval(*n.exprs[1]) : Result<Value>(s);
        frames_.pop_back();
        if (!c.ok()) return c.status();
        if (truthy(*c)) kept.push_back(item);
      }
      items.swap(kept);
    }
    if (items.empty()) {
      if (n.bodies.size() > 1) return exec(*n.bodies[1]);
      return ok_status();
    }
    const int64_t len = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < len; ++i) {
      HLX_RETURN_IF_ERROR(count_iteration(n.pos));
      frames_.emplace_back();  // jinja2: each iteration starts from the enclosing scope
      Dict loop;
      loop.set("index0", Value::integer(i));
      loop.set("index", Value::integer(i + 1));
      loop.set("revindex0", Value::integer(len - i - 1));
      loop.set("revindex", Value::integer(len - i));
      loop.set("first", Value::boolean(i == 0));
      loop.set("last", Value::boolean(i == len - 1));
      loop.set("length", Value::integer(len));
      loop.set("depth", Value::integer(1));
      loop.set("depth0", Value::integer(0));
      loop.set("previtem", i > 0 ? items[static_cast<size_t>(i - 1)] : Value::undef("there is no previous item"));
      loop.set("nextitem", i + 1 < len ? items[static_cast<size_t>(i + 1)] : Value::undef("there is no next item"));
      loop.set("cycle", Value::func([i](Renderer&, CallArgs& a, Pos p) -> Result<Value> {
                 if (a.pos.empty())
                   return make_error(ErrorKind::kInvalidArgument, at(p), "loop.cycle() needs arguments");
                 return a.pos[static_cast<size_t>(i) % a.pos.size()];
               }));
      assign("loop", make_dict(std::move(loop)));
      Status s = bind_targets(n, items[static_cast<size_t>(i)]);
      if (s.ok()) s = exec(*n.bodies[0]);
      frames_.pop_back();
      HLX_RETURN_IF_ERROR(s);
      Flow f = flow_;
      flow_ = Flow::kNormal;
      if (f == Flow::kBreak) break;
    }
    return ok_status();
  }

  Status bind_targets(const Node& n, const Value& item) {
    if (n.targets.size() == 1) {
      assign(n.targets[0], item);
      return ok_status();
    }
    return unpack(n.targets, item, n.pos);
  }

  // ---- expressions
  Result<Value> eval(const Expr& e) {
    Guard g(depth_);
    if (depth_ > opt_.max_depth)
      return make_error(ErrorKind::kOutOfRange, at(e.pos), "expression evaluation deeper than ",
                        opt_.max_depth);
    switch (e.k) {
      case Expr::K::Lit: return e.lit;
      case Expr::K::Name: return lookup(e.name);
      case Expr::K::List:
      case Expr::K::Tuple: {
        List l;
        for (const auto& x : e.a) {
          HLX_ASSIGN_OR_RETURN(Value v, eval(*x));
          l.push_back(std::move(v));
        }
        return Value::of_list(std::move(l));
      }
      case Expr::K::Dict: {
        Dict d;
        for (size_t i = 0; i + 1 < e.a.size(); i += 2) {
          HLX_ASSIGN_OR_RETURN(Value k, eval(*e.a[i]));
          if (k.k != Value::K::Str)
            return make_error(ErrorKind::kUnsupported, at(e.a[i]->pos),
                              "only string dict keys are supported, got ", type_name(k));
          HLX_ASSIGN_OR_RETURN(Value v, eval(*e.a[i + 1]));
          d.set(k.s, std::move(v));
        }
        return make_dict(std::move(d));
      }
      case Expr::K::Attr: {
        HLX_ASSIGN_OR_RETURN(Value obj, eval(*e.a[0]));
        return get_attr(obj, e.name, e.pos);
      }
      case Expr::K::Index: {
        HLX_ASSIGN_OR_RETURN(Value obj, eval(*e.a[0]));
        HLX_ASSIGN_OR_RETURN(Value key, eval(*e.a[1]));
        return get_item(obj, key, e.pos);
      }
      case Expr::K::Slice: return eval_slice(e);
      case Expr::K::Call: {
        HLX_ASSIGN_OR_RETURN(Value fn, eval(*e.a[0]));
        HLX_ASSIGN_OR_RETURN(CallArgs args, eval_args(e, 1));
        if (fn.k == Value::K::Undef) return undefined_error(fn, e.pos);
        if (fn.k != Value::K::Func)
          return make_error(ErrorKind::kInvalidArgument, at(e.pos), "'", type_name(fn),
                            "' object is not callable");
        return (*fn.fn)(*this, args, e.pos);
      }
      case Expr::K::Filter: {
        HLX_ASSIGN_OR_RETURN(Value v, eval(*e.a[0]));
        HLX_ASSIGN_OR_RETURN(CallArgs args, eval_args(e, 1));
        return apply_filter(e.name, v, args, e.pos);
      }
      case Expr::K::Test: {
        HLX_ASSIGN_OR_RETURN(Value v, eval(*e.a[0]));
        HLX_ASSIGN_OR_RETURN(CallArgs args, eval_args(e, 1));
        HLX_ASSIGN_OR_RETURN(bool r, apply_test(e.name, v, args, e.pos));
        return Value::boolean(r != e.negated);
      }
      case Expr::K::Neg:
      case Expr::K::Pos: {
        HLX_ASSIGN_OR_RETURN(Value v, eval(*e.a[0]));
        if (v.k == Value::K::Undef) return undefined_error(v, e.pos);
        if (!v.is_num())
          return make_error(ErrorKind::kInvalidArgument, at(e.pos), "bad operand type for unary ",
                            e.k == Expr::K::Neg ? "-" : "+", ": '", type_name(v), "'");
        if (e.k == Expr::K::Pos) return v.k == Value::K::Bool ? Value::integer(v.as_int()) : v;
        if (v.k == Value::K::Float) return Value::floating(-v.f);
        if (v.as_int() == INT64_MIN)
          return make_error(ErrorKind::kOutOfRange, at(e.pos), "integer overflow");
        return Value::integer(-v.as_int());
      }
      case Expr::K::Not: {
        HLX_ASSIGN_OR_RETURN(Value v, eval(*e.a[0]));
        return Value::boolean(!truthy(v));
      }
      case Expr::K::And: {
        HLX_ASSIGN_OR_RETURN(Value l, eval(*e.a[0]));
        if (!truthy(l)) return l;
        return eval(*e.a[1]);
      }
      case Expr::K::Or: {
        HLX_ASSIGN_OR_RETURN(Value l, eval(*e.a[0]));
        if (truthy(l)) return l;
        return eval(*e.a[1]);
      }
      case Expr::K::Bin: {
        HLX_ASSIGN_OR_RETURN(Value l, eval(*e.a[0]));
        HLX_ASSIGN_OR_RETURN(Value r, eval(*e.a[1]));
        return binary(e.name, l, r, e.pos);
      }
      case Expr::K::Compare: {
        HLX_ASSIGN_OR_RETURN(Value l, eval(*e.a[0]));
        for (size_t i = 0; i < e.ops.size(); ++i) {
          HLX_ASSIGN_OR_RETURN(Value r, eval(*e.a[i + 1]));
          HLX_ASSIGN_OR_RETURN(bool ok, compare(e.ops[i], l, r, e.pos));
          if (!ok) return Value::boolean(false);
          l = std::move(r);
        }
        return Value::boolean(true);
      }
      case Expr::K::Cond: {
        HLX_ASSIGN_OR_RETURN(Value c, eval(*e.a[0]));
        if (truthy(c)) return eval(*e.a[1]);
        if (e.a[2]) return eval(*e.a[2]);
        return Value::undef("the inline if expression evaluated to false and has no else");
      }
    }
    return make_error(ErrorKind::kInternal, at(e.pos), "unknown expression");
  }

  Result<CallArgs> eval_args(const Expr& e, size_t first) {
    CallArgs args;
    for (size_t i = first; i < e.a.size(); ++i) {
      HLX_ASSIGN_OR_RETURN(Value v, eval(*e.a[i]));
      args.pos.push_back(std::move(v));
    }
    for (const auto& [k, x] : e.kw) {
      HLX_ASSIGN_OR_RETURN(Value v, eval(*x));
      args.kw.emplace_back(k, std::move(v));
    }
    return args;
  }

  Result<Value> eval_slice(const Expr& e) {
    HLX_ASSIGN_OR_RETURN(Value obj, eval(*e.a[0]));
    if (obj.k == Value::K::Undef) return undefined_error(obj, e.pos);
    int64_t idx[3] = {0, 0, 1};
    bool given[3] = {false, false, false};
    for (int k = 0; k < 3; ++k) {
      if (!e.a[static_cast<size_t>(k) + 1]) continue;
      HLX_ASSIGN_OR_RETURN(Value v, eval(*e.a[static_cast<size_t>(k) + 1]));
      if (v.k == Value::K::None) continue;
      if (!v.is_intlike())
        return make_error(ErrorKind::kInvalidArgument, at(e.pos),
                          "slice indices must be integers or None, got ", type_name(v));
      idx[k] = v.as_int();
      given[k] = true;
    }
    int64_t step = given[2] ? idx[2] : 1;
    if (step == 0) return make_error(ErrorKind::kInvalidArgument, at(e.pos), "slice step cannot be zero");
    auto pick = [&](int64_t len, std::vector<size_t>& out) {
      // Python's slice.indices().
      auto norm = [&](int64_t v, bool g, int64_t dflt_pos, int64_t dflt_neg) {
        if (!g) return step > 0 ? dflt_pos : dflt_neg;
        if (v < 0) v += len;
        if (step > 0) return std::clamp<int64_t>(v, 0, len);
        return std::clamp<int64_t>(v, -1, len - 1);
      };
      int64_t start = norm(idx[0], given[0], 0, len - 1);
      int64_t stop = norm(idx[1], given[1], len, -1);
      for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) out.push_back(static_cast<size_t>(i));
    };
    std::vector<size_t> sel;
    if (obj.k == Value::K::List) {
      pick(static_cast<int64_t>(obj.list->size()), sel);
      List l;
      for (size_t i : sel) l.push_back((*obj.list)[i]);
      return Value::of_list(std::move(l));
    }
    if (obj.k == Value::K::Str) {
      std::vector<int32_t> cps = decode_utf8(obj.s);
      pick(static_cast<int64_t>(cps.size()), sel);
      std::string s;
      for (size_t i : sel) append_utf8(s, cps[i]);
      return Value::str(std::move(s));
    }
    return make_error(ErrorKind::kInvalidArgument, at(e.pos), "'", type_name(obj),
                      "' object is not subscriptable");
  }

  Result<Value> get_item(const Value& obj, const Value& key, Pos p) {
    switch (obj.k) {
      case Value::K::Undef: return undefined_error(obj, p);
      case Value::K::List:
        if (key.is_intlike()) {
          int64_t i = key.as_int(), n = static_cast<int64_t>(obj.list->size());
          if (i < 0) i += n;
          if (i < 0 || i >= n) return Value::undef(str_cat("list index ", key.as_int(), " out of range"));
          return (*obj.list)[static_cast<size_t>(i)];
        }
        break;
      case Value::K::Str:
        if (key.is_intlike()) {
          std::vector<int32_t> cps = decode_utf8(obj.s);
          int64_t i = key.as_int(), n = static_cast<int64_t>(cps.size());
          if (i < 0) i += n;
          if (i < 0 || i >= n) return Value::undef(str_cat("string index ", key.as_int(), " out of range"));
          std::string s;
          append_utf8(s, cps[static_cast<size_t>(i)]);
          return Value::str(std::move(s));
        }
        break;
      case Value::K::Dict:
      case Value::K::Ns:
        if (key.k == Value::K::Str) {
          if (const Value* v = obj.dict->find(key.s)) return *v;
          return Value::undef("'dict object' has no attribute '" + key.s + "'");
        }
        return Value::undef(str_cat("'dict object' has no key ", repr(key)));
      default: break;
    }
    if (key.k == Value::K::Str) return get_attr(obj, key.s, p);
    return Value::undef(str_cat("'", type_name(obj), " object' has no item ", repr(key)));
  }

  Result<Value> get_attr(const Value& obj, const std::string& name, Pos p);
  Result<Value> binary(const std::string& op, const Value& l, const Value& r, Pos p);
  Result<bool> compare(const std::string& op, const Value& l, const Value& r, Pos p);
  Result<bool> contains(const Value& hay, const Value& needle, Pos p);
  Result<Value> apply_filter(const std::string& name, const Value& v, CallArgs& args, Pos p);
  Result<bool> apply_test(const std::string& name, const Value& v, CallArgs& args, Pos p);
};

Status arg_error(Pos p, const std::string& fn, const std::string& what) {
  return make_error(ErrorKind::kInvalidArgument, at(p), fn, ": ", what);
}

Result<std::string> str_arg(const CallArgs& a, size_t i, const char* name, const std::string& fn, Pos p) {
  const Value* v = a.get(i, name);
  if (!v || v->k != Value::K::Str)
    return arg_error(p, fn, str_cat("argument '", name, "' must be a string"));
  return v->s;
}

// Python str.strip family; chars == nullptr strips Unicode whitespace.
std::string py_strip(const std::string& s, const Value* chars, bool left, bool right) {
  std::vector<int32_t> cps = decode_utf8(s);
  std::vector<int32_t> set;
  bool use_set = chars && chars->k == Value::K::Str;
  if (use_set) set = decode_utf8(chars->s);
  auto strip_me = [&](int32_t c) {
    return use_set ? std::find(set.begin(), set.end(), c) != set.end() : py_space(c);
  };
  size_t b = 0, e = cps.size();
  if (left)
    while (b < e && strip_me(cps[b])) ++b;
  if (right)
    while (e > b && strip_me(cps[e - 1])) --e;
  return encode_utf8(cps, b, e);
}

std::string map_case(const std::string& s, int mode) {  // 0 lower, 1 upper, 2 title, 3 capitalize
  std::string out;
  bool prev_cased = false;
  size_t idx = 0;
  for (int32_t c : decode_utf8(s)) {
    int32_t m = c;
    if (mode == 0) m = utf8proc_tolower(c);
    else if (mode == 1) m = utf8proc_toupper(c);
    else if (mode == 2) m = prev_cased ? utf8proc_tolower(c) : utf8proc_totitle(c);
    else m = idx == 0 ? utf8proc_totitle(c) : utf8proc_tolower(c);
    prev_cased = utf8proc_tolower(c) != c || utf8proc_toupper(c) != c;
    append_utf8(out, m);
    ++idx;
  }
  return out;
}

Result<List> py_split(const std::string& s, const Value* sep, int64_t maxsplit, Pos p) {
  List out;
  if (!sep || sep->k == Value::K::None) {
    std::vector<int32_t> cps = decode_utf8(s);
    size_t i = 0, n = cps.size();
    while (i < n) {
      while (i < n && py_space(cps[i])) ++i;
      if (i >= n) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit) {
        size_t e = n;
        while (e > i && py_space(cps[e - 1])) --e;
        out.push_back(Value::str(encode_utf8(cps, i, e)));
        break;
      }
      size_t b = i;
      while (i < n && !py_space(cps[i])) ++i;
      out.push_back(Value::str(encode_utf8(cps, b, i)));
    }
    return out;
  }
  if (sep->k != Value::K::Str) return arg_error(p, "split", "separator must be a string");
  if (sep->s.empty()) return arg_error(p, "split", "empty separator");
  size_t b = 0;
  while (true) {
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit) break;
    size_t f = s.find(sep->s, b);
    if (f == std::string::npos) break;
    out.push_back(Value::str(s.substr(b, f - b)));
    b = f + sep->s.size();
  }
  out.push_back(Value::str(s.substr(b)));
  return out;
}

std::string py_replace(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
  std::string out;
  if (from.empty()) {  // Python inserts `to` between every code point
    std::vector<int32_t> cps = decode_utf8(s);
    int64_t done = 0;
    for (size_t i = 0; i <= cps.size(); ++i) {
      if (count < 0 || done < count) {
        out += to;
        ++done;
      }
      if (i < cps.size()) append_utf8(out, cps[i]);
    }
    return out;
  }
  size_t b = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t f = s.find(from, b);
    if (f == std::string::npos) break;
    out.append(s, b, f - b);
    out += to;
    b = f + from.size();
    ++done;
  }
  out.append(s, b, std::string::npos);
  return out;
}

Value bound(std::function<Result<Value>(CallArgs&, Pos)> f) {
  return Value::func([f = std::move(f)](Renderer&, CallArgs& a, Pos p) { return f(a, p); });
}

Result<Value> string_method(const std::string& s, const std::string& name) {
  auto affix = [s](bool starts) {
    return bound([s, starts](CallArgs& a, Pos p) -> Result<Value> {
      const Value* x = a.get(0, "prefix");
      if (!x) return arg_error(p, starts ? "startswith" : "endswith", "missing argument");
      List opts = x->k == Value::K::List ? *x->list : List{*x};
      for (const Value& o : opts) {
        if (o.k != Value::K::Str) return arg_error(p, starts ? "startswith" : "endswith", "argument must be str");
        bool hit = starts ? s.compare(0, o.s.size(), o.s) == 0 && s.size() >= o.s.size()
                          : s.size() >= o.s.size() && s.compare(s.size() - o.s.size(), o.s.size(), o.s) == 0;
        if (hit) return Value::boolean(true);
      }
      return Value::boolean(false);
    });
  };
  if (name == "startswith") return affix(true);
  if (name == "endswith") return affix(false);
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    bool l = name != "rstrip", r = name != "lstrip";
    return bound([s, l, r](CallArgs& a, Pos) -> Result<Value> {
      const Value* c = a.get(0, "chars");
      return Value::str(py_strip(s, c && c->k != Value::K::None ? c : nullptr, l, r));
    });
  }
  if (name == "split") {
    return bound([s](CallArgs& a, Pos p) -> Result<Value> {
      const Value* m = a.get(1, "maxsplit");
      HLX_ASSIGN_OR_RETURN(List l, py_split(s, a.get(0, "sep"), m && m->is_intlike() ? m->as_int() : -1, p));
      return Value::of_list(std::move(l));
    });
  }
  if (name == "replace") {
    return bound([s](CallArgs& a, Pos p) -> Result<Value> {
      HLX_ASSIGN_OR_RETURN(std::string from, str_arg(a, 0, "old", "replace", p));
      HLX_ASSIGN_OR_RETURN(std::string to, str_arg(a, 1, "new", "replace", p));
      const Value* c = a.get(2, "count");
      std::string r = py_replace(s, from, to, c && c->is_intlike() ? c->as_int() : -1);
      return Value::str(std::move(r));
    });
  }
  int mode = name == "lower" ? 0 : name == "upper" ? 1 : name == "title" ? 2 : name == "capitalize" ? 3 : -1;
  if (mode >= 0)
    return bound([s, mode](CallArgs&, Pos) -> Result<Value> { return Value::str(map_case(s, mode)); });
  if (name == "find" || name == "count") {
    bool find = name == "find";
    return bound([s, find](CallArgs& a, Pos p) -> Result<Value> {
      HLX_ASSIGN_OR_RETURN(std::string sub, str_arg(a, 0, "sub", find ? "find" : "count", p));
      if (find) {
        size_t f = s.find(sub);
        if (f == std::string::npos) return Value::integer(-1);
        return Value::integer(static_cast<int64_t>(decode_utf8(s.substr(0, f)).size()));
      }
      if (sub.empty()) return Value::integer(static_cast<int64_t>(decode_utf8(s).size()) + 1);
      int64_t n = 0;
      for (size_t f = s.find(sub); f != std::string::npos; f = s.find(sub, f + sub.size())) ++n;
      return Value::integer(n);
    });
  }
  if (name == "join") {
    return bound([s](CallArgs& a, Pos p) -> Result<Value> {
      const Value* x = a.get(0, "iterable");
      if (!x || x->k != Value::K::List) return arg_error(p, "join", "argument must be a list");
      std::string out;
      for (size_t i = 0; i < x->list->size(); ++i) {
        if ((*x->list)[i].k != Value::K::Str) return arg_error(p, "join", "sequence item is not a str");
        if (i) out += s;
        out += (*x->list)[i].s;
      }
      return Value::str(std::move(out));
    });
  }
  return Value::undef("'str object' has no attribute '" + name + "'");
}

Result<Value> Renderer::get_attr(const Value& obj, const std::string& name, Pos p) {
  switch (obj.k) {
    case Value::K::Undef: return undefined_error(obj, p);
    case Value::K::Str: return string_method(obj.s, name);
    case Value::K::Dict: {
      // jinja2 tries Python attributes first: d.items/keys/values/get are methods.
      auto d = obj.dict;
      if (name == "items" || name == "keys" || name == "values") {
        int which = name == "items" ? 0 : name == "keys" ? 1 : 2;
        return bound([d, which](CallArgs&, Pos) -> Result<Value> {
          List out;
          for (const auto& kv : d->items) {
            if (which == 0) out.push_back(Value::of_list({Value::str(kv.first), kv.second}));
            else if (which == 1) out.push_back(Value::str(kv.first));
            else out.push_back(kv.second);
          }
          return Value::of_list(std::move(out));
        });
      }
      if (name == "get") {
        return bound([d](CallArgs& a, Pos p) -> Result<Value> {
          const Value* k = a.get(0, "key");
          if (!k) return arg_error(p, "get", "missing key");
          if (k->k == Value::K::Str)
            if (const Value* v = d->find(k->s)) return *v;
          const Value* dflt = a.get(1, "default");
          return dflt ? *dflt : Value::none();
        });
      }
      if (const Value* v = obj.dict->find(name)) return *v;
      return Value::undef("'dict object' has no attribute '" + name + "'");
    }
    case Value::K::Ns:
      if (const Value* v = obj.dict->find(name)) return *v;
      return Value::undef("'Namespace' has no attribute '" + name + "'");
    default:
      return Value::undef(str_cat("'", type_name(obj), " object' has no attribute '", name, "'"));
  }
}

Result<bool> Renderer::contains(const Value& hay, const Value& needle, Pos p) {
  switch (hay.k) {
    case Value::K::Undef: return false;
    case Value::K::Str:
      if (needle.k != Value::K::Str)
        return make_error(ErrorKind::kInvalidArgument, at(p), "'in <string>' requires string as left operand, not ",
                          type_name(needle));
      return hay.s.find(needle.s) != std::string::npos;
    case Value::K::List:
      for (const Value& v : *hay.list)
        if (equal(v, needle)) return true;
      return false;
    case Value::K::Dict:
    case Value::K::Ns:
      return needle.k == Value::K::Str && hay.dict->find(needle.s) != nullptr;
    default:
      return make_error(ErrorKind::kInvalidArgument, at(p), "argument of type '", type_name(hay),
                        "' is not iterable");
  }
}

Result<bool> Renderer::compare(const std::string& op, const Value& l, const Value& r, Pos p) {
  if (op == "==") return equal(l, r);
  if (op == "!=") return !equal(l, r);
  if (op == "in") return contains(r, l, p);
  if (op == "notin") {
    HLX_ASSIGN_OR_RETURN(bool c, contains(r, l, p));
    return !c;
  }
  int c = 0;
  if (l.is_num() && r.is_num()) {
    if (l.is_intlike() && r.is_intlike()) c = l.as_int() < r.as_int() ? -1 : l.as_int() > r.as_int();
    else c = l.as_double() < r.as_double() ? -1 : l.as_double() > r.as_double() ? 1 : 0;
  } else if (l.k == Value::K::Str && r.k == Value::K::Str) {
    c = l.s.compare(r.s);  // byte order of UTF-8 equals code point order
  } else {
    if (l.k == Value::K::Undef) return undefined_error(l, p);
    if (r.k == Value::K::Undef) return undefined_error(r, p);
    return make_error(ErrorKind::kInvalidArgument, at(p), "'", op, "' not supported between '",
                      type_name(l), "' and '", type_name(r), "'");
  }
  if (op == "<") return c < 0;
  if (op == ">") return c > 0;
  if (op == "<=") return c <= 0;
  return c >= 0;
}

Result<Value> Renderer::binary(const std::string& op, const Value& l, const Value& r, Pos p) {
  if (op == "~") {
    std::string s = to_str(l) + to_str(r);
    if (s.size() > opt_.max_output_bytes)
      return make_error(ErrorKind::kOutOfRange, at(p), "string exceeds ", opt_.max_output_bytes, " bytes");
    return Value::str(std::move(s));
  }
  if (l.k == Value::K::Undef) return undefined_error(l, p);
  if (r.k == Value::K::Undef) return undefined_error(r, p);
  auto bad = [&]() {
    return make_error(ErrorKind::kInvalidArgument, at(p), "unsupported operand type(s) for ", op, ": '",
                      type_name(l), "' and '", type_name(r), "'");
  };
  auto overflow = [&]() { return make_error(ErrorKind::kOutOfRange, at(p), "integer overflow in '", op, "'"); };
  if (op == "+") {
    if (l.k == Value::K::Str && r.k == Value::K::Str) {
      if (l.s.size() + r.s.size() > opt_.max_output_bytes)
        return make_error(ErrorKind::kOutOfRange, at(p), "string exceeds ", opt_.max_output_bytes, " bytes");
      return Value::str(l.s + r.s);
    }
    if (l.k == Value::K::List && r.k == Value::K::List) {
      List out = *l.list;
      out.insert(out.end(), r.list->begin(), r.list->end());
      return Value::of_list(std::move(out));
    }
  }
  if (op == "*" && ((l.k == Value::K::Str && r.is_intlike()) || (r.k == Value::K::Str && l.is_intlike()))) {
    const std::string& s = l.k == Value::K::Str ? l.s : r.s;
    int64_t n = l.k == Value::K::Str ? r.as_int() : l.as_int();
    if (n <= 0) return Value::str("");
    if (static_cast<double>(s.size()) * static_cast<double>(n) > static_cast<double>(opt_.max_output_bytes))
      return make_error(ErrorKind::kOutOfRange, at(p), "string repetition exceeds ", opt_.max_output_bytes, " bytes");
    std::string out;
    for (int64_t i = 0; i < n; ++i) out += s;
    return Value::str(std::move(out));
  }
  if (!l.is_num() || !r.is_num()) return bad();
  bool ints = l.is_intlike() && r.is_intlike();
  int64_t a = l.as_int(), b = r.as_int(), res = 0;
  double x = l.as_double(), y = r.as_double();
  if (op == "+") {
    if (!ints) return Value::floating(x + y);
    if (__builtin_add_overflow(a, b, &res)) return overflow();
    return Value::integer(res);
  }
  if (op == "-") {
    if (!ints) return Value::floating(x - y);
    if (__builtin_sub_overflow(a, b, &res)) return overflow();
    return Value::integer(res);
  }
  if (op == "*") {
    if (!ints) return Value::floating(x * y);
    if (__builtin_mul_overflow(a, b, &res)) return overflow();
    return Value::integer(res);
  }
  if (op == "/") {
    if (y == 0) return make_error(ErrorKind::kInvalidArgument, at(p), "division by zero");
    return Value::floating(x / y);
  }
  if (op == "//" || op == "%") {
    if (ints) {
      if (b == 0) return make_error(ErrorKind::kInvalidArgument, at(p), "integer division or modulo by zero");
      if (a == INT64_MIN && b == -1) return overflow();
      int64_t q = a / b, m = a % b;
      if (m != 0 && ((m < 0) != (b < 0))) {  // Python floors
        --q;
        m += b;
      }
      return Value::integer(op == "//" ? q : m);
    }
    if (y == 0) return make_error(ErrorKind::kInvalidArgument, at(p), "float division or modulo by zero");
    double q = std::floor(x / y);
    if (op == "//") return Value::floating(q);
    double m = std::fmod(x, y);
    if (m != 0 && ((m < 0) != (y < 0))) m += y;
    return Value::floating(m);
  }
  if (op == "**") {
    if (ints && b >= 0) {
      int64_t acc = 1;
      for (int64_t i = 0; i < b; ++i) {
        if (__builtin_mul_overflow(acc, a, &acc)) return overflow();
        if (acc == 0 || acc == 1) break;
        if (i > 64 && (acc == 1 || acc == -1)) break;
      }
      if (a == -1) acc = (b % 2) ? -1 : 1;
      return Value::integer(acc);
    }
    return Value::floating(std::pow(x, y));
  }
  return bad();
}

// A test applied as a predicate by select/reject/selectattr/rejectattr.
Result<bool> run_test(Renderer& r, const std::string& name, const Value& v, const List& extra, Pos p) {
  CallArgs a;
  a.pos = extra;
  return r.apply_test(name, v, a, p);
}

Result<Value> Renderer::apply_filter(const std::string& name, const Value& v, CallArgs& a, Pos p) {
  auto need_str = [&](const Value& x) -> Result<std::string> {
    if (x.k == Value::K::Undef) return std::string();
    return to_str(x);
  };
  if (name == "trim") {
    const Value* chars = a.get(0, "chars");
    HLX_ASSIGN_OR_RETURN(std::string s, need_str(v));
    return Value::str(py_strip(s, chars && chars->k == Value::K::Str ? chars : nullptr, true, true));
  }
  if (name == "length" || name == "count") {
    switch (v.k) {
      case Value::K::Undef: return Value::integer(0);
      case Value::K::Str: return Value::integer(static_cast<int64_t>(decode_utf8(v.s).size()));
      case Value::K::List: return Value::integer(static_cast<int64_t>(v.list->size()));
      case Value::K::Dict: return Value::integer(static_cast<int64_t>(v.dict->items.size()));
      default:
        return make_error(ErrorKind::kInvalidArgument, at(p), "object of type '", type_name(v),
                          "' has no len()");
    }
  }
  if (name == "tojson") {
    const Value* ind = a.get(0, "indent");
    const Value* sk = a.get(3, "sort_keys");
    int indent = ind && ind->is_intlike() ? static_cast<int>(std::clamp<int64_t>(ind->as_int(), 0, 64)) : -1;
    std::string out;
    Status s = to_json(v, indent, 0, sk && truthy(*sk), out, 0);
    if (!s.ok()) return make_error(s.kind(), at(p), s.message());
    return Value::str(std::move(out));
  }
  if (name == "string") return v.k == Value::K::Str ? v : Value::str(to_str(v));
  if (name == "lower" || name == "upper" || name == "title" || name == "capitalize") {
    int mode = name == "lower" ? 0 : name == "upper" ? 1 : name == "title" ? 2 : 3;
    return Value::str(map_case(to_str(v), mode));
  }
  if (name == "first" || name == "last") {
    bool first = name == "first";
    if (v.k == Value::K::Undef) return undefined_error(v, p);
    HLX_ASSIGN_OR_RETURN(List items, iterate(v, p));
    if (items.empty()) return Value::undef("no " + name + " item, sequence was empty");
    return first ? items.front() : items.back();
  }
  if (name == "default" || name == "d") {
    const Value* dflt = a.get(0, "default_value");
    const Value* boolean = a.get(1, "boolean");
    bool use = v.k == Value::K::Undef || (boolean && truthy(*boolean) && !truthy(v));
    if (use) return dflt ? *dflt : Value::str("");
    return v;
  }
  if (name == "join") {
    const Value* sep = a.get(0, "d");
    const Value* attr = a.get(1, "attribute");
    HLX_ASSIGN_OR_RETURN(List items, iterate(v, p));
    std::string out, s = sep ? to_str(*sep) : "";
    for (size_t i = 0; i < items.size(); ++i) {
      if (i) out += s;
      Value item = items[i];
      if (attr) {
        HLX_ASSIGN_OR_RETURN(item, get_item(item, *attr, p));
      }
      out += to_str(item);
      if (out.size() > opt_.max_output_bytes)
        return make_error(ErrorKind::kOutOfRange, at(p), "join result exceeds ", opt_.max_output_bytes, " bytes");
    }
    return Value::str(std::move(out));
  }
  if (name == "replace") {
    HLX_ASSIGN_OR_RETURN(std::string from, str_arg(a, 0, "old", "replace", p));
    HLX_ASSIGN_OR_RETURN(std::string to, str_arg(a, 1, "new", "replace", p));
    const Value* c = a.get(2, "count");
    std::string r = py_replace(to_str(v), from, to, c && c->is_intlike() ? c->as_int() : -1);
    if (r.size() > opt_.max_output_bytes)
      return make_error(ErrorKind::kOutOfRange, at(p), "replace result exceeds ", opt_.max_output_bytes, " bytes");
    return Value::str(std::move(r));
  }
  if (name == "items") {
    if (v.k == Value::K::Undef) return Value::of_list({});
    if (v.k != Value::K::Dict)
      return make_error(ErrorKind::kInvalidArgument, at(p), "items filter needs a mapping, got ", type_name(v));
    List out;
    for (const auto& kv : v.dict->items) out.push_back(Value::of_list({Value::str(kv.first), kv.second}));
    return Value::of_list(std::move(out));
  }
  if (name == "list") {
    HLX_ASSIGN_OR_RETURN(List items, iterate(v, p));
    return Value::of_list(std::move(items));
  }
  if (name == "reverse") {
    if (v.k == Value::K::Str) {
      std::vector<int32_t> cps = decode_utf8(v.s);
      std::reverse(cps.begin(), cps.end());
      return Value::str(encode_utf8(cps));
    }
    HLX_ASSIGN_OR_RETURN(List items, iterate(v, p));
    std::reverse(items.begin(), items.end());
    return Value::of_list(std::move(items));
  }
  if (name == "selectattr" || name == "rejectattr" || name == "select" || name == "reject") {
    bool attr_mode = name == "selectattr" || name == "rejectattr";
    bool keep_if = name == "selectattr" || name == "select";
    HLX_ASSIGN_OR_RETURN(List items, iterate(v, p));
    size_t k = 0;
    std::string attr;
    if (attr_mode) {
      if (a.pos.empty() || a.pos[0].k != Value::K::Str)
        return arg_error(p, name, "first argument must be an attribute name");
      attr = a.pos[0].s;
      k = 1;
    }
    std::string test;
    if (k < a.pos.size()) {
      if (a.pos[k].k != Value::K::Str) return arg_error(p, name, "test name must be a string");
      test = a.pos[k].s;
    }
    List extra(a.pos.begin() + static_cast<std::ptrdiff_t>(std::min(a.pos.size(), k + 1)), a.pos.end());
    List out;
    for (const Value& item : items) {
      HLX_RETURN_IF_ERROR(count_iteration(p));
      Value x = item;
      if (attr_mode) {
        // jinja2 resolves dotted paths ("a.b") item by item
        size_t b = 0;
        while (true) {
          size_t dot = attr.find('.', b);
          std::string part = attr.substr(b, dot == std::string::npos ? std::string::npos : dot - b);
          if (x.k == Value::K::Undef) break;
          HLX_ASSIGN_OR_RETURN(x, get_item(x, Value::str(part), p));
          if (dot == std::string::npos) break;
          b = dot + 1;
        }
      }
      bool hit;
      if (test.empty()) {
        hit = truthy(x);
      } else {
        HLX_ASSIGN_OR_RETURN(hit, run_test(*this, test, x, extra, p));
      }
      if (hit == keep_if) out.push_back(item);
    }
    return Value::of_list(std::move(out));
  }
  if (name == "map") {
    HLX_ASSIGN_OR_RETURN(List items, iterate(v, p));
    List out;
    const Value* attr = nullptr;
    for (const auto& kv : a.kw)
      if (kv.first == "attribute") attr = &kv.second;
    const Value* dflt = nullptr;
    for (const auto& kv : a.kw)
      if (kv.first == "default") dflt = &kv.second;
    for (const Value& item : items) {
      HLX_RETURN_IF_ERROR(count_iteration(p));
      if (attr) {
        HLX_ASSIGN_OR_RETURN(Value x, get_item(item, *attr, p));
        if (x.k == Value::K::Undef && dflt) x = *dflt;
        out.push_back(x);
      } else {
        if (a.pos.empty() || a.pos[0].k != Value::K::Str) return arg_error(p, "map", "needs a filter name or attribute=");
        CallArgs rest;
        rest.pos.assign(a.pos.begin() + 1, a.pos.end());
        HLX_ASSIGN_OR_RETURN(Value x, apply_filter(a.pos[0].s, item, rest, p));
        out.push_back(x);
      }
    }
    return Value::of_list(std::move(out));
  }
  if (name == "int") {
    if (v.is_num()) return Value::integer(v.k == Value::K::Float ? static_cast<int64_t>(v.f) : v.as_int());
    if (v.k == Value::K::Str) {
      char* end = nullptr;
      long long x = std::strtoll(v.s.c_str(), &end, 10);
      if (end && *end == 0 && !v.s.empty()) return Value::integer(x);
    }
    const Value* d = a.get(0, "default");
    return d ? *d : Value::integer(0);
  }
  if (name == "float") {
    if (v.is_num()) return Value::floating(v.as_double());
    if (v.k == Value::K::Str) {
      char* end = nullptr;
      double x = std::strtod(v.s.c_str(), &end);
      if (end && *end == 0 && !v.s.empty()) return Value::floating(x);
    }
    const Value* d = a.get(0, "default");
    return d ? *d : Value::floating(0);
  }
  if (name == "abs") {
    if (v.k == Value::K::Float) return Value::floating(std::fabs(v.f));
    if (v.is_intlike() && v.as_int() != INT64_MIN) return Value::integer(std::llabs(v.as_int()));
    return make_error(ErrorKind::kInvalidArgument, at(p), "bad operand type for abs(): '", type_name(v), "'");
  }
  if (name == "safe") return v;
  return make_error(ErrorKind::kUnsupported, at(p), "unsupported filter '", name, "'");
}

Result<bool> Renderer::apply_test(const std::string& name, const Value& v, CallArgs& a, Pos p) {
  using K = Value::K;
  const Value* arg = a.get(0, "other");
  if (name == "defined") return v.k != K::Undef;
  if (name == "undefined") return v.k == K::Undef;
  if (name == "none") return v.k == K::None;
  if (name == "boolean") return v.k == K::Bool;
  if (name == "true") return v.k == K::Bool && v.b;
  if (name == "false") return v.k == K::Bool && !v.b;
  if (name == "integer") return v.k == K::Int;
  if (name == "float") return v.k == K::Float;
  if (name == "number") return v.is_num();
  if (name == "string") return v.k == K::Str;
  if (name == "mapping") return v.k == K::Dict;
  if (name == "iterable") return v.k == K::Str || v.k == K::List || v.k == K::Dict || v.k == K::Undef;
  if (name == "sequence") return v.k == K::Str || v.k == K::List || v.k == K::Dict || v.k == K::Undef;
  if (name == "callable") return v.k == K::Func;
  if (name == "lower" || name == "upper") {
    if (v.k != K::Str) return false;
    return map_case(v.s, name == "lower" ? 0 : 1) == v.s;
  }
  if (name == "odd" || name == "even" || name == "divisibleby") {
    if (!v.is_intlike()) {
      if (v.k == K::Undef) return undefined_error(v, p);
      return make_error(ErrorKind::kInvalidArgument, at(p), "test '", name, "' needs an integer, got ", type_name(v));
    }
    if (name == "odd") return (v.as_int() % 2) != 0;
    if (name == "even") return (v.as_int() % 2) == 0;
    const Value* d = a.get(0, "num");
    if (!d || !d->is_intlike() || d->as_int() == 0)
      return arg_error(p, "divisibleby", "needs a non-zero integer argument");
    return v.as_int() % d->as_int() == 0;
  }
  if (name == "sameas") {
    if (!arg) return arg_error(p, "sameas", "missing argument");
    if (v.k != arg->k) return false;
    if (v.k == K::None || v.k == K::Undef) return true;
    if (v.k == K::Bool) return v.b == arg->b;
    return equal(v, *arg) && (v.k == K::Int || v.list == arg->list) && v.dict == arg->dict;
  }
  static const std::pair<const char*, const char*> cmp[] = {
      {"eq", "=="}, {"equalto", "=="}, {"==", "=="}, {"ne", "!="}, {"!=", "!="}, {"lt", "<"},
      {"lessthan", "<"}, {"<", "<"}, {"le", "<="}, {"<=", "<="}, {"gt", ">"}, {"greaterthan", ">"},
      {">", ">"}, {"ge", ">="}, {">=", ">="}, {"in", "in"}};
  for (const auto& [tn, op] : cmp) {
    if (name == tn) {
      const Value* o = a.get(0, name == "in" ? "seq" : "other");
      if (!o) return arg_error(p, name, "missing argument");
      return compare(op, v, *o, p);
    }
  }
  return make_error(ErrorKind::kUnsupported, at(p), "unsupported test '", name, "'");
}

Result<Value> builtin_range(Renderer& r, CallArgs& a, Pos p) {
  int64_t start = 0, stop = 0, step = 1;
  for (const Value& v : a.pos)
    if (!v.is_intlike()) return arg_error(p, "range", str_cat("arguments must be integers, got ", type_name(v)));
  if (a.pos.size() == 1) stop = a.pos[0].as_int();
  else if (a.pos.size() == 2 || a.pos.size() == 3) {
    start = a.pos[0].as_int();
    stop = a.pos[1].as_int();
    if (a.pos.size() == 3) step = a.pos[2].as_int();
  } else {
    return arg_error(p, "range", "expects 1 to 3 arguments");
  }
  if (step == 0) return arg_error(p, "range", "step must not be zero");
  List out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    HLX_RETURN_IF_ERROR(r.count_iteration(p));
    out.push_back(Value::integer(i));
    if ((step > 0 && i > INT64_MAX - step) || (step < 0 && i < INT64_MIN - step)) break;
  }
  return Value::of_list(std::move(out));
}

Result<Value> builtin_namespace(Renderer&, CallArgs& a, Pos p, Value::K kind) {
  Dict d;
  for (const Value& v : a.pos) {
    if (v.k != Value::K::Dict) return arg_error(p, "namespace", "positional argument must be a mapping");
    for (const auto& kv : v.dict->items) d.set(kv.first, kv.second);
  }
  for (const auto& kv : a.kw) d.set(kv.first, kv.second);
  return make_dict(std::move(d), kind);
}

}  // namespace

Result<Template> Template::parse(const std::string& source, const Options& options) {
  // jinja2 normalises newlines to \n and drops one trailing newline (keep_trailing_newline=False).
  std::string src;
  src.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      src.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      src.push_back(source[i]);
    }
  }
  if (!src.empty() && src.back() == '\n') src.pop_back();
  Lexer lexer(std::move(src), options);
  HLX_ASSIGN_OR_RETURN(std::vector<Token> toks, lexer.run());
  Parser parser(std::move(toks));
  HLX_ASSIGN_OR_RETURN(NodeP root, parser.parse_template());
  Template t;
  t.root_ = root;
  t.options_ = options;
  return t;
}

Result<std::string> Template::render(const nlohmann::ordered_json& context) const {
  if (!context.is_object())
    return make_error(ErrorKind::kInvalidArgument, "template context must be a JSON object, got ",
                      context.type_name());
  Renderer r(options_);
  Frame globals;
  globals.emplace_back("range", Value::func(builtin_range));
  globals.emplace_back("namespace", Value::func([](Renderer& rr, CallArgs& a, Pos p) {
                         return builtin_namespace(rr, a, p, Value::K::Ns);
                       }));
  globals.emplace_back("dict", Value::func([](Renderer& rr, CallArgs& a, Pos p) {
                         return builtin_namespace(rr, a, p, Value::K::Dict);
                       }));
  globals.emplace_back("raise_exception", Value::func([](Renderer&, CallArgs& a, Pos p) -> Result<Value> {
                         std::string msg = a.pos.empty() ? "" : to_str(a.pos[0]);
                         return make_error(ErrorKind::kInvalidArgument, kRaisedPrefix, msg, " (",
                                           "line ", p.line, ", column ", p.col, ")");
                       }));
  for (auto it = context.begin(); it != context.end(); ++it) {
    Value v = from_json(*it);
    bool replaced = false;
    for (auto& kv : globals)
      if (kv.first == it.key()) {
        kv.second = v;
        replaced = true;
      }
    if (!replaced) globals.emplace_back(it.key(), std::move(v));
  }
  r.frames_.push_back(std::move(globals));
  r.frames_.emplace_back();  // top-level template scope
  HLX_RETURN_IF_ERROR(r.exec(*root_));
  return std::move(r.out_);
}

}  // namespace hlx::jinja
