// Gemma3 vision-language spec (Gemma3Config defaults, both naming schemes, typed errors), its
// checkpoint layout, vision_encode / prefill_embeddings_masked module contracts and identities, and
// the gemma3-vlm fixture. Numerics: tests/models/test_gemma3_vlm_reference.py.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "io/checkpoint.h"
#include "models/fixture.h"
#include "models/text_entries.h"
#include "models/vision_spec.h"
#include "stablehlo/parser.h"
#include "stablehlo/printer.h"
#include "stablehlo/verifier.h"

namespace hlx::models {
namespace {

using shlo::Attr;
using shlo::TensorType;

// gemma-3-4b-it's config.json, trimmed to a small text model (the tower keeps its real numbers
// except the layer count).
std::string config(const std::string& extra = "", const std::string& vision_extra = "",
                   const std::string& text_extra = "") {
  return str_cat(
      R"({"model_type": "gemma3", "torch_dtype": "bfloat16", "architectures": ["Gemma3ForConditionalGeneration"],
      "text_config": {"model_type": "gemma3_text", "hidden_size": 96, "intermediate_size": 192, "num_hidden_layers": 4,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 262208,
        "sliding_window": 1024, "sliding_window_pattern": 6)",
      text_extra, R"(},
      "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 1152, "intermediate_size": 4304,
        "num_hidden_layers": 2, "num_attention_heads": 16, "image_size": 896, "patch_size": 14,
        "vision_use_head": false)",
      vision_extra, "}", extra, "}");
}

Result<VlmSpec> parse(const std::string& json, const std::vector<std::string>& names = {}) {
  Result<HfConfig> c = HfConfig::parse(json);
  if (!c.ok()) return c.status();
  return vlm_spec_from_config(*c, names);
}

VlmSpec spec_of(const std::string& json, const std::vector<std::string>& names = {}) {
  Result<VlmSpec> s = parse(json, names);
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return s.ok() ? *s : VlmSpec{};
}

TEST(Gemma3VlmSpec, ParsesGemma3Defaults) {
  const VlmSpec s = spec_of(config());
  EXPECT_EQ(s.family, VlmFamily::kGemma3);
  EXPECT_EQ(s.vision.family, VisionFamily::kSiglip);
  EXPECT_EQ(s.mm_tokens_per_image, 256);  // Gemma3Config defaults
  EXPECT_EQ(s.boi_token_id, 255999);
  EXPECT_EQ(s.eoi_token_id, 256000);
  EXPECT_EQ(s.image_token_id, 262144);
  EXPECT_EQ(s.tokens_per_image(), 256);
  EXPECT_EQ(s.vision.num_patches(), 4096);  // 896 / 14 = 64 per side
  EXPECT_EQ(s.pooled_side(), 16);
  EXPECT_EQ(s.pool_kernel(), 4);
  EXPECT_DOUBLE_EQ(s.projector_norm_eps, 1e-6);  // the vision eps (SiglipVisionConfig default)
  EXPECT_TRUE(s.vision.use_post_layernorm);
  EXPECT_EQ(s.vision.feature_layer, 2);
  EXPECT_EQ(s.mask_mode, ImageMaskMode::kImageBlocks);
  EXPECT_DOUBLE_EQ(s.text.embedding_scale, 9.8125);  // sqrt(96) rounded to bf16
  // No names: transformers >= 4.52 names.
  EXPECT_EQ(s.text.weight_prefix, "model.language_model.");
  EXPECT_EQ(s.vision.weight_prefix, "model.vision_tower.vision_model.");
  EXPECT_EQ(s.projector_prefix, "model.multi_modal_projector.");
}

TEST(Gemma3VlmSpec, PicksTheNamingSchemeFromTheCheckpoint) {
  const VlmSpec legacy = spec_of(config(), {"language_model.model.embed_tokens.weight", "vision_tower.vision_model.x"});
  EXPECT_EQ(legacy.text.weight_prefix, "language_model.model.");
  EXPECT_EQ(legacy.text.lm_head_name, "language_model.model.embed_tokens.weight");  // tied
  EXPECT_EQ(legacy.vision.weight_prefix, "vision_tower.vision_model.");
  EXPECT_EQ(legacy.projector_prefix, "multi_modal_projector.");
  const VlmSpec now =
      spec_of(config(), {"model.language_model.embed_tokens.weight", "model.vision_tower.vision_model.x"});
  EXPECT_EQ(now.text.weight_prefix, "model.language_model.");
  EXPECT_EQ(now.vision.weight_prefix, "model.vision_tower.vision_model.");
  const std::vector<TensorInfo> l = vision_checkpoint_layout(legacy);
  ASSERT_GE(l.size(), 2u);
  EXPECT_EQ(l[l.size() - 2].name, "multi_modal_projector.mm_soft_emb_norm.weight");
  EXPECT_EQ(l[l.size() - 2].shape, (Shape{1152}));
  EXPECT_EQ(l.back().name, "multi_modal_projector.mm_input_projection_weight");
  EXPECT_EQ(l.back().shape, (Shape{1152, 96}));  // [vision_hidden, text_hidden], not a Linear
  EXPECT_NE(
      std::find_if(l.begin(), l.end(),
                   [](const TensorInfo& t) { return t.name == "vision_tower.vision_model.post_layernorm.weight"; }),
      l.end());
}

TEST(Gemma3VlmSpec, TellsAVlmFromATextOnlyGemma3) {
  Result<HfConfig> c = HfConfig::parse(config());
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(is_vision_language(*c));  // the llava path stays llava-only
  EXPECT_FALSE(is_gemma3_vlm(*c, {"model.language_model.embed_tokens.weight"}));
  EXPECT_TRUE(is_gemma3_vlm(*c, {"language_model.model.embed_tokens.weight", "vision_tower.vision_model.x"}));
}

TEST(Gemma3VlmSpec, RejectsWithTypedErrors) {
  auto fails = [](const std::string& json, ErrorKind kind, const std::vector<std::string>& needles) {
    SCOPED_TRACE(json);
    Result<VlmSpec> s = parse(json);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.status().kind(), kind) << s.status().to_string();
    for (const std::string& n : needles)
      EXPECT_NE(s.status().to_string().find(n), std::string::npos) << s.status().to_string();
  };
  fails(config(R"(, "mm_tokens_per_image": 200)"), ErrorKind::kInvalidArgument, {"mm_tokens_per_image", "200"});
  fails(config(R"(, "mm_tokens_per_image": 25)"), ErrorKind::kInvalidArgument, {"25", "64"});  // 5 does not divide 64
  fails(config(R"(, "boi_token_index": 262208)"), ErrorKind::kInvalidArgument, {"boi_token_index", "262208"});
  fails(config(R"(, "hlx_image_mask": "causal")"), ErrorKind::kUnsupported, {"hlx_image_mask", "causal"});
  fails(config("", "", R"(, "sliding_window": 100)"), ErrorKind::kUnsupported, {"256", "sliding_window 100"});
  fails(config("", R"(, "model_type": "clip_vision_model")"), ErrorKind::kUnsupported, {"clip_vision_model"});
  EXPECT_EQ(spec_of(config(R"(, "hlx_image_mask": "bidirectional")")).mask_mode, ImageMaskMode::kBidirectional);
}

