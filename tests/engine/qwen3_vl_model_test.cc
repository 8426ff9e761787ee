// Qwen3-VL below the batch engine: TextModel::prefill_embeddings_mrope (M-RoPE positions and a
// DeepStack payload chunked over the buckets, replay near the capacity re-adding features, every
// invalid payload refused before anything is touched), the per-slot rope delta used by decode,
// and Qwen3VLVisionModel's padded patch buckets against the exact-grid vision entry.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <random>

#include <unistd.h>

#include "engine/qwen3_vl_vision_model.h"
#include "engine/text_model.h"
#include "io/checkpoint.h"
#include "io/hf_config.h"
#include "models/fixture.h"
#include "models/qwen3_vl.h"
#include "multimodal/qwen3_vl_processor.h"
#include "runtime/program.h"

namespace hlx::engine {
namespace {

namespace fs = std::filesystem;

const std::string& vl_dir() {
  static std::string dir;
  if (!dir.empty()) return dir;
  dir = (fs::path(testing::TempDir()) / ("hlx_qwen3vl_model_" + std::to_string(::getpid()))).string();
  models::FixtureOptions o;
  o.family = "qwen3-vl";
  o.dtype = DType::kF32;
  o.seed = 5;
  Status s = models::write_qwen3_vl_fixture(dir, o);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return dir;
}

std::unique_ptr<TextModel> load(TextModelOptions o) {
  auto m = TextModel::load(vl_dir(), o);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  return m.ok() ? std::move(*m) : nullptr;
}

Tensor random_f32(Shape shape, uint32_t seed, float scale = 0.5f) {
  Tensor t = Tensor::empty(DType::kF32, shape);
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, scale);
  for (int64_t i = 0; i < t.num_elements(); ++i) t.data<float>()[i] = d(rng);
  return t;
}

float max_diff(const Tensor& a, const Tensor& b) {
  float m = 0;
  for (int64_t i = 0; i < a.num_elements(); ++i) m = std::max(m, std::fabs(a.data<float>()[i] - b.data<float>()[i]));
  return m;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

std::string cache_bytes(const TextModel& m) {
  std::string out;
  for (const Tensor& c : m.caches()) out.append(static_cast<const char*>(c.raw()), c.nbytes());
  return out;
}

// An image prompt: text rows, one image of a 4x8 patch grid (8 rows at `image_at`), text rows.
struct Prompt {
  std::vector<int64_t> ids;
  Tensor embeddings, positions;
  int64_t delta = 0;
  DeepstackPayload payload;
};

Prompt make_prompt(const TextModel& m, int64_t n, int64_t image_at, uint32_t seed = 1) {
  Prompt p;
  const int64_t image = m.image_token_id(), hidden = m.spec().hidden_size;
  std::vector<int32_t> ids32;
  for (int64_t i = 0; i < n; ++i)
    ids32.push_back(i >= image_at && i < image_at + 8 ? int32_t(image) : int32_t((i * 37 + 3) % 250));
  auto mp = mm::qwen_mrope_positions(ids32, int32_t(image), {mm::ImageGrid{1, 4, 8}}, 2);
  EXPECT_TRUE(mp.ok()) << mp.status().to_string();
  p.ids.assign(ids32.begin(), ids32.end());
  p.positions = Tensor::empty(DType::kI32, {3, n});
  std::copy(mp->positions.begin(), mp->positions.end(), p.positions.data<int32_t>());
  p.delta = mp->rope_delta;
  p.embeddings = random_f32({n, hidden}, seed);
  p.payload.visual_positions = Tensor::empty(DType::kI32, {8});
  for (int32_t v = 0; v < 8; ++v) p.payload.visual_positions.data<int32_t>()[v] = int32_t(image_at) + v;
  p.payload.layer_features = random_f32({3, 8, hidden}, seed + 1);
  p.payload.count = 8;
  return p;
}

Result<Tensor> prefill(TextModel& m, int64_t slot, const Prompt& p, int64_t end_row, bool deepstack = true) {
  return m.prefill_embeddings_mrope(slot, p.embeddings, p.ids, p.positions, p.delta, end_row,
                                    deepstack ? &p.payload : nullptr);
}

TEST(Qwen3VLTextModel, ChunkedPrefillMatchesOneCall) {
  TextModelOptions one;
  one.context_capacity = 32;
  one.prefill_buckets = {32};
  one.slots = 2;
  TextModelOptions chunked = one;
  chunked.prefill_buckets = {8, 32};  // rows 0..7, 8..15, then 16..19: the image spans two chunks
  chunked.context_capacity = 32;
  auto a = load(one), b = load(chunked);
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(a->has_mrope_entries());
  Prompt p = make_prompt(*a, 20, 5);
  // warm_up_mrope compiles what the image prompt uses: prefill and decode then compile nothing.
  ASSERT_TRUE(a->warm_up_mrope(20, 1).ok());
  const int compiled = a->stats().compiled;
  EXPECT_EQ(compiled, 3);  // mrope + deepstack for bucket 32, decode_mrope for B = 1
  int64_t sa = *a->admit(p.ids, 4), sb = *b->admit(p.ids, 4);
  // b in three calls so every chunk boundary is a call boundary as well.
  auto la = prefill(*a, sa, p, 20);
  ASSERT_TRUE(la.ok()) << la.status().to_string();
  DecodeRow row{sa, 3, 20};
  ASSERT_TRUE(a->decode(std::span<const DecodeRow>(&row, 1)).ok());
  EXPECT_EQ(a->stats().compiled, compiled);
  for (int64_t end : {8, 16, 20}) {
    auto lb = prefill(*b, sb, p, end);
    ASSERT_TRUE(lb.ok()) << lb.status().to_string();
    if (end == 20) {
      EXPECT_LT(max_diff(*la, *lb), 1e-4f);
    }
  }
  auto without = prefill(*a, *a->admit(p.ids, 4), p, 20, /*deepstack=*/false);
  ASSERT_TRUE(without.ok());
  EXPECT_GT(max_diff(*la, *without), 1e-2f) << "DeepStack must move the logits";
  EXPECT_EQ(*a->rope_delta(sa), p.delta);
  EXPECT_NE(p.delta, 0);

  // Zero visual rows (count 0): the M-RoPE entry, the same bits as no payload.
  Prompt z = p;
  z.payload.count = 0;
  ASSERT_TRUE(a->release(sa).ok());
  auto lz = prefill(*a, *a->admit(p.ids, 4), z, 20);
  ASSERT_TRUE(lz.ok()) << lz.status().to_string();
  EXPECT_TRUE(same_bits(*lz, *without));
}

// Capacity 20, buckets {8, 20}: after 13 rows, the next chunk cannot fit a bucket below the
// capacity and replays row 12, an image row: its features must be added again, or its K/V in the
// layers after the first DeepStack layer (and the final logits) change.
TEST(Qwen3VLTextModel, ReplayNearCapacityReAddsFeatures) {
  TextModelOptions o;
  o.context_capacity = 20;
  o.prefill_buckets = {8, 20};
  auto split = load(o), whole = load(o);
  ASSERT_TRUE(split && whole);
  Prompt p = make_prompt(*split, 18, 5);  // image rows 5..12
  int64_t s = *split->admit(p.ids, 2), w = *whole->admit(p.ids, 2);
  ASSERT_TRUE(prefill(*split, s, p, 13).ok());
  std::vector<Tensor> before;
  for (const Tensor& c : split->caches()) before.push_back(c.clone());
  auto ls = prefill(*split, s, p, 18);
  ASSERT_TRUE(ls.ok()) << ls.status().to_string();
  auto lw = prefill(*whole, w, p, 18);
  ASSERT_TRUE(lw.ok());
  EXPECT_LT(max_diff(*ls, *lw), 1e-4f);
  // Row 12 of every cache (K/V of layers 1 and 2 depend on the features added after layers 0, 1).
  for (size_t i = 0; i < before.size(); ++i) {
    const Tensor& c = split->caches()[i];
    const int64_t row = c.dim(2) * c.dim(3);
    float d = 0;
    for (int64_t j = 0; j < row; ++j)
      d = std::max(d, std::fabs(c.data<float>()[12 * row + j] - before[i].data<float>()[12 * row + j]));
    EXPECT_LT(d, 1e-5f) << "cache " << i << " row 12 changed on replay";
  }
}

struct BadCase {
  const char* name;
  std::function<void(Prompt&)> edit;
  ErrorKind kind;
  const char* message;  // a substring naming the offending values
};

TEST(Qwen3VLTextModel, InvalidPayloadsAreRefusedBeforeAnythingIsTouched) {
  TextModelOptions o;
  o.context_capacity = 32;
  o.prefill_buckets = {8, 32};
  auto m = load(o);
  ASSERT_TRUE(m);
  const int64_t hidden = m->spec().hidden_size;
  auto set_pos = [](Prompt& p, int v, int32_t value) { p.payload.visual_positions.data<int32_t>()[v] = value; };
  const std::vector<BadCase> cases = {
      {"duplicate", [&](Prompt& p) { set_pos(p, 3, 7); }, ErrorKind::kInvalidArgument,
       "visual_positions[3] = 7 after 7"},
      {"unsorted", [&](Prompt& p) { set_pos(p, 2, 12); }, ErrorKind::kInvalidArgument,
       "visual_positions[3] = 8 after 12"},
      {"past the prompt", [&](Prompt& p) { set_pos(p, 7, 20); }, ErrorKind::kInvalidArgument,
       "visual_positions[7] = 20 is outside the prompt rows [0, 20)"},
      {"negative", [&](Prompt& p) { set_pos(p, 0, -1); }, ErrorKind::kInvalidArgument, "visual_positions[0] = -1"},
      {"not an image row", [&](Prompt& p) { set_pos(p, 0, 2); }, ErrorKind::kInvalidArgument, "row 2 holds token"},
      {"wrong K",
       [&](Prompt& p) {
         p.payload.layer_features = random_f32({2, 8, hidden}, 9);
       },
       ErrorKind::kInvalidArgument, "layer_features must be f32 [3, 8, "},
      {"wrong Nv",
       [&](Prompt& p) {
         p.payload.layer_features = random_f32({3, 7, hidden}, 9);
       },
       ErrorKind::kInvalidArgument, "got f32[3x7x"},
      {"wrong hidden",
       [&](Prompt& p) {
         p.payload.layer_features = random_f32({3, 8, hidden + 1}, 9);
       },
       ErrorKind::kInvalidArgument, "layer_features must be f32"},
      {"bf16 features",
       [&](Prompt& p) {
         p.payload.layer_features = Tensor::zeros(DType::kBF16, {3, 8, hidden});
       },
       ErrorKind::kInvalidArgument, "layer_features must be f32"},
      {"i64 positions", [&](Prompt& p) { p.payload.visual_positions = Tensor::zeros(DType::kI64, {8}); },
       ErrorKind::kInvalidArgument, "visual_positions must be i32 [Nv]"},
      {"count above Nv", [&](Prompt& p) { p.payload.count = 9; }, ErrorKind::kInvalidArgument,
       "visual count 9 outside [0, Nv 8]"},
      {"negative count", [&](Prompt& p) { p.payload.count = -1; }, ErrorKind::kInvalidArgument, "visual count -1"},
      {"rope positions shape",
       [&](Prompt& p) {
         p.positions = Tensor::zeros(DType::kI32, {3, 19});
       },
       ErrorKind::kInvalidArgument, "expected i32 [3, 20]"},
      {"negative rope position", [&](Prompt& p) { p.positions.data<int32_t>()[20 + 4] = -3; },
       ErrorKind::kInvalidArgument, "rope_positions[1, 4] = -3 is negative"},
      {"delta past i32", [&](Prompt& p) { p.delta = int64_t(1) << 40; }, ErrorKind::kOutOfRange,
       "rope_delta 1099511627776 is outside the i32 range"},
  };
  const std::string clean = cache_bytes(*m);
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.name);
    Prompt p = make_prompt(*m, 20, 5);
    c.edit(p);
    int64_t slot = *m->admit(p.ids, 4);
    auto r = prefill(*m, slot, p, 20);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().kind(), c.kind) << r.status().to_string();
    EXPECT_NE(r.status().message().find(c.message), std::string::npos) << r.status().to_string();
    EXPECT_EQ(*m->cache_length(slot), 0);
    EXPECT_EQ(*m->rope_delta(slot), 0);
    EXPECT_TRUE(cache_bytes(*m) == clean);
    ASSERT_TRUE(m->release(slot).ok());
  }
}

