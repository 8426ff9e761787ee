#include "cli/text_gen.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <thread>

namespace hlx::cli {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

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

// Length of the longest suffix of `text` that is a proper prefix of some stop string.
size_t stop_holdback(std::string_view text, const std::vector<std::string>& stops) {
  size_t best = 0;
  for (const std::string& s : stops)
    for (size_t n = std::min(text.size(), s.size() - 1); n > best; --n)
      if (text.substr(text.size() - n) == std::string_view(s).substr(0, n)) {
        best = n;
        break;
      }
  return best;
}

int64_t argmax_row(const float* row, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (row[i] > row[best]) best = i;
  return best;
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
                                    const std::function<void(std::string_view)>& on_text) {
  for (const std::string& s : p.stop)
    if (s.empty()) return make_error(ErrorKind::kInvalidArgument, "--stop: an empty stop string");
  if (p.temperature != 0.f)
    return make_error(ErrorKind::kUnsupported, "--temp ", p.temperature,
                      ": sampling needs the engine's Session, not in this build; use greedy (--temp 0)");
  if (prompt.empty()) return make_error(ErrorKind::kInvalidArgument, "the prompt is empty (0 tokens)");
  HLX_ASSIGN_OR_RETURN(int64_t slot, model.admit(prompt, p.max_new_tokens));
  TextGenResult res;
  res.prompt_tokens = int64_t(prompt.size());
  res.finish = "length";
  const auto& eos = model.spec().eos_token_ids;
  const int64_t vocab = model.spec().vocab_size;
  tok::StreamDecoder dec(tokenizer, /*skip_special_tokens=*/true);
  std::string acc;   // all decided text
  size_t sent = 0;   // bytes of acc given to on_text
  size_t max_stop = 0;
  bool stopped_by_string = false;
  for (const auto& s : p.stop) max_stop = std::max(max_stop, s.size());
  // Adds decoded text; returns true when a stop string completed.
  auto push_text = [&](const std::string& piece, bool final) -> bool {
    size_t from = acc.size() > max_stop ? acc.size() - max_stop : 0;
    acc += piece;
    size_t hit = std::string::npos;
    for (const auto& s : p.stop) hit = std::min(hit, acc.find(s, from));
    if (hit != std::string::npos) {
      acc.resize(hit);
      if (hit > sent) on_text(std::string_view(acc).substr(sent));
      sent = acc.size();
      return true;
    }
    size_t keep = final ? 0 : stop_holdback(acc, p.stop);
    if (acc.size() - keep > sent) {
      on_text(std::string_view(acc).substr(sent, acc.size() - keep - sent));
      sent = acc.size() - keep;
    }
    return false;
  };
  auto body = [&]() -> Status {
    if (p.max_new_tokens == 0) return ok_status();
    auto t0 = Clock::now();
    HLX_ASSIGN_OR_RETURN(Tensor logits, model.prefill(slot, prompt));
    res.prefill_ms = ms_since(t0);
    int64_t next = argmax_row(logits.data<float>(), vocab);
    t0 = Clock::now();
    int64_t position = int64_t(prompt.size());
    for (;;) {
      res.tokens.push_back(next);
      if (std::find(eos.begin(), eos.end(), next) != eos.end()) {
        res.finish = "stop";
        break;
      }
      HLX_ASSIGN_OR_RETURN(std::string piece, dec.step(uint32_t(next)));
      if (push_text(piece, false)) {
        stopped_by_string = true;
        res.finish = "stop";
        break;
      }
      if (int64_t(res.tokens.size()) >= p.max_new_tokens) break;
      engine::DecodeRow row{slot, next, position++};
      HLX_ASSIGN_OR_RETURN(Tensor dl, model.decode(std::span<const engine::DecodeRow>(&row, 1)));
      next = argmax_row(dl.data<float>(), vocab);
    }
    res.decode_ms = ms_since(t0);
    if (!stopped_by_string) {
      HLX_ASSIGN_OR_RETURN(std::string rest, dec.finish());
      push_text(rest, true);
    }
    return ok_status();
  };
  Status s = body();
  Status r = model.release(slot);
  if (!s.ok()) return s;
  if (!r.ok()) return r;
  res.text = acc.substr(0, sent);
  return res;
}

std::string summary_line(const TextGenResult& r) {
  // Decode rate counts the tokens after the first (the first comes from the prefill logits).
  const int64_t decoded = r.tokens.empty() ? 0 : int64_t(r.tokens.size()) - 1;
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "prompt %lld tokens, generated %lld tokens; prefill %.1f ms (%.1f tokens/s), decode %.1f ms "
                "(%.1f tokens/s); finish: %s",
                (long long)r.prompt_tokens, (long long)r.tokens.size(), r.prefill_ms,
                per_second(r.prompt_tokens, r.prefill_ms), r.decode_ms, per_second(decoded, r.decode_ms),
                r.finish.c_str());
  return buf;
}

}  // namespace hlx::cli
