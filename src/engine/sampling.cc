#include "engine/sampling.h"

#include <algorithm>
#if defined(__SSE4_1__)
#include <smmintrin.h>
#endif
#include <cmath>
#include <cstring>
#include <limits>

namespace hlx::engine {

namespace {

Status range_error(const char* field, double value, const char* range) {
  return make_error(ErrorKind::kInvalidArgument, "sampling.", field, " = ", value, " is outside ", range);
}

}  // namespace

Status validate_sampling(const SamplingParams& p) {
  if (!std::isfinite(p.temperature) || p.temperature < 0) return range_error("temperature", p.temperature, "[0, inf)");
  if (p.top_k < 0) return range_error("top_k", double(p.top_k), "[0, inf) (0 = off)");
  if (!std::isfinite(p.top_p) || p.top_p <= 0 || p.top_p > 1) return range_error("top_p", p.top_p, "(0, 1]");
  if (!std::isfinite(p.min_p) || p.min_p < 0 || p.min_p > 1) return range_error("min_p", p.min_p, "[0, 1]");
  if (!std::isfinite(p.repetition_penalty) || p.repetition_penalty <= 0)
    return range_error("repetition_penalty", p.repetition_penalty, "(0, inf)");
  if (!std::isfinite(p.presence_penalty) || p.presence_penalty < -2 || p.presence_penalty > 2)
    return range_error("presence_penalty", p.presence_penalty, "[-2, 2]");
  if (!std::isfinite(p.frequency_penalty) || p.frequency_penalty < -2 || p.frequency_penalty > 2)
    return range_error("frequency_penalty", p.frequency_penalty, "[-2, 2]");
  return ok_status();
}

int64_t argmax(std::span<const float> logits) {
  int64_t best = -1;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (std::isnan(logits[i])) continue;
    if (best < 0 || logits[i] > logits[size_t(best)]) best = int64_t(i);
  }
  if (best < 0 && !logits.empty()) best = 0;
  return best;
}

Result<Sampler> Sampler::create(const SamplingParams& params, std::span<const int64_t> prompt) {
  HLX_RETURN_IF_ERROR(validate_sampling(params));
  Sampler s(params);
  for (int64_t t : prompt) s.seen_[t] += 1;
  return s;
}

void Sampler::accept(int64_t token) {
  seen_[token] += 1;
  generated_[token] += 1;
}

std::vector<int64_t> Sampler::penalized_tokens(int64_t vocab) const {
  std::vector<int64_t> t;
  if (params_.repetition_penalty != 1.0f)
    for (const auto& [id, n] : seen_)
      if (id >= 0 && id < vocab) t.push_back(id);
  if (params_.presence_penalty != 0.0f || params_.frequency_penalty != 0.0f)
    for (const auto& [id, n] : generated_)
      if (id >= 0 && id < vocab) t.push_back(id);
  std::sort(t.begin(), t.end());
  t.erase(std::unique(t.begin(), t.end()), t.end());
  return t;
}

float Sampler::penalized(int64_t token, float l) const {
  if (params_.repetition_penalty != 1.0f && seen_.count(token)) {
    const float r = params_.repetition_penalty;
    l = l > 0 ? l / r : l * r;
  }
  if (params_.presence_penalty != 0.0f || params_.frequency_penalty != 0.0f) {
    auto it = generated_.find(token);
    if (it != generated_.end())
      l -= params_.frequency_penalty * float(it->second) + (it->second > 0 ? params_.presence_penalty : 0.0f);
  }
  return l;
}

void Sampler::apply_penalties(std::span<float> logits) const {
  for (int64_t t : penalized_tokens(int64_t(logits.size()))) logits[size_t(t)] = penalized(t, logits[size_t(t)]);
}

