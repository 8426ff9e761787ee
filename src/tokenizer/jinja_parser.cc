// Parser: tokens -> statement tree (Node) with expression trees (Expr), following jinja2's grammar
// and operator precedence; nesting is bounded so hostile templates cannot overflow the stack.
#include <algorithm>
#include <initializer_list>

#include "tokenizer/jinja_internal.h"

namespace hlx::jinja::internal {
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
      case T::Eof:
        return " (found end of template)";
      case T::BlockEnd:
        return " (found '%}')";
      case T::VarEnd:
        return " (found '}}')";
      case T::Text:
        return " (found template text)";
      default:
        return " (found '" + t.text + "')";
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
          return make_error(ErrorKind::kParse, at(tk.pos), "unexpected end of template, expected '", stops.back(), "'");
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
      if (cur().type == T::Op && (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == ">" ||
                                  cur().text == "<=" || cur().text == ">=")) {
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
      default:
        break;
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
                   (cur().type == T::Name && !is_name("and") && !is_name("or") && !is_name("else") && !is_name("if") &&
                    !is_name("in") && !is_name("not") && !is_name("is"))) {
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

Result<NodeP> parse_tokens(std::vector<Token> tokens) {
  Parser parser(std::move(tokens));
  return parser.parse_template();
}

}  // namespace hlx::jinja::internal
