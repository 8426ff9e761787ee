// Random-weight vision-language checkpoints in the legacy layout of the released checkpoints
// (language_model.model.*, language_model.lm_head.*, vision_tower.vision_model.*,
// multi_modal_projector.*): the text part is the text fixture of the same seed (llama for
// llava-clip, qwen2 for llava-siglip, gemma3 for gemma3-vlm) nested under text_config, the tower is
// a CLIP or SigLIP vision model with every tensor a real checkpoint has (including the layers past
// the feature layer and post_layernorm, which a LLaVA encoder must skip).
#include <cmath>

#include <nlohmann/json.hpp>

#include "io/file.h"
#include "io/hf_config.h"
#include "models/fixture.h"
#include "models/vision_spec.h"

namespace hlx::models {
namespace {

using ojson = nlohmann::ordered_json;

struct VisionArch {
  std::string model_type;
  int64_t hidden, intermediate, layers, heads, image, patch;
  double eps;
  const char* act;
  int64_t feature_layer;
  const char* strategy;
};

// Tiny towers: CLIP 28/7 -> 16 patches + class token, layer -2 of 3, "default" -> 16 tokens;
// SigLIP 34/8 -> 16 patches (the last 2 pixel rows/columns fall outside every patch, as 384/14
// does in real SigLIP), layer -1 of 2, "full" -> 16 tokens. Head dims 12 and 20, hidden sizes that
// are not powers of two (a transposed weight would not fit).
const VisionArch kTinyClip{"clip_vision_model", 48, 96, 3, 4, 28, 7, 1e-5, "quick_gelu", -2, "default"};
const VisionArch kTinySiglip{"siglip_vision_model", 40, 88, 2, 2, 34, 8, 1e-6, "gelu_pytorch_tanh", -1, "full"};
// openai/clip-vit-large-patch14-336 as used by llava-hf/llava-1.5-7b-hf.
const VisionArch kClipL336{"clip_vision_model", 1024, 4096, 24, 16, 336, 14, 1e-5, "quick_gelu", -2, "default"};
// Gemma3 tiny: SigLIP 32/8 -> a 4 x 4 patch grid, average-pooled 2 x 2 (kernel 2) to 4 tokens per
// image (a block of 4 rows = the tiny text model's sliding window); head_dim 24.
const VisionArch kTinyGemma3{"siglip_vision_model", 48, 80, 2, 2, 32, 8, 1e-6, "gelu_pytorch_tanh", -1, "full"};
constexpr int64_t kTinyGemma3Tokens = 4;
// google/gemma-3-4b-it's tower: SigLIP 896/14 -> 64 x 64 patches, head_dim 72, pooled 4 x 4 to 256.
const VisionArch kGemma3_4b{"siglip_vision_model", 1152, 4304, 27, 16, 896, 14, 1e-6, "gelu_pytorch_tanh", -1, "full"};
constexpr int64_t kGemma3_4bTokens = 256;

constexpr const char* kImageToken = "<|image_pad|>";

// Renders content parts in order; an image part becomes the image token. Works with jinja2 and
// hlx's template engine.
constexpr const char* kChatTemplate =
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' -}}"
    "{%- if message['content'] is string -%}{{- message['content'] -}}"
    "{%- else -%}{%- for part in message['content'] -%}"
    "{%- if part['type'] == 'image' -%}{{- '<|image_pad|>' -}}"
    "{%- elif part['type'] == 'text' -%}{{- part['text'] -}}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}";

Result<VisionArch> vision_arch(const FixtureOptions& o) {
  if (o.family == "gemma3-vlm") {
    if (o.preset == "tiny") return kTinyGemma3;
    if (o.preset == "gemma-3-4b") return kGemma3_4b;
    return make_error(ErrorKind::kInvalidArgument, "fixture: unknown preset '", o.preset,
                      "' for gemma3-vlm (expected tiny or gemma-3-4b)");
  }
  if (o.family != "llava-clip" && o.family != "llava-siglip")
    return make_error(ErrorKind::kInvalidArgument, "fixture: unknown vision-language family '", o.family,
                      "' (expected llava-clip, llava-siglip or gemma3-vlm)");
  if (o.preset == "tiny") return o.family == "llava-clip" ? kTinyClip : kTinySiglip;
  if (o.preset == "clip-vit-l-336") {
    if (o.family != "llava-clip")
      return make_error(ErrorKind::kInvalidArgument,
                        "fixture: preset 'clip-vit-l-336' is a CLIP tower (family llava-clip), not '", o.family, "'");
    return kClipL336;
  }
  return make_error(ErrorKind::kInvalidArgument, "fixture: unknown preset '", o.preset, "' for ", o.family,
                    " (expected tiny or clip-vit-l-336)");
}

FixtureOptions text_options(const FixtureOptions& o) {
  FixtureOptions t = o;
  t.family = o.family == "llava-clip" ? "llama" : o.family == "gemma3-vlm" ? "gemma3" : "qwen2";
  t.preset = "tiny";
  return t;
}

Result<int64_t> image_token_id(const FixtureOptions& o, int64_t vocab) {
  if (o.tokenizer_dir.empty()) return vocab - 20;  // a small-vocabulary fixture: an otherwise unused id
  const std::string path = o.tokenizer_dir + "/tokenizer.json";
  HLX_ASSIGN_OR_RETURN(std::string text, read_file(path));
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_object() && j.contains("added_tokens") && j["added_tokens"].is_array())
    for (const auto& t : j["added_tokens"])
      if (t.is_object() && t.value("content", "") == kImageToken && t.contains("id") && t["id"].is_number_integer())
        return t["id"].get<int64_t>();
  return make_error(ErrorKind::kNotFound, "fixture: '", path, "' has no added token \"", kImageToken, "\"");
}

ojson vision_config(const VisionArch& v) {
  ojson c = ojson::object();
  c["hidden_act"] = v.act;
  c["hidden_size"] = v.hidden;
  c["image_size"] = v.image;
  c["intermediate_size"] = v.intermediate;
  c["layer_norm_eps"] = v.eps;
  c["model_type"] = v.model_type;
  c["num_attention_heads"] = v.heads;
  c["num_channels"] = 3;
  c["num_hidden_layers"] = v.layers;
  c["patch_size"] = v.patch;
  if (v.model_type == "clip_vision_model")
    c["projection_dim"] = 768;
  else
    c["vision_use_head"] = false;
  return c;
}

ojson preprocessor_config(const VisionArch& v, bool gemma3, int64_t tokens) {
  ojson c = ojson::object();
  if (gemma3) {  // Gemma3ImageProcessor as google/gemma-3-4b-it ships it
    c["do_convert_rgb"] = nullptr;
    c["do_normalize"] = true;
    c["do_pan_and_scan"] = nullptr;
    c["do_rescale"] = true;
    c["do_resize"] = true;
    c["image_mean"] = {0.5, 0.5, 0.5};
    c["image_processor_type"] = "Gemma3ImageProcessor";
    c["image_seq_length"] = tokens;
    c["image_std"] = {0.5, 0.5, 0.5};
    c["pan_and_scan_max_num_crops"] = nullptr;
    c["pan_and_scan_min_crop_size"] = nullptr;
    c["pan_and_scan_min_ratio_to_activate"] = nullptr;
    c["processor_class"] = "Gemma3Processor";
    c["resample"] = 2;
    c["rescale_factor"] = 1.0 / 255.0;
    c["size"] = {{"height", v.image}, {"width", v.image}};
    return c;
  }
  if (v.model_type == "clip_vision_model") {
    c["crop_size"] = {{"height", v.image}, {"width", v.image}};
    c["do_center_crop"] = true;
    c["do_convert_rgb"] = true;
    c["do_normalize"] = true;
    c["do_rescale"] = true;
    c["do_resize"] = true;
    c["image_mean"] = {0.48145466, 0.4578275, 0.40821073};
    c["image_processor_type"] = "CLIPImageProcessor";
    c["image_std"] = {0.26862954, 0.26130258, 0.27577711};
    c["processor_class"] = "LlavaProcessor";
    c["resample"] = 3;
    c["rescale_factor"] = 1.0 / 255.0;
    c["size"] = {{"shortest_edge", v.image}};
  } else {
    c["do_convert_rgb"] = true;
    c["do_normalize"] = true;
    c["do_rescale"] = true;
    c["do_resize"] = true;
    c["image_mean"] = {0.5, 0.5, 0.5};
    c["image_processor_type"] = "SiglipImageProcessor";
    c["image_std"] = {0.5, 0.5, 0.5};
    c["processor_class"] = "LlavaProcessor";
    c["resample"] = 3;
    c["rescale_factor"] = 1.0 / 255.0;
    c["size"] = {{"height", v.image}, {"width", v.image}};
  }
  return c;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Vision and projector tensors: norms 1 +- 0.2, biases +-0.17 (non-zero), embeddings std 0.5,
// linear / patch weights std 1/sqrt(fan_in) so activations stay O(1) through the tower. Gemma3's
// projector: the (1 + w) norm stores w = 0 +- 0.3 (so a norm without the 1 + is far off), and the
// projection [vision_hidden, text_hidden] has its fan-in first.
FixtureTensor vision_tensor(const TensorInfo& info) {
  constexpr float kSqrt3 = 1.7320508f;
  const std::string& n = info.name;
  if (ends_with(n, "mm_soft_emb_norm.weight")) return {info, 0.f, 0.3f};
  if (ends_with(n, "mm_input_projection_weight")) return {info, 0.f, kSqrt3 / std::sqrt(float(info.shape[0]))};
  if ((ends_with(n, "norm1.weight") || ends_with(n, "norm2.weight") || ends_with(n, "layrnorm.weight") ||
       ends_with(n, "layernorm.weight")))
    return {info, 1.f, 0.2f};
  if (ends_with(n, ".bias")) return {info, 0.f, 0.1f * kSqrt3};
  if (ends_with(n, "class_embedding") || ends_with(n, "position_embedding.weight")) return {info, 0.f, 0.5f * kSqrt3};
  int64_t fan_in = 1;
  for (size_t i = 1; i < info.shape.size(); ++i) fan_in *= info.shape[i];
  return {info, 0.f, kSqrt3 / std::sqrt(float(fan_in))};
}

struct LlavaFixture {
  std::string config_json, generation_json, preprocessor_json, processor_json, chat_template;
  VlmSpec spec;
};

// Gemma3ForConditionalGeneration: the gemma3 text fixture's config.json (text_config, special
// ids from the tokenizer) with a SigLIP vision_config and mm_tokens_per_image; tensors in the
// legacy layout of the released checkpoints.
Result<LlavaFixture> make_gemma3_configs(const FixtureOptions& o, const VisionArch& v) {
  const FixtureOptions to = text_options(o);
  HLX_ASSIGN_OR_RETURN(FixtureConfigs text, fixture_configs(to));
  ojson c = ojson::parse(text.config_json);
  const int64_t tokens = o.preset == "tiny" ? kTinyGemma3Tokens : kGemma3_4bTokens;
  c["mm_tokens_per_image"] = tokens;
  // A real model's window (1024 in gemma-3-4b) holds a whole image block; the tiny one's (4) holds
  // exactly one tiny block, the bench preset's text gets 512.
  if (o.preset != "tiny") c["text_config"]["sliding_window"] = 512;
  c["vision_config"] = vision_config(v);
  c["vision_config"]["vision_use_head"] = false;

  LlavaFixture out;
  out.generation_json = text.generation_config_json;
  HLX_ASSIGN_OR_RETURN(HfConfig parsed, HfConfig::parse(c.dump(2), "fixture config.json", out.generation_json));
  Result<VlmSpec> spec = gemma3_vlm_spec_from_config(parsed, {"language_model.model.embed_tokens.weight"});
  if (!spec.ok()) return spec.status().with_context(str_cat("fixture ", o.family, "/", o.preset));
  out.spec = std::move(*spec);
  out.config_json = c.dump(2) + "\n";
  out.preprocessor_json = preprocessor_config(v, true, tokens).dump(2) + "\n";
  ojson proc = ojson::object();
  proc["image_seq_length"] = tokens;
  proc["processor_class"] = "Gemma3Processor";
  out.processor_json = proc.dump(2) + "\n";
  return out;  // the real tokenizer_config.json's chat template is kept as is
}

Result<LlavaFixture> make_configs(const FixtureOptions& o) {
  HLX_ASSIGN_OR_RETURN(VisionArch v, vision_arch(o));
  if (o.family == "gemma3-vlm") return make_gemma3_configs(o, v);
  const FixtureOptions to = text_options(o);
  HLX_ASSIGN_OR_RETURN(FixtureConfigs text, fixture_configs(to));
  ojson text_cfg = ojson::parse(text.config_json);
  const int64_t vocab = text_cfg["vocab_size"].get<int64_t>();
  HLX_ASSIGN_OR_RETURN(int64_t image_id, image_token_id(o, vocab));

  ojson c = ojson::object();
  c["architectures"] = {"LlavaForConditionalGeneration"};
  c["ignore_index"] = -100;
  c["image_token_index"] = image_id;
  c["model_type"] = "llava";
  c["multimodal_projector_bias"] = true;
  c["projector_hidden_act"] = "gelu";
  c["text_config"] = text_cfg;
  c["tie_word_embeddings"] = false;
  c["torch_dtype"] = o.dtype == DType::kBF16 ? "bfloat16" : "float32";
  c["vision_config"] = vision_config(v);
  c["vision_feature_layer"] = v.feature_layer;
  c["vision_feature_select_strategy"] = v.strategy;

  LlavaFixture out;
  out.generation_json = text.generation_config_json;
  // The layout comes from what the production parser makes of this config.
  HLX_ASSIGN_OR_RETURN(HfConfig parsed, HfConfig::parse(c.dump(2), "fixture config.json", out.generation_json));
  Result<VlmSpec> spec = llava_spec_from_config(parsed);
  if (!spec.ok()) return spec.status().with_context(str_cat("fixture ", o.family, "/", o.preset));
  out.spec = std::move(*spec);
  c["image_seq_length"] = out.spec.vision.tokens_per_image();
  out.config_json = c.dump(2) + "\n";
  out.preprocessor_json = preprocessor_config(v, false, 0).dump(2) + "\n";
  out.chat_template = kChatTemplate;
  return out;
}

}  // namespace

bool is_vlm_fixture_family(const std::string& family) {
  return family == "llava-clip" || family == "llava-siglip" || family == "gemma3-vlm";
}

Result<std::string> vlm_fixture_config(const FixtureOptions& options) {
  HLX_ASSIGN_OR_RETURN(LlavaFixture fx, make_configs(options));
  return fx.config_json;
}

Status write_vlm_fixture(const std::string& dir, const FixtureOptions& options) {
  HLX_ASSIGN_OR_RETURN(LlavaFixture fx, make_configs(options));
  std::vector<std::pair<std::string, std::string>> files = {{"config.json", fx.config_json},
                                                            {"generation_config.json", fx.generation_json},
                                                            {"preprocessor_config.json", fx.preprocessor_json}};
  if (!fx.processor_json.empty()) files.push_back({"processor_config.json", fx.processor_json});
  // tokenizer_config.json with the LLaVA chat template (Gemma3: its own template, which renders an
  // image part as <start_of_image>).
  HLX_RETURN_IF_ERROR(write_fixture_files(dir, files, options, fx.chat_template));

  // Weights: text model, then the whole tower (every layer, post_layernorm), then the projector.
  std::vector<FixtureTensor> tensors;
  for (const TensorInfo& t : text_checkpoint_layout(fx.spec.text))
    tensors.push_back(text_fixture_tensor(fx.spec.text, t));
  VlmSpec full = fx.spec;
  full.vision.feature_layer = full.vision.num_layers;
  full.vision.use_post_layernorm = true;
  for (const TensorInfo& t : vision_checkpoint_layout(full)) tensors.push_back(vision_tensor(t));
  return write_fixture_weights(dir, tensors, options);
}

}  // namespace hlx::models
