#include "cli/text_gen.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <thread>

#include "core/clock.h"
#include "engine/json_constraint.h"
#include "engine/multimodal_prompt.h"
#include "engine/session.h"
#include "io/file.h"
#include "io/hf_config.h"
#include "models/vision_spec.h"

namespace hlx::cli {
namespace {

using Clock = std::chrono::steady_clock;

// Prints an elapsed-time spinner on stderr from a helper thread until stopped.
class Spinner {
 public:
  explicit Spinner(std::string label) : label_(std::move(label)), t0_(Clock::now()) {
    thread_ = std::thread([this] {
      static const char kFrames[] = "|/-\\";
      std::unique_lock<std::mutex> lock(mu_);
      for (int i = 0; !done_; ++i) {
        std::fprintf(stderr, "\r%s %c %.1fs", label_.c_str(), kFrames[i % 4], ms_since(t0_) / 1000.0);
        std::fflush(stderr);
        cv_.wait_for(lock, std::chrono::milliseconds(100));
      }
      std::fprintf(stderr, "\r%*s\r", int(label_.size()) + 16, "");
      std::fflush(stderr);
    });
  }
  ~Spinner() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  std::string label_;
  Clock::time_point t0_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

uint64_t checkpoint_bytes(const std::string& dir) {
  uint64_t total = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec))
    if (e.path().extension() == ".safetensors") total += e.file_size(ec);
  return total;
}

}  // namespace

double per_second(int64_t count, double ms) { return ms > 0 ? double(count) * 1000.0 / ms : 0.0; }

Result<std::unique_ptr<engine::TextModel>> load_model_with_progress(const std::string& dir,
                                                                    const engine::TextModelOptions& options) {
  const double mib = double(checkpoint_bytes(dir)) / (1 << 20);
  char label[512];
  std::snprintf(label, sizeof label, "hlx: loading %s (%.1f MiB)", dir.c_str(), mib);
  auto t0 = Clock::now();
  Result<std::unique_ptr<engine::TextModel>> model = Status(ErrorKind::kInternal, "unset");
  if (isatty(STDERR_FILENO)) {
    Spinner spin(label);
    model = engine::TextModel::load(dir, options);
  } else {
    std::fprintf(stderr, "%s ...\n", label);
    model = engine::TextModel::load(dir, options);
  }
  if (!model.ok()) return model;
  const engine::TextModelStats& st = (*model)->stats();
  std::fprintf(stderr,
               "hlx: loaded in %.1f ms (config %.1f, checkpoint %.1f, emit %.1f ms for %d modules); capacity %lld, "
               "slots %lld, kv %s (%.1f MiB)\n",
               ms_since(t0), st.config_ms, st.checkpoint_ms, st.emit_ms, st.modules,
               (long long)(*model)->shape().context_capacity, (long long)(*model)->shape().slots,
               std::string(dtype_name((*model)->shape().kv_dtype)).c_str(), double(st.kv_bytes) / (1 << 20));
  return model;
}

Result<std::shared_ptr<const tok::Tokenizer>> load_checkpoint_tokenizer(const std::string& dir) {
  const std::string path = dir + "/tokenizer.json";
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))
    return make_error(ErrorKind::kNotFound, "'", path,
                      "' does not exist: text prompts need the checkpoint's tokenizer (use --tokens for ids, or "
                      "`hlx fixture` with the tokenizer installed by `make setup`)");
  return tok::Tokenizer::load(path);
}

Result<ChatTemplate> load_checkpoint_template(const std::string& dir) {
  const std::string path = dir + "/tokenizer_config.json";
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))
    return make_error(ErrorKind::kNotFound, "'", path, "' does not exist: --chat needs the checkpoint's chat template");
  return ChatTemplate::from_tokenizer_config(path);
}

