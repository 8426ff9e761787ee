// Sampler: parameter validation, greedy, seeds, the filter chain and penalties against values
// computed by hand from their definitions.
#include "engine/sampling.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace hlx::engine {
namespace {

std::vector<float> random_row(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, 3.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

std::vector<double> softmax(const std::vector<float>& l, double t = 1.0) {
  double mx = -INFINITY, sum = 0;
  for (float x : l) mx = std::max(mx, double(x) / t);
  std::vector<double> p(l.size());
  for (size_t i = 0; i < l.size(); ++i) sum += (p[i] = std::exp(double(l[i]) / t - mx));
  for (auto& x : p) x /= sum;
  return p;
}

TEST(Sampling, ValidationNamesTheField) {
  struct Case {
    SamplingParams p;
    std::string field;
  };
  std::vector<Case> cases;
  SamplingParams p;
  p = {};
  p.temperature = -0.1f;
  cases.push_back({p, "temperature"});
  p = {};
  p.temperature = NAN;
  cases.push_back({p, "temperature"});
  p = {};
  p.top_k = -1;
  cases.push_back({p, "top_k"});
  p = {};
  p.top_p = 0.0f;
  cases.push_back({p, "top_p"});
  p = {};
  p.top_p = 1.5f;
  cases.push_back({p, "top_p"});
  p = {};
  p.min_p = -0.5f;
  cases.push_back({p, "min_p"});
  p = {};
  p.min_p = 1.01f;
  cases.push_back({p, "min_p"});
  p = {};
  p.repetition_penalty = 0.0f;
  cases.push_back({p, "repetition_penalty"});
  p = {};
  p.repetition_penalty = INFINITY;
  cases.push_back({p, "repetition_penalty"});
  p = {};
  p.presence_penalty = 2.5f;
  cases.push_back({p, "presence_penalty"});
  p = {};
  p.frequency_penalty = -3.0f;
  cases.push_back({p, "frequency_penalty"});
  for (const auto& c : cases) {
    Status s = validate_sampling(c.p);
    EXPECT_EQ(s.kind(), ErrorKind::kInvalidArgument) << c.field;
    EXPECT_NE(s.message().find(c.field), std::string::npos) << s.message();
    EXPECT_FALSE(Sampler::create(c.p).ok());
  }
  EXPECT_TRUE(validate_sampling(SamplingParams{}).ok());
}

TEST(Sampling, GreedyIsArgmaxAndTopK1IsGreedy) {
  for (uint32_t seed = 0; seed < 50; ++seed) {
    auto row = random_row(333, seed);
    int64_t best = 0;
    for (size_t i = 1; i < row.size(); ++i)
      if (row[i] > row[size_t(best)]) best = int64_t(i);
    auto greedy = Sampler::create(SamplingParams{});
    ASSERT_TRUE(greedy.ok());
    EXPECT_EQ(greedy->sample(row).value(), best);
    SamplingParams k1;
    k1.temperature = 1.3f;
    k1.top_k = 1;
    k1.seed = seed;
    auto s = Sampler::create(k1);
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(s->sample(row).value(), best);
  }
  // Ties go to the lowest id; NaN never wins.
  std::vector<float> tie = {1.0f, 5.0f, NAN, 5.0f};
  EXPECT_EQ(Sampler::create(SamplingParams{})->sample(tie).value(), 1);
  EXPECT_EQ(argmax(tie), 1);
}

TEST(Sampling, SameSeedSameSequenceOtherSeedDiffers) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 1234;
  auto row = random_row(64, 9);
  for (auto& x : row) x *= 0.2f;  // flat enough that draws vary
  auto a = Sampler::create(p), b = Sampler::create(p);
  p.seed = 1235;
  auto c = Sampler::create(p);
  std::vector<int64_t> ta, tb, tc;
  for (int i = 0; i < 200; ++i) {
    ta.push_back(a->next(row).value());
    tb.push_back(b->next(row).value());
    tc.push_back(c->next(row).value());
  }
  EXPECT_EQ(ta, tb);
  EXPECT_NE(ta, tc);
  // Known first draws for seed 1234: the generator is std::mt19937_64 (fully specified by the
  // standard) and the uniform uses its top 53 bits, so these hold on every platform.
  std::mt19937_64 ref(1234);
  double u = double(ref() >> 11) * 0x1.0p-53;
  auto probs = softmax(row);
  // Walk the distribution in (probability desc, id asc) order.
  std::vector<int64_t> order(row.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = int64_t(i);
  std::sort(order.begin(), order.end(), [&](int64_t x, int64_t y) {
    return probs[size_t(x)] > probs[size_t(y)] || (probs[size_t(x)] == probs[size_t(y)] && x < y);
  });
  double cum = 0;
  int64_t expect = order.back();
  for (int64_t id : order)
    if (u < (cum += probs[size_t(id)])) {
      expect = id;
      break;
    }
  EXPECT_EQ(ta[0], expect);
}

TEST(Sampling, FrequenciesFollowTheFilteredSoftmax) {
  const std::vector<float> row = {2.0f, 1.0f, 0.5f, 0.0f, -1.0f, 1.5f};
  const int n = 40000;
  auto freq_of = [&](SamplingParams p) {
    auto s = Sampler::create(p);
    EXPECT_TRUE(s.ok());
    std::vector<double> f(row.size(), 0);
    for (int i = 0; i < n; ++i) f[size_t(s->sample(row).value())] += 1.0 / n;
    return f;
  };
  auto check = [&](SamplingParams p, const std::vector<double>& expect) {
    auto f = freq_of(p);
    auto d = Sampler::create(p)->distribution(row).value();
    for (size_t i = 0; i < row.size(); ++i) {
      EXPECT_NEAR(d[i], expect[i], 1e-12) << "id " << i << " temp " << p.temperature;
      EXPECT_NEAR(f[i], expect[i], 0.01) << "id " << i << " temp " << p.temperature;
      if (expect[i] == 0) {
        EXPECT_EQ(f[i], 0.0);
      }
    }
  };
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 5;
  check(p, softmax(row));
  p.temperature = 0.5f;
  check(p, softmax(row, 0.5));
  p.temperature = 2.0f;
  check(p, softmax(row, 2.0));
  // top-k = 2: ids 0 and 5 renormalised.
  p.temperature = 1.0f;
  p.top_k = 2;
  {
    double a = std::exp(2.0), b = std::exp(1.5);
    check(p, {a / (a + b), 0, 0, 0, 0, b / (a + b)});
  }
  // top-p = 0.6: sorted probabilities of the full softmax are id0 .39, id5 .24, id1 .14 ...;
  // the smallest prefix reaching 0.6 is {0, 5}.
  p.top_k = 0;
  p.top_p = 0.6f;
  {
    auto sm = softmax(row);
    ASSERT_LT(sm[0], 0.6);
    ASSERT_GE(sm[0] + sm[5], 0.6);
    double z = sm[0] + sm[5];
    check(p, {sm[0] / z, 0, 0, 0, 0, sm[5] / z});
  }
  // min-p = 0.3: keep p >= 0.3 * p_max, i.e. logit >= 2 + ln 0.3 = 0.796: ids 0, 1, 5.
  p.top_p = 1.0f;
  p.min_p = 0.3f;
  {
    double a = std::exp(2.0), b = std::exp(1.0), c = std::exp(1.5);
    double z = a + b + c;
    check(p, {a / z, b / z, 0, 0, 0, c / z});
  }
}

TEST(Sampling, LogitBiasIsAddedToTheLogit) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.f, 2.f);
  std::vector<float> row(5003);
  for (float& x : row) x = nd(rng);
  const std::vector<std::pair<int64_t, float>> bias = {{17, 7.5f}, {4000, -100.f}, {2, 0.25f}};
  std::vector<float> biased = row;
  for (const auto& [id, b] : bias) biased[size_t(id)] += b;
  for (float t : {0.f, 0.7f, 1.f}) {
    for (float top_p : {1.f, 0.9f}) {
      SamplingParams with;
      with.temperature = t;
      with.top_p = top_p;
      with.repetition_penalty = 1.3f;  // the bias comes after the penalties
      with.logit_bias = bias;
      SamplingParams without = with;
      without.logit_bias.clear();
      const std::vector<int64_t> prompt = {17, 5, 9};
      auto a = Sampler::create(with, prompt), b = Sampler::create(without, prompt);
      ASSERT_TRUE(a.ok() && b.ok());
      // The repetition penalty of token 17 applies to the raw logit, then the bias.
      std::vector<float> expect = row;
      for (int64_t id : prompt)
        expect[size_t(id)] = expect[size_t(id)] > 0 ? expect[size_t(id)] / 1.3f : expect[size_t(id)] * 1.3f;
      for (const auto& [id, bb] : bias) expect[size_t(id)] += bb;
      SamplingParams none = without;
      none.repetition_penalty = 1.f;
      auto c = Sampler::create(none);
      ASSERT_TRUE(c.ok());
      EXPECT_EQ(*a->distribution(row), *c->distribution(expect)) << "t " << t << " top_p " << top_p;
      if (t > 0) {  // and the draws: the same tokens as the unbiased sampler on the biased row
        for (int i = 0; i < 50; ++i) EXPECT_EQ(*a->sample(row), *c->sample(expect));
      }
    }
  }
  SamplingParams p;
  p.logit_bias = {{3, 101.f}};
  EXPECT_NE(validate_sampling(p).message().find("[-100, 100]"), std::string::npos);
  p.logit_bias = {{-1, 1.f}};
  EXPECT_NE(validate_sampling(p).message().find("negative"), std::string::npos);
  p.logit_bias = {{3, 1.f}, {3, 2.f}};
  EXPECT_NE(validate_sampling(p).message().find("twice"), std::string::npos);
  p.logit_bias = {{3, NAN}};
  EXPECT_FALSE(validate_sampling(p).ok());
  p.logit_bias.assign(kMaxLogitBias + 1, {0, 0.f});
  EXPECT_NE(validate_sampling(p).message().find("entries"), std::string::npos);
}

