#include "engine/tool_calls.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "engine/json_constraint.h"

namespace hlx::engine {

using json = nlohmann::ordered_json;

bool template_has_tool_calls(std::string_view source) {
  return source.find(kToolCallOpen) != std::string_view::npos && source.find("tools") != std::string_view::npos;
}

Result<std::shared_ptr<const JsonGrammar>> tool_call_grammar(std::span<const ToolFunction> functions) {
  if (functions.empty()) return make_error(ErrorKind::kInvalidArgument, "tool_call_grammar: no functions");
  json branches = json::array();
  for (size_t i = 0; i < functions.size(); ++i) {
    const ToolFunction& f = functions[i];
    json params = json{{"type", "object"}};
    if (!f.parameters.empty()) {
      params = json::parse(f.parameters, nullptr, false);
      if (params.is_discarded())
        return make_error(ErrorKind::kInvalidArgument, "tools[", i, "].function.parameters is not valid JSON");
      // Compiled alone first, so that an error names this function's schema.
      auto alone = JsonGrammar::compile_cached(f.parameters);
      if (!alone.ok())
        return Status(alone.status().kind(), str_cat("tools[", i, "].function.parameters: ", alone.status().message()));
    }
    branches.push_back(json{{"type", "object"},
                            {"properties", json{{"name", json{{"const", f.name}}}, {"arguments", params}}},
                            {"required", json::array({"name", "arguments"})},
                            {"additionalProperties", false}});
  }
  const json schema = branches.size() == 1 ? branches[0] : json{{"anyOf", branches}};
  return JsonGrammar::compile_cached(schema.dump());
}

namespace {

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

// The length of the longest suffix of `s` that is a proper prefix of `tag`.
size_t partial_tag(std::string_view s, std::string_view tag) {
  for (size_t n = std::min(s.size(), tag.size() - 1); n > 0; --n)
    if (s.substr(s.size() - n) == tag.substr(0, n)) return n;
  return 0;
}

}  // namespace

void ToolCallParser::emit_text(std::string_view t, std::vector<Piece>& out) {
  size_t last = t.size();
  while (last > 0 && is_space(t[last - 1])) --last;
  if (last == 0) {  // whitespace only: held (or dropped next to a call)
    if (!drop_ws_) ws_.append(t);
    return;
  }
  size_t first = 0;
  if (drop_ws_)
    while (is_space(t[first])) ++first;
  std::string piece = drop_ws_ ? std::string() : std::move(ws_);
  piece.append(t.substr(first, last - first));
  ws_.assign(t.substr(last));
  drop_ws_ = false;
  out.push_back(Piece{std::move(piece), std::nullopt});
}

namespace {

// A JSON value's extent: the index after the value starting at s[i] (leading whitespace
// skipped), or npos when it is not one. Numbers are checked for syntax only, so a value no double
// holds (1e999: valid JSON, which the forced-call grammar can write) is still a value.
size_t skip_space(std::string_view s, size_t i) {
  while (i < s.size() && is_space(s[i])) ++i;
  return i;
}

size_t scan_value(std::string_view s, size_t i, int depth);

size_t scan_string(std::string_view s, size_t i) {
  if (i >= s.size() || s[i] != '"') return std::string_view::npos;
  for (++i; i < s.size(); ++i) {
    if (s[i] == '\\') {
      ++i;
    } else if (s[i] == '"') {
      return i + 1;
    } else if (uint8_t(s[i]) < 0x20) {
      return std::string_view::npos;
    }
  }
  return std::string_view::npos;
}

size_t scan_value(std::string_view s, size_t i, int depth) {
  constexpr size_t npos = std::string_view::npos;
  i = skip_space(s, i);
  if (i >= s.size() || depth > 64) return npos;
  const char c = s[i];
  if (c == '"') return scan_string(s, i);
  if (c == '{' || c == '[') {
    const char close = c == '{' ? '}' : ']';
    i = skip_space(s, i + 1);
    if (i < s.size() && s[i] == close) return i + 1;
    for (;;) {
      if (c == '{') {
        i = scan_string(s, skip_space(s, i));
        if (i == npos) return npos;
        i = skip_space(s, i);
        if (i >= s.size() || s[i] != ':') return npos;
        ++i;
      }
      i = scan_value(s, i, depth + 1);
      if (i == npos) return npos;
      i = skip_space(s, i);
      if (i >= s.size()) return npos;
      if (s[i] == close) return i + 1;
      if (s[i] != ',') return npos;
      ++i;
    }
  }
  for (std::string_view lit : {"true", "false", "null"})
    if (s.substr(i, lit.size()) == lit) return i + lit.size();
  // -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
  const size_t start = i;
  auto digits = [&] {
    const size_t from = i;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
    return i > from;
  };
  if (i < s.size() && s[i] == '-') ++i;
  if (i < s.size() && s[i] == '0')
    ++i;
  else if (!digits())
    return npos;
  if (i < s.size() && s[i] == '.' && (++i, !digits())) return npos;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
    if (!digits()) return npos;
  }
  return i > start ? i : npos;
}

// The inside of a block as a call: exactly one JSON object whose members are "name" (a string
// naming a known function) and "arguments" (an object, kept as written).
std::optional<ToolCall> parse_call(std::string_view inner, const std::vector<std::string>& names) {
  constexpr size_t npos = std::string_view::npos;
  size_t i = skip_space(inner, 0);
  if (scan_value(inner, i, 0) == npos || skip_space(inner, scan_value(inner, i, 0)) != inner.size() || inner[i] != '{')
    return std::nullopt;
  std::optional<std::string> name, args;
  i = skip_space(inner, i + 1);
  while (i < inner.size() && inner[i] != '}') {
    const size_t key_end = scan_string(inner, i);
    const json key = json::parse(inner.substr(i, key_end - i), nullptr, false);
    i = skip_space(inner, skip_space(inner, key_end) + 1);  // past ':'
    const size_t value_end = scan_value(inner, i, 0);
    const std::string_view value = inner.substr(i, value_end - i);
    if (key == "name" && !name && value[0] == '"') {
      const json n = json::parse(value, nullptr, false);
      if (!n.is_string()) return std::nullopt;
      name = n.get<std::string>();
    } else if (key == "arguments" && !args && value[0] == '{') {
      args = std::string(value);
    } else {
      return std::nullopt;  // another member, a repeated one, or the wrong type
    }
    i = skip_space(inner, value_end);
    if (i < inner.size() && inner[i] == ',') i = skip_space(inner, i + 1);
  }
  if (!name || !args || std::find(names.begin(), names.end(), *name) == names.end()) return std::nullopt;
  return ToolCall{std::move(*name), std::move(*args)};
}

}  // namespace

