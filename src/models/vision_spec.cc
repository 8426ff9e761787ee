// config.json -> VlmSpec, and the vision checkpoint layout. Defaults are those of transformers'
// LlavaConfig, Gemma3Config, CLIPVisionConfig and SiglipVisionConfig, so an omitted key means what
// it means upstream.
#include "models/vision_spec.h"

#include <algorithm>

namespace hlx::models {

const char* vision_family_name(VisionFamily f) { return f == VisionFamily::kClip ? "clip" : "siglip"; }

const char* vision_activation_name(VisionActivation a) {
  switch (a) {
    case VisionActivation::kQuickGelu:
      return "quick_gelu";
    case VisionActivation::kGeluTanh:
      return "gelu_tanh";
    case VisionActivation::kGeluErf:
      return "gelu_erf";
  }
  return "?";
}

const char* vlm_family_name(VlmFamily f) {
  switch (f) {
    case VlmFamily::kLlava:
      return "llava";
    case VlmFamily::kGemma3:
      return "gemma3";
    case VlmFamily::kQwen3VL:
      return "qwen3_vl";
  }
  return "?";
}

const char* image_mask_mode_name(ImageMaskMode m) {
  switch (m) {
    case ImageMaskMode::kCausal:
      return "causal";
    case ImageMaskMode::kImageBlocks:
      return "image_blocks";
    case ImageMaskMode::kBidirectional:
      return "bidirectional";
  }
  return "?";
}

const char* vision_stage_name(VisionStage s) {
  switch (s) {
    case VisionStage::kFeatures:
      return "features";
    case VisionStage::kTower:
      return "tower";
    case VisionStage::kPooled:
      return "pooled";
  }
  return "?";
}

int64_t VlmSpec::pooled_side() const {
  int64_t side = 0;
  while ((side + 1) * (side + 1) <= mm_tokens_per_image) ++side;
  return side;
}

int64_t VlmSpec::pool_kernel() const {
  const int64_t side = pooled_side();
  return side > 0 ? vision.patches_per_side() / side : 0;
}

std::string VlmSpec::prefill_variant() const {
  return str_cat("vlm=", vlm_family_name(family), " mask=", image_mask_mode_name(mask_mode),
                 " image_token=", image_token_id, " boi=", boi_token_id, " eoi=", eoi_token_id,
                 " tokens_per_image=", tokens_per_image(), " image_rows=unscaled");
}

namespace {

struct VisionDefaults {
  int64_t hidden, intermediate, layers, heads, image, patch;
  const char* act;
  double eps;
};
// CLIPVisionConfig(): 768/3072/12/12, image 224, patch 32, quick_gelu, eps 1e-5.
constexpr VisionDefaults kClipDefaults{768, 3072, 12, 12, 224, 32, "quick_gelu", 1e-5};
// LlavaConfig without a vision_config: CLIP ViT-L/14-336 (other fields CLIPVisionConfig's).
constexpr VisionDefaults kLlavaClipDefaults{1024, 4096, 24, 16, 336, 14, "quick_gelu", 1e-5};
// SiglipVisionConfig(): 768/3072/12/12, image 224, patch 16, gelu_pytorch_tanh, eps 1e-6.
constexpr VisionDefaults kSiglipDefaults{768, 3072, 12, 12, 224, 16, "gelu_pytorch_tanh", 1e-6};

Status unsupported(const ConfigView& c, const std::string& key, const std::string& what) {
  return make_error(ErrorKind::kUnsupported, c.where(), ": ", key, ": ", what);
}
Status invalid(const ConfigView& c, const std::string& key, const std::string& what) {
  return make_error(ErrorKind::kInvalidArgument, c.where(), ": ", key, ": ", what);
}

Result<VisionActivation> parse_activation(const ConfigView& c, const std::string& key, const std::string& name) {
  if (name == "quick_gelu") return VisionActivation::kQuickGelu;
  if (name == "gelu_pytorch_tanh" || name == "gelu_new") return VisionActivation::kGeluTanh;
  if (name == "gelu") return VisionActivation::kGeluErf;
  return unsupported(c, key, str_cat("'", name, "' (implemented: gelu, gelu_pytorch_tanh, gelu_new, quick_gelu)"));
}

bool any_starts_with(const std::vector<std::string>& names, const std::string& prefix) {
  return std::any_of(names.begin(), names.end(), [&](const std::string& n) { return n.rfind(prefix, 0) == 0; });
}

// vision_config -> the tower's numbers (CLIP or SigLIP, with the wrapper's defaults when absent).
Status parse_tower(const HfConfig& config, VisionSpec& v) {
  const ConfigView& root = config.root();
  HLX_ASSIGN_OR_RETURN(std::string root_type, config.model_type());
  const ConfigView& c = config.vision();
  const bool has_vision = root.has("vision_config");
  std::string vtype = "clip_vision_model";
  if (has_vision) {
    HLX_ASSIGN_OR_RETURN(vtype, c.optional_string("model_type", "clip_vision_model"));
  }
  const VisionDefaults* def = nullptr;
  if (vtype == "clip_vision_model") {
    v.family = VisionFamily::kClip;
    def = has_vision ? &kClipDefaults : &kLlavaClipDefaults;
  } else if (vtype == "siglip_vision_model") {
    v.family = VisionFamily::kSiglip;
    def = &kSiglipDefaults;
  } else {
    return unsupported(c, "model_type",
                       str_cat("'", vtype, "' (implemented vision towers: clip_vision_model, siglip_vision_model)"));
  }
  // Gemma3Config without a vision_config: SiglipVisionConfig().
  if (root_type == "gemma3" && !has_vision) {
    v.family = VisionFamily::kSiglip;
    def = &kSiglipDefaults;
    vtype = "siglip_vision_model";
  }
  v.model_type = vtype;
  HLX_ASSIGN_OR_RETURN(v.hidden_size, c.optional_int("hidden_size", def->hidden));
  HLX_ASSIGN_OR_RETURN(v.intermediate_size, c.optional_int("intermediate_size", def->intermediate));
  HLX_ASSIGN_OR_RETURN(v.num_layers, c.optional_int("num_hidden_layers", def->layers));
  HLX_ASSIGN_OR_RETURN(v.num_heads, c.optional_int("num_attention_heads", def->heads));
  HLX_ASSIGN_OR_RETURN(v.image_size, c.optional_int("image_size", def->image));
  HLX_ASSIGN_OR_RETURN(v.patch_size, c.optional_int("patch_size", def->patch));
  HLX_ASSIGN_OR_RETURN(v.num_channels, c.optional_int("num_channels", 3));
  HLX_ASSIGN_OR_RETURN(v.layer_norm_eps, c.optional_float("layer_norm_eps", def->eps));
  HLX_ASSIGN_OR_RETURN(std::string act, c.optional_string("hidden_act", def->act));
  HLX_ASSIGN_OR_RETURN(v.activation, parse_activation(c, "hidden_act", act));
  for (auto [key, val] : {std::pair<const char*, int64_t>{"hidden_size", v.hidden_size},
                          {"intermediate_size", v.intermediate_size},
                          {"num_hidden_layers", v.num_layers},
                          {"num_attention_heads", v.num_heads},
                          {"image_size", v.image_size},
                          {"patch_size", v.patch_size}})
    if (val <= 0) return invalid(c, key, str_cat(val, " must be positive"));
  if (v.num_channels != 3) return unsupported(c, "num_channels", str_cat(v.num_channels, " (pixels are RGB: 3)"));
  if (v.hidden_size % v.num_heads != 0)
    return invalid(c, "hidden_size", str_cat(v.hidden_size, " is not a multiple of num_attention_heads ", v.num_heads));
  // A stride-P convolution without padding: image_size need not be a multiple of P (SigLIP 384/14
  // drops the last 6 pixels), but it must hold one patch.
  if (v.image_size < v.patch_size)
    return invalid(c, "image_size", str_cat(v.image_size, " is smaller than patch_size ", v.patch_size));
  if (!(v.layer_norm_eps > 0)) return invalid(c, "layer_norm_eps", str_cat(v.layer_norm_eps, " must be > 0"));
  (void)root;
  return ok_status();
}

}  // namespace

bool is_vision_language(const HfConfig& config) {
  auto type = config.model_type();
  return type.ok() && *type == "llava";
}

bool is_gemma3_vlm(const HfConfig& config, const std::vector<std::string>& names) {
  auto type = config.model_type();
  return type.ok() && *type == "gemma3" && std::any_of(names.begin(), names.end(), [](const std::string& n) {
           return n.find("vision_tower.vision_model.") != std::string::npos;
         });
}

Result<VlmSpec> vlm_spec_from_config(const HfConfig& config, const std::vector<std::string>& names) {
  HLX_ASSIGN_OR_RETURN(std::string type, config.model_type());
  if (type == "gemma3") return gemma3_vlm_spec_from_config(config, names);
  return llava_spec_from_config(config, names);
}

Result<VlmSpec> llava_spec_from_config(const HfConfig& config, const std::vector<std::string>& names) {
  const ConfigView& root = config.root();
  HLX_ASSIGN_OR_RETURN(std::string root_type, config.model_type());
  if (root_type != "llava")
    return make_error(ErrorKind::kUnsupported, root.where(), ": model_type '", root_type,
                      "' is not a supported vision-language model (implemented: llava)");
  VlmSpec s;
  HLX_ASSIGN_OR_RETURN(s.text, text_spec_from_config(config));

  // ---- naming scheme: transformers < 4.52 saved `language_model.model.*`, `vision_tower.*`,
  // `multi_modal_projector.*`, `language_model.lm_head.*`; newer saves put them under `model.` and
  // the head at `lm_head.*`.
  const bool new_names =
      any_starts_with(names, "model.language_model.") || any_starts_with(names, "model.vision_tower.");
  if (new_names) {
    s.text.weight_prefix = "model.language_model.";
    s.text.lm_head_name = s.text.tie_word_embeddings ? s.text.weight_prefix + "embed_tokens.weight" : "lm_head.weight";
  }
  s.projector_prefix = new_names ? "model.multi_modal_projector." : "multi_modal_projector.";

  // ---- wrapper fields.
  HLX_ASSIGN_OR_RETURN(int64_t image_token_index, root.optional_int("image_token_index", 32000));
  HLX_ASSIGN_OR_RETURN(s.image_token_id, root.optional_int("image_token_id", image_token_index));
  if (s.image_token_id < 0 || s.image_token_id >= s.text.vocab_size)
    return invalid(
        root, "image_token_index",
        str_cat(s.image_token_id, " is not a token id of the text model (vocab_size ", s.text.vocab_size, ")"));
  HLX_ASSIGN_OR_RETURN(s.projector_act, root.optional_string("projector_hidden_act", "gelu"));
  HLX_ASSIGN_OR_RETURN(s.projector_activation, parse_activation(root, "projector_hidden_act", s.projector_act));
  HLX_ASSIGN_OR_RETURN(s.projector_bias, root.optional_bool("multimodal_projector_bias", true));
  VisionSpec& v = s.vision;
  HLX_ASSIGN_OR_RETURN(v.select_strategy, root.optional_string("vision_feature_select_strategy", "default"));
  if (v.select_strategy != "default" && v.select_strategy != "full")
    return unsupported(root, "vision_feature_select_strategy",
                       str_cat("'", v.select_strategy, "' (implemented: default, full)"));
  std::vector<int64_t> layers;
  if (root.has("vision_feature_layer")) {
    HLX_ASSIGN_OR_RETURN(layers, root.optional_int_list("vision_feature_layer"));
    // A list means several layers concatenated on the feature axis.
    Result<int64_t> single = root.require_int("vision_feature_layer");
    if (!single.ok())
      return unsupported(root, "vision_feature_layer", "a list of layers (only a single layer is implemented)");
  } else {
    layers = {-2};
  }
  if (layers.empty()) return invalid(root, "vision_feature_layer", "is an empty list");

  HLX_RETURN_IF_ERROR(parse_tower(config, s.vision));
  // hidden_states has L + 1 entries; python indexing.
  const int64_t l = v.num_layers;
  if (layers[0] < -(l + 1) || layers[0] > l)
    return invalid(root, "vision_feature_layer",
                   str_cat(layers[0], " is outside hidden_states (", l + 1, " entries for ", l, " layers)"));
  v.feature_layer = layers[0] < 0 ? layers[0] + l + 1 : layers[0];
  v.use_post_layernorm = false;  // llava selects from hidden_states
  if (v.tokens_per_image() <= 0)
    return invalid(root, "vision_feature_select_strategy",
                   str_cat("'default' drops the only token of a ", v.num_positions(), "-token image"));
  v.weight_prefix = new_names ? "model.vision_tower.vision_model." : "vision_tower.vision_model.";
  v.weight_dtype = s.text.weight_dtype;
  return s;
}

Result<VlmSpec> gemma3_vlm_spec_from_config(const HfConfig& config, const std::vector<std::string>& names) {
  const ConfigView& root = config.root();
  HLX_ASSIGN_OR_RETURN(std::string root_type, config.model_type());
  if (root_type != "gemma3")
    return make_error(ErrorKind::kUnsupported, root.where(), ": model_type '", root_type,
                      "' is not a Gemma3 vision-language model (expected gemma3)");
  VlmSpec s;
  s.family = VlmFamily::kGemma3;
  HLX_ASSIGN_OR_RETURN(s.text, text_spec_from_config(config));
  // Naming scheme: the released checkpoints use `language_model.model.*`, `vision_tower.*`,
  // `multi_modal_projector.*`; transformers >= 4.52 saves `model.language_model.*` etc. Without
  // names, the newer one (text_spec_from_config's choice).
  const bool legacy = !names.empty() && !any_starts_with(names, "model.language_model.") &&
                      !any_starts_with(names, "model.vision_tower.");
  if (legacy) {
    s.text.weight_prefix = "language_model.model.";
    s.text.lm_head_name =
        s.text.tie_word_embeddings ? s.text.weight_prefix + "embed_tokens.weight" : "language_model.lm_head.weight";
  }
  s.projector_prefix = legacy ? "multi_modal_projector." : "model.multi_modal_projector.";

  // ---- Gemma3Config fields.
  HLX_ASSIGN_OR_RETURN(s.mm_tokens_per_image, root.optional_int("mm_tokens_per_image", 256));
  HLX_ASSIGN_OR_RETURN(int64_t boi, root.optional_int("boi_token_index", 255999));
  HLX_ASSIGN_OR_RETURN(s.boi_token_id, root.optional_int("boi_token_id", boi));
  HLX_ASSIGN_OR_RETURN(int64_t eoi, root.optional_int("eoi_token_index", 256000));
  HLX_ASSIGN_OR_RETURN(s.eoi_token_id, root.optional_int("eoi_token_id", eoi));
  HLX_ASSIGN_OR_RETURN(int64_t image, root.optional_int("image_token_index", 262144));
  HLX_ASSIGN_OR_RETURN(s.image_token_id, root.optional_int("image_token_id", image));
  // The image soft token may lie past the vocabulary (it is looked up as id 0, then replaced);
  // begin/end-of-image are embedded as text.
  if (s.image_token_id < 0) return invalid(root, "image_token_index", str_cat(s.image_token_id, " is negative"));
  for (auto [key, id] :
       {std::pair<const char*, int64_t>{"boi_token_index", s.boi_token_id}, {"eoi_token_index", s.eoi_token_id}})
    if (id < 0 || id >= s.text.vocab_size)
      return invalid(root, key,
                     str_cat(id, " is not a token id of the text model (vocab_size ", s.text.vocab_size, ")"));
  HLX_ASSIGN_OR_RETURN(std::string mode, root.optional_string("hlx_image_mask", "image_blocks"));
  if (mode == "image_blocks")
    s.mask_mode = ImageMaskMode::kImageBlocks;
  else if (mode == "bidirectional")
    s.mask_mode = ImageMaskMode::kBidirectional;
  else
    return unsupported(root, "hlx_image_mask", str_cat("'", mode, "' (implemented: image_blocks, bidirectional)"));

  // ---- the tower: SigLIP, every layer, post_layernorm (last_hidden_state).
  HLX_RETURN_IF_ERROR(parse_tower(config, s.vision));
  VisionSpec& v = s.vision;
  if (v.family != VisionFamily::kSiglip)
    return unsupported(config.vision(), "model_type",
                       str_cat("'", v.model_type, "' (Gemma3's tower is siglip_vision_model)"));
  v.feature_layer = v.num_layers;
  v.select_strategy = "full";
  v.use_post_layernorm = true;
  v.weight_prefix = legacy ? "vision_tower.vision_model." : "model.vision_tower.vision_model.";
  v.weight_dtype = s.text.weight_dtype;
  s.projector_norm_eps = v.layer_norm_eps;

  // ---- the pooled grid: sqrt(mm_tokens)^2 rows, a whole kernel per row.
  const int64_t side = s.pooled_side(), grid = v.patches_per_side();
  if (s.mm_tokens_per_image <= 0 || side * side != s.mm_tokens_per_image)
    return invalid(root, "mm_tokens_per_image", str_cat(s.mm_tokens_per_image, " is not a positive square"));
  if (grid % side != 0)
    return invalid(root, "mm_tokens_per_image",
                   str_cat(s.mm_tokens_per_image, " (", side, " x ", side, ") does not pool the ", grid, " x ", grid,
                           " patch grid evenly (image_size ", v.image_size, ", patch_size ", v.patch_size, ")"));
  // The masked prefill applies each sliding layer's window on top of the image-block rule; that
  // equals upstream's (causal AND window) OR same-block only while a block fits in the window.
  const bool any_sliding =
      std::find(s.text.layer_is_sliding.begin(), s.text.layer_is_sliding.end(), true) != s.text.layer_is_sliding.end();
  if (any_sliding && s.text.sliding_window > 0 && s.mm_tokens_per_image > s.text.sliding_window)
    return unsupported(root, "mm_tokens_per_image",
                       str_cat(s.mm_tokens_per_image, " image rows per block exceed the sliding_window ",
                               s.text.sliding_window, " (a block wider than the window is not implemented)"));
  return s;
}

std::vector<TensorInfo> vision_checkpoint_layout(const VlmSpec& spec) {
  std::vector<TensorInfo> out;
  const VisionSpec& v = spec.vision;
  const std::string& p = v.weight_prefix;
  const int64_t d = v.hidden_size, ps = v.patch_size;
  auto add = [&](std::string name, Shape shape) { out.push_back({std::move(name), std::move(shape)}); };

  // Conv2d weight [out, in, kh, kw]; CLIP's has no bias and a learned class embedding.
  if (v.has_class_token()) add(p + "embeddings.class_embedding", {d});
  add(p + "embeddings.patch_embedding.weight", {d, v.num_channels, ps, ps});
  if (v.family == VisionFamily::kSiglip) add(p + "embeddings.patch_embedding.bias", {d});
  add(p + "embeddings.position_embedding.weight", {v.num_positions(), d});
  if (v.family == VisionFamily::kClip) {
    add(p + "pre_layrnorm.weight", {d});  // sic: transformers' spelling
    add(p + "pre_layrnorm.bias", {d});
  }
  for (int64_t i = 0; i < v.feature_layer; ++i) {
    const std::string lp = p + "encoder.layers." + std::to_string(i) + ".";
    add(lp + "layer_norm1.weight", {d});
    add(lp + "layer_norm1.bias", {d});
    for (const char* proj : {"q_proj", "k_proj", "v_proj", "out_proj"}) {
      add(lp + "self_attn." + proj + ".weight", {d, d});
      add(lp + "self_attn." + proj + ".bias", {d});
    }
    add(lp + "layer_norm2.weight", {d});
    add(lp + "layer_norm2.bias", {d});
    add(lp + "mlp.fc1.weight", {v.intermediate_size, d});
    add(lp + "mlp.fc1.bias", {v.intermediate_size});
    add(lp + "mlp.fc2.weight", {d, v.intermediate_size});
    add(lp + "mlp.fc2.bias", {d});
  }
  if (v.use_post_layernorm) {
    add(p + "post_layernorm.weight", {d});
    add(p + "post_layernorm.bias", {d});
  }
  const std::string& q = spec.projector_prefix;
  const int64_t th = spec.text.hidden_size;
  if (spec.family == VlmFamily::kGemma3) {
    add(q + "mm_soft_emb_norm.weight", {d});
    add(q + "mm_input_projection_weight", {d, th});  // [vision_hidden, text_hidden]: x . W
    return out;
  }
  add(q + "linear_1.weight", {th, d});
  if (spec.projector_bias) add(q + "linear_1.bias", {th});
  add(q + "linear_2.weight", {th, th});
  if (spec.projector_bias) add(q + "linear_2.bias", {th});
  return out;
}

}  // namespace hlx::models