TEST(Sampling, PenaltiesMatchTheirDefinitions) {
  std::vector<float> row = {2.0f, -1.0f, 0.5f, 3.0f, -2.0f, 1.0f};
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  const std::vector<int64_t> prompt = {0, 1, 1};
  auto s = Sampler::create(p, prompt);
  ASSERT_TRUE(s.ok());
  s->accept(3);
  s->accept(3);
  s->accept(4);
  s->accept(1);
  std::vector<float> got = row;
  s->apply_penalties(got);
  // repetition over {0,1,3,4} (prompt + generated, once each): positive / 2, negative * 2;
  // then generated counts {3:2, 4:1, 1:1}: minus 0.25*count + 0.5.
  std::vector<float> expect = {
      2.0f / 2,                    // prompt only
      -1.0f * 2 - (0.25f + 0.5f),  // prompt and generated once
      0.5f,                        // untouched
      3.0f / 2 - (0.5f + 0.5f),    // generated twice
      -2.0f * 2 - (0.25f + 0.5f),  // generated once
      1.0f,                        // untouched
  };
  for (size_t i = 0; i < row.size(); ++i) EXPECT_FLOAT_EQ(got[i], expect[i]) << "id " << i;
  // Greedy sees the penalized logits: id 3 (3.0) drops to 0.5, id 0 (1.0) and id 5 (1.0) tie -> 0.
  EXPECT_EQ(s->sample(row).value(), 0);
  // Without penalties greedy picks 3.
  EXPECT_EQ(Sampler::create(SamplingParams{}, prompt)->sample(row).value(), 3);
}

