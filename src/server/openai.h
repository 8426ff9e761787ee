// The OpenAI request and response shapes: parsing and type-checking request bodies into what the
// engine needs, and building the JSON of responses and Server-Sent Event chunks.
//
// Request fields (both endpoints): model, max_tokens / max_completion_tokens (>= 1; the latter
// wins), temperature [0, 2] (default 1, as OpenAI), top_p (0, 1], top_k (-1/0 = off), min_p
// [0, 1], presence_penalty / frequency_penalty [-2, 2], repetition_penalty > 0, seed (any
// integer; default: random), stop (string or list of up to 16 non-empty strings), n (1 to
// kMaxChoices choices of one prompt: choice i samples with seed + i, so choice 0 is the n = 1 answer),
// stream, stream_options.include_usage, ignore_eos (vLLM extension). Chat adds messages and
// chat_template_kwargs (object of template variables, e.g. {"enable_thinking": false}; see
// kMaxTemplateKwargs); max_tokens above 2^31 - 1 is refused; completions
// take prompt (a string, a list of one string, a list of token ids, or a list of one such list).
// logit_bias ({"<token id>": bias in [-100, 100]}, at most 1024; ids past the vocabulary: 400).
// response_format: {"type":"text"}, {"type":"json_object"} or {"type":"json_schema","json_schema":
// {"name", "schema", "strict", "description"}} (the schema subset of engine/json_constraint.h;
// other keywords: 400 code unsupported naming them). Chat takes tools, tool_choice and
// parallel_tool_calls (see ChatRequest). Unsupported features that change the output
// (functions, echo, suffix, best_of > 1) are refused with 400 rather than ignored; other
// unknown fields are ignored. null means "not given" for every optional field.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/sampling.h"
#include "server/api_error.h"

namespace hlx::tok {
class Tokenizer;
}
namespace hlx::engine {
class JsonGrammar;
}