Result<TextGenResult> generate_text(engine::TextModel& model, const std::shared_ptr<const tok::Tokenizer>& tokenizer,
                                    const std::vector<int64_t>& prompt, const TextGenParams& p,
                                    const std::function<void(std::string_view)>& on_text, ImageInput images,
                                    const std::function<void(std::span<const float>)>& on_logits) {
  for (const std::string& s : p.stop)
    if (s.empty()) return make_error(ErrorKind::kInvalidArgument, "--stop: an empty stop string");
  if (prompt.empty()) return make_error(ErrorKind::kInvalidArgument, "the prompt is empty (0 tokens)");
  engine::BatchEngineOptions bo;
  bo.tokenizer = tokenizer;
  bo.skip_special_tokens = true;
  bo.vision = images.vision;
  bo.max_images_per_request = std::max<int64_t>(engine::kDefaultMaxImagesPerRequest, int64_t(images.images.size()));
  bo.prefix_cache = p.prefix_cache;
  engine::Session session(model, bo);
  engine::GenerationRequest req;
  req.prompt = prompt;
  req.max_new_tokens = p.max_new_tokens;
  req.sampling.temperature = p.temperature;
  req.sampling.top_k = p.top_k;
  req.sampling.top_p = p.top_p;
  req.sampling.min_p = p.min_p;
  req.sampling.seed = p.seed;
  req.stop = p.stop;
  for (const std::string& kv : p.logit_bias) {
    const size_t eq = kv.find('=');
    char* end = nullptr;
    const long long id = eq == std::string::npos ? -1 : std::strtoll(kv.c_str(), &end, 10);
    const bool id_ok = eq != std::string::npos && end == kv.c_str() + eq && eq > 0;
    const float bias = id_ok ? std::strtof(kv.c_str() + eq + 1, &end) : 0.f;
    if (!id_ok || eq + 1 == kv.size() || *end != '\0')
      return make_error(ErrorKind::kInvalidArgument, "--logit-bias '", kv, "' (expected TOKEN_ID=BIAS, e.g. 42=-100)");
    req.sampling.logit_bias.emplace_back(id, bias);
  }
  if (p.logprobs >= 0) {
    if (p.logprobs > engine::kMaxTopLogprobs)
      return make_error(ErrorKind::kInvalidArgument, "--logprobs ", p.logprobs, " is outside [0, ",
                        engine::kMaxTopLogprobs, "]");
    req.sampling.logprobs = true;
    req.sampling.top_logprobs = p.logprobs;
  }
  if (p.json && !p.json_schema_file.empty())
    return make_error(ErrorKind::kInvalidArgument, "give one of --json and --json-schema");
  if (p.json) req.json_grammar = engine::JsonGrammar::any_object();
  if (!p.json_schema_file.empty()) {
    HLX_ASSIGN_OR_RETURN(std::string schema, read_file(p.json_schema_file, size_t(1) << 20));
    auto g = engine::JsonGrammar::compile(schema);
    if (!g.ok()) return g.status().with_context(str_cat("--json-schema ", p.json_schema_file));
    req.json_grammar = *g;
  }
  req.images = std::move(images.images);
  if (on_logits) req.on_logits = on_logits;
  req.on_event = [&](const engine::Event& e) {
    if (!e.text.empty()) on_text(e.text);
  };
  HLX_ASSIGN_OR_RETURN(engine::Completion c, session.generate(std::move(req)));
  if (c.finish == engine::Finish::kError) return c.error;
  TextGenResult res;
  res.prompt_tokens = c.prompt_tokens;
  res.cached_tokens = c.cached_tokens;
  res.images = c.images;
  res.preprocess_ms = c.preprocess_ms;
  res.encode_ms = c.encode_ms;
  res.tokens = c.tokens;
  res.logprobs = std::move(c.logprobs);
  res.text = c.text;
  res.finish = engine::finish_name(c.finish);
  res.prefill_ms = c.prefill_ms;
  res.decode_ms = c.decode_ms;
  return res;
}

std::string summary_line(const TextGenResult& r) {
  // Decode rate counts the tokens after the first (the first comes from the prefill logits).
  const int64_t decoded = r.tokens.empty() ? 0 : int64_t(r.tokens.size()) - 1;
  char images[160] = "";
  if (r.images > 0)
    std::snprintf(images, sizeof images, " (%lld image%s); preprocess %.1f ms, encode %.1f ms", (long long)r.images,
                  r.images == 1 ? "" : "s", r.preprocess_ms, r.encode_ms);
  char cached[64] = "";
  if (r.cached_tokens > 0) std::snprintf(cached, sizeof cached, " (%lld cached)", (long long)r.cached_tokens);
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "prompt %lld tokens%s, generated %lld tokens%s; prefill %.1f ms (%.1f tokens/s), decode %.1f ms "
                "(%.1f tokens/s); finish: %s",
                (long long)r.prompt_tokens, cached, (long long)r.tokens.size(), images, r.prefill_ms,
                per_second(r.prompt_tokens - r.cached_tokens, r.prefill_ms), r.decode_ms,
                per_second(decoded, r.decode_ms), r.finish.c_str());
  return buf;
}

Result<bool> is_vision_language_dir(const std::string& dir) {
  HLX_ASSIGN_OR_RETURN(int64_t id, engine::checkpoint_image_token_id(dir));
  return id >= 0;
}

Status require_vision_language_dir(const std::string& dir) {
  HLX_ASSIGN_OR_RETURN(bool vl, is_vision_language_dir(dir));
  return vl ? ok_status() : engine::text_only_model_error("--image", dir);
}

Status check_no_image_tokens(const std::string& dir, const std::vector<int64_t>& prompt) {
  HLX_ASSIGN_OR_RETURN(int64_t id, engine::checkpoint_image_token_id(dir));
  if (id < 0) return ok_status();
  const int64_t n = int64_t(std::count(prompt.begin(), prompt.end(), id));
  if (n > 0)
    return make_error(ErrorKind::kInvalidArgument, "the prompt has ", n, " image placeholder(s) (token id ", id,
                      ") but no --image was given");
  return ok_status();
}