TEST(Qwen3VLTextModel, StaticMaxVisualRowsOverflowIsRefused) {
  TextModelOptions o;
  o.context_capacity = 32;
  o.prefill_buckets = {8, 32};
  o.deepstack_visual_rows = 4;
  auto m = load(o);
  ASSERT_TRUE(m);
  Prompt p = make_prompt(*m, 20, 5);
  int64_t slot = *m->admit(p.ids, 4);
  const std::string clean = cache_bytes(*m);
  auto r = prefill(*m, slot, p, 20);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().kind(), ErrorKind::kOutOfRange);
  EXPECT_NE(r.status().message().find("has 8 visual rows, more than the static max Nv 4"), std::string::npos)
      << r.status().to_string();
  EXPECT_EQ(*m->cache_length(slot), 0);
  EXPECT_TRUE(cache_bytes(*m) == clean);
  // Split so each call's chunk holds at most 4 visual rows: accepted.
  ASSERT_TRUE(prefill(*m, slot, p, 9).ok());
  EXPECT_TRUE(prefill(*m, slot, p, 20).ok());
}

TEST(Qwen3VLTextModel, MropeNeedsAnMropeModel) {
  std::string dir = (fs::path(testing::TempDir()) / ("hlx_qwen3vl_plain_" + std::to_string(::getpid()))).string();
  models::FixtureOptions fo;
  fo.family = "qwen3";
  ASSERT_TRUE(models::write_text_fixture(dir, fo).ok());
  TextModelOptions o;
  o.context_capacity = 32;
  o.embeddings = true;
  auto m = TextModel::load(dir, o);
  ASSERT_TRUE(m.ok());
  EXPECT_FALSE((*m)->has_mrope_entries());
  Tensor emb = random_f32({4, (*m)->spec().hidden_size}, 3);
  std::vector<int64_t> ids = {1, 2, 3, 4};
  int64_t slot = *(*m)->admit(ids, 1);
  auto r = (*m)->prefill_embeddings_mrope(slot, emb, ids, Tensor::zeros(DType::kI32, {3, 4}), 0, 4);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().kind(), ErrorKind::kInvalidArgument);
  EXPECT_NE(r.status().message().find("has no mrope_section"), std::string::npos) << r.status().to_string();
}