// Greedy takes a path of its own (no candidate list): the lowest id with the largest finite
// penalized logit, against a plain loop over a penalized copy. Rows hold NaN, +-inf, ties, +-0,
// few distinct values (many ties) and penalized tokens that lead, tie or fall behind.
TEST(Sampling, GreedyIsTheLowestIdOfTheLargestFinitePenalizedLogit) {
  std::mt19937 g(11);
  for (int trial = 0; trial < 400; ++trial) {
    const size_t n = 1 + g() % 300;
    std::vector<float> row(n);
    const int levels = 1 + int(g() % 6);
    for (auto& x : row) {
      const uint32_t k = g() % 20;
      x = k == 0   ? NAN
          : k == 1 ? INFINITY
          : k == 2 ? -INFINITY
          : k == 3 ? -0.0f
          : k == 4 ? 0.0f
                   : float(int(g() % levels) - 2);
    }
    SamplingParams p;
    if (trial % 4 != 0) p.repetition_penalty = trial % 3 ? 1.5f : 0.5f;
    if (trial % 5 != 0) {
      p.presence_penalty = trial % 2 ? 0.5f : -1.0f;
      p.frequency_penalty = 0.25f;
    }
    std::vector<int64_t> prompt;
    for (int i = int(g() % 6); i > 0; --i) prompt.push_back(int64_t(g() % (n + 3)));  // ids past the row too
    auto s = Sampler::create(p, prompt);
    ASSERT_TRUE(s.ok());
    for (int i = int(g() % 6); i > 0; --i) s->accept(int64_t(g() % n));
    std::vector<float> pen = row;
    s->apply_penalties(pen);
    int64_t want = -1;
    for (size_t i = 0; i < n; ++i)
      if (std::isfinite(pen[i]) && (want < 0 || pen[i] > pen[size_t(want)])) want = int64_t(i);
    auto got = s->sample(row);
    if (want < 0) {
      EXPECT_EQ(got.status().kind(), ErrorKind::kInvalidArgument) << "trial " << trial;
    } else {
      ASSERT_TRUE(got.ok()) << "trial " << trial << ": " << got.status().to_string();
      EXPECT_EQ(*got, want) << "trial " << trial;
    }
  }
}

