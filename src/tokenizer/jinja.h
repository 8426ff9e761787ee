// A Jinja2 subset interpreter for chat templates (Qwen3, Gemma3, Llama 3, LLaVA style).
//
// Templates are untrusted input: parsing and rendering never throw or abort. Errors are Status
// values whose messages name the line and column of the offending construct. Rendering is bounded
// (loop iterations, call/recursion depth, output bytes) so a hostile template cannot hang or
// exhaust memory.
//
// Semantics follow jinja2 as Hugging Face configures it for apply_chat_template:
// Environment(trim_blocks=True, lstrip_blocks=True), default Undefined (falsy, renders empty,
// errors on attribute access), loop controls (break/continue), no autoescape, one trailing newline
// of the source dropped. Context values come from JSON (objects keep their key order).
//
// Thread safety: a parsed Template is immutable; render() may be called from several threads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace hlx::jinja {

struct Options {
  bool trim_blocks = true;    // drop the first newline after a block/comment tag
  bool lstrip_blocks = true;  // strip spaces/tabs before a block/comment tag at line start
  // Bounds on rendering work; exceeding one is an kOutOfRange error.
  int64_t max_loop_iterations = 1'000'000;  // summed over all loops of one render
  int max_depth = 200;                      // nested expression/statement/macro depth
  size_t max_output_bytes = 64u << 20;
};

// Message prefix of the error raised by the template's own raise_exception(msg) call.
inline constexpr const char* kRaisedPrefix = "template raised exception: ";
bool is_raised_exception(const Status& status);

struct Node;  // parsed statement tree (jinja_internal.h)

class Template {
 public:
  // kParse errors name line:column; unknown statements, filters and tests are reported at render
  // or parse time as kUnsupported naming the construct.
  static Result<Template> parse(const std::string& source, const Options& options = {});

  // `context` must be a JSON object; its members become the template's global variables.
  // Besides them, the globals range, namespace, raise_exception and dict are available.
  Result<std::string> render(const nlohmann::ordered_json& context) const;
  // As above with a tighter output limit for this call: output past `max_output_bytes` stops the
  // rendering with kCapacityExceeded (strings built inside the template are bounded by it too).
  Result<std::string> render(const nlohmann::ordered_json& context, size_t max_output_bytes) const;

 private:
  std::shared_ptr<const Node> root_;
  Options options_;
};

}  // namespace hlx::jinja
