// LLaVA config parsing (CLIP and SigLIP towers, defaults, naming schemes, typed errors), the vision
// checkpoint layout, the identity of the vision entry and the emitted `vision_encode` module's
// schema. Numerics are checked against numpy in test_vision_reference.py.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "io/checkpoint.h"
#include "io/file.h"
#include "models/fixture.h"
#include "models/vision_spec.h"
#include "stablehlo/parser.h"
#include "stablehlo/printer.h"
#include "stablehlo/verifier.h"

namespace hlx::models {
namespace {

using shlo::Attr;
using shlo::TensorType;

// Text models small and odd-sized; towers with sizes that collide with nothing else.
const char* kText = R"("text_config": {"model_type": "llama", "hidden_size": 72, "intermediate_size": 120,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 300})";

std::string clip_config(const std::string& extra = "", const std::string& vision_extra = "") {
  return str_cat(R"({"model_type": "llava", "torch_dtype": "bfloat16", "image_token_index": 290, )", kText,
                 R"(, "vision_config": {"model_type": "clip_vision_model", "hidden_size": 48, "intermediate_size": 104,
                 "num_hidden_layers": 3, "num_attention_heads": 4, "image_size": 35, "patch_size": 7)",
                 vision_extra, "}", extra, "}");
}

std::string siglip_config(const std::string& extra = "", const std::string& vision_extra = "") {
  return str_cat(R"({"model_type": "llava", "torch_dtype": "float32", "image_token_index": 291,
      "vision_feature_layer": -1, "vision_feature_select_strategy": "full", )",
                 kText, R"(, "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 40,
                 "intermediate_size": 88, "num_hidden_layers": 2, "num_attention_heads": 2, "image_size": 36,
                 "patch_size": 6)",
                 vision_extra, "}", extra, "}");
}

Result<VlmSpec> parse(const std::string& json, const std::vector<std::string>& names = {}) {
  Result<HfConfig> c = HfConfig::parse(json);
  if (!c.ok()) return c.status();
  return llava_spec_from_config(*c, names);
}

VlmSpec spec_of(const std::string& json, const std::vector<std::string>& names = {}) {
  Result<VlmSpec> s = parse(json, names);
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return s.ok() ? *s : VlmSpec{};
}

TEST(VisionSpec, ParsesClipLlava) {
  const VlmSpec s = spec_of(clip_config());
  EXPECT_EQ(s.vision.family, VisionFamily::kClip);
  EXPECT_EQ(s.vision.hidden_size, 48);
  EXPECT_EQ(s.vision.intermediate_size, 104);
  EXPECT_EQ(s.vision.num_layers, 3);
  EXPECT_EQ(s.vision.head_dim(), 12);
  EXPECT_DOUBLE_EQ(s.vision.layer_norm_eps, 1e-5);  // CLIPVisionConfig default
  EXPECT_EQ(s.vision.activation, VisionActivation::kQuickGelu);
  EXPECT_EQ(s.vision.feature_layer, 2);  // LlavaConfig default -2 of hidden_states[0..3]
  EXPECT_EQ(s.vision.select_strategy, "default");
  EXPECT_FALSE(s.vision.use_post_layernorm);
  EXPECT_EQ(s.vision.num_positions(), 26);     // 5x5 patches + class token
  EXPECT_EQ(s.vision.tokens_per_image(), 25);  // class token dropped
  EXPECT_EQ(s.vision.weight_prefix, "vision_tower.vision_model.");
  EXPECT_EQ(s.vision.weight_dtype, DType::kBF16);
  EXPECT_EQ(s.projector_prefix, "multi_modal_projector.");
  EXPECT_EQ(s.projector_activation, VisionActivation::kGeluErf);
  EXPECT_TRUE(s.projector_bias);
  EXPECT_EQ(s.image_token_id, 290);
  EXPECT_EQ(s.text.hidden_size, 72);
  EXPECT_EQ(s.text.weight_prefix, "language_model.model.");
  EXPECT_EQ(s.text.lm_head_name, "language_model.lm_head.weight");
}