// The sampling algorithm as it was before the partial path (sort every finite candidate, softmax,
// top-p, min-p, renormalise, one draw), written out plainly as the reference. `logits` are already
// penalized.
int64_t reference_draw(const std::vector<float>& logits, const SamplingParams& p, std::mt19937_64& rng) {
  std::vector<std::pair<int64_t, double>> c;
  const double inv_t = 1.0 / double(p.temperature);
  for (size_t i = 0; i < logits.size(); ++i)
    if (std::isfinite(logits[i])) c.emplace_back(int64_t(i), double(logits[i]) * inv_t);
  std::sort(c.begin(), c.end(), [](const auto& a, const auto& b) {
    return a.second > b.second || (a.second == b.second && a.first < b.first);
  });
  if (p.top_k > 0 && size_t(p.top_k) < c.size()) c.resize(size_t(p.top_k));
  const double mx = c.front().second;
  double sum = 0;
  for (auto& [id, x] : c) sum += (x = std::exp(x - mx));
  for (auto& [id, x] : c) x /= sum;
  if (p.top_p < 1.0f) {
    double cum = 0;
    for (size_t i = 0; i < c.size(); ++i)
      if ((cum += c[i].second) >= double(p.top_p)) {
        c.resize(i + 1);
        break;
      }
  }
  if (p.min_p > 0.0f) {
    const double floor = double(p.min_p) * c.front().second;
    size_t keep = 1;
    while (keep < c.size() && c[keep].second >= floor) ++keep;
    c.resize(keep);
  }
  sum = 0;
  for (auto& [id, x] : c) sum += x;
  for (auto& [id, x] : c) x /= sum;
  const double u = double(rng() >> 11) * 0x1.0p-53;
  if (c.size() == 1) return c.front().first;
  double cum = 0;
  for (const auto& [id, x] : c)
    if (u < (cum += x)) return id;
  return c.back().first;
}

// Rows of every shape the sampler meets: random, ties, peaked, flat, spread over hundreds of nats
// (so part of the row is far below the maximum), signed zeros, and NaN / inf holes.
std::vector<float> test_row(int kind, size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::uniform_int_distribution<int> small(0, 3);
  std::uniform_real_distribution<float> wide(-300.0f, 30.0f);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    switch (kind) {
      case 0:
        v[i] = normal(g);
        break;
      case 1:
        v[i] = float(small(g));
        break;  // many ties
      case 2:
        v[i] = normal(g) + (i % 97 == 3 ? 25.0f : 0.0f);
        break;  // a few peaks
      case 3:
        v[i] = 1.5f;
        break;  // flat
      case 4:
        v[i] = wide(g);
        break;  // long tail
      case 5:
        v[i] = (g() & 1) ? 0.0f : -0.0f;
        break;  // signed zeros
      case 6:
        v[i] = normal(g) * 0.01f;
        break;  // nearly flat
      default:
        v[i] = std::round(normal(g)) * 8.0f;
        break;  // ties, steps of 8 nats
    }
  }
  if (kind == 4 || kind == 0) {
    for (size_t i = 5; i < n; i += 11) v[i] = NAN;
    for (size_t i = 7; i < n; i += 13) v[i] = -INFINITY;
    for (size_t i = 9; i < n; i += 29) v[i] = INFINITY;
  }
  return v;
}

