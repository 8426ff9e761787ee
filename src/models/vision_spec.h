// Vision-language models as data: the vision tower (CLIP ViT or SigLIP), the projector (LLaVA's
// MLP or Gemma3's pooled RMSNorm projection) and the text model, parsed once from a Hugging Face
// config.json (model_type "llava" or "gemma3"). The vision entry (`vision_encode`) turns one
// preprocessed image into projected features, one row per image token, in the text model's hidden
// size.
//
//   vision_encode(pixels: tensor<1x3xHxWxf32>, weights... in vision_checkpoint_layout() order with
//                 `hlx.weight` attrs, stored dtype) -> features: tensor<T x text_hidden x f32>
//
// T = tokens_per_image(). Module attribute hlx.identity = SHA-256 of vision_entry_description().
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "io/hf_config.h"
#include "models/text_spec.h"
#include "stablehlo/ir.h"

namespace hlx::models {

enum class VisionFamily { kClip, kSiglip };
const char* vision_family_name(VisionFamily f);  // "clip" | "siglip"

// Activations of the tower MLP and the projector (transformers' ACT2FN names).
enum class VisionActivation {
  kQuickGelu,  // "quick_gelu": x * sigmoid(1.702 x) (CLIP)
  kGeluTanh,   // "gelu_pytorch_tanh" / "gelu_new": tanh approximation (SigLIP)
  kGeluErf,    // "gelu": 0.5 x (1 + erf(x / sqrt 2)) (LLaVA projector default)
};
const char* vision_activation_name(VisionActivation a);

struct VisionSpec {  // from config.json's vision_config + the llava wrapper fields
  VisionFamily family = VisionFamily::kClip;
  std::string model_type;  // "clip_vision_model" | "siglip_vision_model"
  int64_t image_size = 0, patch_size = 0, num_channels = 3, hidden_size = 0, intermediate_size = 0, num_layers = 0,
          num_heads = 0;
  double layer_norm_eps = 1e-5;
  VisionActivation activation = VisionActivation::kQuickGelu;
  // CLIP: class token + pre_layrnorm; SigLIP: neither (and a bias on the patch projection).
  // vision_feature_layer resolved against hidden_states (length L+1; hidden_states[0] is the
  // embedding output, after pre_layrnorm for CLIP): e.g. -2 -> L-1. Only layers < feature_layer run.
  int64_t feature_layer = 0;
  std::string select_strategy = "default";  // "default" (drop the first token) | "full"
  // LLaVA reads hidden_states, never last_hidden_state, so the tower's post_layernorm is never
  // applied (false for every llava config; kept for wrappers that do use it).
  bool use_post_layernorm = false;
  std::string weight_prefix;  // "vision_tower.vision_model." or "model.vision_tower.vision_model."
  DType weight_dtype = DType::kF32;

  bool has_class_token() const { return family == VisionFamily::kClip; }
  int64_t patches_per_side() const { return patch_size > 0 ? image_size / patch_size : 0; }
  int64_t num_patches() const { return patches_per_side() * patches_per_side(); }
  int64_t num_positions() const { return num_patches() + (has_class_token() ? 1 : 0); }
  int64_t head_dim() const { return num_heads > 0 ? hidden_size / num_heads : 0; }
  // Rows the tower produces, minus the first one under the "default" strategy.
  int64_t tokens_per_image() const { return num_positions() - (select_strategy == "default" ? 1 : 0); }
};

enum class VlmFamily {
  kLlava,    // LlavaForConditionalGeneration: hidden_states[layer] -> linear/act/linear, causal prompt
  kGemma3,   // Gemma3ForConditionalGeneration: last_hidden_state -> avg-pool, (1+w) RMSNorm, x.W;
             // image blocks attend bidirectionally (prefill_embeddings_masked)
  kQwen3VL,  // Qwen3VLForConditionalGeneration: its own spec (models/qwen3_vl.h); M-RoPE + DeepStack
};
const char* vlm_family_name(VlmFamily f);  // "llava" | "gemma3" | "qwen3_vl"

// How the prefill mask of an image prompt is built (Gemma3). kImageBlocks is upstream's rule:
// causal, or both rows in the same image block. kBidirectional (every valid pair visible) exists
// only as an explicitly configured variant (config key "hlx_image_mask": "bidirectional").
enum class ImageMaskMode { kCausal, kImageBlocks, kBidirectional };
const char* image_mask_mode_name(ImageMaskMode m);  // "causal" | "image_blocks" | "bidirectional"

// The part of vision_encode's graph a module returns: the projected features (the entry), or, for
// tests, the tower's output rows (Gemma3: last_hidden_state) or the pooled rows before the norm.
enum class VisionStage { kFeatures, kTower, kPooled };
const char* vision_stage_name(VisionStage s);  // "features" | "tower" | "pooled"

struct VlmSpec {
  VlmFamily family = VlmFamily::kLlava;
  TextModelSpec text;  // text_spec_from_config(config), prefixes adjusted to the naming scheme
  VisionSpec vision;
  int64_t image_token_id = 0;    // image_token_index / image_token_id
  std::string projector_prefix;  // "multi_modal_projector." or "model.multi_modal_projector."
  // LLaVA projector.
  std::string projector_act = "gelu";  // projector_hidden_act as written
  VisionActivation projector_activation = VisionActivation::kGeluErf;
  bool projector_bias = true;  // multimodal_projector_bias
  // Gemma3 projector and prompt layout.
  int64_t mm_tokens_per_image = 0;               // pooled rows per image (a square: 256 = 16 x 16)
  int64_t boi_token_id = -1, eoi_token_id = -1;  // <start_of_image>, <end_of_image>
  double projector_norm_eps = 1e-6;              // mm_soft_emb_norm: the *vision* layer_norm_eps
  ImageMaskMode mask_mode = ImageMaskMode::kCausal;
  // Text rows enter prefill as embed(id) * embedding_scale (text.embedding_scale, rounded to the
  // weight dtype); image rows are the projected features, unscaled (Gemma3 and LLaVA alike).

