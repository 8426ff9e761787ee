// BatchEngine with a VisionModel over the tiny VLM fixtures of every family (LLaVA with CLIP and
// SigLIP towers, Gemma3 with masked image blocks, Qwen3-VL with per-image token counts, M-RoPE and
// DeepStack): image and text requests mixed in one batch give the same tokens and logits bits as
// each run alone; admission counts the image rows; prompt/image mismatches are refused before
// anything is queued or touched; image side tensors are gone after the last prefill chunk and on
// cancel. (Numerics against numpy references: tests/models/test_llava_reference.py,
// test_gemma3_vlm_reference.py, test_qwen3_vl_e2e.py, test_vlm_engine.py.)
#include <gtest/gtest.h>

#include <tuple>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "engine/batch_engine.h"
#include "engine/session.h"
#include "engine/vision_model.h"
#include "models/fixture.h"

namespace hlx::engine {
namespace {

namespace fs = std::filesystem;

const std::string& llava_dir(const std::string& family) {
  static std::map<std::string, std::string> dirs;
  auto it = dirs.find(family);
  if (it != dirs.end()) return it->second;
  std::string dir =
      (fs::path(testing::TempDir()) / ("hlx_vision_engine_" + family + "_" + std::to_string(::getpid()))).string();
  models::FixtureOptions o;
  o.family = family;
  o.dtype = DType::kF32;
  o.seed = 5;
  Status s = models::is_qwen3_vl_fixture_family(family) ? models::write_qwen3_vl_fixture(dir, o)
                                                        : models::write_vlm_fixture(dir, o);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return dirs[family] = dir;
}

constexpr int64_t kCapacity = 96;

struct Models {
  std::unique_ptr<TextModel> text;
  std::unique_ptr<VisionModel> vision;
};

Models load(const std::string& family, int64_t slots, bool embeddings = true) {
  Models m;
  TextModelOptions o;
  o.context_capacity = kCapacity;
  o.slots = slots;
  o.prefill_buckets = {8, 16, 32};
  o.kv_dtype = DType::kF32;
  o.embeddings = embeddings;
  auto t = TextModel::load(llava_dir(family), o);
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  if (t.ok()) m.text = std::move(*t);
  auto v = VisionModel::load(llava_dir(family));
  EXPECT_TRUE(v.ok()) << v.status().to_string();
  if (v.ok()) m.vision = std::move(*v);
  return m;
}

// A synthetic RGB picture: smooth gradients plus a per-seed pattern, of any size.
mm::Image picture(int64_t w, int64_t h, int seed) {
  mm::Image im;
  im.width = w;
  im.height = h;
  im.pixels.resize(size_t(w * h * 3));
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x) {
      uint8_t* p = im.row(y) + x * 3;
      p[0] = uint8_t((x * 255) / std::max<int64_t>(1, w - 1));
      p[1] = uint8_t((y * 255) / std::max<int64_t>(1, h - 1));
      p[2] = uint8_t(((x / (2 + seed)) + (y / 3) * seed) % 2 ? 200 : 30 + 20 * seed);
    }
  return im;
}

std::vector<int64_t> text_prompt(int64_t n, int64_t salt) {
  std::vector<int64_t> p;
  for (int64_t i = 0; i < n; ++i) p.push_back((i * 37 + 11 + salt * 101) % 290);  // < 300 (image id)
  return p;
}

int64_t tokens_of(const VisionModel& v, const mm::Image& image) { return v.image_tokens(image).value(); }

// `n` text tokens with image k's run of image tokens inserted at at[k] (in order): the prompt as
// the engine takes it, expanded.
std::vector<int64_t> image_prompt(int64_t n, int64_t salt, const VisionModel& v, std::vector<size_t> at,
                                  const std::vector<mm::Image>& images) {
  std::vector<int64_t> p = text_prompt(n, salt);
  for (size_t k = at.size(); k-- > 0;)
    p.insert(p.begin() + int64_t(at[k]), size_t(tokens_of(v, images[k])), v.image_token_id());
  return p;
}

struct Spec {
  std::vector<int64_t> prompt;
  std::vector<mm::Image> images;
  int64_t max_new;
};

struct Outcome {
  Completion c;
  std::vector<std::string> logits;
};

GenerationRequest make_request(const Spec& s, std::vector<std::string>* sink) {
  GenerationRequest r;
  r.prompt = s.prompt;
  r.images = s.images;
  r.max_new_tokens = s.max_new;
  r.eos_token_ids = std::vector<int64_t>{};
  r.on_logits = [sink](std::span<const float> row) {
    sink->emplace_back(reinterpret_cast<const char*>(row.data()), row.size_bytes());
  };
  return r;
}

BatchEngineOptions with_vision(VisionModel* v) {
  BatchEngineOptions o;
  o.vision = v;
  o.max_images_per_request = 2;
  return o;
}

class VisionEngine : public testing::TestWithParam<std::string> {};

TEST_P(VisionEngine, ImageAndTextRequestsInOneBatchEqualTheirSoloRuns) {
  Models m = load(GetParam(), 3);
  ASSERT_TRUE(m.text && m.vision);
  auto spec = [&](int64_t n, int64_t salt, std::vector<size_t> at, std::vector<mm::Image> images, int64_t max_new) {
    return Spec{image_prompt(n, salt, *m.vision, at, images), images, max_new};
  };
  std::vector<Spec> specs = {
      spec(9, 1, {1}, {picture(40, 30, 1)}, 10),                        // 1 image: crop / squash / resize
      {text_prompt(13, 2), {}, 12},                                     // text only
      spec(6, 3, {0, 4}, {picture(23, 57, 2), picture(64, 64, 3)}, 9),  // 2 images (Qwen: of other sizes)
      {text_prompt(21, 4), {}, 7},                                      // text, 2 chunks
      spec(30, 5, {12}, {picture(33, 33, 4)}, 8),                       // 1 image mid-prompt, 2+ chunks
  };
  std::vector<Outcome> alone(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    Session s(*m.text, with_vision(m.vision.get()));
    auto c = s.generate(make_request(specs[i], &alone[i].logits));
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    ASSERT_EQ(c->finish, Finish::kLength) << c->error.to_string();
    alone[i].c = std::move(*c);
    EXPECT_EQ(alone[i].c.images, int64_t(specs[i].images.size()));
    EXPECT_EQ(alone[i].c.prompt_tokens, int64_t(specs[i].prompt.size()));
    EXPECT_EQ(alone[i].logits.size(), size_t(specs[i].max_new));
  }
  // The images matter: the same prompt with another picture gives other logits.
  {
    Spec other = specs[0];
    other.images = {picture(40, 30, 5)};
    std::vector<std::string> lg;
    Session s(*m.text, with_vision(m.vision.get()));
    auto c = s.generate(make_request(other, &lg));
    ASSERT_TRUE(c.ok());
    EXPECT_NE(lg[0], alone[0].logits[0]);
  }

  // All five at once on 3 slots (two wait for a slot), stepping until idle.
  BatchEngine engine(*m.text, with_vision(m.vision.get()));
  std::vector<std::vector<std::string>> logits(specs.size());
  std::vector<RequestId> ids;
  for (size_t i = 0; i < specs.size(); ++i) {
    auto id = engine.submit(make_request(specs[i], &logits[i]));
    ASSERT_TRUE(id.ok()) << id.status().to_string();
    ids.push_back(*id);
  }
  ASSERT_TRUE(engine.run_until_idle().ok());
  EXPECT_EQ(engine.side_tensor_bytes(), 0u);
  for (size_t i = 0; i < specs.size(); ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    auto c = engine.take_completion(ids[i]);
    ASSERT_TRUE(c);
    EXPECT_EQ(c->finish, Finish::kLength) << c->error.to_string();
    EXPECT_EQ(c->tokens, alone[i].c.tokens);
    ASSERT_EQ(logits[i].size(), alone[i].logits.size());
    for (size_t k = 0; k < logits[i].size(); ++k) EXPECT_TRUE(logits[i][k] == alone[i].logits[k]) << "logits row " << k;
  }
  EXPECT_EQ(m.text->slot_pool().free_count(), 3);
}

TEST_P(VisionEngine, AdmissionCountsTheImageRows) {
  Models m = load(GetParam(), 1);
  ASSERT_TRUE(m.text && m.vision);
  BatchEngine engine(*m.text, with_vision(m.vision.get()));
  const std::vector<mm::Image> images = {picture(30, 30, 1)};
  const int64_t t = tokens_of(*m.vision, images[0]);
  auto prompt = image_prompt(10, 1, *m.vision, {2}, images);  // 10 text ids and t image rows
  const int64_t expanded = 10 + t;
  ASSERT_EQ(int64_t(prompt.size()), expanded);
  const int64_t fits = kCapacity - expanded;
  ASSERT_GT(fits, 0);
  GenerationRequest r;
  r.prompt = prompt;
  r.images = images;
  r.max_new_tokens = fits + 1;
  Admission adm;
  auto id = engine.submit(r, &adm);
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.status().kind(), ErrorKind::kCapacityExceeded);
  const std::string msg = id.status().message();
  EXPECT_NE(msg.find("prompt " + std::to_string(expanded) + " tokens"), std::string::npos) << msg;
  EXPECT_NE(msg.find("max_new_tokens " + std::to_string(fits + 1)), std::string::npos) << msg;
  EXPECT_NE(msg.find("context_capacity " + std::to_string(kCapacity)), std::string::npos) << msg;
  EXPECT_NE(msg.find("1 image(s)"), std::string::npos) << msg;
  EXPECT_EQ(adm.effective_prompt_len, expanded);
  EXPECT_EQ(adm.max_new_tokens, fits + 1);
  EXPECT_EQ(adm.context_capacity, kCapacity);
  EXPECT_EQ(engine.queued(), 0);
  EXPECT_EQ(engine.side_tensor_bytes(), 0u);