namespace {
Result<std::vector<int64_t>> image_token_counts(const engine::VisionModel& vision,
                                                const std::vector<mm::Image>& images) {
  std::vector<int64_t> tokens;
  for (size_t i = 0; i < images.size(); ++i) {
    auto t = vision.image_tokens(images[i]);
    if (!t.ok()) return t.status().with_context(str_cat("image ", i));
    tokens.push_back(*t);
  }
  return tokens;
}
}  // namespace

Result<std::string> expand_image_text(const engine::VisionModel& vision, std::string_view text,
                                      const std::vector<mm::Image>& images) {
  HLX_ASSIGN_OR_RETURN(std::vector<int64_t> tokens, image_token_counts(vision, images));
  return vision.expand_prompt(text, tokens);
}

Result<std::vector<int64_t>> expand_image_ids(const engine::VisionModel& vision, const std::vector<int64_t>& ids,
                                              const std::vector<mm::Image>& images) {
  if (vision.family() == models::VlmFamily::kGemma3)
    return make_error(ErrorKind::kUnsupported,
                      "--tokens with --image: Gemma3 image prompts are expanded on the text "
                      "before tokenization; give the prompt as text (-p)");
  HLX_ASSIGN_OR_RETURN(std::vector<int64_t> tokens, image_token_counts(vision, images));
  return engine::expand_image_tokens(ids, vision.image_token_id(), tokens);
}

Result<std::vector<mm::Image>> load_image_files(const std::vector<std::string>& paths) {
  std::vector<mm::Image> out;
  for (const std::string& p : paths) {
    auto im = mm::load_image(p);
    if (!im.ok()) return im.status().with_context(str_cat("--image '", p, "'"));
    out.push_back(std::move(*im));
  }
  return out;
}

Result<std::unique_ptr<engine::VisionModel>> load_vision_with_progress(
    const std::string& dir, int threads, std::shared_ptr<const tok::Tokenizer> tokenizer) {
  auto t0 = Clock::now();
  engine::VisionModelOptions o;
  o.threads = threads;
  o.tokenizer = std::move(tokenizer);
  HLX_ASSIGN_OR_RETURN(std::unique_ptr<engine::VisionModel> v, engine::VisionModel::load(dir, o));
  const engine::VisionModelStats& st = v->stats();
  std::fprintf(stderr, "hlx: vision (%s) loaded in %.1f ms (emit %.1f, compile %.1f, bind %.1f ms, %.1f MiB)\n",
               v->describe().c_str(), ms_since(t0), st.emit_ms, st.compile_ms, st.bind_ms,
               double(st.weight_bytes) / (1 << 20));
  return v;
}

Status warm_up_image_prompt(engine::TextModel& model, const std::vector<int64_t>& prompt, int64_t max_new_tokens) {
  const int64_t rows = int64_t(prompt.size());
  if (rows < 1 || rows + max_new_tokens > model.shape().context_capacity) return ok_status();
  return model.warm_up(rows, false, max_new_tokens > 1 ? 1 : 0, /*embeddings=*/true);
}

nlohmann::ordered_json user_message(const std::string& text, size_t images) {
  if (images == 0) return {{"role", "user"}, {"content", text}};
  nlohmann::ordered_json content = nlohmann::ordered_json::array();
  for (size_t i = 0; i < images; ++i) content.push_back({{"type", "image"}});
  content.push_back({{"type", "text"}, {"text", text}});
  return {{"role", "user"}, {"content", content}};
}

std::string logprobs_lines(const std::vector<engine::TokenLogprobs>& lps) {
  auto num = [](double v) {
    char b[32];
    if (!std::isfinite(v)) return std::string("null");
    std::snprintf(b, sizeof b, "%.9g", v);
    return std::string(b);
  };
  std::string out;
  for (size_t i = 0; i < lps.size(); ++i) {
    out += "logprobs: {\"i\":" + std::to_string(i) + ",\"id\":" + std::to_string(lps[i].token) +
           ",\"logprob\":" + num(lps[i].logprob) + ",\"top\":[";
    for (size_t k = 0; k < lps[i].top.size(); ++k)
      out += (k ? ",[" : "[") + std::to_string(lps[i].top[k].first) + "," + num(lps[i].top[k].second) + "]";
    out += "]}\n";
  }
  return out;
}

void add_sampling_flags(CLI::App* sub, TextGenParams& gen) {
  sub->add_option("--temp,--temperature", gen.temperature, "sampling temperature (default 0: greedy)");
  sub->add_option("--top-k", gen.top_k, "keep the k most likely tokens (0: off)");
  sub->add_option("--top-p", gen.top_p, "nucleus sampling mass (1: off)");
  sub->add_option("--min-p", gen.min_p, "drop tokens below min_p * p_max (0: off)");
  sub->add_option("--seed", gen.seed, "sampling seed (default 0)");
  sub->add_option("--stop", gen.stop, "stop string (repeatable); the output ends before it");
  sub->add_option("--logit-bias", gen.logit_bias,
                  "TOKEN_ID=BIAS added to that token's logit, BIAS in [-100, 100] (repeatable)");
}

}  // namespace hlx::cli
