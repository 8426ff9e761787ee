// The tree-walking renderer: runs statements (if/for/set/macro, loop controls) and evaluates
// expressions with Python semantics for indexing, slicing, comparison and arithmetic.
#include <algorithm>
#include <cmath>

#include "tokenizer/jinja_internal.h"

namespace hlx::jinja::internal {

Value Renderer::lookup(const std::string& name) const {
  for (auto f = frames_.rbegin(); f != frames_.rend(); ++f)
    for (const auto& kv : *f)
      if (kv.first == name) return kv.second;
  return Value::undef("'" + name + "' is undefined");
}

void Renderer::assign(const std::string& name, Value v) {
  Frame& f = frames_.back();
  for (auto& kv : f)
    if (kv.first == name) {
      kv.second = std::move(v);
      return;
    }
  f.emplace_back(name, std::move(v));
}

Status Renderer::undefined_error(const Value& v, Pos p) {
  return make_error(ErrorKind::kInvalidArgument, at(p), v.s.empty() ? "value is undefined" : v.s);
}

Status Renderer::write(const std::string& s) {
  if (out_.size() + s.size() > opt_.max_output_bytes)
    return make_error(callers_output_limit_ ? ErrorKind::kCapacityExceeded : ErrorKind::kOutOfRange,
                      "rendered output exceeds ", opt_.max_output_bytes, " bytes");
  out_ += s;
  return ok_status();
}

Status Renderer::count_iteration(Pos p) {
  if (++iterations_ > opt_.max_loop_iterations)
    return make_error(ErrorKind::kOutOfRange, at(p), "template exceeded ", opt_.max_loop_iterations,
                      " loop iterations");
  return ok_status();
}

// ---- statements
Status Renderer::exec(const Node& n) {
  Guard g(depth_);
  if (depth_ > opt_.max_depth)
    return make_error(ErrorKind::kOutOfRange, at(n.pos), "template recursion deeper than ", opt_.max_depth);
  switch (n.k) {
    case Node::K::Body:
      for (const auto& c : n.bodies) {
        HLX_RETURN_IF_ERROR(exec(*c));
        if (flow_ != Flow::kNormal) break;
      }
      return ok_status();
    case Node::K::Text:
      return write(n.text);
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
    case Node::K::For:
      return exec_for(n);
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
        return make_error(ErrorKind::kInvalidArgument, at(n.pos), "cannot assign attribute '", n.text, "' on '",
                          n.targets[0], "' of type ", type_name(ns), " (only namespace() objects are assignable)");
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
      assign(n.text, Value::func([def](Renderer& r, CallArgs& args, Pos p) { return r.call_macro(*def, args, p); }));
      return ok_status();
    }
    case Node::K::Break:
      flow_ = Flow::kBreak;
      return ok_status();
    case Node::K::Continue:
      flow_ = Flow::kContinue;
      return ok_status();
  }
  return ok_status();
}

Status Renderer::unpack(const std::vector<std::string>& targets, const Value& v, Pos p) {
  HLX_ASSIGN_OR_RETURN(List items, iterate(v, p));
  if (items.size() != targets.size())
    return make_error(ErrorKind::kInvalidArgument, at(p), "cannot unpack ", items.size(), " values into ",
                      targets.size(), " names");
  for (size_t i = 0; i < targets.size(); ++i) assign(targets[i], items[i]);
  return ok_status();
}