const std::string* str_attr(const shlo::AttrDict& d, const char* key) {
  const Attr* a = shlo::find_attr(d, key);
  return a && a->kind == Attr::Kind::kString ? &a->str : nullptr;
}

std::string identity(const VlmSpec& s, VisionStage stage = VisionStage::kFeatures) {
  Result<shlo::Module> m = emit_vision_entry(s, stage);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  return m.ok() && str_attr(m->attrs, shlo::kIdentityAttr) ? *str_attr(m->attrs, shlo::kIdentityAttr) : "";
}

// A small tower so the modules stay quick to build: 32/8 -> 4 x 4 patches pooled to 2 x 2.
std::string small(const std::string& extra = "") {
  return config(
      str_cat(R"(, "mm_tokens_per_image": 4)", extra),
      R"(, "hidden_size": 48, "intermediate_size": 80, "num_attention_heads": 2, "image_size": 32, "patch_size": 8)");
}

TEST(Gemma3VisionEntry, ModuleFollowsTheContract) {
  const VlmSpec spec = spec_of(small());
  Result<shlo::Module> r = emit_vision_entry(spec);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_TRUE(shlo::verify_module(*r).ok());
  const shlo::Function* fn = r->find_function("vision_encode");
  ASSERT_NE(fn, nullptr);
  const std::vector<TensorInfo> layout = vision_checkpoint_layout(spec);
  ASSERT_EQ(fn->args.size(), 1 + layout.size());
  EXPECT_EQ(fn->type_of(fn->args[0]), (TensorType{DType::kF32, {1, 3, 32, 32}}));
  ASSERT_EQ(fn->result_types.size(), 1u);
  EXPECT_EQ(fn->result_types[0], (TensorType{DType::kF32, {4, 96}}));
  EXPECT_EQ(shlo::find_attr(r->attrs, "hlx.tokens_per_image")->i, 4);
  const std::string text = shlo::print_module(*r);
  EXPECT_EQ(text.find("chlo."), std::string::npos);
  EXPECT_NE(text.find("weight_offset = 1.0"), std::string::npos) << "the projector norm is a Gemma (1 + w) norm";
  Result<shlo::Module> back = shlo::parse_module(text);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(shlo::print_module(*back), text);
  // Intermediate stages for tests: tower rows [16, 48], pooled rows [4, 48].
  Result<shlo::Module> tower = emit_vision_entry(spec, VisionStage::kTower);
  ASSERT_TRUE(tower.ok());
  EXPECT_EQ(tower->find_function("vision_encode")->result_types[0], (TensorType{DType::kF32, {16, 48}}));
  Result<shlo::Module> pooled = emit_vision_entry(spec, VisionStage::kPooled);
  ASSERT_TRUE(pooled.ok());
  EXPECT_EQ(pooled->find_function("vision_encode")->result_types[0], (TensorType{DType::kF32, {4, 48}}));
}