// The slot's delta: set by the M-RoPE prefill, used by decode (decode_mrope), reset on release and
// admit; text through the same checkpoint (equal axes, delta 0) decodes with the plain entry and
// gives the plain path's bits.
TEST(Qwen3VLTextModel, RopeDeltaDrivesDecodeAndIsPerSlot) {
  TextModelOptions o;
  o.context_capacity = 32;
  o.slots = 2;
  o.prefill_buckets = {8, 32};
  auto m = load(o);
  ASSERT_TRUE(m);
  Prompt p = make_prompt(*m, 20, 5);
  ASSERT_NE(p.delta, 0);
  auto decode_after = [&](int64_t delta) -> Tensor {
    Prompt q = p;
    q.delta = delta;
    int64_t slot = *m->admit(q.ids, 4);
    EXPECT_TRUE(prefill(*m, slot, q, 20).ok());
    EXPECT_EQ(*m->rope_delta(slot), delta);
    DecodeRow row{slot, 17, 20};
    auto d = m->decode(std::span<const DecodeRow>(&row, 1));
    EXPECT_TRUE(d.ok()) << d.status().to_string();
    EXPECT_TRUE(m->release(slot).ok());
    EXPECT_EQ(*m->rope_delta(slot), 0);
    return d.ok() ? *d : Tensor();
  };
  Tensor with = decode_after(p.delta), without = decode_after(0);
  EXPECT_GT(max_diff(with, without), 1e-3f) << "the delta must move the decode logits";

  // A delta that would rotate the next token at a negative position is refused at decode.
  {
    Prompt q = p;
    q.delta = -21;
    int64_t slot = *m->admit(q.ids, 4);
    ASSERT_TRUE(prefill(*m, slot, q, 20).ok());
    DecodeRow row{slot, 17, 20};
    auto d = m->decode(std::span<const DecodeRow>(&row, 1));
    ASSERT_FALSE(d.ok());
    EXPECT_EQ(d.status().kind(), ErrorKind::kOutOfRange);
    EXPECT_NE(d.status().message().find("position 20 + rope delta -21 of slot"), std::string::npos)
        << d.status().to_string();
    EXPECT_EQ(*m->cache_length(slot), 20);
    ASSERT_TRUE(m->release(slot).ok());
  }

  // A slot with a delta refuses 1D-rotary prefills (they would rotate at the bare row).
  int64_t slot = *m->admit(p.ids, 4);
  ASSERT_TRUE(prefill(*m, slot, p, 20).ok());
  std::vector<int64_t> more = {5};
  auto r = m->prefill(slot, more);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().kind(), ErrorKind::kUnsupported);
  ASSERT_TRUE(m->release(slot).ok());

  // Text only: M-RoPE with equal axes and delta 0 == prefill_embeddings, and decode bit for bit.
  std::vector<int64_t> ids = {3, 9, 27, 81, 4, 12};
  Tensor emb = *m->embed_tokens(ids);
  Tensor lin = Tensor::empty(DType::kI32, {3, 6});
  for (int64_t i = 0; i < 18; ++i) lin.data<int32_t>()[i] = int32_t(i % 6);
  int64_t s0 = *m->admit(ids, 2), s1 = *m->admit(ids, 2);
  auto a = m->prefill_embeddings(s0, emb, ids, 6);
  auto b = m->prefill_embeddings_mrope(s1, emb, ids, lin, 0, 6);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(same_bits(*a, *b));
  DecodeRow rows[2] = {{s0, 7, 6}, {s1, 7, 6}};
  auto d = m->decode(rows);
  ASSERT_TRUE(d.ok());
  const int64_t vocab = m->spec().vocab_size;
  EXPECT_EQ(std::memcmp(d->data<float>(), d->data<float>() + vocab, size_t(vocab) * sizeof(float)), 0);

  // A text row batched with an image slot (decode_mrope for the batch) keeps the bits it has in a
  // plain decode batch of the same size.
  ASSERT_TRUE(m->release(s1).ok());
  auto mixed = [&](int64_t delta) -> Tensor {
    Prompt q = p;
    q.delta = delta;
    int64_t si = *m->admit(q.ids, 4);
    EXPECT_TRUE(prefill(*m, si, q, 20).ok());
    DecodeRow batch[2] = {{s0, 7, 6}, {si, 17, 20}};
    auto out = m->decode(batch);
    EXPECT_TRUE(out.ok()) << out.status().to_string();
    EXPECT_TRUE(m->release(si).ok());
    return out.ok() ? *out : Tensor();
  };
  Tensor with_delta = mixed(p.delta), plain = mixed(0);
  EXPECT_EQ(std::memcmp(with_delta.data<float>(), plain.data<float>(), size_t(vocab) * sizeof(float)), 0);
  EXPECT_NE(std::memcmp(with_delta.data<float>() + vocab, plain.data<float>() + vocab, size_t(vocab) * sizeof(float)),
            0);
}

