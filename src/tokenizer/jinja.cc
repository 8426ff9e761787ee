// Public entry points (jinja.h): source -> jinja_lexer.cc -> jinja_parser.cc -> tree, rendered by
// jinja_render.cc/jinja_filters.cc. Behaviour is checked byte-for-byte against python3-jinja2
// (tests/tokenizer/test_chat_template_reference.py); comments cite the jinja2 behaviour mirrored.
#include "tokenizer/jinja.h"

#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja_internal.h"

namespace hlx::jinja {

using internal::builtin_namespace;
using internal::builtin_range;
using internal::CallArgs;
using internal::Frame;
using internal::from_json;
using internal::lex;
using internal::NodeP;
using internal::parse_tokens;
using internal::Pos;
using internal::Renderer;
using internal::to_str;
using internal::Token;
using internal::Value;

bool is_raised_exception(const Status& status) { return !status.ok() && status.message().rfind(kRaisedPrefix, 0) == 0; }

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
  HLX_ASSIGN_OR_RETURN(std::vector<Token> toks, lex(std::move(src), options));
  HLX_ASSIGN_OR_RETURN(NodeP root, parse_tokens(std::move(toks)));
  Template t;
  t.root_ = root;
  t.options_ = options;
  return t;
}

Result<std::string> Template::render(const nlohmann::ordered_json& context) const {
  return render(context, options_.max_output_bytes);
}

Result<std::string> Template::render(const nlohmann::ordered_json& context, size_t max_output_bytes) const {
  if (!context.is_object())
    return make_error(ErrorKind::kInvalidArgument, "template context must be a JSON object, got ", context.type_name());
  Renderer r(options_);
  if (max_output_bytes < options_.max_output_bytes) {
    r.opt_.max_output_bytes = max_output_bytes;
    r.callers_output_limit_ = true;
  }
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
                         return make_error(ErrorKind::kInvalidArgument, kRaisedPrefix, msg, " (", "line ", p.line,
                                           ", column ", p.col, ")");
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
