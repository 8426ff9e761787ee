// libFuzzer target: arbitrary bytes as a request body, mapped the way the server does it: JSON
// (parse_json_body), then the chat and the completions request (server/openai.h) under prompt
// limits, image parts read as data: URLs (base64 and header sniffing, no pixel decoding), and
// an accepted chat rendered through a chat template with its chat_template_kwargs; accepted
// logprobs fields are in range (chat top_logprobs 0..20 with logprobs, completions 0..5). No exception
// may escape (libFuzzer reports it as a crash); errors must be 4xx with a code or message, and
// an accepted request must respect the limits and keep reserved template variables its own.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "server/image_input.h"
#include "server/openai.h"
#include "tokenizer/template.h"

using namespace hlx;
using namespace hlx::server;

namespace {

void check_error(const ApiError& e) {
  if (e.ok()) return;
  if (e.status < 400 || e.status > 499 || e.message.empty()) std::abort();
  if (!json::accept(e.to_json())) std::abort();
}

const ChatTemplate& chat_template() {
  // Prints what a hostile kwarg would try to replace, so an override would show in the output.
  static const ChatTemplate t = *ChatTemplate::from_source(
      "{{ bos_token }}{% for m in messages %}<{{ m.role }}>{% endfor %}"
      "{% if tools %}TOOLS{% endif %}{% if add_generation_prompt %}<gen>{% endif %}",
      json{{"bos_token", "<s>"}});
  return t;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view body(reinterpret_cast<const char*>(data), size);
  json v;
  ApiError e = parse_json_body(body, v);
  check_error(e);
  if (!e.ok()) return 0;
  const PromptLimits limits{512, 64};

  CompletionRequest comp;
  e = parse_completion_request(v, comp, limits);
  check_error(e);
  if (e.ok()) {
    if (comp.prompt_text && comp.prompt_text->size() > limits.max_bytes) std::abort();
    if (comp.prompt_ids.size() > limits.max_tokens) std::abort();
    if (comp.params.max_tokens && (*comp.params.max_tokens < 1 || *comp.params.max_tokens > 2147483647)) std::abort();
    // Completions' logprobs: 0..5 top ids, only when asked.
    const engine::SamplingParams& s = comp.params.sampling;
    if (s.top_logprobs < 0 || s.top_logprobs > 5 || (s.top_logprobs > 0 && !s.logprobs)) std::abort();
  }

  ChatRequest chat;
  e = parse_chat_request(v, chat, limits);
  check_error(e);
  if (!e.ok()) return 0;
  const engine::SamplingParams& cs = chat.params.sampling;
  if (cs.top_logprobs < 0 || cs.top_logprobs > engine::kMaxTopLogprobs || (cs.top_logprobs > 0 && !cs.logprobs))
    std::abort();
  if (chat.template_kwargs.is_object())
    for (auto it = chat.template_kwargs.begin(); it != chat.template_kwargs.end(); ++it)
      if (ChatTemplate::is_reserved_variable(it.key())) std::abort();
  ImageLimits il;
  il.max_bytes = 4096;
  il.max_pixels = 64 * 64;
  for (const ImageRef& ref : chat.images) {
    std::string bytes;
    ApiError ie = read_image_url(ref.url, il, ref.param, bytes);
    if (!ie.ok() && ie.status != 400 && ie.status != 413) std::abort();
    if (ie.ok()) {
      if (bytes.size() > il.max_bytes) std::abort();
      (void)image_dimensions(bytes);
    }
  }
  auto out = chat_template().render(chat.messages, true, chat.template_kwargs, 4096);
  if (out.ok()) {
    // The validated messages and the server's own variables are what got rendered.
    if (out->rfind("<s>", 0) != 0 || out->find("TOOLS") != std::string::npos) std::abort();
    if (out->size() < 5 || out->compare(out->size() - 5, 5, "<gen>") != 0) std::abort();
  }
  return 0;
}