TEST(Sampling, PartialSelectionDrawsWhatTheFullSortDrew) {
  const float temps[] = {0.05f, 0.7f, 1.0f, 1.7f, 100.0f};
  const float top_ps[] = {1.0f, 0.95f, 0.5f, 0.01f};
  const float min_ps[] = {0.0f, 0.05f, 1e-12f, 1e-30f};
  int64_t compared = 0, distinct_rows = 0;
  for (size_t n : {size_t(1), size_t(2), size_t(7), size_t(100), size_t(3000)}) {
    for (int kind = 0; kind < 8; ++kind) {
      const auto row = test_row(kind, n, uint32_t(n * 31 + size_t(kind)));
      bool any_finite = false;
      for (float x : row) any_finite |= std::isfinite(x);
      if (!any_finite) continue;
      ++distinct_rows;
      for (float t : temps)
        for (float tp : top_ps)
          for (float mp : min_ps)
            for (int64_t tk : {int64_t(0), int64_t(n), int64_t(n) + 3}) {
              SamplingParams p;
              p.temperature = t;
              p.top_p = tp;
              p.min_p = mp;
              p.top_k = tk;
              p.seed = uint64_t(n) * 1000003u + uint64_t(kind) * 7919u + uint64_t(compared % 17);
              auto s = Sampler::create(p);
              ASSERT_TRUE(s.ok());
              std::mt19937_64 rng(p.seed);
              for (int draw = 0; draw < 6; ++draw) {
                auto got = s->sample(row);
                ASSERT_TRUE(got.ok()) << got.status().to_string();
                ASSERT_EQ(*got, reference_draw(row, p, rng))
                    << "n " << n << " kind " << kind << " T " << t << " top_p " << tp << " min_p " << mp << " top_k "
                    << tk << " draw " << draw;
                ++compared;
              }
            }
    }
  }
  EXPECT_GT(distinct_rows, 30);
  EXPECT_GT(compared, 40000);
}

TEST(Sampling, PartialSelectionMatchesOnVocabularySizedRowsWithPenalties) {
  // Qwen3's vocabulary; sampled with penalties so the row changes between steps.
  const size_t n = 151936;
  for (int kind : {0, 2, 4, 7}) {
    const auto row = test_row(kind, n, uint32_t(kind + 100));
    for (float tp : {1.0f, 0.9f}) {
      SamplingParams p;
      p.temperature = 1.0f;
      p.top_p = tp;
      p.repetition_penalty = 1.3f;
      p.frequency_penalty = 0.5f;
      p.seed = uint64_t(kind) * 10 + (tp < 1 ? 1 : 0);
      const std::vector<int64_t> prompt = {1, 2, 3, 500, 151935};
      auto s = Sampler::create(p, prompt), mirror = Sampler::create(p, prompt);
      std::mt19937_64 rng(p.seed);
      for (int step = 0; step < 12; ++step) {
        std::vector<float> penalized = row;
        mirror->apply_penalties(penalized);
        const int64_t want = reference_draw(penalized, p, rng);
        auto got = s->next(row);
        ASSERT_TRUE(got.ok());
        ASSERT_EQ(*got, want) << "kind " << kind << " top_p " << tp << " step " << step;
        mirror->accept(want);
      }
    }
  }
}

