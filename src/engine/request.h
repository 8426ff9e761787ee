// A generation request, the events it streams and its final result.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/sampling.h"

namespace hlx::engine {
class JsonGrammar;
}
#include "multimodal/image.h"

namespace hlx::engine {

using RequestId = uint64_t;  // assigned by BatchEngine::submit, starting at 1, never reused

// Why a request ended.
enum class Finish {
  kNone,       // still queued or running
  kStop,       // an EOS id was generated or a stop string appeared in the text
  kLength,     // max_new_tokens generated
  kCancelled,  // cancel() before it finished
  kError,      // a model call failed; Completion::error says why
};
// "none", "stop", "length", "cancelled", "error" (the OpenAI / CLI spelling).
const char* finish_name(Finish f);

struct Event;

struct GenerationRequest {
  std::vector<int64_t> prompt;  // token ids (>= 1)
  int64_t max_new_tokens = 0;   // prompt.size() + max_new_tokens <= context_capacity (admission)
  // Decoded RGB images, in prompt order. The prompt is expanded: image i is a run of
  // VisionModel::image_tokens(images[i]) image token ids (VisionModel::expand_prompt on the text
  // before tokenizing, or expand_image_tokens on ids for LLaVA / Qwen3-VL), and admission counts
  // the whole prompt. Needs an engine with a VisionModel.
  std::vector<mm::Image> images;
  SamplingParams sampling;
  // Stop ids. nullopt: the model's spec().eos_token_ids (generation_config.json / config.json);
  // an empty vector: never stop on a token.
  std::optional<std::vector<int64_t>> eos_token_ids;
  // Stop strings, matched in the decoded generated text (needs the engine's tokenizer; a request
  // with stop strings on an engine without one is rejected with kInvalidArgument). The reported
  // text ends before the first occurrence; text that might begin a stop string is held back from
  // events until it is decided.
  std::vector<std::string> stop;
  // Structured output (OpenAI response_format json_object / json_schema): null = off. Each token
  // is sampled from the logits with every token the grammar does not allow at -inf (penalties,
  // logit_bias, logprobs and the filters all see that masked row), EOS only once the value is
  // complete; the request finishes with Finish::kStop as soon as the value is closed, or with
  // kLength (the text then incomplete) at max_new_tokens. Needs the engine's tokenizer.
  // Compile with JsonGrammar::compile_cached so requests of one schema share the mask cache.
  std::shared_ptr<const JsonGrammar> json_grammar;
  // Several choices of one prompt (OpenAI's n): the id of the request that prefills the prompt.
  // This request waits in the queue (FIFO: later requests wait behind it) until that one has
  // finished its prefill (or ended), then, with the prefix cache on, copies its prompt rows and
  // prefills only the last row. 0: no such wait. An id that is not running or queued is ignored.
  RequestId prefill_after = 0;
  // Called on the engine thread (inside step()) for every event of this request, instead of
  // queueing it for BatchEngine::events(). Must not call back into the engine except cancel().
  std::function<void(const Event&)> on_event;
  // Optional, on the engine thread: the raw model logits row (f32[vocab], before penalties and
  // sampling) that each generated token is chosen from. For tests and debugging.
  std::function<void(std::span<const float>)> on_logits;
};

struct Event {
  enum class Kind {
    kToken,     // one generated token; `text` is the newly decided text (may be empty)
    kFinished,  // the last event of a request: the rest of the text, finish reason, error
  };
  RequestId id = 0;
  Kind kind = Kind::kToken;
  int64_t token = -1;  // kToken only
  // kToken with sampling.logprobs: the token's log-probabilities (see TokenLogprobs).
  std::optional<TokenLogprobs> logprobs;
  std::string text;               // UTF-8 text delta (always empty without a tokenizer)
  Finish finish = Finish::kNone;  // kFinished only
  Status error;                   // kFinished with Finish::kError
  // kFinished only: the request's stage timings and prompt length, as in its Completion.
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;  // prompt rows reused from the prefix cache (not prefilled)
  double preprocess_ms = 0, encode_ms = 0, prefill_ms = 0, decode_ms = 0;
};

// Everything a finished request produced.
struct Completion {
  RequestId id = 0;
  int64_t prompt_tokens = 0;  // image rows included
  // Leading prompt rows whose K/V were reused from the prefix cache instead of prefilled
  // (BatchEngineOptions::prefix_cache); prompt_tokens - cached_tokens rows were computed.
  int64_t cached_tokens = 0;
  // Images whose features came from the image-feature cache (no vision_encode call).
  int64_t cached_images = 0;
  // Images whose rows lay inside the reused prefix (cached_tokens): neither encoded nor looked up.
  int64_t reused_images = 0;
  int64_t images = 0;
  // Generated ids, including a final EOS id or the token that completed a stop string.
  std::vector<int64_t> tokens;
  // With sampling.logprobs: one entry per generated token, in order (stop-string tokens included).
  std::vector<TokenLogprobs> logprobs;
  std::string text;  // decoded generated text without the stop string (empty without tokenizer)
  Finish finish = Finish::kNone;
  Status error;
  double queue_ms = 0;       // submit -> slot acquired
  double preprocess_ms = 0;  // decoded images -> pixel tensors (in submit, on the caller's thread)
  double encode_ms = 0;      // vision_encode calls (engine thread, before the first prefill chunk)
  double prefill_ms = 0;     // sum of this request's prefill chunk calls
  double decode_ms = 0;      // first token -> finished (wall time, shared with the batch)
  int64_t prefill_chunks = 0;
};

}  // namespace hlx::engine
