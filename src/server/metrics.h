// Server metrics in the Prometheus text exposition format (version 0.0.4).
//
//   hlx_requests_total{endpoint, outcome}    counter: every HTTP request, by route and outcome
//   hlx_finish_total{reason}                 counter: finished generations by finish reason
//   hlx_prompt_tokens_total                  counter: prompt tokens of accepted generations
//   hlx_prompt_tokens_cached_total / hlx_prompt_tokens_computed_total
//                                            counters: prompt rows of finished generations reused
//                                            from the prefix cache / prefilled
//   hlx_image_cache_hits_total / hlx_image_cache_misses_total
//                                            counters: images of finished generations whose
//                                            features came from the image-feature cache / were encoded
//                                            (images inside a reused prefix count as neither)
//   hlx_generated_tokens_total               counter: tokens generated (streamed or not)
//   hlx_prefill_seconds_total / hlx_decode_seconds_total
//                                            counters: engine time per request (prefill calls;
//                                            first token -> finish, shared with the batch)
//   hlx_prefill_tokens_per_second / hlx_decode_tokens_per_second
//                                            gauges: the same ratios over the server's lifetime
//   hlx_time_to_first_token_seconds          histogram: submit -> first generated token
//   hlx_queue_depth, hlx_active_slots, hlx_slots, hlx_requests_in_flight    gauges
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

namespace hlx::server {

struct EngineGauges {
  int64_t queue_depth = 0, active_slots = 0, slots = 0, in_flight = 0;
};

class Metrics {
 public:
  static constexpr std::array<double, 13> kTtftBuckets = {0.005, 0.01, 0.025, 0.05, 0.1,  0.25, 0.5,
                                                          1.0,   2.5,  5.0,   10.0, 30.0, 60.0};

  void count_request(const std::string& endpoint, const std::string& outcome);
  void count_finish(const std::string& reason);
  void add_prompt_tokens(int64_t n);
  void add_generated_tokens(int64_t n);
  void add_prefill(int64_t tokens, double seconds);
  void add_prompt_reuse(int64_t cached, int64_t computed);
  void add_images(int64_t cache_hits, int64_t cache_misses);
  void add_decode(int64_t tokens, double seconds);
  void observe_ttft(double seconds);

  std::string render(const EngineGauges& gauges) const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, std::string>, int64_t> requests_;
  std::map<std::string, int64_t> finishes_;
  int64_t prompt_tokens_ = 0, generated_tokens_ = 0;
  int64_t prefill_tokens_ = 0, decode_tokens_ = 0;
  int64_t prompt_cached_ = 0, prompt_computed_ = 0;
  int64_t image_hits_ = 0, image_misses_ = 0;
  double prefill_seconds_ = 0, decode_seconds_ = 0;
  std::array<int64_t, kTtftBuckets.size()> ttft_counts_{};  // non-cumulative per bucket
  int64_t ttft_count_ = 0;
  double ttft_sum_ = 0;
};

}  // namespace hlx::server