// The full sort's kept candidates (id, cumulative share) for one row and parameters, in the
// order reference_draw walks them: the same steps and sums as reference_draw, kept apart from
// the draw so that many seeds can share them. `logits` are already penalized.
std::vector<std::pair<int64_t, double>> reference_cumulative(const std::vector<float>& logits,
                                                             const SamplingParams& p) {
  std::vector<std::pair<int64_t, double>> c;
  const double inv_t = 1.0 / double(p.temperature);
  for (size_t i = 0; i < logits.size(); ++i)
    if (std::isfinite(logits[i])) c.emplace_back(int64_t(i), double(logits[i]) * inv_t);
  std::sort(c.begin(), c.end(), [](const auto& a, const auto& b) {
    return a.second > b.second || (a.second == b.second && a.first < b.first);
  });
  const double mx = c.front().second;
  double sum = 0;
  for (auto& [id, x] : c) sum += (x = std::exp(x - mx));
  for (auto& [id, x] : c) x /= sum;
  if (p.top_p < 1.0f) {
    double cum = 0;
    for (size_t i = 0; i < c.size(); ++i)
      if ((cum += c[i].second) >= double(p.top_p)) {
        c.resize(i + 1);
        break;
      }
  }
  if (p.min_p > 0.0f) {
    const double floor = double(p.min_p) * c.front().second;
    size_t keep = 1;
    while (keep < c.size() && c[keep].second >= floor) ++keep;
    c.resize(keep);
  }
  sum = 0;
  for (auto& [id, x] : c) sum += x;
  double cum = 0;
  for (auto& [id, x] : c) x = (cum += x / sum);
  return c;
}

// reference_draw's choice for the uniform u: the first candidate whose cumulative share exceeds u
// (the shares never decrease), the last one if none does, the only one without looking at u.
int64_t reference_pick(const std::vector<std::pair<int64_t, double>>& cum, double u) {
  if (cum.size() == 1) return cum.front().first;
  auto it = std::upper_bound(cum.begin(), cum.end(), u, [](double v, const auto& e) { return v < e.second; });
  return it == cum.end() ? cum.back().first : it->first;
}

double first_uniform(uint64_t seed) {
  std::mt19937_64 rng(seed);
  return double(rng() >> 11) * 0x1.0p-53;
}

// An LLM-like row as the sampling bench uses (normal, sd 2.5, 20 tokens 10-20 nats above), or
// flat (sd 0.3).
std::vector<float> bench_row(bool flat, size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, flat ? 0.3f : 2.5f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  if (!flat)
    for (int i = 0; i < 20; ++i) v[size_t(g() % v.size())] += 10.0f + float(i) * 0.5f;
  return v;
}

// The bucketed full-vocabulary path (rows of 2048 finite logits and up) against the full sort,
// one fresh Sampler per seed, 1000 seeds for every row shape and parameter set.
TEST(Sampling, BucketedDrawEqualsTheFullSortOnManySeeds) {
  struct Row {
    std::string name;
    std::vector<float> logits;
  };
  std::vector<Row> rows;
  const size_t vocab = 151936;
  rows.push_back({"llm 152k", bench_row(false, vocab, 1)});
  rows.push_back({"flat sd 0.3 152k", bench_row(true, vocab, 2)});
  for (int kind = 0; kind < 8; ++kind)
    rows.push_back({"kind " + std::to_string(kind) + " 5003", test_row(kind, 5003, uint32_t(40 + kind))});
  struct Params {
    float t, top_p, min_p;
  };
  const Params params[] = {{1.0f, 1.0f, 0.0f}, {1.0f, 0.9f, 0.0f}, {1.0f, 1.0f, 0.05f}, {0.7f, 0.95f, 0.01f}};
  const uint64_t kSeeds = 1000;
  for (const Row& row : rows) {
    for (const Params& pp : params) {
      // Time: ~0.5 ms a draw at 152k (fresh buffers), so 152k rows take three parameter sets.
      if (row.logits.size() == vocab && (pp.min_p == 0.05f || (row.name != "llm 152k" && pp.top_p == 1.0f))) continue;
      SamplingParams p;
      p.temperature = pp.t;
      p.top_p = pp.top_p;
      p.min_p = pp.min_p;
      const auto cum = reference_cumulative(row.logits, p);
      std::vector<int64_t> seen;
      for (uint64_t seed = 0; seed < kSeeds; ++seed) {
        p.seed = seed * 0x9E3779B97F4A7C15ull + 17;
        auto s = Sampler::create(p);
        ASSERT_TRUE(s.ok());
        auto got = s->sample(row.logits);
        ASSERT_TRUE(got.ok()) << got.status().to_string();
        ASSERT_EQ(*got, reference_pick(cum, first_uniform(p.seed)))
            << row.name << " T " << pp.t << " top_p " << pp.top_p << " min_p " << pp.min_p << " seed " << p.seed;
        seen.push_back(*got);
      }
      std::sort(seen.begin(), seen.end());
      // The draws do vary (so a wrong token would show), unless one candidate holds ~everything.
      if (cum.front().second < 0.99) {
        EXPECT_GT(std::unique(seen.begin(), seen.end()) - seen.begin(), 1) << row.name;
      }
    }
  }
}

