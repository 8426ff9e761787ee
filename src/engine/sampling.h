// Token sampling: penalties, temperature, top-k, top-p, min-p and a per-request seeded RNG.
//
// Order (as Hugging Face's logits processors and llama.cpp's default chain):
//   0. (structured output, in the batch engine before the Sampler: tokens the JSON grammar does
//      not allow are set to -inf; every step below, log-probabilities included, sees that row)
//   1. repetition penalty over every token of the prompt and the generated text
//      (logit > 0 ? logit / penalty : logit * penalty), once per distinct token;
//   2. presence and frequency penalties over generated tokens only (OpenAI definition):
//      logit -= frequency_penalty * count + presence_penalty * (count > 0);
//   2b. logit_bias: logit += bias for each listed token (OpenAI's logit_bias; -100 bans a token in
//      practice, +100 all but forces it);
//   (log-probabilities, when asked, are the log-softmax of this row: after 1-2b, before 3-7)
//   3. temperature 0: argmax of the penalized logits (lowest id on ties), no random draw;
//      otherwise logits / temperature, then
//   4. top-k (keep the k largest; 0 = off), 5. softmax, 6. top-p (keep the smallest set of the
//      most probable tokens whose mass reaches top_p; 1 = off), 7. min-p (keep p >= min_p * p_max;
//      0 = off), renormalise, 8. one uniform draw from the request's own RNG.
//
// Reproducibility: each Sampler owns a 64-bit Mersenne Twister seeded with `seed` and draws exactly
// one value per sampled (non-greedy) token, with the uniform derived from the top 53 bits (no
// std::uniform_real_distribution, whose output is implementation-defined). Candidates are ordered
// by (probability desc, id asc). So a request's tokens depend only on its own logits and seed, never
// on which other requests share the batch.
//
// Threads: a Sampler is single-threaded state owned by one request.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/status.h"

namespace hlx::engine {

struct SamplingParams {
  float temperature = 0.0f;         // >= 0; 0 = greedy
  int64_t top_k = 0;                // >= 0; 0 = off
  float top_p = 1.0f;               // (0, 1]; 1 = off
  float min_p = 0.0f;               // [0, 1]; 0 = off
  float repetition_penalty = 1.0f;  // > 0; 1 = off
  float presence_penalty = 0.0f;    // [-2, 2]; 0 = off
  float frequency_penalty = 0.0f;   // [-2, 2]; 0 = off
  uint64_t seed = 0;
  // (token id, bias in [-100, 100]) pairs, ids unique and >= 0 (the engine checks them against
  // the vocabulary); at most kMaxLogitBias entries.
  std::vector<std::pair<int64_t, float>> logit_bias;
  // Log-probabilities of each generated token (OpenAI's logprobs / top_logprobs): `logprobs`
  // reports the chosen token's; `top_logprobs` in [0, kMaxTopLogprobs] (needs logprobs) adds
  // that many most likely ids. Off: no work at all per token.
  bool logprobs = false;
  int64_t top_logprobs = 0;
};
inline constexpr size_t kMaxLogitBias = 1024;
inline constexpr int64_t kMaxTopLogprobs = 20;

// One generated token's log-probabilities: log-softmax over the whole vocabulary of the logits
// after the penalties and logit_bias (steps 1-2b), before temperature, top-k, top-p and min-p,
// in double (log-sum-exp around the row maximum). A non-finite logit has logprob -inf.
struct TokenLogprobs {
  int64_t token = -1;
  double logprob = 0;
  std::vector<std::pair<int64_t, double>> top;  // (id, logprob): logprob desc, id asc on ties
};

// kInvalidArgument naming the field, its value and the allowed range (NaN and inf rejected).
Status validate_sampling(const SamplingParams& params);

class Sampler {
 public:
  // Validates `params`; `prompt` seeds the repetition-penalty token set.
  static Result<Sampler> create(const SamplingParams& params, std::span<const int64_t> prompt = {});

  // Applies steps 1-2 in place to one row of logits (its size is the vocabulary).
  void apply_penalties(std::span<float> logits) const;
  // Steps 1-8 on a copy of `logits`; kInvalidArgument for an empty row or a row without any
  // finite logit. Does not record the token: call accept() with what was chosen.
  Result<int64_t> sample(std::span<const float> logits);
  // Records a generated token for the penalties.
  void accept(int64_t token);
  // sample() followed by accept(); with params().logprobs and `lp` non-null, also the chosen
  // token's log-probabilities (computed before accept(), so under the draw's penalties).
  Result<int64_t> next(std::span<const float> logits, std::optional<TokenLogprobs>* lp = nullptr);
  // The log-probabilities of `chosen` and the top `top` ids (see TokenLogprobs) for a row with
  // this sampler's penalties applied; kInvalidArgument for an empty row, one without a finite
  // logit, or `chosen` outside the row. Call before accept(chosen).
  Result<TokenLogprobs> logprobs(std::span<const float> logits, int64_t chosen, int64_t top);

  // The probabilities after steps 1-7 (zero outside the kept set), for tests; no RNG draw.
  Result<std::vector<double>> distribution(std::span<const float> logits) const;

  const SamplingParams& params() const { return params_; }

 private:
  explicit Sampler(const SamplingParams& p);
  // Kept candidates (id, probability) in (probability desc, id asc) order, normalised.
  Result<std::vector<std::pair<int64_t, double>>> candidates(std::span<const float> logits) const;
  double uniform();
  // Ids below `vocab` that a penalty applies to (sorted, unique), and a logit of `token` after them.
  std::vector<int64_t> penalized_tokens(int64_t vocab) const;
  float penalized(int64_t token, float l) const;
  // sample() with top-k off (or above the row's finite count) without sorting the whole row;
  // -1 when the row needs the full path (see sampling.cc).
  Result<int64_t> sample_full_vocab(std::span<const float> logits);
  // sample_full_vocab's paths over the penalized row_: the bucketed estimate (-1 when it cannot
  // certify the old algorithm's choice; it sets *u once it has drawn) and the exact sorted head
  // (draws unless u >= 0).
  int64_t bucketed_draw(std::span<const float> row, size_t finite, float mx, float mn, double* u);
  int64_t sorted_head_draw(std::span<const float> row, size_t finite, float mx, double u);
  // sample() at temperature 0 (no RNG draw), without building the candidate list.
  Result<int64_t> greedy(std::span<const float> logits) const;

  SamplingParams params_;
  std::mt19937_64 rng_;
  std::unordered_map<int64_t, int64_t> seen_;       // prompt and generated tokens (repetition)
  std::unordered_map<int64_t, int64_t> generated_;  // generated token -> count
  // sample_full_vocab's buffers, kept between tokens: fresh ones (4 MB at a 152k vocabulary)
  // cost more in page faults than the sort itself.
  std::vector<float> row_;
  std::vector<uint32_t> head_, sort_tmp_;
  std::vector<double> head_p_;
  std::vector<double> bucket_mass_;             // bucketed_draw: exp(x - max) per bucket
  std::vector<uint16_t> bucket_;                // bucket per id
  std::vector<uint32_t> order_, bucket_begin_;  // one bucket's ids; bucket offsets
  std::vector<uint64_t> bucket_sort_;
  std::vector<float> lp_row_;  // logprobs(): the penalized row
};

// Index of the largest value (lowest index on ties; NaN never wins). -1 for an empty row.
int64_t argmax(std::span<const float> logits);

}  // namespace hlx::engine