TEST(VisionSpec, ParsesSiglipLlavaWithNewNames) {
  const std::vector<std::string> names = {"model.language_model.embed_tokens.weight",
                                          "model.vision_tower.vision_model.embeddings.patch_embedding.weight",
                                          "lm_head.weight"};
  const VlmSpec s = spec_of(siglip_config(R"(, "projector_hidden_act": "gelu_pytorch_tanh",
      "multimodal_projector_bias": false, "image_token_id": 17)"),
                            names);
  EXPECT_EQ(s.vision.family, VisionFamily::kSiglip);
  EXPECT_DOUBLE_EQ(s.vision.layer_norm_eps, 1e-6);
  EXPECT_EQ(s.vision.activation, VisionActivation::kGeluTanh);
  EXPECT_EQ(s.vision.feature_layer, 2);  // -1: after the last layer, post_layernorm not applied
  EXPECT_FALSE(s.vision.use_post_layernorm);
  EXPECT_EQ(s.vision.tokens_per_image(), 36);  // 6x6, no class token, "full"
  EXPECT_EQ(s.vision.weight_prefix, "model.vision_tower.vision_model.");
  EXPECT_EQ(s.projector_prefix, "model.multi_modal_projector.");
  EXPECT_EQ(s.text.weight_prefix, "model.language_model.");
  EXPECT_EQ(s.text.lm_head_name, "lm_head.weight");
  EXPECT_EQ(s.projector_activation, VisionActivation::kGeluTanh);
  EXPECT_FALSE(s.projector_bias);
  EXPECT_EQ(s.image_token_id, 17);  // image_token_id wins over image_token_index
}

TEST(VisionSpec, UpstreamDefaultsAndRealTokenCounts) {
  // No vision_config: LlavaConfig's CLIP ViT-L/14-336 -> 576 tokens.
  const VlmSpec l = spec_of(str_cat(R"({"model_type": "llava", "image_token_index": 5, )", kText, "}"));
  EXPECT_EQ(l.vision.hidden_size, 1024);
  EXPECT_EQ(l.vision.num_layers, 24);
  EXPECT_EQ(l.vision.feature_layer, 23);
  EXPECT_EQ(l.vision.tokens_per_image(), 576);
  // SigLIP so400m-like 384/14, "full" -> 729.
  const VlmSpec s = spec_of(str_cat(R"({"model_type": "llava", "image_token_index": 5,
      "vision_feature_select_strategy": "full", )",
                                    kText, R"(, "vision_config": {"model_type": "siglip_vision_model",
      "image_size": 384, "patch_size": 14, "hidden_size": 1152, "num_attention_heads": 16}})"));
  EXPECT_EQ(s.vision.tokens_per_image(), 729);
  EXPECT_EQ(s.vision.num_layers, 12);  // SiglipVisionConfig default
  EXPECT_EQ(s.vision.intermediate_size, 3072);
}

void expect_error(const std::string& json, ErrorKind kind, const std::string& needle) {
  SCOPED_TRACE(needle);
  Result<VlmSpec> s = parse(json);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().kind(), kind) << s.status().to_string();
  EXPECT_NE(s.status().to_string().find(needle), std::string::npos) << s.status().to_string();
}