  // Image rows per image in the expanded prompt.
  int64_t tokens_per_image() const {
    return family == VlmFamily::kGemma3 ? mm_tokens_per_image : vision.tokens_per_image();
  }
  int64_t pooled_side() const;  // Gemma3: sqrt(mm_tokens_per_image)
  int64_t pool_kernel() const;  // Gemma3: patches_per_side / pooled_side
  // The variant text of the text entries that take image prompts (prefill_embeddings_masked): mask
  // mode, image token ids and the image-row scaling policy, hashed into their identity.
  std::string prefill_variant() const;
};

// A checkpoint this spec parser reads as vision-language: model_type llava.
bool is_vision_language(const HfConfig& config);
// model_type gemma3 with a vision tower in the checkpoint (`names` holds a
// `*vision_tower.vision_model.*` tensor). A Gemma3 checkpoint without tower weights stays a text model.
bool is_gemma3_vlm(const HfConfig& config, const std::vector<std::string>& names);

// Parses a llava config.json; `names` (the checkpoint's tensor names, may be empty) picks the
// naming scheme (legacy `language_model.model.*` / `vision_tower.*` vs `model.language_model.*` /
// `model.vision_tower.*`). Unsupported vision model_type / strategy / activation -> kUnsupported
// naming it; inconsistent numbers -> kInvalidArgument.
Result<VlmSpec> llava_spec_from_config(const HfConfig& config, const std::vector<std::string>& names = {});
// Parses a gemma3 config.json (Gemma3Config: SigLIP vision_config, mm_tokens_per_image,
// boi/eoi/image_token_index). Naming scheme from `names` as for llava (legacy
// `language_model.model.*` / `vision_tower.vision_model.*` / `multi_modal_projector.*`, or
// `model.language_model.*` / `model.vision_tower.vision_model.*` / `model.multi_modal_projector.*`).
// mm_tokens_per_image must be a square whose side divides the patch grid (kInvalidArgument), and
// no longer than the sliding window (an image block wider than the window: kUnsupported naming both).
Result<VlmSpec> gemma3_vlm_spec_from_config(const HfConfig& config, const std::vector<std::string>& names = {});
// llava or gemma3 by model_type (kUnsupported for anything else).
Result<VlmSpec> vlm_spec_from_config(const HfConfig& config, const std::vector<std::string>& names = {});

// Tower + projector tensors the vision entry reads, in its weight-argument order (layers past the
// selected feature layer and the unused post_layernorm are not read).
std::vector<TensorInfo> vision_checkpoint_layout(const VlmSpec& spec);

// The `vision_encode` module (see the top of this file). A stage other than kFeatures returns that
// intermediate instead ([N, vision_hidden] tower rows / [T, vision_hidden] pooled rows; Gemma3 only
// for kPooled), as a module of its own identity, for tests.
Result<shlo::Module> emit_vision_entry(const VlmSpec& spec, VisionStage stage = VisionStage::kFeatures);
// The canonical description hashed into the identity.
std::string vision_entry_description(const VlmSpec& spec, VisionStage stage = VisionStage::kFeatures);

}  // namespace hlx::models

namespace hlx::shlo {
class FunctionBuilder;
class Value;
}  // namespace hlx::shlo

namespace hlx::models {
// The activation `a` on f32 x in plain StableHLO (erf GELU via Abramowitz & Stegun 7.1.26, see
// vision_encoder.cc); shared by the vision towers.
shlo::Value vision_activation(shlo::FunctionBuilder& f, VisionActivation a, const shlo::Value& x);

// The dtype of the towers' attention operands Q, K and V: bf16 for a bf16 checkpoint, as upstream
// runs that tower (its q, k and v are bf16 tensors), which lets the attention kernel take one bf16
// dot product per pair; f32 otherwise. Part of each tower entry's identity (`attention_dtype`).
inline DType tower_attention_dtype(DType weight_dtype) {
  return weight_dtype == DType::kBF16 ? DType::kBF16 : DType::kF32;
}

}  // namespace hlx::models