  r.max_new_tokens = fits;  // exactly at the capacity
  id = engine.submit(r, &adm);
  ASSERT_TRUE(id.ok()) << id.status().to_string();
  EXPECT_EQ(adm.effective_prompt_len, expanded);
  ASSERT_TRUE(engine.run_until_idle().ok());
  auto c = engine.take_completion(*id);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->finish, Finish::kLength) << c->error.to_string();
  EXPECT_EQ(int64_t(c->tokens.size()), fits);
}

TEST_P(VisionEngine, MismatchesAreRefusedBeforeAnythingIsTouched) {
  Models m = load(GetParam(), 2);
  ASSERT_TRUE(m.text && m.vision);
  std::vector<std::string> before;
  for (const Tensor& c : m.text->caches()) before.emplace_back(static_cast<const char*>(c.raw()), c.nbytes());
  auto unchanged = [&] {
    size_t i = 0;
    for (const Tensor& c : m.text->caches())
      if (std::string(static_cast<const char*>(c.raw()), c.nbytes()) != before[i++]) return false;
    return true;
  };
  BatchEngine engine(*m.text, with_vision(m.vision.get()));
  auto refused = [&](GenerationRequest r, const std::string& part) {
    Admission adm;
    auto id = engine.submit(std::move(r), &adm);
    ASSERT_FALSE(id.ok()) << part;
    EXPECT_EQ(id.status().kind(), ErrorKind::kInvalidArgument) << id.status().to_string();
    EXPECT_NE(id.status().message().find(part), std::string::npos) << id.status().to_string();
    EXPECT_FALSE(adm.ok());
    EXPECT_EQ(engine.queued(), 0);
    EXPECT_EQ(engine.running(), 0);
    EXPECT_EQ(engine.side_tensor_bytes(), 0u);
    EXPECT_EQ(m.text->slot_pool().free_count(), 2);
  };
  GenerationRequest r;
  r.max_new_tokens = 4;
  const std::vector<mm::Image> two = {picture(30, 30, 1), picture(30, 30, 2)};
  r.prompt = image_prompt(8, 1, *m.vision, {1, 5}, two);
  r.images = {two[0]};
  refused(r, "1 image(s) need");  // the rows of 2 images, 1 image
  r.prompt = text_prompt(8, 1);
  refused(r, "has 0 image token(s)");  // an image without its rows
  r.prompt = image_prompt(8, 1, *m.vision, {1}, two);
  r.images = {};
  refused(r, "0 image(s) need 0");  // image rows without an image
  std::vector<int64_t> unexpanded = text_prompt(8, 1);
  unexpanded.insert(unexpanded.begin() + 1, m.vision->image_token_id());
  r.prompt = unexpanded;
  r.images = {picture(30, 30, 1)};
  refused(r, "expand the prompt text");  // one placeholder id, not the image's rows
  r.images = {picture(30, 30, 1), picture(30, 30, 2), picture(30, 30, 3)};
  r.prompt = image_prompt(8, 1, *m.vision, {0, 1, 2}, r.images);
  refused(r, "2 allowed");  // over max_images_per_request
  r.prompt = image_prompt(8, 1, *m.vision, {1}, two);
  r.images = {mm::Image{}};  // an empty image is refused by its size, at submit
  refused(r, "image 0");

  // A text-only engine (no vision model) refuses images.
  BatchEngine text_only(*m.text);
  r.images = {picture(30, 30, 1)};
  auto id = text_only.submit(r);
  ASSERT_FALSE(id.ok());
  EXPECT_NE(id.status().message().find("text-only"), std::string::npos) << id.status().to_string();
  EXPECT_EQ(text_only.queued(), 0);
  EXPECT_TRUE(unchanged());
}