Result<std::vector<std::pair<int64_t, double>>> Sampler::candidates(std::span<const float> logits_in) const {
  if (logits_in.empty()) return make_error(ErrorKind::kInvalidArgument, "sampling an empty logits row");
  std::vector<float> logits(logits_in.begin(), logits_in.end());
  apply_penalties(logits);
  std::vector<std::pair<int64_t, double>> c;
  c.reserve(logits.size());
  const double inv_t = params_.temperature > 0 ? 1.0 / double(params_.temperature) : 1.0;
  for (size_t i = 0; i < logits.size(); ++i)
    if (std::isfinite(logits[i])) c.emplace_back(int64_t(i), double(logits[i]) * inv_t);
  if (c.empty()) return make_error(ErrorKind::kInvalidArgument, "no finite logit in a row of ", logits.size());
  auto order = [](const std::pair<int64_t, double>& a, const std::pair<int64_t, double>& b) {
    return a.second > b.second || (a.second == b.second && a.first < b.first);
  };
  if (params_.temperature == 0) {
    // Greedy: the argmax of the penalized logits, lowest id on ties.
    auto best = *std::min_element(c.begin(), c.end(), order);
    return std::vector<std::pair<int64_t, double>>{{best.first, 1.0}};
  }
  if (params_.top_k > 0 && size_t(params_.top_k) < c.size()) {
    std::partial_sort(c.begin(), c.begin() + params_.top_k, c.end(), order);
    c.resize(size_t(params_.top_k));
  } else {
    std::sort(c.begin(), c.end(), order);
  }
  // Softmax over the kept candidates.
  const double mx = c.front().second;
  double sum = 0;
  for (auto& [id, x] : c) sum += (x = std::exp(x - mx));
  for (auto& [id, x] : c) x /= sum;
  if (params_.top_p < 1.0f) {
    double cum = 0;
    size_t keep = c.size();
    for (size_t i = 0; i < c.size(); ++i) {
      cum += c[i].second;
      if (cum >= double(params_.top_p)) {
        keep = i + 1;
        break;
      }
    }
    c.resize(keep);
  }
  if (params_.min_p > 0.0f) {
    const double floor = double(params_.min_p) * c.front().second;
    size_t keep = 1;
    while (keep < c.size() && c[keep].second >= floor) ++keep;
    c.resize(keep);
  }
  sum = 0;
  for (auto& [id, p] : c) sum += p;
  for (auto& [id, p] : c) p /= sum;
  return c;
}

double Sampler::uniform() { return double(rng_() >> 11) * 0x1.0p-53; }

// Greedy without candidates(): that copies the row, then builds a (id, double) pair per finite
// logit (2.4 MB at a 152k vocabulary) to take one minimum, ~0.5 ms a row, 8 rows a decode step at
// 8 slots. Same result: the lowest id with the largest finite penalized logit, where only the
// tokens the penalties touch can differ from the row (they are skipped by the scan and scored after).
Result<int64_t> Sampler::greedy(std::span<const float> logits) const {
  if (logits.empty()) return make_error(ErrorKind::kInvalidArgument, "sampling an empty logits row");
  const int64_t v = int64_t(logits.size());
  const std::vector<int64_t> touched = penalized_tokens(v);
  const float inf = std::numeric_limits<float>::infinity();
  int64_t best = -1;
  float bv = -inf;
  // The first of the largest finite values of [a, e), if above bv: its maximum, then the first
  // index holding it (two branch-free passes; -0 and +0 compare equal, so either finds the first).
  auto scan = [&](int64_t a, int64_t e) {
    const float* x = logits.data();
    float m = -inf;
    int64_t i = a;
#if defined(__SSE4_1__)
    const __m128i abs_mask = _mm_set1_epi32(0x7fffffff), inf_bits = _mm_set1_epi32(0x7f800000);
    const __m128 ninf = _mm_set1_ps(-inf);
    __m128 m4 = ninf;
    for (; i + 4 <= e; i += 4) {
      const __m128 v = _mm_loadu_ps(x + i);
      const __m128i finite = _mm_cmplt_epi32(_mm_and_si128(_mm_castps_si128(v), abs_mask), inf_bits);
      m4 = _mm_max_ps(m4, _mm_blendv_ps(ninf, v, _mm_castsi128_ps(finite)));
    }
    alignas(16) float lanes[4];
    _mm_store_ps(lanes, m4);
    for (float l : lanes) m = std::max(m, l);
#endif
    for (; i < e; ++i)
      if (x[i] > m && x[i] < inf) m = x[i];
    if (!(m > bv) || m == -inf) return;
    for (i = a; x[i] != m; ++i) {
    }
    bv = m;
    best = i;
  };
  int64_t from = 0;
  for (int64_t t : touched) {
    scan(from, t);
    from = t + 1;
  }
  scan(from, v);
  for (int64_t t : touched) {
    const float l = penalized(t, logits[size_t(t)]);
    if (std::isfinite(l) && (best < 0 || l > bv || (l == bv && t < best))) {
      bv = l;
      best = t;
    }
  }
  if (best < 0) return make_error(ErrorKind::kInvalidArgument, "no finite logit in a row of ", logits.size());
  return best;
}