// Seeds whose uniform lands within 3e-11 of a boundary of the cumulative shares (1 in ~10^5),
// where the estimate must give up on settling the draw and the exact path takes it with that u:
// an all-equal row (boundaries k/n) and a flat one.
TEST(Sampling, BucketedDrawNearABoundaryEqualsTheFullSort) {
  const size_t n = 151936;
  for (bool equal : {true, false}) {
    const std::vector<float> row = equal ? std::vector<float>(n, 0.25f) : bench_row(true, n, 5);
    SamplingParams p;
    p.temperature = 1.0f;
    const auto cum = reference_cumulative(row, p);
    int found = 0;
    for (uint64_t seed = 0; seed < 1000000 && found < 6; ++seed) {
      const double u = first_uniform(seed);
      auto it = std::upper_bound(cum.begin(), cum.end(), u, [](double v, const auto& e) { return v < e.second; });
      const double above = it == cum.end() ? 1.0 : it->second;
      const double below = it == cum.begin() ? 0.0 : std::prev(it)->second;
      if (std::min(above - u, u - below) > 3e-11) continue;
      ++found;
      p.seed = seed;
      auto s = Sampler::create(p);
      ASSERT_TRUE(s.ok());
      ASSERT_EQ(s->sample(row).value(), reference_pick(cum, u)) << "seed " << seed << (equal ? " equal" : " flat");
    }
    EXPECT_GE(found, 2) << (equal ? "equal" : "flat");
  }
}

// Reference log-softmax of `row` after the penalties written out from their definitions
// (repetition over the prompt, logit_bias), in long double (the sampler sums f32 exps in double).
std::vector<long double> ref_log_softmax(std::vector<float> row, const std::vector<int64_t>& prompt, float rep,
                                         const std::vector<std::pair<int64_t, float>>& bias) {
  std::vector<bool> seen(row.size());
  for (int64_t t : prompt) seen[size_t(t)] = true;
  for (size_t i = 0; i < row.size(); ++i)
    if (seen[i]) row[i] = row[i] > 0 ? row[i] / rep : row[i] * rep;
  for (auto [t, b] : bias) row[size_t(t)] += b;
  long double mx = -INFINITY, sum = 0;
  for (float x : row)
    if (std::isfinite(x)) mx = std::max<long double>(mx, x);
  for (float x : row)
    if (std::isfinite(x)) sum += std::exp((long double)x - mx);
  std::vector<long double> out(row.size());
  for (size_t i = 0; i < row.size(); ++i) out[i] = std::isfinite(row[i]) ? row[i] - mx - std::log(sum) : -INFINITY;
  return out;
}