TEST_P(VisionEngine, SideTensorsAreReleasedAfterPrefillAndOnCancel) {
  Models m = load(GetParam(), 1);
  ASSERT_TRUE(m.text && m.vision);
  BatchEngineOptions no_cache = with_vision(m.vision.get());
  no_cache.image_cache_bytes = 0;  // every request encodes: the steps below count encode calls
  no_cache.prefix_cache = false;   // (a repeated prompt would reuse its image rows, no encode)
  BatchEngine engine(*m.text, no_cache);
  GenerationRequest r;
  r.images = {picture(30, 30, 1), picture(50, 20, 2)};
  r.prompt = image_prompt(36, 1, *m.vision, {0, 18}, r.images);  // > 32 rows: 2+ chunks
  r.max_new_tokens = 6;
  r.eos_token_ids = std::vector<int64_t>{};
  // The bytes each stage holds: pixels, then features (+ DeepStack rows), then the merged rows (+
  // the DeepStack payload: row ids and features); M-RoPE positions from submit to the last chunk.
  const size_t rows = r.prompt.size(), hidden = size_t(m.vision->hidden_size());
  const size_t image_rows = size_t(tokens_of(*m.vision, r.images[0]) + tokens_of(*m.vision, r.images[1]));
  const size_t k = m.text->spec().deepstack_layers.size();
  const size_t positions = m.text->has_mrope_entries() ? 3 * rows * 4 : 0;
  const size_t pixel_bytes = size_t(m.vision->preprocess(r.images[0])->pixels.nbytes()) +
                             size_t(m.vision->preprocess(r.images[1])->pixels.nbytes()) + positions;
  const size_t feature_bytes = image_rows * hidden * 4 * (1 + k) + positions;
  const size_t merged_bytes = rows * hidden * 4 + positions + (k ? image_rows * 4 + k * image_rows * hidden * 4 : 0);

  // Running: pixels until encoded (one image per step), merged rows until the last chunk.
  auto a = engine.submit(r);
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  EXPECT_EQ(engine.side_tensor_bytes(), pixel_bytes);  // queued with its pixels
  ASSERT_TRUE(engine.step().ok());                     // image 0 encoded
  EXPECT_GT(engine.side_tensor_bytes(), 0u);
  ASSERT_TRUE(engine.step().ok());  // image 1 encoded: features only
  EXPECT_EQ(engine.side_tensor_bytes(), feature_bytes);
  ASSERT_TRUE(engine.step().ok());  // merged, first chunk (the prompt needs 2+ chunks)
  EXPECT_GT(m.text->cache_length(0).value(), 0);
  EXPECT_LT(m.text->cache_length(0).value(), int64_t(rows));
  EXPECT_EQ(engine.side_tensor_bytes(), merged_bytes);
  // A second request waits for the only slot, holding its pixels; cancelling it drops them.
  GenerationRequest q = r;
  auto b = engine.submit(q);
  ASSERT_TRUE(b.ok());
  ASSERT_TRUE(engine.step().ok());
  ASSERT_TRUE(engine.cancel(*b).ok());
  ASSERT_TRUE(engine.run_until_idle().ok());
  EXPECT_EQ(engine.side_tensor_bytes(), 0u);
  auto ca = engine.take_completion(*a);
  ASSERT_TRUE(ca);
  EXPECT_EQ(ca->finish, Finish::kLength) << ca->error.to_string();
  EXPECT_EQ(ca->images, 2);
  EXPECT_GE(ca->prefill_chunks, 2);
  auto cb = engine.take_completion(*b);
  ASSERT_TRUE(cb);
  EXPECT_EQ(cb->finish, Finish::kCancelled);

  // Cancelling a running request between its encode steps releases everything and the slot.
  auto c = engine.submit(r);
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(engine.step().ok());
  EXPECT_GT(engine.side_tensor_bytes(), 0u);
  EXPECT_EQ(m.text->slot_pool().free_count(), 0);
  ASSERT_TRUE(engine.cancel(*c).ok());
  EXPECT_EQ(engine.side_tensor_bytes(), 0u);
  EXPECT_EQ(m.text->slot_pool().free_count(), 1);
  ASSERT_TRUE(engine.run_until_idle().ok());
  EXPECT_EQ(engine.take_completion(*c)->finish, Finish::kCancelled);

  // And during the prefill chunks (merged rows held).
  auto d = engine.submit(r);
  ASSERT_TRUE(d.ok());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(engine.step().ok());
  EXPECT_GT(engine.side_tensor_bytes(), 0u);
  ASSERT_TRUE(engine.cancel(*d).ok());
  EXPECT_EQ(engine.side_tensor_bytes(), 0u);
  EXPECT_EQ(m.text->slot_pool().free_count(), 1);
}

