// Prefix reuse (BatchEngineOptions::prefix_cache): every request's logits and tokens with reuse
// are compared bit for bit against the same request on an engine with reuse off, over an f32 and a
// bf16 fixture, and the bf16 one with an int8 KV cache (copied rows must bring their scales): a prefix ending inside a
// prefill chunk and at a chunk edge, chat-like turns (previous prompt + its generated tokens + new text), partial
// matches, a repeated prompt, eviction then recompute, and a prefix copied from a slot that is still running. The
// expected cached_tokens are asserted too, so a cache that never hits fails.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/batch_engine.h"
#include "engine/session.h"
#include "models/fixture.h"

namespace hlx::engine {
namespace {

namespace fs = std::filesystem;

struct Fixture {
  std::string family;
  DType dtype;
  std::optional<DType> kv_dtype = std::nullopt;  // default: the model's auto choice
};

std::string fixture_name(const Fixture& f) { return f.family + "_" + std::string(dtype_name(f.dtype)); }
std::string param_name(const Fixture& f) {
  return fixture_name(f) + (f.kv_dtype ? "_kv_" + std::string(dtype_name(*f.kv_dtype)) : "");
}

const std::string& fixture_dir(const Fixture& f) {
  static std::map<std::string, std::string> dirs;
  const std::string key = fixture_name(f);
  auto it = dirs.find(key);
  if (it != dirs.end()) return it->second;
  std::string dir =
      (fs::path(testing::TempDir()) / ("hlx_prefix_fixture_" + key + "_" + std::to_string(::getpid()))).string();
  models::FixtureOptions o;
  o.family = f.family;
  o.dtype = f.dtype;
  o.seed = 23;
  Status s = models::write_text_fixture(dir, o);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return dirs[key] = dir;
}

// Buckets {8, 16}: a 20-row prompt is written as 16 + 4 (in the 8 bucket), so a reused prefix of
// 20 ends inside the reuse-off run's second chunk and one of 16 ends at its edge.
std::unique_ptr<TextModel> load(const Fixture& f, int64_t slots) {
  TextModelOptions o;
  o.context_capacity = 96;
  o.slots = slots;
  o.prefill_buckets = {8, 16};
  o.kv_dtype = f.kv_dtype;
  auto m = TextModel::load(fixture_dir(f), o);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  return m.ok() ? std::move(*m) : nullptr;
}

std::vector<int64_t> tokens_of(int64_t n, int64_t vocab, int64_t salt) {
  std::vector<int64_t> p;
  for (int64_t i = 0; i < n; ++i) p.push_back((i * 41 + 7 + salt * 97) % vocab);
  return p;
}

std::vector<int64_t> cat(std::vector<int64_t> a, const std::vector<int64_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

struct Outcome {
  Completion c;
  std::vector<std::string> logits;  // every logits row, as bytes
};

GenerationRequest request(std::vector<int64_t> prompt, int64_t max_new, Outcome* out, uint64_t seed = 0) {
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.max_new_tokens = max_new;
  r.eos_token_ids = std::vector<int64_t>{};  // run to max_new_tokens
  if (seed) {
    r.sampling.temperature = 0.9f;
    r.sampling.seed = seed;
  }
  r.on_logits = [out](std::span<const float> row) {
    out->logits.emplace_back(reinterpret_cast<const char*>(row.data()), row.size_bytes());
  };
  return r;
}

// The reference: the request alone on an engine with reuse off.
class Reference {
 public:
  explicit Reference(const Fixture& f) : model_(load(f, 1)) {}
  Outcome run(std::vector<int64_t> prompt, int64_t max_new, uint64_t seed = 0) {
    Outcome o;
    BatchEngineOptions bo;
    bo.prefix_cache = false;
    Session s(*model_, bo);
    auto c = s.generate(request(std::move(prompt), max_new, &o, seed));
    EXPECT_TRUE(c.ok()) << c.status().to_string();
    if (c.ok()) o.c = std::move(*c);
    EXPECT_EQ(o.c.cached_tokens, 0);
    return o;
  }
  TextModel& model() { return *model_; }

 private:
  std::unique_ptr<TextModel> model_;
};

void expect_same(const Outcome& got, const Outcome& want, const std::string& what) {
  EXPECT_EQ(got.c.tokens, want.c.tokens) << what;
  ASSERT_EQ(got.logits.size(), want.logits.size()) << what;
  for (size_t t = 0; t < got.logits.size(); ++t)
    EXPECT_TRUE(got.logits[t] == want.logits[t]) << what << ": logits of token " << t << " differ in bits";
}

class PrefixCache : public testing::TestWithParam<Fixture> {};

TEST_P(PrefixCache, ChatTurnsInOneSlotReuseThePreviousPromptBitIdentically) {
  auto m = load(GetParam(), 1);
  ASSERT_TRUE(m);
  Reference ref(GetParam());
  const int64_t vocab = m->spec().vocab_size;
  Session s(*m);  // prefix_cache on (the default)
  auto run = [&](std::vector<int64_t> prompt, int64_t max_new, uint64_t seed = 0) {
    Outcome o;
    auto c = s.generate(request(std::move(prompt), max_new, &o, seed));
    EXPECT_TRUE(c.ok()) << c.status().to_string();
    if (c.ok()) o.c = std::move(*c);
    return o;
  };
  // Turn 1: nothing cached.
  std::vector<int64_t> p1 = tokens_of(20, vocab, 1);
  Outcome t1 = run(p1, 6);
  EXPECT_EQ(t1.c.cached_tokens, 0);
  expect_same(t1, ref.run(p1, 6), "turn 1");
  // Turn 2: turn 1's prompt and reply plus new text. Its 20 prompt rows are reused (a prefix that
  // ends inside the reuse-off run's second chunk); the reply's rows were written by decode and are
  // prefilled again.
  std::vector<int64_t> p2 = cat(cat(p1, t1.c.tokens), tokens_of(9, vocab, 2));
  Outcome t2 = run(p2, 5, 77);
  EXPECT_EQ(t2.c.cached_tokens, 20);
  EXPECT_EQ(t2.c.prompt_tokens, int64_t(p2.size()));
  expect_same(t2, ref.run(p2, 5, 77), "turn 2 (seeded sampling)");
  // Turn 3: the whole turn-2 prompt (35 rows, across three chunks) is reused.
  std::vector<int64_t> p3 = cat(cat(p2, t2.c.tokens), tokens_of(4, vocab, 3));
  Outcome t3 = run(p3, 5);
  EXPECT_EQ(t3.c.cached_tokens, int64_t(p2.size()));
  expect_same(t3, ref.run(p3, 5), "turn 3");
  // The same prompt again: all but its last row are reused.
  Outcome again = run(p3, 5);
  EXPECT_EQ(again.c.cached_tokens, int64_t(p3.size()) - 1);
  expect_same(again, t3, "repeated prompt");
  // A partial match: the first 13 rows, then different tokens.
  std::vector<int64_t> p4(p3.begin(), p3.begin() + 13);
  p4 = cat(p4, tokens_of(10, vocab, 4));
  Outcome t4 = run(p4, 4);
  EXPECT_EQ(t4.c.cached_tokens, 13);
  expect_same(t4, ref.run(p4, 4), "partial match");
}

TEST_P(PrefixCache, PrefixEndingAtAChunkEdgeAndAtTheCapacity) {
  auto m = load(GetParam(), 1);
  ASSERT_TRUE(m);
  Reference ref(GetParam());
  const int64_t vocab = m->spec().vocab_size;
  Session s(*m);
  std::vector<int64_t> p1 = tokens_of(16, vocab, 5);  // exactly one 16-row chunk
  Outcome a;
  ASSERT_TRUE(s.generate(request(p1, 3, &a)).ok());
  std::vector<int64_t> p2 = cat(p1, tokens_of(17, vocab, 6));
  Outcome b;
  auto c = s.generate(request(p2, 3, &b));
  ASSERT_TRUE(c.ok());
  b.c = *c;
  EXPECT_EQ(b.c.cached_tokens, 16);
  expect_same(b, ref.run(p2, 3), "prefix at a chunk edge");
  // Near the capacity (96): 90 rows after 33 reused; the last chunk replays reused rows
  // (no bucket fits between row 88 and 96 for 2 rows... the planner's replay path).
  std::vector<int64_t> p3 = cat(p2, tokens_of(57, vocab, 7));
  ASSERT_EQ(p3.size(), 90u);
  Outcome d;
  auto dc = s.generate(request(p3, 6, &d));
  ASSERT_TRUE(dc.ok()) << dc.status().to_string();
  d.c = *dc;
  EXPECT_EQ(d.c.cached_tokens, 33);
  expect_same(d, ref.run(p3, 6), "near the capacity");
}

TEST_P(PrefixCache, EvictionThenRecomputeAndLeastRecentlyUsedPlacement) {
  auto m = load(GetParam(), 2);
  ASSERT_TRUE(m);
  Reference ref(GetParam());
  const int64_t vocab = m->spec().vocab_size;
  BatchEngine e(*m);
  std::map<RequestId, std::unique_ptr<Outcome>> outs;
  auto submit = [&](std::vector<int64_t> p, int64_t max_new) {
    auto o = std::make_unique<Outcome>();
    auto id = e.submit(request(std::move(p), max_new, o.get()));
    EXPECT_TRUE(id.ok()) << id.status().to_string();
    outs[*id] = std::move(o);
    return *id;
  };
  auto finish = [&](RequestId id) {
    EXPECT_TRUE(e.run_until_idle().ok());
    Outcome o = std::move(*outs[id]);
    auto c = e.take_completion(id);
    EXPECT_TRUE(c.has_value());
    if (c) o.c = std::move(*c);
    return o;
  };
  std::vector<int64_t> a = tokens_of(24, vocab, 8), b = tokens_of(18, vocab, 9);
  Outcome oa = finish(submit(a, 4));  // slot 0 holds a
  Outcome ob = finish(submit(b, 4));  // slot 1 (least recently used) holds b; a survives
  EXPECT_EQ(ob.c.cached_tokens, 0);
  std::vector<int64_t> a2 = cat(a, tokens_of(5, vocab, 10));
  Outcome oa2 = finish(submit(a2, 4));
  EXPECT_EQ(oa2.c.cached_tokens, 24) << "a's rows must survive a request placed in the other slot";
  expect_same(oa2, ref.run(a2, 4), "a extended");
  // Two unrelated requests at once take both slots: a's and b's rows are overwritten.
  auto x = submit(tokens_of(30, vocab, 11), 3);
  auto y = submit(tokens_of(21, vocab, 12), 3);
  Outcome ox = finish(x), oy = finish(y);
  EXPECT_EQ(ox.c.cached_tokens, 0);
  EXPECT_EQ(oy.c.cached_tokens, 0);
  Outcome oa3 = finish(submit(a2, 4));
  EXPECT_EQ(oa3.c.cached_tokens, 0) << "evicted: recomputed";
  expect_same(oa3, ref.run(a2, 4), "after eviction");
  EXPECT_EQ(m->slot_pool().free_count(), 2);
}

TEST_P(PrefixCache, SharedSystemPromptIsCopiedFromARunningSlot) {
  auto m = load(GetParam(), 2);
  ASSERT_TRUE(m);
  Reference ref(GetParam());
  const int64_t vocab = m->spec().vocab_size;
  BatchEngine e(*m);
  const std::vector<int64_t> system = tokens_of(27, vocab, 13);
  const std::vector<int64_t> pa = cat(system, tokens_of(6, vocab, 14)), pb = cat(system, tokens_of(11, vocab, 15));
  Outcome oa, ob;
  RequestId ia = e.submit(request(pa, 20, &oa)).value();
  // a's prompt (33 rows: chunks 16 + 16 + 1) is written, then it decodes.
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(e.step().ok());
  ASSERT_EQ(e.running(), 1);
  RequestId ib = e.submit(request(pb, 6, &ob)).value();
  ASSERT_TRUE(e.run_until_idle().ok());
  oa.c = *e.take_completion(ia);
  ob.c = *e.take_completion(ib);
  EXPECT_EQ(ob.c.cached_tokens, 27) << "the system prompt's rows are copied from a's slot";
  expect_same(oa, ref.run(pa, 20), "the running request");
  expect_same(ob, ref.run(pb, 6), "the request with copied rows");
}

// OpenAI's n: three choices of one prompt submitted at once. With prefill_after the second and third
// wait for the first one's prefill and copy its rows (only the last row is computed); without it all
// three prefill the whole prompt side by side. Either way each choice is the same bits as its seed alone.
TEST_P(PrefixCache, ChoicesOfOnePromptPrefillItOnce) {
  Reference ref(GetParam());
  const std::vector<int64_t> p = tokens_of(29, ref.model().spec().vocab_size, 18);
  for (bool after : {true, false}) {
    auto m = load(GetParam(), 3);  // fresh slots: the model keeps finished prompts' rows
    ASSERT_TRUE(m);
    BatchEngine e(*m);
    Outcome o[3];
    RequestId ids[3];
    for (int i = 0; i < 3; ++i) {
      GenerationRequest r = request(p, 5, &o[i], /*seed=*/100 + uint64_t(i));
      if (after && i > 0) r.prefill_after = ids[0];
      ids[i] = e.submit(std::move(r)).value();
    }
    ASSERT_TRUE(e.run_until_idle().ok());
    for (int i = 0; i < 3; ++i) {
      o[i].c = *e.take_completion(ids[i]);
      EXPECT_EQ(o[i].c.cached_tokens, after && i > 0 ? int64_t(p.size()) - 1 : 0) << "choice " << i;
      expect_same(o[i], ref.run(p, 5, 100 + uint64_t(i)), str_cat("choice ", i, after ? " (prefill_after)" : ""));
    }
    EXPECT_NE(o[0].c.tokens, o[1].c.tokens) << "other seeds, other samples";
  }
}

TEST_P(PrefixCache, OffReusesNothing) {
  auto m = load(GetParam(), 1);
  ASSERT_TRUE(m);
  const int64_t vocab = m->spec().vocab_size;
  BatchEngineOptions bo;
  bo.prefix_cache = false;
  Session s(*m, bo);
  std::vector<int64_t> p = tokens_of(20, vocab, 16);
  Outcome a, b;
  ASSERT_TRUE(s.generate(request(p, 2, &a)).ok());
  auto c = s.generate(request(cat(p, tokens_of(3, vocab, 17)), 2, &b));
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->cached_tokens, 0);
  EXPECT_EQ(c->prefill_chunks, 2);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, PrefixCache,
                         testing::Values(Fixture{"llama", DType::kF32}, Fixture{"qwen3", DType::kBF16},
                                         Fixture{"qwen3", DType::kBF16, DType::kI8}),
                         [](const testing::TestParamInfo<Fixture>& i) { return param_name(i.param); });

// TextModel::admit_reusing checks everything before touching a slot.
TEST(PrefixCacheModel, AdmitReusingRefusesBadPrefixesAndTouchesNothing) {
  auto m = load(Fixture{"llama", DType::kF32}, 2);
  ASSERT_TRUE(m);
  const int64_t vocab = m->spec().vocab_size;
  std::vector<int64_t> p = tokens_of(12, vocab, 18);
  auto slot = m->admit(p, 4);
  ASSERT_TRUE(slot.ok());
  ASSERT_TRUE(m->prefill(*slot, p).ok());
  EXPECT_EQ(m->reusable_prefix(*slot).size(), 12u);  // in use: its prefilled rows
  ASSERT_TRUE(m->release(*slot).ok());
  ASSERT_EQ(m->reusable_prefix(*slot).size(), 12u);  // retained
  std::vector<int64_t> q = p;
  q[5] = (q[5] + 1) % vocab;
  auto bad_ids = m->admit_reusing(q, 4, 1, 8, *slot);
  EXPECT_EQ(bad_ids.status().kind(), ErrorKind::kInvalidArgument);
  EXPECT_NE(bad_ids.status().message().find("row 5"), std::string::npos) << bad_ids.status().to_string();
  auto whole = m->admit_reusing(p, 4, *slot, 12, *slot);  // the last row must be prefilled
  EXPECT_EQ(whole.status().kind(), ErrorKind::kInvalidArgument);
  auto too_long = m->admit_reusing(p, 90, *slot, 4, *slot);
  EXPECT_EQ(too_long.status().kind(), ErrorKind::kCapacityExceeded);
  EXPECT_EQ(m->slot_pool().free_count(), 2);
  EXPECT_EQ(m->reusable_prefix(*slot).size(), 12u);
  // Decode rows are not reusable: after one decode step the prefilled rows stay 12 of 13.
  auto again = m->admit_reusing(p, 4, *slot, 11, *slot);
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_EQ(*m->cache_length(*slot), 11);
  ASSERT_TRUE(m->prefill(*slot, std::span<const int64_t>(p).subspan(11)).ok());
  DecodeRow r{*slot, 3, 12};
  ASSERT_TRUE(m->decode(std::span<const DecodeRow>(&r, 1)).ok());
  EXPECT_EQ(m->reusable_prefix(*slot).size(), 12u);
  ASSERT_TRUE(m->release(*slot).ok());
  EXPECT_EQ(m->reusable_prefix(*slot).size(), 12u);
  // A fresh admit() of the slot drops what it retained.
  auto s0 = m->admit(p, 4);
  ASSERT_TRUE(s0.ok());
  EXPECT_EQ(*s0, *slot);
  EXPECT_TRUE(m->reusable_prefix(*slot).empty());
}

}  // namespace
}  // namespace hlx::engine