TEST(Sampling, LogprobsAreTheLogSoftmaxAfterPenaltiesBeforeTemperature) {
  std::vector<float> row = random_row(5000, 3);
  row[17] = row[40] = row[41] = 30.0f;  // a three-way tie at the top: ids in ascending order
  row[9] = -INFINITY;
  row[10] = NAN;
  const std::vector<int64_t> prompt = {1, 2, 40, 300};
  SamplingParams p;
  p.temperature = 0.7f;
  p.repetition_penalty = 1.3f;
  p.logit_bias = {{5, 4.0f}, {6, -100.0f}};
  p.logprobs = true;
  p.top_logprobs = 20;
  auto s = Sampler::create(p, prompt);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  const auto ref = ref_log_softmax(row, prompt, 1.3f, p.logit_bias);
  for (int64_t chosen : {int64_t(5), int64_t(6), int64_t(40), int64_t(4999)}) {
    auto lp = s->logprobs(row, chosen, 20);
    ASSERT_TRUE(lp.ok()) << lp.status().to_string();
    EXPECT_EQ(lp->token, chosen);
    EXPECT_NEAR(lp->logprob, double(ref[size_t(chosen)]), 1e-6);
    // The 20 largest of the reference, by value then id.
    std::vector<int64_t> ids(row.size());
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = int64_t(i);
    std::stable_sort(ids.begin(), ids.end(), [&](int64_t a, int64_t b) { return ref[size_t(a)] > ref[size_t(b)]; });
    ASSERT_EQ(lp->top.size(), 20u);
    for (size_t k = 0; k < 20; ++k) {
      EXPECT_EQ(lp->top[k].first, ids[k]) << "rank " << k;
      EXPECT_NEAR(lp->top[k].second, double(ref[size_t(ids[k])]), 1e-6);
    }
  }
  // The tie: 17 then 41 (40 was lowered by the repetition penalty: 30 / 1.3).
  auto lp = s->logprobs(row, 9, 3);
  ASSERT_TRUE(lp.ok());
  EXPECT_EQ(lp->top[0].first, 17);
  EXPECT_EQ(lp->top[1].first, 41);
  EXPECT_EQ(lp->top[2].first, 40);
  EXPECT_EQ(lp->logprob, -INFINITY);  // id 9's logit is -inf
  EXPECT_FALSE(s->logprobs(row, 5000, 3).ok());
  EXPECT_FALSE(s->logprobs(std::vector<float>(4, -INFINITY), 0, 3).ok());
}

TEST(Sampling, LogprobsDoNotChangeTheTokensAndComeOnlyWhenAsked) {
  const std::vector<float> row = random_row(3000, 8);
  SamplingParams p;
  p.temperature = 0.9f;
  p.top_p = 0.95f;
  p.frequency_penalty = 0.5f;
  p.seed = 77;
  SamplingParams q = p;
  q.logprobs = true;
  q.top_logprobs = 2;
  auto a = Sampler::create(p), b = Sampler::create(q);
  ASSERT_TRUE(a.ok() && b.ok());
  for (int i = 0; i < 30; ++i) {
    std::optional<TokenLogprobs> la, lb;
    auto ta = a->next(row, &la), tb = b->next(row, &lb);
    ASSERT_TRUE(ta.ok() && tb.ok());
    EXPECT_EQ(*ta, *tb) << "token " << i;
    EXPECT_FALSE(la.has_value());
    ASSERT_TRUE(lb.has_value());
    EXPECT_EQ(lb->token, *tb);
    EXPECT_EQ(lb->top.size(), 2u);
  }
}

TEST(Sampling, LogprobsValidation) {
  SamplingParams p;
  p.logprobs = true;
  p.top_logprobs = 21;
  Status s = validate_sampling(p);
  EXPECT_NE(s.message().find("top_logprobs = 21"), std::string::npos) << s.to_string();
  p.top_logprobs = -1;
  EXPECT_FALSE(validate_sampling(p).ok());
  p.top_logprobs = 20;
  EXPECT_TRUE(validate_sampling(p).ok());
  p.logprobs = false;
  s = validate_sampling(p);
  EXPECT_NE(s.message().find("needs sampling.logprobs"), std::string::npos) << s.to_string();
}

TEST(Sampling, RowWithoutFiniteLogitIsAnError) {
  std::vector<float> bad = {NAN, -INFINITY};
  SamplingParams p;
  p.temperature = 1.0f;
  EXPECT_EQ(Sampler::create(p)->sample(bad).status().kind(), ErrorKind::kInvalidArgument);
  EXPECT_EQ(Sampler::create(p)->sample(std::vector<float>{}).status().kind(), ErrorKind::kInvalidArgument);
  // And greedy (temperature 0).
  EXPECT_EQ(Sampler::create(SamplingParams{})->sample(bad).status().kind(), ErrorKind::kInvalidArgument);
  EXPECT_EQ(Sampler::create(SamplingParams{})->sample(std::vector<float>{}).status().kind(),
            ErrorKind::kInvalidArgument);
}

}  // namespace
}  // namespace hlx::engine
