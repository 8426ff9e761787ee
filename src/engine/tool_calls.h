// Tool calls in the Hermes syntax that Qwen2.5/Qwen3 chat templates teach the model:
//   <tool_call>\n{"name": "<function>", "arguments": {...}}\n</tool_call>
// The parser that turns generated text into calls plus the text outside them (streamed or at
// once), and the grammar that forces one call whose arguments follow the function's schema.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace hlx::engine {

class JsonGrammar;

inline constexpr std::string_view kToolCallOpen = "<tool_call>";
inline constexpr std::string_view kToolCallClose = "</tool_call>";
// What a forced call's prompt ends with (the grammar then writes the JSON) and what closes it.
inline constexpr std::string_view kToolCallPrefix = "<tool_call>\n";
inline constexpr std::string_view kToolCallSuffix = "\n</tool_call>";

// Whether a chat template teaches this syntax (it renders tools and <tool_call> blocks).
bool template_has_tool_calls(std::string_view template_source);

struct ToolCall {
  std::string name;
  std::string arguments;  // a JSON object's text, as the model wrote it
};

// A function the model may call: its name and its parameters' JSON schema (text; empty = any
// object).
struct ToolFunction {
  std::string name;
  std::string parameters;
};

// The grammar of one call's JSON, {"name": <one of the functions>, "arguments": <its
// parameters>}, for a prompt that ends with kToolCallPrefix. One function: an object with a
// const name; several: an anyOf that the name decides (json_constraint's tagged union).
// kUnsupported / kInvalidArgument (from JsonGrammar::compile) name "tools[i].function.parameters".
Result<std::shared_ptr<const JsonGrammar>> tool_call_grammar(std::span<const ToolFunction> functions);

// Splits generated text into content and calls as it arrives. A block between kToolCallOpen and
// kToolCallClose whose inside is one JSON object {"name": <a known function>, "arguments":
// {...}} becomes a call; any other block (bad JSON, an unknown name, arguments not an object,
// no closing tag by the end) stays in the content as written. Text that may be the start of an
// opening tag is held back until decided. Whitespace next to a call and at either end of the
// content is dropped.
class ToolCallParser {
 public:
  explicit ToolCallParser(std::vector<std::string> names) : names_(std::move(names)) {}

  struct Piece {
    std::string content;  // text to append to the content (when call is empty)
    std::optional<ToolCall> call;
  };
  // The pieces decided by `text` (appended to what came before).
  std::vector<Piece> feed(std::string_view text);
  // At the end of the output: the rest (an unclosed block becomes content).
  std::vector<Piece> finish();

 private:
  void emit_text(std::string_view text, std::vector<Piece>& out);
  void emit_block(std::vector<Piece>& out);
  std::vector<std::string> names_;
  std::string buf_;        // undecided text: a partial opening tag, or the inside of a block
  bool in_block_ = false;  // buf_ holds the inside of a block (after its opening tag)
  std::string ws_;         // whitespace held until text other than a call follows
  bool drop_ws_ = true;    // at the start, or right after a call
};

// The whole text at once: content (whitespace-trimmed; empty when none) and the calls.
void parse_tool_calls(std::string_view text, std::span<const std::string> names, std::string& content,
                      std::vector<ToolCall>& calls);

}  // namespace hlx::engine