// The image-feature cache: a repeated image (a separately decoded copy of the same pixels) takes
// its features from the cache, no encode call, and the request's logits are the same bits as on
// an engine without the cache; one changed pixel is a miss; a bound smaller than one image's
// features keeps nothing.
TEST_P(VisionEngine, RepeatedImageSkipsEncodeAndIsBitIdentical) {
  Models m = load(GetParam(), 1);
  ASSERT_TRUE(m.text && m.vision);
  auto run = [&](BatchEngine& e, const Spec& s) {
    Outcome o;
    auto id = e.submit(make_request(s, &o.logits));
    EXPECT_TRUE(id.ok()) << id.status().to_string();
    EXPECT_TRUE(e.run_until_idle().ok());
    auto c = e.take_completion(*id);
    EXPECT_TRUE(c.has_value());
    if (c) o.c = std::move(*c);
    EXPECT_EQ(o.c.finish, Finish::kLength) << o.c.error.to_string();
    return o;
  };
  mm::Image changed = picture(40, 30, 3);
  changed.row(7)[5 * 3 + 1] ^= 0x40;  // one pixel, one channel
  const Spec first{image_prompt(10, 1, *m.vision, {2}, {picture(40, 30, 3)}), {picture(40, 30, 3)}, 4};
  const Spec again{image_prompt(14, 2, *m.vision, {5}, {picture(40, 30, 3)}), {picture(40, 30, 3)}, 4};
  const Spec other{image_prompt(14, 2, *m.vision, {5}, {changed}), {changed}, 4};

  BatchEngine cached(*m.text, with_vision(m.vision.get()));
  Outcome a = run(cached, first);
  EXPECT_EQ(a.c.cached_images, 0);
  EXPECT_GT(cached.image_cache_bytes(), 0u);
  Outcome b = run(cached, again);
  EXPECT_EQ(b.c.cached_images, 1) << "the same pixels must hit";
  EXPECT_EQ(b.c.encode_ms, 0.0);
  Outcome c = run(cached, other);
  EXPECT_EQ(c.c.cached_images, 0) << "a one-pixel change must miss";

  BatchEngineOptions off = with_vision(m.vision.get());
  off.image_cache_bytes = 0;
  BatchEngine plain(*m.text, off);
  for (const auto& [got, spec, what] : {std::tuple{&b, &again, "hit"}, std::tuple{&c, &other, "miss"}}) {
    Outcome want = run(plain, *spec);
    EXPECT_EQ(want.c.cached_images, 0);
    EXPECT_EQ(got->c.tokens, want.c.tokens) << what;
    ASSERT_EQ(got->logits.size(), want.logits.size()) << what;
    for (size_t t = 0; t < want.logits.size(); ++t)
      EXPECT_TRUE(got->logits[t] == want.logits[t]) << what << ": logits of token " << t << " differ in bits";
  }
  EXPECT_EQ(plain.image_cache_bytes(), 0u);

  BatchEngineOptions tiny = with_vision(m.vision.get());
  tiny.image_cache_bytes = 64;  // smaller than any image's features
  BatchEngine small(*m.text, tiny);
  run(small, first);
  EXPECT_EQ(run(small, again).c.cached_images, 0);
  EXPECT_EQ(small.image_cache_bytes(), 0u);
}

