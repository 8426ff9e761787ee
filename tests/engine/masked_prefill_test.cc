// TextModel::prefill_embeddings_masked on a Gemma3 vision-language fixture: image blocks are never
// split across chunks (the planner's atomic spans), so a prompt prefilled in small buckets gives
// the bits of one whole-prompt call (logits and every cache row), for both cache types; the
// image-block mask changes the result against the causal prefill_embeddings; a block that fits no
// bucket is refused before any cache row is touched. Numerics against upstream:
// tests/models/test_gemma3_vlm_reference.py.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include <unistd.h>

#include "engine/text_model.h"
#include "models/fixture.h"

namespace hlx::engine {
namespace {

namespace fs = std::filesystem;

const std::string& fixture_dir() {
  static std::string dir;
  if (!dir.empty()) return dir;
  dir = (fs::path(testing::TempDir()) / ("hlx_masked_prefill_" + std::to_string(::getpid()))).string();
  models::FixtureOptions o;
  o.family = "gemma3-vlm";
  o.seed = 4;
  Status s = models::write_vlm_fixture(dir, o);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return dir;
}

std::unique_ptr<TextModel> load(std::vector<int64_t> buckets, DType kv) {
  TextModelOptions o;
  o.context_capacity = 64;
  o.kv_dtype = kv;
  o.prefill_buckets = std::move(buckets);
  auto m = TextModel::load(fixture_dir(), o);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  return m.ok() ? std::move(*m) : nullptr;
}

// Bytes of slot 0's rows [0, rows) in every cache.
std::string slot_bytes(const TextModel& m, int64_t rows) {
  std::string out;
  for (const Tensor& c : m.caches()) {
    const size_t row = size_t(c.dim(2) * c.dim(3)) * dtype_size(c.dtype());
    out.append(static_cast<const char*>(c.raw()), size_t(rows) * row);
  }
  return out;
}

// The tiny fixture without a tokenizer: vocabulary 320, boi 300, eoi 301, image soft token 302,
// 4 rows per image. Blocks at rows [6, 10) and [13, 17).
constexpr int64_t kBoi = 300, kEoi = 301, kImg = 302;
const std::vector<int64_t> kIds = {2,    5, 17,   9,    11,   kBoi, kImg, kImg, kImg, kImg,
                                   kEoi, 7, kBoi, kImg, kImg, kImg, kImg, kEoi, 4};

// Text rows embed(id) * scale, image rows deterministic stand-ins for projected features.
Tensor embeddings(const TextModel& m) {
  std::vector<int64_t> looked = kIds;
  for (auto& t : looked)
    if (t == kImg) t = 0;
  Result<Tensor> e = m.embed_tokens(looked);
  EXPECT_TRUE(e.ok());
  Tensor out = std::move(*e);
  const int64_t h = m.spec().hidden_size;
  for (int64_t r = 0; r < int64_t(kIds.size()); ++r)
    if (kIds[size_t(r)] == kImg)
      for (int64_t c = 0; c < h; ++c) out.data<float>()[r * h + c] = std::sin(0.37f * float(r * h + c));
  return out;
}

TEST(MaskedPrefill, ChunkedEqualsWholeBitForBitWithAtomicImageBlocks) {
  for (DType kv : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(dtype_name(kv));
    auto whole = load({64}, kv);
    auto chunked = load({6, 8}, kv);  // plans [0,6) [6,13) [13,19): 8-row cuts would split both blocks
    ASSERT_TRUE(whole && chunked);
    ASSERT_TRUE(whole->has_masked_entries());
    const Tensor e = embeddings(*whole);
    const int64_t n = int64_t(kIds.size());
    auto sa = whole->admit(kIds, 4);
    auto sb = chunked->admit(kIds, 4);
    ASSERT_TRUE(sa.ok() && sb.ok());
    auto a = whole->prefill_embeddings_masked(*sa, e, kIds, n);
    auto b = chunked->prefill_embeddings_masked(*sb, e, kIds, n);
    ASSERT_TRUE(a.ok()) << a.status().to_string();
    ASSERT_TRUE(b.ok()) << b.status().to_string();
    EXPECT_EQ(std::memcmp(a->raw(), b->raw(), a->nbytes()), 0) << "last-row logits";
    EXPECT_EQ(slot_bytes(*whole, n), slot_bytes(*chunked, n)) << "cache rows";
    EXPECT_EQ(*chunked->cache_length(*sb), n);

    // The image-block rule matters: the causal prefill_embeddings of the same rows differs.
    auto c = load({64}, kv);
    auto sc = c->admit(kIds, 4);
    auto causal = c->prefill_embeddings(*sc, e, kIds, n);
    ASSERT_TRUE(causal.ok());
    float diff = 0;
    for (int64_t i = 0; i < causal->num_elements(); ++i)
      diff = std::max(diff, std::fabs(causal->data<float>()[i] - a->data<float>()[i]));
    EXPECT_GT(diff, 1e-2f);
  }
}

TEST(MaskedPrefill, BlockWiderThanEveryBucketTouchesNothing) {
  auto m = load({2, 3}, DType::kF32);
  ASSERT_TRUE(m);
  const Tensor e = embeddings(*m);
  auto slot = m->admit(kIds, 4);
  ASSERT_TRUE(slot.ok());
  const std::string before = slot_bytes(*m, 64);
  auto r = m->prefill_embeddings_masked(*slot, e, kIds, int64_t(kIds.size()));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().kind(), ErrorKind::kUnsupported);
  EXPECT_NE(r.status().to_string().find("[6, 10)"), std::string::npos) << r.status().to_string();
  EXPECT_EQ(*m->cache_length(*slot), 0);
  EXPECT_EQ(slot_bytes(*m, 64), before);
  // A prefill that would stop inside a block is refused too.
  r = m->prefill_embeddings_masked(*slot, e, kIds, 8);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().kind(), ErrorKind::kInvalidArgument);
}

TEST(MaskedPrefill, TextOnlyModelsHaveNoMaskedEntries) {
  const std::string dir = (fs::path(testing::TempDir()) / ("hlx_masked_text_" + std::to_string(::getpid()))).string();
  models::FixtureOptions o;
  o.family = "gemma3";  // Gemma3 config without tower weights: the text model it always was
  ASSERT_TRUE(models::write_text_fixture(dir, o).ok());
  TextModelOptions to;
  to.context_capacity = 64;
  auto m = TextModel::load(dir, to);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_FALSE((*m)->has_masked_entries());
  EXPECT_FALSE((*m)->has_embeddings_entries());
  auto slot = (*m)->admit(std::vector<int64_t>{1, 2}, 1);
  auto r = (*m)->prefill_embeddings_masked(*slot, Tensor::zeros(DType::kF32, {2, (*m)->spec().hidden_size}),
                                           std::vector<int64_t>{1, 2}, 2);
  EXPECT_EQ(r.status().kind(), ErrorKind::kInvalidArgument);
}

}  // namespace
}  // namespace hlx::engine
