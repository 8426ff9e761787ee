// CLI helpers shared by `hlx generate -p` and `hlx chat`: loading a checkpoint with a progress
// indicator on stderr, its tokenizer and chat template, and one streamed text generation.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "core/status.h"
#include "engine/sampling.h"
#include "engine/text_model.h"
#include "engine/vision_model.h"
#include "multimodal/image.h"
#include "tokenizer/template.h"
#include "tokenizer/tokenizer.h"

namespace hlx::cli {

// TextModel::load with a progress indicator on stderr: while stderr is a TTY, an elapsed-time
// spinner on one line; otherwise one line per phase ("loading ...", "loaded ...").
Result<std::unique_ptr<engine::TextModel>> load_model_with_progress(const std::string& dir,
                                                                    const engine::TextModelOptions& options);

// DIR/tokenizer.json (kNotFound naming the file and how to get one when it is missing).
Result<std::shared_ptr<const tok::Tokenizer>> load_checkpoint_tokenizer(const std::string& dir);
// DIR/tokenizer_config.json's chat template.
Result<ChatTemplate> load_checkpoint_template(const std::string& dir);

struct TextGenParams {
  int64_t max_new_tokens = 64;
  float temperature = 0.f;  // 0: greedy
  int64_t top_k = 0;
  float top_p = 1.f;
  float min_p = 0.f;
  uint64_t seed = 0;
  std::vector<std::string> stop;        // stop strings (non-empty, valid UTF-8)
  std::vector<std::string> logit_bias;  // "ID=BIAS" (--logit-bias), parsed by generate_text
  bool prefix_cache = true;             // --prefix-cache: reuse rows an earlier call left in the model's slots
  int64_t logprobs = -1;                // >= 0: each token's logprob and this many top ids (--logprobs K)
  bool json = false;                    // --json: the output is one JSON object (json_object)
  std::string json_schema_file;         // --json-schema F: the output validates against F's schema
};

struct TextGenResult {
  int64_t prompt_tokens = 0;  // after image placeholder expansion
  int64_t cached_tokens = 0;  // prompt rows reused from the prefix cache, not prefilled
  int64_t images = 0;
  std::vector<int64_t> tokens;                  // generated ids (including a final EOS)
  std::string text;                             // generated text up to (not including) a stop string
  std::string finish;                           // "stop" | "length" | "cancelled" | "error"
  std::vector<engine::TokenLogprobs> logprobs;  // one per token when params.logprobs >= 0
  double preprocess_ms = 0, encode_ms = 0, prefill_ms = 0, decode_ms = 0;
};

// Declares --temp, --top-k, --top-p, --min-p, --seed, --stop and --logit-bias on `sub`.
void add_sampling_flags(CLI::App* sub, TextGenParams& gen);

// Images of a request (--image): the decoded files and the vision model that encodes them.
struct ImageInput {
  std::vector<mm::Image> images;
  engine::VisionModel* vision = nullptr;  // not owned; required when images is non-empty
};

// Generates from `prompt` ids in one slot of `model`, calling on_text with every newly decided
// piece of text (valid UTF-8; text that may start a stop string is held back until decided).
// `tokenizer` may be null (no text then); `on_logits` (optional) sees every logits row.
Result<TextGenResult> generate_text(engine::TextModel& model, const std::shared_ptr<const tok::Tokenizer>& tokenizer,
                                    const std::vector<int64_t>& prompt, const TextGenParams& params,
                                    const std::function<void(std::string_view)>& on_text, ImageInput images = {},
                                    const std::function<void(std::span<const float>)>& on_logits = {});

// "prompt 12 tokens, generated 20 tokens; prefill 310.2 tok/s, decode 95.1 tok/s; finish: length"
// ("prompt 40 tokens (32 cached), ..." when the prefix cache supplied rows; the prefill rate then
// counts the computed rows only)
// (with images: "... (1 image); preprocess 1.2 ms, encode 3.4 ms, prefill ...").
std::string summary_line(const TextGenResult& r);

// True when DIR is a vision-language checkpoint hlx runs (llava, gemma3 with tower weights, qwen3_vl).
Result<bool> is_vision_language_dir(const std::string& dir);
// ok when `dir` is a vision-language checkpoint, else the typed "--image: ... text-only" error.
Status require_vision_language_dir(const std::string& dir);
// Without --image on a vision-language checkpoint, a prompt holding its image token id has no
// image to put there (upstream refuses such inputs too): kInvalidArgument naming the count.
Status check_no_image_tokens(const std::string& dir, const std::vector<int64_t>& prompt);
// The prompt text with each image placeholder expanded for its image (VisionModel::expand_prompt
// with every image's token count), to be tokenized as is.
Result<std::string> expand_image_text(const engine::VisionModel& vision, std::string_view text,
                                      const std::vector<mm::Image>& images);
// --tokens prompts: one image token id per image, expanded on the ids (exact for LLaVA and
// Qwen3-VL, whose image token is a special token; Gemma3 is expanded as text: kUnsupported).
Result<std::vector<int64_t>> expand_image_ids(const engine::VisionModel& vision, const std::vector<int64_t>& ids,
                                              const std::vector<mm::Image>& images);
// Decodes every --image file (PNG/JPEG, EXIF orientation applied), naming the file on error.
Result<std::vector<mm::Image>> load_image_files(const std::vector<std::string>& paths);
// VisionModel::load with one line on stderr (family, load time, tokens per image).
Result<std::unique_ptr<engine::VisionModel>> load_vision_with_progress(const std::string& dir, int threads,
                                                                       std::shared_ptr<const tok::Tokenizer> tokenizer);
// Compiles the entries an (expanded) image prompt will use (the model's image prefill buckets,
// decode), so the summary's prefill time is not compile time. Prompts the engine will refuse
// (over capacity) are left for it to report.
Status warm_up_image_prompt(engine::TextModel& model, const std::vector<int64_t>& prompt, int64_t max_new_tokens);
// The --chat user message: content [{"type":"image"} x images, {"type":"text","text": text}], or
// the plain string without images.
nlohmann::ordered_json user_message(const std::string& text, size_t images);

double per_second(int64_t count, double ms);

// --logprobs output: one line per generated token,
//   logprobs: {"i":0,"id":791,"logprob":-1.25,"top":[[791,-1.25],[13,-2.5]]}
// (JSON after the "logprobs: " prefix; top = [id, logprob] pairs, most likely first; a logprob
// of -inf is written as null).
std::string logprobs_lines(const std::vector<engine::TokenLogprobs>& lps);

}  // namespace hlx::cli
