#include "server/metrics.h"

#include <cstdio>

namespace hlx::server {
namespace {

std::string num(double v, const char* format = "%.9g") {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

void help(std::string& out, const char* name, const char* type, const char* text) {
  out += std::string("# HELP ") + name + " " + text + "\n# TYPE " + name + " " + type + "\n";
}

}  // namespace

void Metrics::count_request(const std::string& endpoint, const std::string& outcome) {
  std::lock_guard<std::mutex> lock(mu_);
  ++requests_[{endpoint, outcome}];
}

void Metrics::count_finish(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  ++finishes_[reason];
}

void Metrics::add_prompt_tokens(int64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  prompt_tokens_ += n;
}

void Metrics::add_generated_tokens(int64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  generated_tokens_ += n;
}

void Metrics::add_prompt_reuse(int64_t cached, int64_t computed) {
  std::lock_guard<std::mutex> lock(mu_);
  prompt_cached_ += cached;
  prompt_computed_ += computed;
}

void Metrics::add_images(int64_t cache_hits, int64_t cache_misses) {
  std::lock_guard<std::mutex> lock(mu_);
  image_hits_ += cache_hits;
  image_misses_ += cache_misses;
}

void Metrics::add_prefill(int64_t tokens, double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  prefill_tokens_ += tokens;
  prefill_seconds_ += seconds;
}

void Metrics::add_decode(int64_t tokens, double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  decode_tokens_ += tokens;
  decode_seconds_ += seconds;
}

void Metrics::observe_ttft(double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < kTtftBuckets.size(); ++i)
    if (seconds <= kTtftBuckets[i]) {
      ++ttft_counts_[i];
      break;
    }
  ++ttft_count_;
  ttft_sum_ += seconds;
}

std::string Metrics::render(const EngineGauges& g) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  help(out, "hlx_requests_total", "counter", "HTTP requests by endpoint and outcome.");
  for (const auto& [key, n] : requests_)
    out +=
        "hlx_requests_total{endpoint=\"" + key.first + "\",outcome=\"" + key.second + "\"} " + std::to_string(n) + "\n";
  help(out, "hlx_finish_total", "counter", "Finished generations by finish reason.");
  for (const auto& [reason, n] : finishes_)
    out += "hlx_finish_total{reason=\"" + reason + "\"} " + std::to_string(n) + "\n";
  help(out, "hlx_prompt_tokens_total", "counter", "Prompt tokens of generations submitted to the engine.");
  out += "hlx_prompt_tokens_total " + std::to_string(prompt_tokens_) + "\n";
  help(out, "hlx_prompt_tokens_cached_total", "counter",
       "Prompt rows of finished generations reused from the prefix cache (not prefilled).");
  out += "hlx_prompt_tokens_cached_total " + std::to_string(prompt_cached_) + "\n";
  help(out, "hlx_prompt_tokens_computed_total", "counter", "Prompt rows of finished generations that were prefilled.");
  out += "hlx_prompt_tokens_computed_total " + std::to_string(prompt_computed_) + "\n";
  help(out, "hlx_image_cache_hits_total", "counter",
       "Images of finished generations whose features came from the image-feature cache.");
  out += "hlx_image_cache_hits_total " + std::to_string(image_hits_) + "\n";
  help(out, "hlx_image_cache_misses_total", "counter", "Images of finished generations that were encoded.");
  out += "hlx_image_cache_misses_total " + std::to_string(image_misses_) + "\n";
  help(out, "hlx_generated_tokens_total", "counter", "Tokens generated.");
  out += "hlx_generated_tokens_total " + std::to_string(generated_tokens_) + "\n";
  help(out, "hlx_prefill_seconds_total", "counter", "Engine time spent in prefill calls, summed over requests.");
  out += "hlx_prefill_seconds_total " + num(prefill_seconds_) + "\n";
  help(out, "hlx_decode_seconds_total", "counter",
       "Per-request decode wall time (first token to finish, shared with the batch), summed.");
  out += "hlx_decode_seconds_total " + num(decode_seconds_) + "\n";
  help(out, "hlx_prefill_tokens_per_second", "gauge", "Prompt tokens per second of prefill time (lifetime).");
  out += "hlx_prefill_tokens_per_second " + num(prefill_seconds_ > 0 ? double(prefill_tokens_) / prefill_seconds_ : 0) +
         "\n";
  help(out, "hlx_decode_tokens_per_second", "gauge",
       "Decoded tokens per second of per-request decode time (lifetime).");
  out +=
      "hlx_decode_tokens_per_second " + num(decode_seconds_ > 0 ? double(decode_tokens_) / decode_seconds_ : 0) + "\n";
  help(out, "hlx_time_to_first_token_seconds", "histogram", "Time from submission to the first generated token.");
  int64_t cumulative = 0;
  for (size_t i = 0; i < kTtftBuckets.size(); ++i) {
    cumulative += ttft_counts_[i];
    out += "hlx_time_to_first_token_seconds_bucket{le=\"" + num(kTtftBuckets[i], "%g") + "\"} " +
           std::to_string(cumulative) + "\n";
  }
  out += "hlx_time_to_first_token_seconds_bucket{le=\"+Inf\"} " + std::to_string(ttft_count_) + "\n";
  out += "hlx_time_to_first_token_seconds_sum " + num(ttft_sum_) + "\n";
  out += "hlx_time_to_first_token_seconds_count " + std::to_string(ttft_count_) + "\n";
  help(out, "hlx_queue_depth", "gauge", "Requests admitted and waiting for a slot.");
  out += "hlx_queue_depth " + std::to_string(g.queue_depth) + "\n";
  help(out, "hlx_active_slots", "gauge", "Slots holding a running request.");
  out += "hlx_active_slots " + std::to_string(g.active_slots) + "\n";
  help(out, "hlx_slots", "gauge", "KV slots (largest decode batch).");
  out += "hlx_slots " + std::to_string(g.slots) + "\n";
  help(out, "hlx_requests_in_flight", "gauge", "Generation requests submitted and not yet finished.");
  out += "hlx_requests_in_flight " + std::to_string(g.in_flight) + "\n";
  return out;
}

}  // namespace hlx::server
