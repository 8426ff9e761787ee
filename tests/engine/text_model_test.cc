// End to end over tiny random-weight fixtures written by hlx itself: load, emit, compile, prefill,
// decode, generate; admission leaving caches untouched; pre-emitted modules checked at load.
// Numerics against the independent numpy reference live in tests/models; here the engine's own
// paths are compared with each other (prefill vs decode, chunked vs whole, replay vs whole).
#include "engine/text_model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <unistd.h>

#include "core/sha256.h"

#include "models/fixture.h"
#include "stablehlo/printer.h"

namespace hlx::engine {
namespace {

namespace fs = std::filesystem;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// One fixture per family for the whole binary (writing and reading them is the slow part).
const std::string& fixture_dir(const std::string& family) {
  static std::map<std::string, std::string> dirs;
  auto it = dirs.find(family);
  if (it != dirs.end()) return it->second;
  std::string dir =
      (fs::path(testing::TempDir()) / ("hlx_engine_fixture_" + family + "_" + std::to_string(::getpid()))).string();
  models::FixtureOptions o;
  o.family = family;
  o.preset = "tiny";
  o.dtype = DType::kF32;
  o.seed = 7;
  Status s = models::write_text_fixture(dir, o);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return dirs[family] = dir;
}

std::unique_ptr<TextModel> load_or_fail(const std::string& dir, TextModelOptions o) {
  auto m = TextModel::load(dir, o);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  return m.ok() ? std::move(*m) : nullptr;
}

std::vector<int64_t> prompt_of(int64_t n, int64_t vocab, int64_t salt = 0) {
  std::vector<int64_t> p;
  for (int64_t i = 0; i < n; ++i) p.push_back((i * 37 + 11 + salt * 101) % vocab);
  return p;
}

// Max abs difference relative to the logit scale.
double rel_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  if (a.shape() != b.shape()) return INFINITY;
  double diff = 0, scale = 1;
  for (int64_t i = 0; i < a.num_elements(); ++i) {
    diff = std::max(diff, double(std::fabs(a.data<float>()[i] - b.data<float>()[i])));
    scale = std::max(scale, double(std::fabs(a.data<float>()[i])));
  }
  return diff / scale;
}

Tensor row(const Tensor& t, int64_t r) {
  int64_t v = t.dim(t.rank() - 1);
  Tensor out = Tensor::empty(DType::kF32, {v});
  std::memcpy(out.data<float>(), t.data<float>() + r * v, size_t(v) * sizeof(float));
  return out;
}

std::vector<std::string> cache_bytes(const TextModel& m) {
  std::vector<std::string> out;
  for (const Tensor& c : m.caches()) out.emplace_back(static_cast<const char*>(c.raw()), c.nbytes());
  return out;
}

class TextModelFamily : public testing::TestWithParam<std::string> {};

TEST_P(TextModelFamily, PrefillLastRowEqualsDecodeOfTheLastToken) {
  TextModelOptions o;
  o.context_capacity = 64;
  o.slots = 2;
  o.kv_dtype = DType::kF32;
  auto m = load_or_fail(fixture_dir(GetParam()), o);
  ASSERT_TRUE(m);
  auto p = prompt_of(13, m->spec().vocab_size);
  auto whole = m->prefill(0, p);
  ASSERT_TRUE(whole.ok()) << whole.status().to_string();
  EXPECT_EQ(whole->shape(), (Shape{m->spec().vocab_size}));
  auto head = m->prefill(1, std::span<const int64_t>(p).first(12));
  ASSERT_TRUE(head.ok()) << head.status().to_string();
  DecodeRow r{1, p[12], 12};
  auto dec = m->decode(std::span<const DecodeRow>(&r, 1));
  ASSERT_TRUE(dec.ok()) << dec.status().to_string();
  EXPECT_LT(rel_diff(*whole, row(*dec, 0)), 1e-4);
  EXPECT_EQ(*m->cache_length(0), 13);
  EXPECT_EQ(*m->cache_length(1), 13);
}

TEST_P(TextModelFamily, ChunkedPrefillMatchesOneBucket) {
  TextModelOptions whole_o;
  whole_o.context_capacity = 64;
  whole_o.kv_dtype = DType::kF32;
  whole_o.all_logits = true;
  TextModelOptions chunk_o = whole_o;
  chunk_o.prefill_buckets = {4, 8, 64};  // 19 rows -> 8 + 8 + 3 (in a 4 bucket)
  auto a = load_or_fail(fixture_dir(GetParam()), whole_o);
  auto b = load_or_fail(fixture_dir(GetParam()), chunk_o);
  ASSERT_TRUE(a && b);
  auto p = prompt_of(19, a->spec().vocab_size);
  auto la = a->prefill_all_logits(0, p);
  auto lb = b->prefill_all_logits(0, p);
  ASSERT_TRUE(la.ok()) << la.status().to_string();
  ASSERT_TRUE(lb.ok()) << lb.status().to_string();
  EXPECT_EQ(la->shape(), (Shape{19, a->spec().vocab_size}));
  EXPECT_LT(rel_diff(*la, *lb), 1e-4);
  // Last-row prefill agrees with the last row of the all-rows entry.
  TextModelOptions c_o = whole_o;
  c_o.all_logits = false;
  auto c = load_or_fail(fixture_dir(GetParam()), c_o);
  auto lc = c->prefill(0, p);
  ASSERT_TRUE(lc.ok());
  EXPECT_LT(rel_diff(row(*la, 18), *lc), 1e-4);
}

TEST_P(TextModelFamily, NearCapacityChunkReplaysRowsAndMatches) {
  TextModelOptions o;
  o.context_capacity = 40;
  o.slots = 2;
  o.kv_dtype = DType::kF32;
  o.prefill_buckets = {8, 40};
  auto m = load_or_fail(fixture_dir(GetParam()), o);
  ASSERT_TRUE(m);
  auto p = prompt_of(38, m->spec().vocab_size);
  // Slot 0: the whole prompt in the 40 bucket. Slot 1: 35 rows, then 3 more at row 35 where no
  // bucket fits (35 + 8 > 40): the engine replays rows 32..34 in an 8-row chunk ending at 40.
  auto whole = m->prefill(0, p);
  ASSERT_TRUE(whole.ok()) << whole.status().to_string();
  ASSERT_TRUE(m->prefill(1, std::span<const int64_t>(p).first(35)).ok());
  auto tail = m->prefill(1, std::span<const int64_t>(p).subspan(35));
  ASSERT_TRUE(tail.ok()) << tail.status().to_string();
  EXPECT_LT(rel_diff(*whole, *tail), 1e-4);
  EXPECT_EQ(*m->cache_length(1), 38);
  // And decode from both slots at once (B = 2) agrees row by row.
  DecodeRow rows[2] = {{0, 5, 38}, {1, 5, 38}};
  auto dec = m->decode(rows);
  ASSERT_TRUE(dec.ok()) << dec.status().to_string();
  EXPECT_LT(rel_diff(row(*dec, 0), row(*dec, 1)), 1e-4);
}

TEST_P(TextModelFamily, GenerateIsTheSameInEverySlotAndBatchedDecodeAgrees) {
  TextModelOptions o;
  o.context_capacity = 64;
  o.slots = 3;
  auto m = load_or_fail(fixture_dir(GetParam()), o);
  ASSERT_TRUE(m);
  auto p = prompt_of(6, m->spec().vocab_size);
  auto g1 = m->generate(p, 10);
  ASSERT_TRUE(g1.ok()) << g1.status().to_string();
  EXPECT_GE(g1->tokens.size(), 1u);
  EXPECT_LE(g1->tokens.size(), 10u);
  if (g1->finish == FinishReason::kLength) {
    EXPECT_EQ(g1->tokens.size(), 10u);
  }
  EXPECT_EQ(m->slot_pool().free_count(), 3);  // released
  // Occupy slot 0 so the same request runs in slot 1: same tokens.
  auto other = prompt_of(9, m->spec().vocab_size, 3);
  auto s0 = m->admit(other, 1);
  ASSERT_TRUE(s0.ok());
  EXPECT_EQ(*s0, 0);
  ASSERT_TRUE(m->prefill(*s0, other).ok());
  auto g2 = m->generate(p, 10);
  ASSERT_TRUE(g2.ok()) << g2.status().to_string();
  EXPECT_EQ(g1->tokens, g2->tokens);
}

TEST_P(TextModelFamily, RejectedRequestsTouchNoSlotAndNoCache) {
  TextModelOptions o;
  o.context_capacity = 32;
  o.slots = 2;
  auto m = load_or_fail(fixture_dir(GetParam()), o);
  ASSERT_TRUE(m);
  const int64_t vocab = m->spec().vocab_size;
  auto a = prompt_of(10, vocab);
  auto slot = m->admit(a, 5);
  ASSERT_TRUE(slot.ok());
  ASSERT_TRUE(m->prefill(*slot, a).ok());
  const auto before = cache_bytes(*m);
  const int64_t free_before = m->slot_pool().free_count();

  // One token over: 30 + 3 = 33 > 32.
  auto b = prompt_of(30, vocab, 1);
  Admission adm;
  auto rejected = m->admit(b, 3, &adm);
  ASSERT_FALSE(rejected.ok());
  EXPECT_EQ(rejected.status().kind(), ErrorKind::kCapacityExceeded);
  EXPECT_EQ(adm.effective_prompt_len, 30);
  EXPECT_EQ(adm.max_new_tokens, 3);
  EXPECT_EQ(adm.context_capacity, 32);
  // Exact fit (30 + 2 = 32) would be admitted: the boundary is where admission says.
  EXPECT_TRUE(check_text_admission(m->limits(), b, 2).ok());
  // Prompt alone over the capacity, and through generate().
  auto c = prompt_of(33, vocab, 2);
  EXPECT_EQ(m->generate(c, 0).status().kind(), ErrorKind::kCapacityExceeded);
  EXPECT_EQ(m->generate(b, 3).status().kind(), ErrorKind::kCapacityExceeded);
  std::vector<int64_t> bad_token = {1, vocab};
  EXPECT_EQ(m->admit(bad_token, 1).status().kind(), ErrorKind::kInvalidArgument);

  // Bypassing admission: the engine's own bounds checks fire before anything runs.
  int64_t other = 1 - *slot;
  EXPECT_EQ(m->prefill(other, c).status().kind(), ErrorKind::kOutOfRange);
  EXPECT_EQ(m->prefill(*slot, prompt_of(23, vocab)).status().kind(), ErrorKind::kOutOfRange);  // 10 + 23 > 32
  DecodeRow past{*slot, 1, 32};
  EXPECT_EQ(m->decode(std::span<const DecodeRow>(&past, 1)).status().kind(), ErrorKind::kOutOfRange);
  DecodeRow hole{*slot, 1, 11};  // cache length is 10
  EXPECT_EQ(m->decode(std::span<const DecodeRow>(&hole, 1)).status().kind(), ErrorKind::kOutOfRange);
  DecodeRow bad_slot{2, 1, 0};
  EXPECT_EQ(m->decode(std::span<const DecodeRow>(&bad_slot, 1)).status().kind(), ErrorKind::kOutOfRange);
  DecodeRow dup[2] = {{*slot, 1, 10}, {*slot, 1, 10}};
  EXPECT_EQ(m->decode(dup).status().kind(), ErrorKind::kInvalidArgument);

  EXPECT_EQ(m->slot_pool().free_count(), free_before);
  EXPECT_EQ(*m->cache_length(*slot), 10);
  EXPECT_EQ(*m->cache_length(other), 0);
  EXPECT_TRUE(before == cache_bytes(*m)) << "a rejected request changed cache bytes";
}

INSTANTIATE_TEST_SUITE_P(Families, TextModelFamily, testing::Values("llama", "qwen2", "qwen3", "gemma3_text"));

// The KV dtype follows the checkpoint unless set (issue 16): an f32 checkpoint keeps f32 K/V, so
// its logits are not rounded through a bf16 cache (K/V, and the Q attending over it); a bf16
// checkpoint gets bf16 K/V.
TEST(TextModel, KvDtypeDefaultsToTheCheckpointsComputeType) {
  TextModelOptions o;
  o.context_capacity = 32;
  auto f32_default = load_or_fail(fixture_dir("qwen3"), o);
  ASSERT_TRUE(f32_default);
  EXPECT_EQ(f32_default->shape().kv_dtype, DType::kF32);
  o.kv_dtype = DType::kF32;
  auto f32_explicit = load_or_fail(fixture_dir("qwen3"), o);
  o.kv_dtype = DType::kBF16;
  auto bf16_kv = load_or_fail(fixture_dir("qwen3"), o);
  ASSERT_TRUE(f32_explicit && bf16_kv);
  EXPECT_EQ(bf16_kv->shape().kv_dtype, DType::kBF16);
  auto p = prompt_of(9, f32_default->spec().vocab_size);
  auto a = f32_default->prefill(0, p), b = f32_explicit->prefill(0, p), c = bf16_kv->prefill(0, p);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(std::memcmp(a->raw(), b->raw(), a->nbytes()), 0) << "default is not the f32 cache";
  EXPECT_NE(std::memcmp(a->raw(), c->raw(), a->nbytes()), 0) << "a bf16 cache would round Q, K and V";

  const std::string bf16_dir =
      (fs::path(testing::TempDir()) / ("hlx_kv_auto_bf16_" + std::to_string(::getpid()))).string();
  models::FixtureOptions fo;
  fo.family = "qwen3";
  fo.preset = "tiny";
  fo.dtype = DType::kBF16;
  fo.seed = 7;
  ASSERT_TRUE(models::write_text_fixture(bf16_dir, fo).ok());
  TextModelOptions d;
  d.context_capacity = 32;
  auto bf16_default = load_or_fail(bf16_dir, d);
  ASSERT_TRUE(bf16_default);
  EXPECT_EQ(bf16_default->shape().kv_dtype, DType::kBF16);
  fs::remove_all(bf16_dir);
}

TEST(TextModel, CheckpointShapeMismatchNamesTensorAndBothShapes) {
  std::string dir = (fs::path(testing::TempDir()) / ("hlx_engine_badshape_" + std::to_string(::getpid()))).string();
  models::FixtureOptions fo;
  fo.family = "llama";
  ASSERT_TRUE(models::write_text_fixture(dir, fo).ok());
  // Claim a larger MLP than the weights have.
  std::ifstream in(dir + "/config.json");
  std::stringstream ss;
  ss << in.rdbuf();
  std::string cfg = ss.str();
  auto spec = models::fixture_spec(fo);
  ASSERT_TRUE(spec.ok());
  std::string key = "\"intermediate_size\": " + std::to_string(spec->intermediate_size);
  size_t at = cfg.find(key);
  ASSERT_NE(at, std::string::npos) << cfg;
  cfg.replace(at, key.size(), "\"intermediate_size\": " + std::to_string(spec->intermediate_size + 8));
  std::ofstream(dir + "/config.json") << cfg;
  TextModelOptions o;
  o.context_capacity = 32;
  auto m = TextModel::load(dir, o);
  ASSERT_FALSE(m.ok());
  const std::string& msg = m.status().message();
  EXPECT_TRUE(contains(msg, "mlp.gate_proj.weight")) << msg;
  EXPECT_TRUE(contains(msg, shape_to_string({spec->intermediate_size + 8, spec->hidden_size}))) << msg;
  EXPECT_TRUE(contains(msg, shape_to_string({spec->intermediate_size, spec->hidden_size}))) << msg;
}

// Writes every module a model with `shape` and `buckets` needs, as `hlx emit` would.
void write_modules(const std::string& dir, const models::TextModelSpec& spec, const models::EngineShape& shape,
                   const std::vector<int64_t>& buckets) {
  fs::create_directories(dir);
  std::vector<models::EntryRequest> reqs;
  for (int64_t b : buckets) reqs.push_back({models::TextEntry::kPrefill, b});
  for (int64_t b = 1; b <= shape.slots; ++b) reqs.push_back({models::TextEntry::kDecode, b});
  for (const auto& r : reqs) {
    auto mod = models::emit_text_entry(spec, shape, r);
    ASSERT_TRUE(mod.ok()) << mod.status().to_string();
    std::ofstream(fs::path(dir) / text_module_file_name(r)) << shlo::print_module(*mod);
  }
}

TEST(TextModel, PreEmittedModulesLoadAndMismatchesFailNamingBothValues) {
  const std::string& fixture = fixture_dir("qwen3");
  std::string mods = (fs::path(testing::TempDir()) / ("hlx_engine_modules_" + std::to_string(::getpid()))).string();
  TextModelOptions o;
  o.context_capacity = 64;
  o.slots = 1;
  auto emitted = load_or_fail(fixture, o);
  ASSERT_TRUE(emitted);
  write_modules(mods, emitted->spec(), emitted->shape(), emitted->prefill_buckets());

  // Same shape from files: loads, and computes what the emitted modules compute.
  TextModelOptions fo = o;
  fo.modules_dir = mods;
  auto from_files = load_or_fail(fixture, fo);
  ASSERT_TRUE(from_files);
  auto p = prompt_of(7, emitted->spec().vocab_size);
  auto la = emitted->prefill(0, p);
  auto lb = from_files->prefill(0, p);
  ASSERT_TRUE(la.ok() && lb.ok());
  EXPECT_EQ(rel_diff(*la, *lb), 0.0);

  // Capacity mismatch: an engine at 128 reading modules emitted at 64. Deterministic: the same
  // message twice, naming both capacities.
  TextModelOptions big = fo;
  big.context_capacity = 128;
  auto bad1 = TextModel::load(fixture, big);
  auto bad2 = TextModel::load(fixture, big);
  ASSERT_FALSE(bad1.ok());
  EXPECT_EQ(bad1.status().kind(), ErrorKind::kInvalidArgument);
  EXPECT_EQ(bad1.status().message(), bad2.status().message());
  EXPECT_TRUE(contains(bad1.status().message(), "module context_capacity 64")) << bad1.status().message();
  EXPECT_TRUE(contains(bad1.status().message(), "engine context_capacity 128")) << bad1.status().message();

  // Identity mismatch with matching shapes: a module emitted for another architecture detail
  // (here: a forged hash) fails naming the found and the expected identity.
  std::string path = (fs::path(mods) / "decode_1.mlir").string();
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  std::string want = hlx::sha256_hex(
      models::text_entry_description(emitted->spec(), emitted->shape(), {models::TextEntry::kDecode, 1}));
  size_t at = text.find(want);
  ASSERT_NE(at, std::string::npos) << "emitted decode_1 does not carry the identity the engine expects";
  std::string forged(64, 'a');
  text.replace(at, want.size(), forged);
  std::ofstream(path) << text;
  auto bad3 = TextModel::load(fixture, fo);
  ASSERT_FALSE(bad3.ok());
  EXPECT_TRUE(contains(bad3.status().message(), forged)) << bad3.status().message();
  EXPECT_TRUE(contains(bad3.status().message(), want)) << bad3.status().message();
  EXPECT_TRUE(contains(bad3.status().message(), "decode_1.mlir")) << bad3.status().message();

  // A missing module is a load error naming the file.
  fs::remove(path);
  auto bad4 = TextModel::load(fixture, fo);
  ASSERT_FALSE(bad4.ok());
  EXPECT_TRUE(contains(bad4.status().message(), "decode_1.mlir")) << bad4.status().message();
}

}  // namespace
}  // namespace hlx::engine
