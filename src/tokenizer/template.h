// Chat templates: the checkpoint's own Jinja template from tokenizer_config.json, rendered the way
// Hugging Face's apply_chat_template does (special-token strings and options as variables).
//
// Thread safety: a ChatTemplate is immutable after construction; render() is safe concurrently.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "tokenizer/jinja.h"

namespace hlx {

class ChatTemplate {
 public:
  // Reads `chat_template` (a string, or HF's list of {name, template}: the "default" entry) and the
  // special tokens bos/eos/unk/pad/sep/cls/mask (strings or {"content": ...} objects).
  static Result<ChatTemplate> from_tokenizer_config(const std::string& path);
  static Result<ChatTemplate> from_tokenizer_config_json(const nlohmann::ordered_json& config);
  // A bare template source; `special_tokens` is a JSON object of name -> string.
  static Result<ChatTemplate> from_source(
      const std::string& source, const nlohmann::ordered_json& special_tokens = nlohmann::ordered_json::object());

  // messages: JSON array of {role, content} (plus tool_calls / tool_call_id, passed as given) where content is a string
  // or a list of parts
  // ({"type":"text","text":...}, {"type":"image"}). extra_vars (object or null) add variables
  // such as enable_thinking; one naming a reserved variable (below) is kInvalidArgument naming it.
  // Output past max_output_bytes stops the rendering with kCapacityExceeded. Errors raised by the
  // template itself satisfy jinja::is_raised_exception().
  // tools: the `tools` variable (null, or a list of OpenAI tool objects {"type":"function",
  // "function":{name, description, parameters}}, as apply_chat_template(tools=...) passes them).
  Result<std::string> render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                             const nlohmann::ordered_json& extra_vars = nullptr, size_t max_output_bytes = SIZE_MAX,
                             const nlohmann::ordered_json& tools = nullptr) const;

  // Variables render() sets itself (messages, tools, documents, add_generation_prompt, the
  // special tokens) and the interpreter's globals (range, namespace, dict, raise_exception):
  // extra_vars may not replace them, or a caller could swap validated messages for its own.
  static const std::vector<std::string_view>& reserved_variables();
  static bool is_reserved_variable(std::string_view name);

  const std::string& source() const { return source_; }

 private:
  std::string source_;
  jinja::Template template_;
  nlohmann::ordered_json special_tokens_ = nlohmann::ordered_json::object();
};

}  // namespace hlx