// The padded bucket modules equal the exact-grid entry; two sizes land in two buckets.
TEST(Qwen3VLVisionModel, PaddedBucketsMatchTheExactGridEntry) {
  auto vm = Qwen3VLVisionModel::load(vl_dir());
  ASSERT_TRUE(vm.ok()) << vm.status().to_string();
  Qwen3VLVisionModel& v = **vm;
  EXPECT_EQ(v.patch_buckets(), (std::vector<int64_t>{64, 192}));
  auto ckpt = Checkpoint::open(vl_dir());
  ASSERT_TRUE(ckpt.ok());
  const int64_t d = v.spec().vision.patch_dim();
  std::vector<int64_t> buckets;
  for (auto [h, w] : {std::pair<int64_t, int64_t>{4, 8}, {12, 14}}) {
    SCOPED_TRACE(str_cat(h, "x", w));
    mm::Qwen2VLImage img{random_f32({h * w, d}, uint32_t(h * w), 1.f), mm::ImageGrid{1, h, w}};
    auto got = v.encode(img);
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    buckets.push_back(got->bucket);
    auto mod = models::emit_qwen3_vl_vision_entry(v.spec(), models::VisionGrid{1, h, w});
    ASSERT_TRUE(mod.ok());
    auto prog = rt::Program::compile(std::make_shared<const shlo::Module>(std::move(*mod)));
    ASSERT_TRUE(prog.ok());
    for (const auto& info : models::qwen3_vl_vision_layout(v.spec()))
      ASSERT_TRUE((*prog)->bind_weight(info.name, *ckpt->tensor(info.name)).ok());
    auto want = (*prog)->run("vision_encode", {img.patches});
    ASSERT_TRUE(want.ok());
    ASSERT_EQ(got->features.shape(), (*want)[0].shape());
    ASSERT_EQ(got->deepstack.shape(), (*want)[1].shape());
    EXPECT_LT(max_diff(got->features, (*want)[0]), 1e-5f);
    EXPECT_LT(max_diff(got->deepstack, (*want)[1]), 1e-5f);
  }
  EXPECT_EQ(buckets, (std::vector<int64_t>{64, 192}));
  EXPECT_EQ(v.stats().compiled, 2);

  // Errors name the values: too many patches, video, patches of the wrong shape.
  mm::Qwen2VLImage big{Tensor::zeros(DType::kF32, {14 * 14, d}), mm::ImageGrid{1, 14, 14}};
  auto r = v.encode(big);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().kind(), ErrorKind::kOutOfRange);
  EXPECT_NE(r.status().message().find("196 patches"), std::string::npos) << r.status().to_string();
  mm::Qwen2VLImage video{Tensor::zeros(DType::kF32, {2 * 16, d}), mm::ImageGrid{2, 4, 4}};
  EXPECT_EQ(v.encode(video).status().kind(), ErrorKind::kUnsupported);
  mm::Qwen2VLImage bad{Tensor::zeros(DType::kF32, {15, d}), mm::ImageGrid{1, 4, 4}};
  EXPECT_EQ(v.encode(bad).status().kind(), ErrorKind::kInvalidArgument);
}

}  // namespace
}  // namespace hlx::engine