TEST(VisionSpec, BadConfigsAreTypedErrorsNamingTheValue) {
  std::string pixtral = clip_config();
  pixtral.replace(pixtral.find("clip_vision_model"), 17, "pixtral");
  expect_error(pixtral, ErrorKind::kUnsupported, "pixtral");
  expect_error(clip_config(R"(, "vision_feature_select_strategy": "cls")"), ErrorKind::kUnsupported, "'cls'");
  expect_error(clip_config(R"(, "vision_feature_layer": [-2, -5])"), ErrorKind::kUnsupported, "list");
  expect_error(clip_config(R"(, "vision_feature_layer": -5)"), ErrorKind::kInvalidArgument, "-5");
  expect_error(clip_config(R"(, "vision_feature_layer": 4)"), ErrorKind::kInvalidArgument, "vision_feature_layer");
  expect_error(clip_config(R"(, "projector_hidden_act": "relu")"), ErrorKind::kUnsupported, "'relu'");
  expect_error(clip_config(R"(, "image_token_index": 300)"), ErrorKind::kInvalidArgument, "300");
  expect_error(clip_config("", R"(, "hidden_act": "silu")"), ErrorKind::kUnsupported, "'silu'");
  expect_error(clip_config("", R"(, "num_attention_heads": 5)"), ErrorKind::kInvalidArgument, "48");
  expect_error(clip_config("", R"(, "image_size": 6)"), ErrorKind::kInvalidArgument, "smaller than patch_size 7");
  expect_error(clip_config("", R"(, "patch_size": 0)"), ErrorKind::kInvalidArgument, "patch_size");
  expect_error(clip_config("", R"(, "num_channels": 4)"), ErrorKind::kUnsupported, "num_channels");
  expect_error(clip_config("", R"(, "hidden_size": "big")"), ErrorKind::kParse, "hidden_size");
  expect_error(R"({"model_type": "llama", "vocab_size": 10})", ErrorKind::kUnsupported, "llama");
}

TEST(VisionSpec, IsVisionLanguage) {
  EXPECT_TRUE(is_vision_language(*HfConfig::parse(clip_config())));
  EXPECT_FALSE(is_vision_language(*HfConfig::parse(R"({"model_type": "qwen3"})")));
}

TEST(VisionLayout, ReadsOnlyWhatTheEntryUses) {
  const VlmSpec c = spec_of(clip_config());
  const std::vector<TensorInfo> lc = vision_checkpoint_layout(c);
  // class + patch + position + pre_layrnorm x2, 2 layers x 16, projector 4.
  ASSERT_EQ(lc.size(), 5u + 2 * 16 + 4);
  EXPECT_EQ(lc[0].name, "vision_tower.vision_model.embeddings.class_embedding");
  EXPECT_EQ(lc[1].name, "vision_tower.vision_model.embeddings.patch_embedding.weight");
  EXPECT_EQ(lc[1].shape, (Shape{48, 3, 7, 7}));
  EXPECT_EQ(lc[2].shape, (Shape{26, 48}));
  EXPECT_EQ(lc[3].name, "vision_tower.vision_model.pre_layrnorm.weight");
  for (const TensorInfo& t : lc) {
    EXPECT_EQ(t.name.find("layers.2."), std::string::npos) << t.name;  // past the feature layer
    EXPECT_EQ(t.name.find("post_layernorm"), std::string::npos) << t.name;
    EXPECT_EQ(t.name.find("patch_embedding.bias"), std::string::npos) << t.name;
  }
  EXPECT_EQ(lc[lc.size() - 4].name, "multi_modal_projector.linear_1.weight");
  EXPECT_EQ(lc[lc.size() - 4].shape, (Shape{72, 48}));
  EXPECT_EQ(lc.back().name, "multi_modal_projector.linear_2.bias");

  const VlmSpec s = spec_of(siglip_config(R"(, "multimodal_projector_bias": false)"));
  const std::vector<TensorInfo> ls = vision_checkpoint_layout(s);
  ASSERT_EQ(ls.size(), 3u + 2 * 16 + 2);  // patch w+b, position; both layers; projector weights only
  EXPECT_EQ(ls[1].name, "vision_tower.vision_model.embeddings.patch_embedding.bias");
  EXPECT_EQ(ls[2].shape, (Shape{36, 40}));
  EXPECT_EQ(ls.back().name, "multi_modal_projector.linear_2.weight");
  for (const TensorInfo& t : ls) EXPECT_EQ(t.name.find("class_embedding"), std::string::npos);
}

const std::string* str_attr(const shlo::AttrDict& d, const char* key) {
  const Attr* a = shlo::find_attr(d, key);
  return a && a->kind == Attr::Kind::kString ? &a->str : nullptr;
}

std::string identity(const VlmSpec& s) {
  Result<shlo::Module> m = emit_vision_entry(s);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  if (!m.ok()) return "";
  const std::string* id = str_attr(m->attrs, shlo::kIdentityAttr);
  return id ? *id : "";
}