// buf_ holds a whole block's inside: a call, or (malformed) text.
void ToolCallParser::emit_block(std::vector<Piece>& out) {
  std::optional<ToolCall> call = parse_call(buf_, names_);
  if (call) {
    ws_.clear();
    drop_ws_ = true;
    out.push_back(Piece{{}, std::move(call)});
  } else {
    emit_text(std::string(kToolCallOpen) + buf_ + std::string(kToolCallClose), out);
  }
  buf_.clear();
}

std::vector<ToolCallParser::Piece> ToolCallParser::feed(std::string_view text) {
  std::vector<Piece> out;
  buf_.append(text);
  for (;;) {
    if (in_block_) {
      const size_t close = buf_.find(kToolCallClose);
      if (close == std::string::npos) break;
      std::string rest = buf_.substr(close + kToolCallClose.size());
      buf_.resize(close);
      emit_block(out);
      buf_ = std::move(rest);
      in_block_ = false;
      continue;
    }
    const size_t open = buf_.find(kToolCallOpen);
    if (open == std::string::npos) {
      const size_t hold = partial_tag(buf_, kToolCallOpen);
      emit_text(std::string_view(buf_).substr(0, buf_.size() - hold), out);
      buf_.erase(0, buf_.size() - hold);
      break;
    }
    emit_text(std::string_view(buf_).substr(0, open), out);
    buf_.erase(0, open + kToolCallOpen.size());
    in_block_ = true;
  }
  // Whitespace-only pieces carry nothing: emit_text only adds pieces with text.
  return out;
}

std::vector<ToolCallParser::Piece> ToolCallParser::finish() {
  std::vector<Piece> out;
  std::string rest = std::move(buf_);
  buf_.clear();
  if (in_block_) rest.insert(0, kToolCallOpen);
  in_block_ = false;
  emit_text(rest, out);
  return out;
}

void parse_tool_calls(std::string_view text, std::span<const std::string> names, std::string& content,
                      std::vector<ToolCall>& calls) {
  ToolCallParser p(std::vector<std::string>(names.begin(), names.end()));
  content.clear();
  calls.clear();
  auto take = [&](std::vector<ToolCallParser::Piece> pieces) {
    for (auto& piece : pieces) {
      if (piece.call)
        calls.push_back(std::move(*piece.call));
      else
        content += piece.content;
    }
  };
  take(p.feed(text));
  take(p.finish());
}

}  // namespace hlx::engine