namespace {

// Sort key of a finite float: ascending key = descending value, -0 and +0 equal (as they compare).
inline uint32_t descending_key(float f) {
  uint32_t b;
  if (f == 0.0f) f = 0.0f;
  std::memcpy(&b, &f, 4);
  const uint32_t ascending = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
  return ~ascending;
}

inline float value_of_key(uint32_t key) {
  const uint32_t ascending = ~key;
  const uint32_t b = (ascending & 0x80000000u) ? (ascending & 0x7fffffffu) : ~ascending;
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

// LSD radix sort of 32-bit keys (3 passes of 11 bits; a pass is skipped when every key has the
// same digit there).
void radix_sort(std::vector<uint32_t>& v, std::vector<uint32_t>& tmp) {
  constexpr int kBits = 11, kBuckets = 1 << kBits, kPasses = 3;
  uint32_t hist[kPasses][kBuckets] = {};
  for (uint32_t k : v)
    for (int p = 0; p < kPasses; ++p) ++hist[p][(k >> (p * kBits)) & (kBuckets - 1)];
  tmp.resize(v.size());
  for (int p = 0; p < kPasses; ++p) {
    uint32_t* h = hist[p];
    if (h[(v.front() >> (p * kBits)) & (kBuckets - 1)] == v.size()) continue;
    uint32_t sum = 0;
    for (int b = 0; b < kBuckets; ++b) {
      const uint32_t n = h[b];
      h[b] = sum;
      sum += n;
    }
    for (uint32_t k : v) tmp[h[(k >> (p * kBits)) & (kBuckets - 1)]++] = k;
    v.swap(tmp);
  }
}

}  // namespace

// The same draw as candidates() + the loop in sample(), without their full sort of (id, double)
// pairs. Only the "head" (x - max >= kTailGap) is sorted, as bare 32-bit order keys of the logits
// (radix sort), and exponentiated; the id of the drawn position is recovered at the end (the r-th
// id holding that logit, ties being in id order). The tail cannot change any sum of the old
// algorithm: in descending order a term is added to a partial sum that already holds the first
// term (1 for the softmax sum, p_0 for the others), and a tail term is below 2^-55 of that first
// term, under half an ulp of the partial sum, so the addition rounds back to the same value. Hence
// the softmax sum, the top-p cut, the renormalisation and the draw's cumulation equal the old ones
// bit for bit; the tail only matters as "the last kept candidate" (the draw's rounding fallback),
// the overall last in (x desc, id asc) order, found by a scan. One case is left to the full path:
// min-p keeping the whole head and maybe part of the tail. Returns -1 for the full path (no RNG
// draw done then).
Result<int64_t> Sampler::sample_full_vocab(std::span<const float> logits_in) {
  constexpr double kTailGap = -40.0;  // exp(-40) = 4.2e-18 < 2^-55
  std::vector<float>& logits = row_;
  logits.assign(logits_in.begin(), logits_in.end());
  apply_penalties(logits);
  const double inv_t = 1.0 / double(params_.temperature);
  float mx = -std::numeric_limits<float>::infinity(), mn = std::numeric_limits<float>::infinity();
  int64_t last = -1;  // smallest finite logit, largest id among equals: last in sorted order
  size_t finite = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    const float l = logits[i];
    if (!std::isfinite(l)) continue;
    ++finite;
    mx = std::max(mx, l);
    if (l <= mn) {
      mn = l;
      last = int64_t(i);
    }
  }
  if (finite == 0) return make_error(ErrorKind::kInvalidArgument, "no finite logit in a row of ", logits.size());
  if (params_.top_k > 0 && size_t(params_.top_k) < finite) return int64_t(-1);
  const double xmax = double(mx) * inv_t;
  std::vector<uint32_t>& head = head_;
  head.clear();
  head.reserve(finite);
  double tail_max = -std::numeric_limits<double>::infinity();  // largest x - xmax in the tail
  for (float l : logits) {
    if (!std::isfinite(l)) continue;
    const double d = double(l) * inv_t - xmax;
    if (d >= kTailGap)
      head.push_back(descending_key(l));
    else
      tail_max = std::max(tail_max, d);
  }
  const size_t tail = finite - head.size();
  if (head.size() > 256)
    radix_sort(head, sort_tmp_);
  else
    std::sort(head.begin(), head.end());
  // Softmax over the head in sorted order (the tail adds nothing to the sum); equal logits share
  // one exp.
  std::vector<double>& p = head_p_;
  p.resize(head.size());
  double sum = 0, e = 0;
  for (size_t i = 0; i < head.size(); ++i) {
    if (i == 0 || head[i] != head[i - 1]) e = std::exp(double(value_of_key(head[i])) * inv_t - xmax);
    sum += (p[i] = e);
  }
  for (double& x : p) x /= sum;
  size_t keep = head.size();
  bool keep_tail = tail > 0;
  if (params_.top_p < 1.0f) {
    double cum = 0;
    for (size_t i = 0; i < head.size(); ++i) {
      cum += p[i];
      if (cum >= double(params_.top_p)) {
        keep = i + 1;
        keep_tail = false;
        break;
      }
    }
  }
  if (params_.min_p > 0.0f) {
    const double floor = double(params_.min_p) * p[0];
    size_t k = 1;
    while (k < keep && p[k] >= floor) ++k;
    if (k < keep) {
      keep = k;
      keep_tail = false;
    } else if (keep_tail) {
      if (std::exp(tail_max) / sum >= floor) return int64_t(-1);  // min-p would keep some of the tail
      keep_tail = false;
    }
  }
  // The id at sorted position i: the r-th (in id order) of the logits holding that value.
  auto id_at = [&](size_t i) -> int64_t {
    size_t first = i;
    while (first > 0 && head[first - 1] == head[i]) --first;
    size_t r = i - first;
    for (size_t id = 0; id < logits.size(); ++id)
      if (std::isfinite(logits[id]) && descending_key(logits[id]) == head[i] && r-- == 0) return int64_t(id);
    return -1;  // unreachable: the key came from this row
  };
  if (keep + (keep_tail ? tail : 0) == 1) {
    uniform();  // one draw per sampled token, whatever the row
    return id_at(0);
  }
  sum = 0;
  for (size_t i = 0; i < keep; ++i) sum += p[i];
  const double u = uniform();
  double cum = 0;
  for (size_t i = 0; i < keep; ++i) {
    cum += p[i] / sum;
    if (u < cum) return id_at(i);
  }
  return keep_tail ? last : id_at(keep - 1);  // rounding: u within the last ulp of 1
}