Result<Value> Renderer::call_macro(const Node& def, CallArgs& args, Pos p) {
  if (args.pos.size() > def.targets.size())
    return make_error(ErrorKind::kInvalidArgument, at(p), "macro '", def.text, "' takes ", def.targets.size(),
                      " arguments, got ", args.pos.size());
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
      if (!d.ok())
        s = d.status();
      else
        assign(def.targets[i], *d);
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

Result<List> Renderer::iterate(const Value& v, Pos p) {
  switch (v.k) {
    case Value::K::Undef:
      return List{};
    case Value::K::List:
      return *v.list;
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
      return make_error(ErrorKind::kInvalidArgument, at(p), "'", type_name(v), "' object is not iterable");
  }
}

Status Renderer::exec_for(const Node& n) {
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
               if (a.pos.empty()) return make_error(ErrorKind::kInvalidArgument, at(p), "loop.cycle() needs arguments");
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

Status Renderer::bind_targets(const Node& n, const Value& item) {
  if (n.targets.size() == 1) {
    assign(n.targets[0], item);
    return ok_status();
  }
  return unpack(n.targets, item, n.pos);
}

// ---- expressions
Result<Value> Renderer::eval(const Expr& e) {
  Guard g(depth_);
  if (depth_ > opt_.max_depth)
    return make_error(ErrorKind::kOutOfRange, at(e.pos), "expression evaluation deeper than ", opt_.max_depth);
  switch (e.k) {
    case Expr::K::Lit:
      return e.lit;
    case Expr::K::Name:
      return lookup(e.name);
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
          return make_error(ErrorKind::kUnsupported, at(e.a[i]->pos), "only string dict keys are supported, got ",
                            type_name(k));
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
    case Expr::K::Slice:
      return eval_slice(e);
    case Expr::K::Call: {
      HLX_ASSIGN_OR_RETURN(Value fn, eval(*e.a[0]));
      HLX_ASSIGN_OR_RETURN(CallArgs args, eval_args(e, 1));
      if (fn.k == Value::K::Undef) return undefined_error(fn, e.pos);
      if (fn.k != Value::K::Func)
        return make_error(ErrorKind::kInvalidArgument, at(e.pos), "'", type_name(fn), "' object is not callable");
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
      if (v.as_int() == INT64_MIN) return make_error(ErrorKind::kOutOfRange, at(e.pos), "integer overflow");
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

Result<CallArgs> Renderer::eval_args(const Expr& e, size_t first) {
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

Result<Value> Renderer::eval_slice(const Expr& e) {
  HLX_ASSIGN_OR_RETURN(Value obj, eval(*e.a[0]));
  if (obj.k == Value::K::Undef) return undefined_error(obj, e.pos);
  int64_t idx[3] = {0, 0, 1};
  bool given[3] = {false, false, false};
  for (int k = 0; k < 3; ++k) {
    if (!e.a[static_cast<size_t>(k) + 1]) continue;
    HLX_ASSIGN_OR_RETURN(Value v, eval(*e.a[static_cast<size_t>(k) + 1]));
    if (v.k == Value::K::None) continue;
    if (!v.is_intlike())
      return make_error(ErrorKind::kInvalidArgument, at(e.pos), "slice indices must be integers or None, got ",
                        type_name(v));
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
  return make_error(ErrorKind::kInvalidArgument, at(e.pos), "'", type_name(obj), "' object is not subscriptable");
}

Result<Value> Renderer::get_item(const Value& obj, const Value& key, Pos p) {
  switch (obj.k) {
    case Value::K::Undef:
      return undefined_error(obj, p);
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
    default:
      break;
  }
  if (key.k == Value::K::Str) return get_attr(obj, key.s, p);
  return Value::undef(str_cat("'", type_name(obj), " object' has no item ", repr(key)));
}

Result<bool> Renderer::contains(const Value& hay, const Value& needle, Pos p) {
  switch (hay.k) {
    case Value::K::Undef:
      return false;
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
      return make_error(ErrorKind::kInvalidArgument, at(p), "argument of type '", type_name(hay), "' is not iterable");
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
    if (l.is_intlike() && r.is_intlike())
      c = l.as_int() < r.as_int() ? -1 : l.as_int() > r.as_int();
    else
      c = l.as_double() < r.as_double() ? -1 : l.as_double() > r.as_double() ? 1 : 0;
  } else if (l.k == Value::K::Str && r.k == Value::K::Str) {
    c = l.s.compare(r.s);  // byte order of UTF-8 equals code point order
  } else {
    if (l.k == Value::K::Undef) return undefined_error(l, p);
    if (r.k == Value::K::Undef) return undefined_error(r, p);
    return make_error(ErrorKind::kInvalidArgument, at(p), "'", op, "' not supported between '", type_name(l), "' and '",
                      type_name(r), "'");
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
    return make_error(ErrorKind::kInvalidArgument, at(p), "unsupported operand type(s) for ", op, ": '", type_name(l),
                      "' and '", type_name(r), "'");
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

}  // namespace hlx::jinja::internal
