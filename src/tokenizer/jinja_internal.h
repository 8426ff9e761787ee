// Internal declarations shared by the parts of the Jinja2 engine (jinja_*.cc): values, tokens, the
// parsed tree, the renderer and the helpers more than one part calls. Not part of the public API.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "tokenizer/jinja.h"

namespace hlx::jinja {
namespace internal {

struct Pos {
  int line = 1, col = 1;
};

// "line L, column C: ", the prefix of every error message that points into the template.
std::string at(Pos p);

// ------------------------------------------------------------------------------------------------
// UTF-8 helpers (jinja_value.cc): Python strings index by code point, so length/slicing/strip work
// on code points. An invalid byte decodes to 0xDC00 | byte and encodes back to the same byte.

std::vector<int32_t> decode_utf8(const std::string& s);
void append_utf8(std::string& out, int32_t cp);
std::string encode_utf8(const std::vector<int32_t>& cps, size_t b = 0, size_t e = SIZE_MAX);
// Python's str.isspace() set.
bool py_space(int32_t c);

// ------------------------------------------------------------------------------------------------
// Values (jinja_value.cc)

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

Value make_dict(Dict d, Value::K k = Value::K::Dict);

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

const char* type_name(const Value& v);  // Python's type name, for error messages
Value from_json(const nlohmann::ordered_json& j);
// str(v) as Python/Jinja render it.
std::string to_str(const Value& v);
std::string repr(const Value& v);
bool truthy(const Value& v);
bool equal(const Value& a, const Value& b);
// JSON as Python's json.dumps(ensure_ascii=False) writes it (HF's tojson filter).
// indent < 0 writes one line; depth counts nesting (bounded).
Status to_json(const Value& v, int indent, int level, bool sort_keys, std::string& out, int depth);

// ------------------------------------------------------------------------------------------------
// Tokens (jinja_lexer.cc)

enum class T { Text, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, Str, Int, Float, Op, Eof };

struct Token {
  T type;
  std::string text;  // Text data, name, string value, operator
  int64_t i = 0;
  double f = 0;
  Pos pos;
};

// Template source (newlines already normalised to \n) -> tokens, the last one T::Eof.
Result<std::vector<Token>> lex(std::string source, const Options& options);

// ------------------------------------------------------------------------------------------------
// Tree (built by jinja_parser.cc, walked by jinja_render.cc)

struct Expr {
  enum class K {
    Lit,
    Name,
    List,
    Dict,
    Tuple,
    Attr,
    Index,
    Slice,
    Call,
    Filter,
    Test,
    Neg,
    Pos,
    Not,
    And,
    Or,
    Bin,
    Compare,
    Cond
  } k;
  Pos pos;
  Value lit;
  std::string name;                      // Name, Attr, Filter, Test, Bin operator
  bool negated = false;                  // Test: `is not`
  std::vector<std::shared_ptr<Expr>> a;  // operands / items / args
  std::vector<std::pair<std::string, std::shared_ptr<Expr>>> kw;
  std::vector<std::string> ops;  // Compare operators
};
using ExprP = std::shared_ptr<Expr>;

}  // namespace internal

// Node stays in hlx::jinja, not internal: jinja.h forward-declares it for Template::root_.
struct Node {
  enum class K { Body, Text, Out, If, For, Set, SetAttr, SetBlock, Macro, Break, Continue } k;
  internal::Pos pos;
  std::string text;                           // Text; SetAttr attribute; Macro name
  std::vector<std::string> targets;           // For/Set names; Macro params
  std::vector<internal::ExprP> exprs;         // Out/Set value; If conditions; For iterable,filter; defaults
  std::vector<std::shared_ptr<Node>> bodies;  // If branches (+else); For body, else; Body children
};

namespace internal {

using NodeP = std::shared_ptr<Node>;

// Tokens -> the statement tree, a Node::K::Body root.
Result<NodeP> parse_tokens(std::vector<Token> tokens);

// ------------------------------------------------------------------------------------------------
// Renderer (jinja_render.cc; get_attr, apply_filter and apply_test are in jinja_filters.cc)

using Frame = std::vector<std::pair<std::string, Value>>;

enum class Flow { kNormal, kBreak, kContinue };

class Renderer {
 public:
  Renderer(const Options& opt) : opt_(opt) {}

  Options opt_;
  std::vector<Frame> frames_;
  std::string out_;
  bool callers_output_limit_ = false;  // opt_.max_output_bytes came from render()'s caller
  int64_t iterations_ = 0;
  int depth_ = 0;
  Flow flow_ = Flow::kNormal;

  struct Guard {
    int& d;
    explicit Guard(int& x) : d(x) { ++d; }
    ~Guard() { --d; }
  };

  Value lookup(const std::string& name) const;
  void assign(const std::string& name, Value v);
  Status undefined_error(const Value& v, Pos p);
  Status write(const std::string& s);
  Status count_iteration(Pos p);

  // ---- statements
  Status exec(const Node& n);
  Status unpack(const std::vector<std::string>& targets, const Value& v, Pos p);
  Result<Value> call_macro(const Node& def, CallArgs& args, Pos p);
  Result<List> iterate(const Value& v, Pos p);
  Status exec_for(const Node& n);
  Status bind_targets(const Node& n, const Value& item);

  // ---- expressions
  Result<Value> eval(const Expr& e);
  Result<CallArgs> eval_args(const Expr& e, size_t first);
  Result<Value> eval_slice(const Expr& e);
  Result<Value> get_item(const Value& obj, const Value& key, Pos p);
  Result<bool> contains(const Value& hay, const Value& needle, Pos p);
  Result<bool> compare(const std::string& op, const Value& l, const Value& r, Pos p);
  Result<Value> binary(const std::string& op, const Value& l, const Value& r, Pos p);

  // ---- built-ins (jinja_filters.cc)
  Result<Value> get_attr(const Value& obj, const std::string& name, Pos p);
  Result<Value> apply_filter(const std::string& name, const Value& v, CallArgs& args, Pos p);
  Result<bool> apply_test(const std::string& name, const Value& v, CallArgs& args, Pos p);
};

// The range(), namespace() and dict() globals (jinja_filters.cc); kind is Value::K::Ns or Dict.
Result<Value> builtin_range(Renderer& r, CallArgs& a, Pos p);
Result<Value> builtin_namespace(Renderer&, CallArgs& a, Pos p, Value::K kind);

}  // namespace internal
}  // namespace hlx::jinja
