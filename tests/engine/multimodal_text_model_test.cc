// TextModel::prefill_embeddings and embed_tokens: fed embed_tokens(t), the embeddings path must
// equal token prefill bit for bit (logits and cache bytes), across bucket chunking, split calls
// and near-capacity replay; bad calls fail before any cache row is touched.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <map>

#include <unistd.h>

#include "engine/text_model.h"
#include "models/fixture.h"

namespace hlx::engine {
namespace {

namespace fs = std::filesystem;

const std::string& fixture_dir(const std::string& family, DType dtype) {
  static std::map<std::string, std::string> dirs;
  std::string key = family + std::string(dtype_name(dtype));
  auto it = dirs.find(key);
  if (it != dirs.end()) return it->second;
  std::string dir = (fs::path(testing::TempDir()) / ("hlx_mm_text_" + key + "_" + std::to_string(::getpid()))).string();
  models::FixtureOptions o;
  o.family = family;
  o.dtype = dtype;
  o.seed = 11;
  Status s = models::write_text_fixture(dir, o);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return dirs[key] = dir;
}

std::vector<int64_t> prompt_of(int64_t n, int64_t vocab) {
  std::vector<int64_t> p;
  for (int64_t i = 0; i < n; ++i) p.push_back((i * 53 + 7) % vocab);
  return p;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

// Bytes of one slot's rows [0, rows) in every cache.
std::string slot_bytes(const TextModel& m, int64_t slot, int64_t rows) {
  std::string out;
  for (const Tensor& c : m.caches()) {
    const size_t row = size_t(c.dim(2) * c.dim(3)) * dtype_size(c.dtype());
    const char* base = static_cast<const char*>(c.raw()) + size_t(slot * c.dim(1)) * row;
    out.append(base, size_t(rows) * row);
  }
  return out;
}

std::unique_ptr<TextModel> load(const std::string& dir, TextModelOptions o) {
  o.embeddings = true;
  auto m = TextModel::load(dir, o);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  return m.ok() ? std::move(*m) : nullptr;
}

struct Case {
  std::string family;
  DType dtype;
};

class EmbeddingsPrefill : public testing::TestWithParam<Case> {};

TEST_P(EmbeddingsPrefill, EqualsTokenPrefillBitForBitAcrossChunksSplitsAndReplay) {
  TextModelOptions o;
  o.context_capacity = 40;
  o.slots = 2;
  o.kv_dtype = DType::kBF16;
  o.prefill_buckets = {8, 16, 40};
  auto m = load(fixture_dir(GetParam().family, GetParam().dtype), o);
  ASSERT_TRUE(m);
  const auto p = prompt_of(38, m->spec().vocab_size);
  auto emb = m->embed_tokens(p);
  ASSERT_TRUE(emb.ok()) << emb.status().to_string();
  ASSERT_EQ(emb->shape(), (Shape{38, m->spec().hidden_size}));

  // 1. The whole prompt at once (one 40 bucket), slot 0 by tokens, slot 1 by embeddings.
  auto by_tok = m->prefill(0, p);
  ASSERT_TRUE(by_tok.ok()) << by_tok.status().to_string();
  auto by_emb = m->prefill_embeddings(1, *emb, p, 38);
  ASSERT_TRUE(by_emb.ok()) << by_emb.status().to_string();
  EXPECT_TRUE(same_bits(*by_tok, *by_emb));
  EXPECT_EQ(slot_bytes(*m, 0, 38), slot_bytes(*m, 1, 38));
  EXPECT_EQ(*m->cache_length(1), 38);

  // 2. Split calls: 20 rows (16 + 8 buckets), then 15 more, then 3 more at row 35 where no bucket
  // fits below the capacity: an 8-row chunk replays rows 32..34 from the same tensor.
  m->reset();
  ASSERT_TRUE(m->admit(p, 0).ok());
  ASSERT_TRUE(m->admit(p, 0).ok());
  auto t1 = m->prefill(0, std::span<const int64_t>(p).first(20));
  auto e1 = m->prefill_embeddings(1, *emb, p, 20);
  ASSERT_TRUE(t1.ok() && e1.ok()) << e1.status().to_string();
  EXPECT_TRUE(same_bits(*t1, *e1));
  auto t2 = m->prefill(0, std::span<const int64_t>(p).subspan(20, 15));
  auto e2 = m->prefill_embeddings(1, *emb, p, 35);
  ASSERT_TRUE(t2.ok() && e2.ok()) << e2.status().to_string();
  EXPECT_TRUE(same_bits(*t2, *e2));
  auto t3 = m->prefill(0, std::span<const int64_t>(p).subspan(35));
  auto e3 = m->prefill_embeddings(1, *emb, p, 38);
  ASSERT_TRUE(t3.ok() && e3.ok()) << e3.status().to_string();
  EXPECT_TRUE(same_bits(*t3, *e3));
  EXPECT_TRUE(same_bits(*by_tok, *e3));  // and the same bits as one call
  EXPECT_EQ(slot_bytes(*m, 0, 38), slot_bytes(*m, 1, 38));

  // 3. Decode continues identically from both slots.
  DecodeRow rows[2] = {{0, p[3], 38}, {1, p[3], 38}};
  auto dec = m->decode(rows);
  ASSERT_TRUE(dec.ok()) << dec.status().to_string();
  const int64_t v = m->spec().vocab_size;
  EXPECT_EQ(std::memcmp(dec->data<float>(), dec->data<float>() + v, size_t(v) * sizeof(float)), 0);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, EmbeddingsPrefill,
                         testing::Values(Case{"qwen3", DType::kBF16}, Case{"llama", DType::kF32},
                                         Case{"gemma3_text", DType::kF32},  // embedding scale sqrt(hidden)
                                         Case{"gemma3_text", DType::kBF16}),
                         [](const testing::TestParamInfo<Case>& i) {
                           return i.param.family + "_" + std::string(dtype_name(i.param.dtype));
                         });

TEST(EmbeddingsPrefillErrors, BadCallsTouchNothing) {
  TextModelOptions o;
  o.context_capacity = 32;
  o.slots = 2;
  o.prefill_buckets = {8, 32};
  auto m = load(fixture_dir("qwen3", DType::kBF16), o);
  ASSERT_TRUE(m);
  const int64_t hidden = m->spec().hidden_size;
  auto p = prompt_of(12, m->spec().vocab_size);
  auto emb = m->embed_tokens(p);
  ASSERT_TRUE(emb.ok());
  ASSERT_TRUE(m->admit(p, 0).ok());
  ASSERT_TRUE(m->prefill_embeddings(0, *emb, p, 6).ok());
  const std::string before = slot_bytes(*m, 0, 32) + slot_bytes(*m, 1, 32);

  auto expect_error = [&](Result<Tensor> r, ErrorKind kind, const std::string& part) {
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().kind(), kind) << r.status().to_string();
    EXPECT_NE(r.status().message().find(part), std::string::npos) << r.status().to_string();
  };
  expect_error(m->prefill_embeddings(5, *emb, p, 12), ErrorKind::kOutOfRange, "slot 5");
  Tensor wrong = Tensor::zeros(DType::kF32, {12, hidden + 1});
  expect_error(m->prefill_embeddings(0, wrong, p, 12), ErrorKind::kInvalidArgument, std::to_string(hidden + 1));
  expect_error(m->prefill_embeddings(0, *emb, p, 6), ErrorKind::kInvalidArgument, "end row 6");    // nothing new
  expect_error(m->prefill_embeddings(0, *emb, p, 13), ErrorKind::kInvalidArgument, "end row 13");  // past the rows
  auto other = p;
  other[2] += 1;
  expect_error(m->prefill_embeddings(0, *emb, other, 12), ErrorKind::kInvalidArgument, "row 2");
  auto negative = p;
  negative[8] = -4;
  expect_error(m->prefill_embeddings(0, *emb, negative, 12), ErrorKind::kInvalidArgument, "-4");
  auto long_p = prompt_of(40, m->spec().vocab_size);
  auto long_emb = m->embed_tokens(long_p);
  ASSERT_TRUE(long_emb.ok());
  std::copy(p.begin(), p.begin() + 6, long_p.begin());
  std::memcpy(long_emb->data<float>(), emb->data<float>(), size_t(6 * hidden) * sizeof(float));
  expect_error(m->prefill_embeddings(0, *long_emb, long_p, 33), ErrorKind::kOutOfRange, "context_capacity 32");
  EXPECT_EQ(*m->cache_length(0), 6);
  EXPECT_EQ(before, slot_bytes(*m, 0, 32) + slot_bytes(*m, 1, 32));

  // embed_tokens checks ids against the vocabulary.
  std::vector<int64_t> bad = {1, m->spec().vocab_size};
  auto be = m->embed_tokens(bad);
  ASSERT_FALSE(be.ok());
  EXPECT_NE(be.status().message().find(std::to_string(m->spec().vocab_size)), std::string::npos);

  // A token prefill may not replay rows that came from embeddings: fill slot 0 up to row 29 from
  // embeddings, then 2 tokens at row 29 would need an 8-row chunk starting at 24.
  auto p30 = prompt_of(30, m->spec().vocab_size);
  std::copy(p.begin(), p.begin() + 6, p30.begin());
  auto e30 = m->embed_tokens(p30);
  ASSERT_TRUE(m->prefill_embeddings(0, *e30, p30, 29).ok());
  auto replay = m->prefill(0, std::span<const int64_t>(p30).subspan(29, 1));
  ASSERT_FALSE(replay.ok());
  EXPECT_EQ(replay.status().kind(), ErrorKind::kUnsupported) << replay.status().to_string();
  EXPECT_EQ(*m->cache_length(0), 29);

  // A model loaded without the entries says so.
  o.embeddings = false;
  auto plain = TextModel::load(fixture_dir("qwen3", DType::kBF16), o);
  ASSERT_TRUE(plain.ok());
  ASSERT_TRUE((*plain)->admit(p, 0).ok());
  expect_error((*plain)->prefill_embeddings(0, *emb, p, 12), ErrorKind::kInvalidArgument, "options.embeddings");
}

}  // namespace
}  // namespace hlx::engine