TEST(VisionEntry, IdentityFollowsTheVisionConfig) {
  const std::string base = identity(spec_of(clip_config()));
  ASSERT_EQ(base.size(), 64u);
  EXPECT_EQ(identity(spec_of(clip_config())), base);
  for (const std::string& change :
       {std::string(R"(, "vision_feature_layer": -1)"), std::string(R"(, "vision_feature_select_strategy": "full")"),
        std::string(R"(, "projector_hidden_act": "gelu_pytorch_tanh")"),
        std::string(R"(, "multimodal_projector_bias": false)")}) {
    SCOPED_TRACE(change);
    EXPECT_NE(identity(spec_of(clip_config(change))), base);
  }
  for (const std::string& change :
       {std::string(R"(, "layer_norm_eps": 1e-6)"), std::string(R"(, "hidden_act": "gelu")"),
        std::string(R"(, "intermediate_size": 96)"), std::string(R"(, "image_size": 42)")}) {
    SCOPED_TRACE(change);
    EXPECT_NE(identity(spec_of(clip_config("", change))), base);
  }
  EXPECT_NE(identity(spec_of(clip_config(), {"model.vision_tower.vision_model.x"})), base);  // other names
}

void check_module(const VlmSpec& spec) {
  SCOPED_TRACE(vision_family_name(spec.vision.family));
  Result<shlo::Module> r = emit_vision_entry(spec);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const shlo::Module& m = *r;
  ASSERT_TRUE(shlo::verify_module(m).ok());
  const shlo::Function* fn = m.find_function("vision_encode");
  ASSERT_NE(fn, nullptr);
  EXPECT_TRUE(fn->is_public);
  const VisionSpec& v = spec.vision;
  const std::vector<TensorInfo> layout = vision_checkpoint_layout(spec);
  ASSERT_EQ(fn->args.size(), 1 + layout.size());
  EXPECT_EQ(fn->type_of(fn->args[0]), (TensorType{DType::kF32, {1, 3, v.image_size, v.image_size}}));
  EXPECT_EQ(*str_attr(fn->arg_attrs[0], shlo::kArgNameAttr), "pixels");
  for (size_t i = 0; i < layout.size(); ++i) {
    EXPECT_EQ(fn->type_of(fn->args[1 + i]), (TensorType{v.weight_dtype, layout[i].shape})) << layout[i].name;
    const std::string* name = str_attr(fn->arg_attrs[1 + i], shlo::kWeightAttr);
    ASSERT_NE(name, nullptr);
    EXPECT_EQ(*name, layout[i].name);
  }
  ASSERT_EQ(fn->result_types.size(), 1u);
  EXPECT_EQ(fn->result_types[0], (TensorType{DType::kF32, {v.tokens_per_image(), spec.text.hidden_size}}));
  EXPECT_EQ(*str_attr(m.attrs, "hlx.entry"), "vision_encode");
  EXPECT_EQ(shlo::find_attr(m.attrs, "hlx.tokens_per_image")->i, v.tokens_per_image());

  // Plain StableHLO + hlx composites (erf is emitted as a polynomial, not chlo.erf); no
  // convolution (patches are a dot_general).
  const std::string text = shlo::print_module(m);
  EXPECT_EQ(text.find("chlo."), std::string::npos);
  EXPECT_EQ(text.find("convolution"), std::string::npos);
  // No dimension left over from another tower layout: SigLIP has no N+1 rows, CLIP never runs
  // with N rows before selection.
  std::vector<int64_t> dims;
  for (const shlo::Function& f : m.functions)
    for (const TensorType& t : f.value_types) dims.insert(dims.end(), t.shape.begin(), t.shape.end());
  const int64_t n = v.num_patches();
  if (v.has_class_token()) {
    EXPECT_GT(std::count(dims.begin(), dims.end(), n + 1), 0);
  } else {
    EXPECT_EQ(std::count(dims.begin(), dims.end(), n + 1), 0);
  }

  Result<shlo::Module> back = shlo::parse_module(text);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_TRUE(shlo::verify_module(*back).ok());
  EXPECT_EQ(shlo::print_module(*back), text);
}