TEST(Gemma3VisionEntry, IdentityFollowsProjectorPromptAndStage) {
  const std::string base = identity(spec_of(small()));
  ASSERT_EQ(base.size(), 64u);
  EXPECT_EQ(identity(spec_of(small())), base);
  for (const std::string& change :
       {std::string(R"(, "image_token_index": 7)"), std::string(R"(, "boi_token_index": 8)"),
        std::string(R"(, "eoi_token_index": 9)"), std::string(R"(, "mm_tokens_per_image": 16)"),
        std::string(R"(, "hlx_image_mask": "bidirectional")")}) {
    SCOPED_TRACE(change);
    EXPECT_NE(identity(spec_of(small(change))), base);
  }
  EXPECT_NE(identity(spec_of(small()), VisionStage::kPooled), base);
  EXPECT_NE(identity(spec_of(small()), VisionStage::kTower), base);
}

TEST(Gemma3TextEntry, MaskedEntriesFollowTheContract) {
  const VlmSpec spec = spec_of(small());
  const EngineShape shape{64, 2, DType::kBF16};
  for (TextEntry e : {TextEntry::kPrefillEmbeddingsMasked, TextEntry::kPrefillEmbeddingsMaskedAllLogits}) {
    SCOPED_TRACE(entry_name(e));
    Result<shlo::Module> r = emit_text_entry(spec.text, shape, {e, 32, spec.prefill_variant()});
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    ASSERT_TRUE(shlo::verify_module(*r).ok());
    const shlo::Function* fn = r->find_function(entry_name(e));
    ASSERT_NE(fn, nullptr);
    const size_t w = text_checkpoint_layout(spec.text).size();
    EXPECT_EQ(fn->type_of(fn->args[w]), (TensorType{DType::kF32, {32, 96}}));
    EXPECT_EQ(*str_attr(fn->arg_attrs[w + 1], shlo::kArgNameAttr), "mask");
    EXPECT_EQ(fn->type_of(fn->args[w + 1]), (TensorType{DType::kF32, {1, 1, 32, 32}}));
    EXPECT_EQ(fn->result_types[0], e == TextEntry::kPrefillEmbeddingsMasked ? (TensorType{DType::kF32, {262208}})
                                                                            : (TensorType{DType::kF32, {32, 262208}}));
    // Every layer's attention takes the bias and drops the causal rule.
    const std::string text = shlo::print_module(*r);
    size_t n = 0;
    for (size_t at = text.find("has_bias = true"); at != std::string::npos; at = text.find("has_bias = true", at + 1))
      ++n;
    EXPECT_EQ(n, size_t(spec.text.num_layers));
  }
  // The variant is part of the identity; plain entries read as before (no variant line).
  const std::string d =
      text_entry_description(spec.text, shape, {TextEntry::kPrefillEmbeddingsMasked, 32, spec.prefill_variant()});
  EXPECT_NE(d.find("mask=image_blocks"), std::string::npos);
  EXPECT_NE(d.find("image_token=262144"), std::string::npos);
  EXPECT_EQ(text_entry_description(spec.text, shape, {TextEntry::kPrefillEmbeddings, 32}).find("variant="),
            std::string::npos);
  VlmSpec other = spec;
  other.mask_mode = ImageMaskMode::kBidirectional;
  EXPECT_NE(
      text_entry_description(spec.text, shape, {TextEntry::kPrefillEmbeddingsMasked, 32, other.prefill_variant()}), d);
}

