// Modules, functions, SSA values and ops (pretty and generic). Attribute and type syntax live in
// text_attr_parser.cc; which pretty syntax an op uses is in text_ops.cc.
#include "stablehlo/parser.h"

#include <fstream>
#include <sstream>

#include "stablehlo/text_ops.h"
#include "stablehlo/text_parser.h"

namespace hlx::shlo {

namespace text {

namespace {

std::string value_name(std::string_view n) { return std::string("%").append(n); }

std::string types_str(const std::vector<TensorType>& ts) {
  std::string s = "(";
  for (size_t i = 0; i < ts.size(); ++i) s += (i ? ", " : "") + ts[i].to_string();
  return s + ")";
}

}  // namespace

Result<Module> TextParser::parse() {
  Module m;
  auto parse_alias = [&]() -> Status {
    size_t at = sc_.pos();
    sc_.try_consume("#");
    std::string name(sc_.suffix_id());
    if (name.empty()) return sc_.error_at(at, "expected alias name after '#'");
    HLX_RETURN_IF_ERROR(sc_.expect("="));
    if (sc_.starts_with("loc")) return skip_location();
    HLX_ASSIGN_OR_RETURN(Attr a, parse_attr());
    aliases_[name] = std::move(a);
    return ok_status();
  };
  while (sc_.peek() == '#') HLX_RETURN_IF_ERROR(parse_alias());
  if (sc_.try_keyword("module") || sc_.try_keyword("builtin.module")) {
    if (sc_.try_consume("@")) {
      if (sc_.pos() < sc_.text().size() && sc_.text()[sc_.pos()] == '"') {
        HLX_ASSIGN_OR_RETURN(m.name, sc_.string_literal());
      } else {
        m.name = std::string(sc_.suffix_id());
        if (m.name.empty()) return sc_.error("expected module name after '@'");
      }
    }
    if (sc_.try_keyword("attributes")) {
      HLX_RETURN_IF_ERROR(sc_.expect("{"));
      HLX_ASSIGN_OR_RETURN(m.attrs, parse_attr_dict_body());
    }
    HLX_RETURN_IF_ERROR(sc_.expect("{"));
    while (!sc_.try_consume("}")) {
      if (sc_.at_end()) return sc_.error("expected '}' to close the module, found end of input");
      HLX_RETURN_IF_ERROR(parse_function(m));
    }
    HLX_RETURN_IF_ERROR(skip_location());
  } else {
    // A file of bare functions is an implicit module, as in MLIR.
    while (!sc_.at_end() && sc_.peek() != '#') HLX_RETURN_IF_ERROR(parse_function(m));
  }
  while (sc_.peek() == '#') HLX_RETURN_IF_ERROR(parse_alias());
  if (!sc_.at_end()) return sc_.error("expected end of input after the module, found ", sc_.found());
  if (m.functions.empty()) return sc_.error("module has no functions");
  return m;
}

Status TextParser::define(std::string name, std::vector<ValueId> ids, size_t pos) {
  for (const Scope& s : scopes_)
    if (s.names.count(name)) return sc_.error_at(pos, "redefinition of value ", value_name(name));
  scopes_.back().names.emplace(std::move(name), std::move(ids));
  return ok_status();
}

Result<ValueId> TextParser::parse_use() {
  size_t at = sc_.pos();
  if (!sc_.try_consume("%")) return sc_.error("expected SSA value, found ", sc_.found());
  std::string name(sc_.suffix_id());
  if (name.empty()) return sc_.error_at(at, "expected value name after '%'");
  std::optional<int64_t> index;
  if (sc_.pos() < sc_.text().size() && sc_.text()[sc_.pos()] == '#') {
    sc_.set_pos(sc_.pos() + 1);
    if (!is_digit(sc_.text().size() > sc_.pos() ? sc_.text()[sc_.pos()] : '\0'))
      return sc_.error("expected result number after '#'");
    HLX_ASSIGN_OR_RETURN(int64_t k, sc_.integer());
    index = k;
  }
  for (auto s = scopes_.rbegin(); s != scopes_.rend(); ++s) {
    auto it = s->names.find(name);
    if (it == s->names.end()) continue;
    const std::vector<ValueId>& group = it->second;
    if (!index) {
      if (group.size() != 1)
        return sc_.error_at(at, "value ", value_name(name), " names ", group.size(), " results; use ", value_name(name),
                            "#N");
      return group[0];
    }
    if (*index < 0 || *index >= int64_t(group.size()))
      return sc_.error_at(at, "result number ", *index, " out of range for ", value_name(name), " which has ",
                          group.size(), " results");
    return group[size_t(*index)];
  }
  return sc_.error_at(at, "use of undefined value ", value_name(name));
}

Status TextParser::parse_uses(std::vector<ValueId>& out) {
  if (sc_.peek() != '%') return ok_status();
  while (true) {
    HLX_ASSIGN_OR_RETURN(ValueId v, parse_use());
    out.push_back(v);
    // A ',' continues the list only when another value follows: pretty syntaxes put keywords
    // after a comma (`%a, %b, dim = 0`).
    size_t save = sc_.pos();
    if (!sc_.try_consume(",")) break;
    if (sc_.peek() != '%') {
      sc_.set_pos(save);
      break;
    }
  }
  return ok_status();
}

Status TextParser::check_operand_types(const Op& op, const std::vector<TensorType>& types, size_t pos) {
  if (types.size() != op.operands.size())
    return sc_.error_at(pos, "'", op.name, "' has ", op.operands.size(), " operands but its type lists ", types.size(),
                        " ", types_str(types));
  for (size_t i = 0; i < types.size(); ++i) {
    const TensorType& actual = fn_->type_of(op.operands[i]);
    if (actual != types[i])
      return sc_.error_at(pos, "operand #", i, " of '", op.name, "' has type ", actual.to_string(),
                          " but the op's type says ", types[i].to_string());
  }
  return ok_status();
}

Status TextParser::parse_function(Module& m) {
  size_t at = sc_.pos();
  if (!sc_.try_keyword("func.func") && !sc_.try_keyword("func"))
    return sc_.error("expected 'func.func', found ", sc_.found());
  Function f;
  if (sc_.try_keyword("private"))
    f.is_public = false;
  else if (!sc_.try_keyword("public") && sc_.try_keyword("nested"))
    f.is_public = false;
  HLX_RETURN_IF_ERROR(sc_.expect("@"));
  if (sc_.pos() < sc_.text().size() && sc_.text()[sc_.pos()] == '"') {
    HLX_ASSIGN_OR_RETURN(f.name, sc_.string_literal());
  } else {
    f.name = std::string(sc_.suffix_id());
  }
  if (f.name.empty()) return sc_.error("expected function name after '@'");
  if (m.find_function(f.name)) return sc_.error_at(at, "redefinition of function @", f.name);
  fn_ = &f;
  scopes_.assign(1, Scope{});
  HLX_RETURN_IF_ERROR(sc_.expect("("));
  if (!sc_.try_consume(")")) {
    do {
      size_t arg_at = sc_.pos();
      HLX_RETURN_IF_ERROR(sc_.expect("%"));
      std::string name(sc_.suffix_id());
      if (name.empty()) return sc_.error_at(arg_at, "expected argument name after '%'");
      HLX_RETURN_IF_ERROR(sc_.expect(":"));
      HLX_ASSIGN_OR_RETURN(TensorType t, parse_tensor_type());
      AttrDict attrs;
      HLX_RETURN_IF_ERROR(parse_optional_attr_dict(attrs));
      HLX_RETURN_IF_ERROR(skip_location());
      ValueId v = f.new_value(std::move(t));
      HLX_RETURN_IF_ERROR(define(std::move(name), {v}, arg_at));
      f.args.push_back(v);
      f.arg_attrs.push_back(std::move(attrs));
    } while (sc_.try_consume(","));
    HLX_RETURN_IF_ERROR(sc_.expect(")"));
  }
  if (sc_.try_consume("->")) {
    bool parens = sc_.try_consume("(");
    if (!parens || !sc_.try_consume(")")) {
      do {
        HLX_ASSIGN_OR_RETURN(TensorType t, parse_tensor_type());
        AttrDict attrs;
        if (parens) HLX_RETURN_IF_ERROR(parse_optional_attr_dict(attrs));
        f.result_types.push_back(std::move(t));
        f.result_attrs.push_back(std::move(attrs));
      } while (parens && sc_.try_consume(","));
      if (parens) HLX_RETURN_IF_ERROR(sc_.expect(")"));
    }
  }
  if (sc_.try_keyword("attributes")) {
    HLX_RETURN_IF_ERROR(sc_.expect("{"));
    HLX_ASSIGN_OR_RETURN(f.attrs, parse_attr_dict_body());
  }
  if (sc_.peek() != '{') return sc_.error("expected '{' to begin the body of @", f.name, ", found ", sc_.found());
  Block body;
  HLX_RETURN_IF_ERROR(parse_region(body, /*allow_label=*/false));
  f.body = std::move(body.ops);
  HLX_RETURN_IF_ERROR(skip_location());
  if (f.body.empty() || f.body.back().name != "func.return")
    return sc_.error_at(at, "body of @", f.name, " must end with 'return'");
  fn_ = nullptr;
  m.functions.push_back(std::move(f));
  return ok_status();
}

// `{ [^bb0(%a: T, ...):] ops }`, in a new value scope. Block arguments already in `block.args` were
// defined by the caller (reduce's `reducer(...)` names them before the braces).
Status TextParser::parse_region(Block& block, bool allow_label) {
  if (int(scopes_.size()) > kMaxNesting) return sc_.error("regions nested deeper than ", kMaxNesting);
  HLX_RETURN_IF_ERROR(sc_.expect("{"));
  if (sc_.peek() == '^') {
    size_t at = sc_.pos();
    if (!allow_label) return sc_.error("block labels are not allowed here");
    sc_.try_consume("^");
    sc_.suffix_id();
    if (sc_.try_consume("(")) {
      if (!sc_.try_consume(")")) {
        do {
          size_t arg_at = sc_.pos();
          HLX_RETURN_IF_ERROR(sc_.expect("%"));
          std::string name(sc_.suffix_id());
          if (name.empty()) return sc_.error_at(arg_at, "expected block argument name after '%'");
          HLX_RETURN_IF_ERROR(sc_.expect(":"));
          HLX_ASSIGN_OR_RETURN(TensorType t, parse_tensor_type());
          HLX_RETURN_IF_ERROR(skip_location());
          ValueId v = fn_->new_value(std::move(t));
          HLX_RETURN_IF_ERROR(define(std::move(name), {v}, arg_at));
          block.args.push_back(v);
        } while (sc_.try_consume(","));
        HLX_RETURN_IF_ERROR(sc_.expect(")"));
      }
    }
    if (!sc_.try_consume(":")) return sc_.error_at(at, "expected ':' after block label");
  }
  return parse_block_body(block);
}

Status TextParser::parse_block_body(Block& block) {
  while (!sc_.try_consume("}")) {
    if (sc_.at_end()) return sc_.error("expected '}' to close a region, found end of input");
    if (sc_.peek() == '^') return sc_.unsupported("regions with more than one block are not supported");
    HLX_RETURN_IF_ERROR(parse_op(block.ops));
  }
  return ok_status();
}

Status TextParser::parse_op(std::vector<Op>& out) {
  size_t op_pos = sc_.pos();
  struct ResultName {
    std::string name;
    int64_t count;
    size_t pos;
  };
  std::vector<ResultName> names;
  if (sc_.peek() == '%') {
    do {
      size_t at = sc_.pos();
      HLX_RETURN_IF_ERROR(sc_.expect("%"));
      std::string name(sc_.suffix_id());
      if (name.empty()) return sc_.error_at(at, "expected result name after '%'");
      int64_t count = 1;
      if (sc_.pos() < sc_.text().size() && sc_.text()[sc_.pos()] == ':') {
        sc_.set_pos(sc_.pos() + 1);
        HLX_ASSIGN_OR_RETURN(count, sc_.integer());
        if (count < 1 || count > 65536) return sc_.error_at(at, "invalid result count ", count);
      }
      names.push_back({std::move(name), count, at});
    } while (sc_.try_consume(","));
    HLX_RETURN_IF_ERROR(sc_.expect("="));
  }
  Op op;
  std::vector<TensorType> result_types;
  size_t name_at = sc_.pos();
  if (sc_.peek() == '"') {
    HLX_ASSIGN_OR_RETURN(op.name, sc_.string_literal());
    if (op.name.empty()) return sc_.error_at(name_at, "empty op name");
    HLX_RETURN_IF_ERROR(parse_generic_op(op, result_types));
  } else {
    std::string_view id = sc_.bare_id();
    if (id.empty()) return sc_.error("expected op name, found ", sc_.found());
    // Inside func.func the func dialect is the default: `call`, `return`.
    op.name = id.find('.') == std::string_view::npos ? "func." + std::string(id) : std::string(id);
    if (syntax_of(op.name) == Syntax::kGeneric)
      return sc_.error_at(name_at, "op '", op.name, "' has no pretty syntax hlx knows; write it in generic form (\"",
                          op.name, "\"(...))");
    HLX_RETURN_IF_ERROR(parse_pretty_op(op, op_pos, result_types));
  }
  HLX_RETURN_IF_ERROR(skip_location());
  int64_t named = 0;
  for (const ResultName& n : names) named += n.count;
  if (!names.empty() && named != int64_t(result_types.size()))
    return sc_.error_at(op_pos, "'", op.name, "' produces ", result_types.size(), " results but ", named, " are named");
  for (TensorType& t : result_types) op.results.push_back(fn_->new_value(std::move(t)));
  size_t next = 0;
  for (ResultName& n : names) {
    std::vector<ValueId> ids(op.results.begin() + long(next), op.results.begin() + long(next + size_t(n.count)));
    next += size_t(n.count);
    HLX_RETURN_IF_ERROR(define(std::move(n.name), std::move(ids), n.pos));
  }
  out.push_back(std::move(op));
  return ok_status();
}

Status TextParser::parse_generic_op(Op& op, std::vector<TensorType>& result_types) {
  size_t at = sc_.pos();
  HLX_RETURN_IF_ERROR(sc_.expect("("));
  HLX_RETURN_IF_ERROR(parse_uses(op.operands));
  HLX_RETURN_IF_ERROR(sc_.expect(")"));
  if (sc_.peek() == '[') return sc_.unsupported("successor blocks are not supported");
  if (sc_.peek() == '<') {
    sc_.try_consume("<");
    HLX_RETURN_IF_ERROR(sc_.expect("{"));
    HLX_ASSIGN_OR_RETURN(op.attrs, parse_attr_dict_body());
    HLX_RETURN_IF_ERROR(sc_.expect(">"));
  }
  if (sc_.peek() == '(') {
    sc_.try_consume("(");
    do {
      Block block;
      scopes_.emplace_back();
      Status s = parse_region(block, /*allow_label=*/true);
      scopes_.pop_back();
      HLX_RETURN_IF_ERROR(s);
      op.regions.push_back(std::move(block));
    } while (sc_.try_consume(","));
    HLX_RETURN_IF_ERROR(sc_.expect(")"));
  }
  HLX_RETURN_IF_ERROR(parse_optional_attr_dict(op.attrs));
  HLX_RETURN_IF_ERROR(sc_.expect(":"));
  size_t type_at = sc_.pos();
  HLX_ASSIGN_OR_RETURN(FunctionSig sig, parse_function_type());
  HLX_RETURN_IF_ERROR(check_operand_types(op, sig.inputs, type_at));
  (void)at;
  result_types = std::move(sig.results);
  return ok_status();
}

}  // namespace text

Result<Module> parse_module(std::string_view text, std::string_view filename) {
  text::TextParser p(text, filename);
  return p.parse();
}

Result<Module> parse_module_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(ErrorKind::kIo, "cannot open '", path, "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return make_error(ErrorKind::kIo, "cannot read '", path, "'");
  std::string text = ss.str();
  return parse_module(text, path);
}

}  // namespace hlx::shlo