TEST(VisionEntry, ModulesFollowTheContract) {
  check_module(spec_of(clip_config()));
  check_module(spec_of(siglip_config()));
  check_module(
      spec_of(siglip_config(R"(, "multimodal_projector_bias": false, "vision_feature_select_strategy": "default")")));
  check_module(spec_of(clip_config(R"(, "vision_feature_layer": 0, "projector_hidden_act": "quick_gelu")")));
  check_module(spec_of(siglip_config("", R"(, "image_size": 40)")));  // 6x6 patches, 4 border pixels unused
}

TEST(VisionEntry, RejectsInconsistentSpecs) {
  VlmSpec s = spec_of(clip_config());
  s.vision.feature_layer = 4;
  Result<shlo::Module> m = emit_vision_entry(s);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().kind(), ErrorKind::kInvalidArgument);
  EXPECT_NE(m.status().to_string().find("4"), std::string::npos);
  s = spec_of(clip_config());
  s.vision.patch_size = 36;  // larger than the image
  EXPECT_FALSE(emit_vision_entry(s).ok());
  s = spec_of(clip_config());
  s.vision.weight_dtype = DType::kI32;
  EXPECT_FALSE(emit_vision_entry(s).ok());
}

// The llava fixtures: the config the production parser reads, every tensor the entries read with
// the right shape and dtype, and the tower tensors a real checkpoint has beyond them.
TEST(LlavaFixture, WritesAConsistentCheckpoint) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / str_cat("hlx_llava_fixture_", ::getpid());
  for (const char* family : {"llava-clip", "llava-siglip"}) {
    SCOPED_TRACE(family);
    FixtureOptions o;
    o.family = family;
    o.dtype = DType::kBF16;
    o.seed = 3;
    ASSERT_TRUE(write_vlm_fixture(dir.string(), o).ok());
    Result<HfConfig> cfg = HfConfig::load(dir.string());
    ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
    Result<Checkpoint> ck = Checkpoint::open(dir.string());
    ASSERT_TRUE(ck.ok()) << ck.status().to_string();
    Result<VlmSpec> spec = llava_spec_from_config(*cfg, ck->names());
    ASSERT_TRUE(spec.ok()) << spec.status().to_string();
    EXPECT_EQ(spec->vision.tokens_per_image(), 16);
    EXPECT_EQ(spec->image_token_id, spec->text.vocab_size - 20);  // no tokenizer: a spare id
    std::vector<TensorInfo> all = text_checkpoint_layout(spec->text);
    for (const TensorInfo& t : vision_checkpoint_layout(*spec)) all.push_back(t);
    for (const TensorInfo& t : all) {
      Result<SafetensorsEntry> e = ck->entry(t.name);
      ASSERT_TRUE(e.ok()) << t.name;
      Result<Tensor> w = ck->tensor(t.name);
      ASSERT_TRUE(w.ok());
      EXPECT_EQ(w->shape(), t.shape) << t.name;
      EXPECT_EQ(w->dtype(), DType::kBF16) << t.name;
    }
    const std::string& p = spec->vision.weight_prefix;
    const int64_t last = spec->vision.num_layers - 1;
    EXPECT_TRUE(ck->has(p + "post_layernorm.weight"));
    EXPECT_TRUE(ck->has(str_cat(p, "encoder.layers.", last, ".mlp.fc2.bias")));
    EXPECT_EQ(ck->size(), all.size() + (spec->vision.feature_layer == spec->vision.num_layers ? 2 : 18));
    EXPECT_TRUE(fs::exists(dir / "preprocessor_config.json"));
  }
  FixtureOptions bad;
  bad.family = "llava-siglip";
  bad.preset = "clip-vit-l-336";
  Status st = write_vlm_fixture(dir.string(), bad);
  EXPECT_EQ(st.kind(), ErrorKind::kInvalidArgument);
  EXPECT_NE(st.to_string().find("clip-vit-l-336"), std::string::npos);
  std::error_code ec;
  fs::remove_all(dir, ec);
}

}  // namespace
}  // namespace hlx::models