// Prefix reuse through images: the rows of an image prompt stay in its slot, keyed by their ids
// and each image's content key. Every request below is compared bit for bit (tokens and every
// logits row) with the same request on an engine with reuse off, and its cached_tokens asserted.
class ImagePrefix {
 public:
  explicit ImagePrefix(Models& m) : engine_(*m.text, with_vision(m.vision.get())) {}
  BatchEngine& engine() { return engine_; }
  Outcome run(const Spec& s) {
    Outcome o;
    auto id = engine_.submit(make_request(s, &o.logits));
    EXPECT_TRUE(id.ok()) << id.status().to_string();
    EXPECT_TRUE(engine_.run_until_idle().ok());
    o.c = engine_.take_completion(*id).value();
    EXPECT_EQ(o.c.finish, Finish::kLength) << o.c.error.to_string();
    return o;
  }

 private:
  BatchEngine engine_;
};

Outcome run_without_reuse(Models& m, const Spec& s) {
  BatchEngineOptions o = with_vision(m.vision.get());
  o.prefix_cache = false;
  o.image_cache_bytes = 0;
  Session session(*m.text, o);
  Outcome out;
  auto c = session.generate(make_request(s, &out.logits));
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  if (c.ok()) out.c = std::move(*c);
  EXPECT_EQ(out.c.finish, Finish::kLength) << out.c.error.to_string();
  EXPECT_EQ(out.c.cached_tokens, 0);
  return out;
}