Result<int64_t> Sampler::sample(std::span<const float> logits) {
  if (params_.temperature == 0) return greedy(logits);
  if (params_.top_k == 0 || size_t(params_.top_k) >= logits.size()) {
    HLX_ASSIGN_OR_RETURN(int64_t t, sample_full_vocab(logits));
    if (t >= 0) return t;
  }
  HLX_ASSIGN_OR_RETURN(auto c, candidates(logits));
  if (c.size() == 1) {
    uniform();  // one draw per sampled token, whatever the row
    return c.front().first;
  }
  const double u = uniform();
  double cum = 0;
  for (const auto& [id, p] : c) {
    cum += p;
    if (u < cum) return id;
  }
  return c.back().first;  // rounding: u within the last ulp of 1
}

Result<int64_t> Sampler::next(std::span<const float> logits) {
  HLX_ASSIGN_OR_RETURN(int64_t t, sample(logits));
  accept(t);
  return t;
}

Result<std::vector<double>> Sampler::distribution(std::span<const float> logits) const {
  HLX_ASSIGN_OR_RETURN(auto c, candidates(logits));
  std::vector<double> out(logits.size(), 0.0);
  for (const auto& [id, p] : c) out[size_t(id)] = p;
  return out;
}

}  // namespace hlx::engine