TEST(Gemma3VlmFixture, WritesACompleteCheckpoint) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / str_cat("hlx_gemma3_vlm_fixture_", ::getpid());
  FixtureOptions o;
  o.family = "gemma3-vlm";
  o.dtype = DType::kBF16;
  o.seed = 3;
  ASSERT_TRUE(write_vlm_fixture(dir.string(), o).ok());
  Result<HfConfig> cfg = HfConfig::load(dir.string());
  ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
  Result<Checkpoint> ck = Checkpoint::open(dir.string());
  ASSERT_TRUE(ck.ok()) << ck.status().to_string();
  EXPECT_TRUE(is_gemma3_vlm(*cfg, ck->names()));
  Result<VlmSpec> spec = vlm_spec_from_config(*cfg, ck->names());
  ASSERT_TRUE(spec.ok()) << spec.status().to_string();
  EXPECT_EQ(spec->text.weight_prefix, "language_model.model.");  // the released checkpoints' layout
  EXPECT_EQ(spec->tokens_per_image(), 4);
  EXPECT_EQ(spec->pool_kernel(), 2);  // 4 x 4 patches -> 2 x 2: pooling is not the identity
  EXPECT_GT(spec->tokens_per_image(), 1);
  std::vector<TensorInfo> all = text_checkpoint_layout(spec->text);
  for (const TensorInfo& t : vision_checkpoint_layout(*spec)) all.push_back(t);
  for (const TensorInfo& t : all) {
    Result<Tensor> w = ck->tensor(t.name);
    ASSERT_TRUE(w.ok()) << t.name;
    EXPECT_EQ(w->shape(), t.shape) << t.name;
  }
  EXPECT_EQ(ck->size(), all.size());  // every tensor is read: nothing unused, nothing missing
  EXPECT_TRUE(fs::exists(dir / "preprocessor_config.json"));
  EXPECT_TRUE(fs::exists(dir / "processor_config.json"));
  FixtureOptions bad = o;
  bad.preset = "clip-vit-l-336";
  EXPECT_EQ(write_vlm_fixture(dir.string(), bad).kind(), ErrorKind::kInvalidArgument);
  std::error_code ec;
  fs::remove_all(dir, ec);
}

}  // namespace
}  // namespace hlx::models