void expect_same(const Outcome& got, const Outcome& want, const std::string& what) {
  EXPECT_EQ(got.c.tokens, want.c.tokens) << what;
  ASSERT_EQ(got.logits.size(), want.logits.size()) << what;
  for (size_t t = 0; t < want.logits.size(); ++t)
    EXPECT_TRUE(got.logits[t] == want.logits[t]) << what << ": logits of token " << t << " differ in bits";
}

std::vector<int64_t> cat(std::vector<int64_t> a, const std::vector<int64_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Turn 2 of a chat (turn 1's prompt, an answer, a new question) reuses every row of turn 1's
// prompt, the image's included, and encodes nothing (not even an image-cache lookup).
TEST_P(VisionEngine, ChatTurnReusesThroughTheImageBitIdentically) {
  Models m = load(GetParam(), 1);
  ASSERT_TRUE(m.text && m.vision);
  const mm::Image im = picture(40, 30, 3);
  const Spec turn1{image_prompt(12, 1, *m.vision, {3}, {im}), {im}, 4};
  const Spec turn2{cat(cat(turn1.prompt, text_prompt(5, 7)), text_prompt(9, 8)), {im}, 5};
  // Turn 3 brings a second image: only that one is encoded (Qwen3-VL: DeepStack rows for it alone).
  const mm::Image im2 = picture(30, 30, 2);
  const Spec turn3{cat(turn2.prompt, image_prompt(12, 9, *m.vision, {4}, {im2})), {im, im2}, 3};
  std::vector<Outcome> got;
  {
    ImagePrefix e(m);
    got.push_back(e.run(turn1));
    got.push_back(e.run(turn2));
    got.push_back(e.run(turn3));
  }
  EXPECT_EQ(got[0].c.cached_tokens, 0);
  EXPECT_EQ(got[1].c.cached_tokens, int64_t(turn1.prompt.size())) << "turn 2 reuses turn 1's prompt rows";
  EXPECT_EQ(got[2].c.cached_tokens, int64_t(turn2.prompt.size()));
  for (size_t t = 1; t < 3; ++t) EXPECT_EQ(got[t].c.cached_images, 0) << "turn " << t + 1 << ": no cache lookup";
  EXPECT_EQ(got[1].c.encode_ms, 0.0) << "turn 2: the image lies in the reused rows";
  EXPECT_EQ(got[1].c.reused_images, 1);
  EXPECT_EQ(got[2].c.reused_images, 1) << "turn 3: the first image only";
  EXPECT_GT(got[2].c.encode_ms, 0.0) << "turn 3: the new image is encoded";
  const Spec* specs[] = {&turn1, &turn2, &turn3};
  for (size_t t = 0; t < 3; ++t) expect_same(got[t], run_without_reuse(m, *specs[t]), "turn " + std::to_string(t + 1));
}

// The same ids with another image at the same rows reuse only the rows before it; a prompt whose
// reusable rows would end inside an image (its last row is an image row) is cut back to the
// image's first row.
TEST_P(VisionEngine, ImageKeysAndSpanEdgesBoundTheReusedPrefix) {
  Models m = load(GetParam(), 1);
  ASSERT_TRUE(m.text && m.vision);
  const mm::Image a = picture(40, 30, 3), b = picture(40, 30, 4);
  ASSERT_EQ(tokens_of(*m.vision, a), tokens_of(*m.vision, b));
  const Spec first{image_prompt(12, 1, *m.vision, {3}, {a}), {a}, 3};
  const Spec other{first.prompt, {b}, 3};  // same ids, another picture
  std::vector<int64_t> ends_in_image(first.prompt.begin(), first.prompt.begin() + 3 + tokens_of(*m.vision, a));
  const Spec last_row_image{ends_in_image, {a}, 3};
  Outcome o, e;
  {
    ImagePrefix eng(m);
    eng.run(first);
    o = eng.run(other);
    eng.run(first);
    e = eng.run(last_row_image);
  }
  EXPECT_EQ(o.c.cached_tokens, 3) << "another image: only the text rows before it";
  EXPECT_EQ(e.c.cached_tokens, 3) << "cut back to the image's first row";
  EXPECT_EQ(e.c.cached_images, 1) << "the image's rows are computed again (its features from the image cache)";
  expect_same(o, run_without_reuse(m, other), "another image");
  expect_same(e, run_without_reuse(m, last_row_image), "prompt ending with the image");
}

// A request cancelled after its first chunk (rows [0, 32) written, the image's rows [20, 20 + t)
// only in part when t > 12) leaves only the rows before the image reusable: an image counts only
// when all its rows were written.
TEST_P(VisionEngine, PartlyWrittenImageIsNotReused) {
  Models m = load(GetParam(), 1);
  ASSERT_TRUE(m.text && m.vision);
  const mm::Image im = picture(40, 30, 3);
  const int64_t t = tokens_of(*m.vision, im);
  const Spec spec{image_prompt(30, 4, *m.vision, {20}, {im}), {im}, 3};
  {
    ImagePrefix eng(m);
    std::vector<std::string> sink;
    auto id = eng.engine().submit(make_request(spec, &sink));
    ASSERT_TRUE(id.ok());
    while (m.text->cache_length(0).value() == 0) ASSERT_TRUE(eng.engine().step().ok());
    ASSERT_LT(m.text->cache_length(0).value(), int64_t(spec.prompt.size()));
    ASSERT_TRUE(eng.engine().cancel(*id).ok());
    ASSERT_TRUE(eng.engine().run_until_idle().ok());
  }
  Outcome o;
  {
    ImagePrefix eng(m);
    o = eng.run(spec);
  }
  EXPECT_EQ(o.c.cached_tokens, 20 + t > 32 ? 20 : 32) << t << " image rows";
  expect_same(o, run_without_reuse(m, spec), "after a cancelled prefill");
}

// TextModel::admit_reusing checks the image keys and span edges itself, before touching anything.
TEST(VisionEnginePrefix, AdmitReusingRefusesAnotherImageOrARowInsideOne) {
  Models m = load("llava-clip", 1);
  ASSERT_TRUE(m.text && m.vision);
  const mm::Image a = picture(40, 30, 3);
  const Spec first{image_prompt(12, 1, *m.vision, {3}, {a}), {a}, 2};
  {
    ImagePrefix eng(m);
    eng.run(first);
  }
  const int64_t t = tokens_of(*m.vision, a), n = int64_t(first.prompt.size());
  ASSERT_EQ(m.text->reusable_prefix(0).size(), size_t(n));
  const std::vector<ImageSpanKey> other = {{3, 3 + t, "another image"}};
  const PromptKey wrong{first.prompt, other};
  EXPECT_EQ(m.text->reusable_rows(0, wrong), 3);
  auto bad = m.text->admit_reusing(wrong, 2, 0, 4, 0);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().kind(), ErrorKind::kInvalidArgument) << bad.status().to_string();
  EXPECT_EQ(m.text->reusable_prefix(0).size(), size_t(n)) << "a refused admission touches nothing";
  EXPECT_EQ(m.text->slot_pool().free_count(), 1);
  EXPECT_TRUE(m.text->admit_reusing(wrong, 2, 0, 3, 0).ok());  // the rows before the image
  ASSERT_TRUE(m.text->release(0).ok());
}

// A prefix held by a slot that is still decoding is copied into the free slot.
TEST_P(VisionEngine, ImagePrefixIsCopiedFromARunningSlot) {
  Models m = load(GetParam(), 2);
  ASSERT_TRUE(m.text && m.vision);
  const mm::Image im = picture(33, 33, 4);
  const Spec shared{image_prompt(10, 2, *m.vision, {4}, {im}), {im}, 12};
  const Spec later{cat(shared.prompt, text_prompt(7, 3)), {im}, 4};
  Outcome s, l;
  {
    ImagePrefix eng(m);
    BatchEngine& e = eng.engine();
    auto a = e.submit(make_request(shared, &s.logits));
    ASSERT_TRUE(a.ok());
    while (s.logits.size() < 2) ASSERT_TRUE(e.step().ok());  // decoding: its prompt rows are written
    auto b = e.submit(make_request(later, &l.logits));
    ASSERT_TRUE(b.ok());
    ASSERT_TRUE(e.run_until_idle().ok());
    s.c = e.take_completion(*a).value();
    l.c = e.take_completion(*b).value();
  }
  EXPECT_EQ(l.c.cached_tokens, int64_t(shared.prompt.size()));
  EXPECT_EQ(l.c.encode_ms, 0.0);
  expect_same(s, run_without_reuse(m, shared), "running request");
  expect_same(l, run_without_reuse(m, later), "copied prefix");
}

// With the prefix cache on, an image request (which reuses no rows) takes the least recently
// used free slot, so the text prefix used last survives it.
TEST(VisionEnginePrefix, ImageRequestsSpareTheFreshestTextPrefix) {
  Models m = load("llava-clip", 2);
  ASSERT_TRUE(m.text && m.vision);
  BatchEngine e(*m.text, with_vision(m.vision.get()));
  std::vector<std::string> sink;
  auto run = [&](const Spec& s) {
    auto id = e.submit(make_request(s, &sink));
    EXPECT_TRUE(id.ok()) << id.status().to_string();
    EXPECT_TRUE(e.run_until_idle().ok());
    return e.take_completion(*id).value();
  };
  const std::vector<int64_t> t1 = text_prompt(20, 1), t2 = text_prompt(18, 2);
  auto extend = [](std::vector<int64_t> p, int64_t n) {
    for (int64_t i = 0; i < n; ++i) p.push_back((i * 13 + 5) % 290);
    return p;
  };
  run({t1, {}, 2});                                          // slot 0 holds t1
  run({t2, {}, 2});                                          // slot 1 (least recently used) holds t2
  EXPECT_EQ(run({extend(t1, 4), {}, 2}).cached_tokens, 20);  // back in slot 0: slot 1 is now the LRU one
  const mm::Image im = picture(30, 30, 1);
  EXPECT_EQ(run({image_prompt(6, 3, *m.vision, {1}, {im}), {im}, 2}).finish, Finish::kLength);
  EXPECT_EQ(run({extend(t1, 9), {}, 2}).cached_tokens, 24) << "the image request took slot 0";
}

INSTANTIATE_TEST_SUITE_P(Fixtures, VisionEngine,
                         testing::Values("llava-clip", "llava-siglip", "gemma3-vlm", "qwen3-vl"),
                         [](const testing::TestParamInfo<std::string>& i) {
                           std::string s = i.param;
                           for (char& ch : s)
                             if (ch == '-') ch = '_';
                           return s;
                         });

TEST(VisionEngineLoad, ImagesNeedTheEmbeddingsEntries) {
  // A vision-language checkpoint always gets them.
  Models m = load("llava-clip", 1, /*embeddings=*/false);
  ASSERT_TRUE(m.text && m.vision);
  EXPECT_TRUE(m.text->has_embeddings_entries());
  // A text model loaded without them refuses image requests (and is not a vision model itself).
  std::string text_dir =
      (fs::path(testing::TempDir()) / ("hlx_vision_engine_text_" + std::to_string(::getpid()))).string();
  models::FixtureOptions o;
  o.family = "qwen3";
  ASSERT_TRUE(models::write_text_fixture(text_dir, o).ok());
  TextModelOptions to;
  to.context_capacity = kCapacity;
  auto text = TextModel::load(text_dir, to);
  ASSERT_TRUE(text.ok()) << text.status().to_string();
  EXPECT_FALSE((*text)->has_embeddings_entries());
  BatchEngine engine(**text, with_vision(m.vision.get()));
  GenerationRequest r;
  r.images = {picture(30, 30, 1)};
  r.prompt = image_prompt(5, 1, *m.vision, {0}, r.images);
  r.max_new_tokens = 2;
  auto id = engine.submit(r);
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.status().kind(), ErrorKind::kInvalidArgument);
  EXPECT_NE(id.status().message().find("prefill_embeddings"), std::string::npos) << id.status().to_string();
  auto v = VisionModel::load(text_dir);
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().kind(), ErrorKind::kInvalidArgument) << v.status().to_string();
}

}  // namespace
}  // namespace hlx::engine
