// Built-ins the renderer dispatches to: filters (x | f), tests (x is t), str and dict methods
// (s.strip(), d.items()) and the range(), namespace() and dict() globals.
#include <utf8proc.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>

#include "tokenizer/jinja_internal.h"

namespace hlx::jinja::internal {
namespace {

Status arg_error(Pos p, const std::string& fn, const std::string& what) {
  return make_error(ErrorKind::kInvalidArgument, at(p), fn, ": ", what);
}

Result<std::string> str_arg(const CallArgs& a, size_t i, const char* name, const std::string& fn, Pos p) {
  const Value* v = a.get(i, name);
  if (!v || v->k != Value::K::Str) return arg_error(p, fn, str_cat("argument '", name, "' must be a string"));
  return v->s;
}

// Python str.strip family; chars == nullptr strips Unicode whitespace.
std::string py_strip(const std::string& s, const Value* chars, bool left, bool right) {
  std::vector<int32_t> cps = decode_utf8(s);
  std::vector<int32_t> set;
  bool use_set = chars && chars->k == Value::K::Str;
  if (use_set) set = decode_utf8(chars->s);
  auto strip_me = [&](int32_t c) { return use_set ? std::find(set.begin(), set.end(), c) != set.end() : py_space(c); };
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
    if (mode == 0)
      m = utf8proc_tolower(c);
    else if (mode == 1)
      m = utf8proc_toupper(c);
    else if (mode == 2)
      m = prev_cased ? utf8proc_tolower(c) : utf8proc_totitle(c);
    else
      m = idx == 0 ? utf8proc_totitle(c) : utf8proc_tolower(c);
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
  if (mode >= 0) return bound([s, mode](CallArgs&, Pos) -> Result<Value> { return Value::str(map_case(s, mode)); });
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

// A test applied as a predicate by select/reject/selectattr/rejectattr.
Result<bool> run_test(Renderer& r, const std::string& name, const Value& v, const List& extra, Pos p) {
  CallArgs a;
  a.pos = extra;
  return r.apply_test(name, v, a, p);
}

}  // namespace

Result<Value> Renderer::get_attr(const Value& obj, const std::string& name, Pos p) {
  switch (obj.k) {
    case Value::K::Undef:
      return undefined_error(obj, p);
    case Value::K::Str:
      return string_method(obj.s, name);
    case Value::K::Dict: {
      // jinja2 tries Python attributes first: d.items/keys/values/get are methods.
      auto d = obj.dict;
      if (name == "items" || name == "keys" || name == "values") {
        int which = name == "items" ? 0 : name == "keys" ? 1 : 2;
        return bound([d, which](CallArgs&, Pos) -> Result<Value> {
          List out;
          for (const auto& kv : d->items) {
            if (which == 0)
              out.push_back(Value::of_list({Value::str(kv.first), kv.second}));
            else if (which == 1)
              out.push_back(Value::str(kv.first));
            else
              out.push_back(kv.second);
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
      case Value::K::Undef:
        return Value::integer(0);
      case Value::K::Str:
        return Value::integer(static_cast<int64_t>(decode_utf8(v.s).size()));
      case Value::K::List:
        return Value::integer(static_cast<int64_t>(v.list->size()));
      case Value::K::Dict:
        return Value::integer(static_cast<int64_t>(v.dict->items.size()));
      default:
        return make_error(ErrorKind::kInvalidArgument, at(p), "object of type '", type_name(v), "' has no len()");
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
        if (a.pos.empty() || a.pos[0].k != Value::K::Str)
          return arg_error(p, "map", "needs a filter name or attribute=");
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
      {"eq", "=="},      {"equalto", "=="}, {"==", "=="}, {"ne", "!="}, {"!=", "!="}, {"lt", "<"},
      {"lessthan", "<"}, {"<", "<"},        {"le", "<="}, {"<=", "<="}, {"gt", ">"},  {"greaterthan", ">"},
      {">", ">"},        {"ge", ">="},      {">=", ">="}, {"in", "in"}};
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
  if (a.pos.size() == 1)
    stop = a.pos[0].as_int();
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

}  // namespace hlx::jinja::internal