namespace hlx::server {

using json = nlohmann::ordered_json;

inline constexpr int64_t kMaxChoices = 16;

struct GenerationParams {
  std::string model;
  int64_t n = 1;  // choices
  std::optional<int64_t> max_tokens;
  engine::SamplingParams sampling;
  bool seed_given = false;
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;
  bool ignore_eos = false;
  // response_format json_object / json_schema (null: text).
  std::shared_ptr<const engine::JsonGrammar> json_grammar;
};

struct ImageRef {
  std::string url;
  std::string param;  // e.g. "messages[0].content[1].image_url.url"
};

// What the server does with the model's <tool_call> blocks (engine/tool_calls.h).
enum class ToolMode {
  kOff,     // no tools, or tool_choice "none": the tools are rendered, the output is text
  kAuto,    // tool_choice "auto" (the default with tools): well-formed blocks become tool_calls
  kForced,  // "required" / a named function: the prompt ends with <tool_call>\n and
            // params.json_grammar (engine::tool_call_grammar) makes the output one call
};

inline constexpr size_t kMaxTools = 128;

struct ChatRequest {
  GenerationParams params;
  // tools: [{"type":"function","function":{name, description?, parameters?, strict?}}] (at most
  // kMaxTools, names 1-64 of a-z A-Z 0-9 _ -, unique); null when none. Passed to the template
  // as given. tool_names: the functions a call may name (forced to a named one: only it).
  json tools;
  std::vector<std::string> tool_names;
  ToolMode tool_mode = ToolMode::kOff;
  bool parallel_tool_calls = true;  // accepted; forced modes always write one call
  // Ready for ChatTemplate::render: {role, content} where content is a string, or (for messages
  // with images) a list of {"type":"text","text"} and {"type":"image"} parts in request order.
  json messages = json::array();
  std::vector<ImageRef> images;  // in the order their {"type":"image"} parts appear
  json template_kwargs;          // null or an object
};

struct CompletionRequest {
  GenerationParams params;
  std::optional<std::string> prompt_text;  // a text prompt, or
  std::vector<int64_t> prompt_ids;         // token ids
};

// JSON text to a value: 400 for malformed JSON (naming the byte offset), nesting deeper than
// `max_depth`, or a top level that is not an object.
ApiError parse_json_body(std::string_view body, json& out, int max_depth = 64);

// Bounds on the prompt checked while parsing, before any prompt text is copied: the prompt's text
// bytes (chat: the text of every message content; completions: the prompt string) -> 400
// prompt_too_large; a token-id prompt longer than max_tokens -> 400 context_length_exceeded.
struct PromptLimits {
  size_t max_bytes = SIZE_MAX;
  size_t max_tokens = SIZE_MAX;
};

// chat_template_kwargs: at most this many entries, keys are template variable names (letters,
// digits, '_'; at most 64 bytes) other than the ones the server sets (ChatTemplate::
// reserved_variables(): 400 reserved_template_variable naming the key), at most this many bytes
// of JSON in all.
inline constexpr size_t kMaxTemplateKwargs = 32;
inline constexpr size_t kMaxTemplateKwargsBytes = 64 * 1024;

ApiError parse_chat_request(const json& body, ChatRequest& out, const PromptLimits& limits = {});
ApiError parse_completion_request(const json& body, CompletionRequest& out, const PromptLimits& limits = {});

struct Usage {
  int64_t prompt_tokens = 0, completion_tokens = 0;
  int64_t cached_tokens = 0;  // prompt_tokens_details.cached_tokens: rows the prefix cache supplied
  json to_json() const;
};

// choices[].logprobs of chat: {"content": [{token, logprob, bytes, top_logprobs: [{token,
// logprob, bytes}]}]}. `token` is the id's text (invalid UTF-8 replaced by U+FFFD), `bytes` its
// raw bytes (Tokenizer::token_bytes) as integers; without a tokenizer (or for an id it does not
// know) token is "token_id:<id>" and bytes null. A logprob of -inf is written as -9999.0.
json chat_logprobs_json(std::span<const engine::TokenLogprobs> lps, const tok::Tokenizer* tokenizer);
// choices[].logprobs of completions (legacy): {tokens, token_logprobs, top_logprobs, text_offset}.
// top_logprobs[i] maps token text to logprob for the top ids plus the chosen one (up to k + 1
// entries, as OpenAI; a text shared by two ids keeps the more likely). text_offset[i] is the
// byte offset of token i's bytes in the generated text, counting from `*offset`, which is
// advanced past these tokens (streamed chunks continue where the last one ended).
json completion_logprobs_json(std::span<const engine::TokenLogprobs> lps, const tok::Tokenizer* tokenizer,
                              size_t* offset);

// One choice of a non-streamed response; `logprobs` null when not asked.
struct ChoiceResult {
  std::string text, finish_reason;
  json logprobs;
  // Chat with tools: the parsed calls (tool_calls_json); then `text` is the content outside
  // them and an empty content is written as null.
  json tool_calls;
};
// One message.tool_calls entry: {id, type "function", function {name, arguments}}.
json tool_call_json(const std::string& id, const std::string& name, const std::string& arguments);
// Non-streamed responses: choices[i] from choices[i] (index i).
json chat_completion_json(const std::string& id, int64_t created, const std::string& model,
                          std::span<const ChoiceResult> choices, const Usage& usage);
json text_completion_json(const std::string& id, int64_t created, const std::string& model,
                          std::span<const ChoiceResult> choices, const Usage& usage);
// One SSE chunk of choice `index`. Chat's `delta` is {"role"} for the opening chunk, {"content"}
// after, {} with the finish; finish empty: "finish_reason": null.
json chat_chunk_json(const std::string& id, int64_t created, const std::string& model, int64_t index, const json& delta,
                     const std::string& finish_reason, bool with_usage_null, const json& logprobs = nullptr);
json text_chunk_json(const std::string& id, int64_t created, const std::string& model, int64_t index,
                     const std::string& text, const std::string& finish_reason, bool with_usage_null,
                     const json& logprobs = nullptr);
// The final usage chunk of stream_options.include_usage: "choices": [] and "usage".
json usage_chunk_json(const std::string& id, int64_t created, const std::string& model, bool chat, const Usage& usage);

// "data: <json>\n\n" (JSON with invalid UTF-8 replaced, never throwing).
std::string sse_event(const json& value);
// dump() that replaces invalid UTF-8 instead of throwing.
std::string dump_json(const json& value);

}  // namespace hlx::server
