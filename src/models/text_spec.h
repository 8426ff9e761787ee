// The architecture of a text decoder as data: everything an emitter, a fixture writer and a
// reference need to know, parsed once from a Hugging Face config.json. No family-specific code
// outside src/models/ ever reads a config.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "core/tensor.h"
#include "io/hf_config.h"

namespace hlx::models {

enum class Family { kLlama, kQwen2, kQwen3, kGemma3 };
const char* family_name(Family f);  // "llama", "qwen2", "qwen3", "gemma3"

enum class Activation { kSilu, kGeluTanh };

struct RopeSpec {
  double theta = 10000.0;
  // "default", "linear" (factor), "llama3" (factor, low/high_freq_factor, original_max_position_embeddings)
  std::string type = "default";
  double factor = 1.0, low_freq_factor = 1.0, high_freq_factor = 4.0;
  int64_t original_max_position = 8192;
};

struct TextModelSpec {
  Family family = Family::kLlama;
  std::string model_type;     // as written in config.json
  std::string weight_prefix;  // "model." or "model.language_model." / "language_model.model."
  std::string lm_head_name;   // "lm_head.weight", or the embedding name when tied
  int64_t vocab_size = 0, hidden_size = 0, intermediate_size = 0, num_layers = 0;
  int64_t num_heads = 0, num_kv_heads = 0, head_dim = 0;
  double rms_norm_eps = 1e-6;
  float norm_weight_offset = 0.f;  // Gemma: (1 + w)
  Activation activation = Activation::kSilu;
  bool attention_bias = false;  // Qwen2: q/k/v biases
  bool qk_norm = false;         // Qwen3, Gemma3: per-head RMSNorm on q and k before rotary
  bool sandwich_norms = false;  // Gemma3: post-attention and post-feedforward norms
  bool tie_word_embeddings = false;
  double embedding_scale = 1.0;                                // Gemma: sqrt(hidden), rounded to the weight dtype
  double attention_scale = 0.0;                                // 1/sqrt(head_dim) or 1/sqrt(query_pre_attn_scalar)
  double attn_logit_softcap = 0.0, final_logit_softcap = 0.0;  // 0 = none
  RopeSpec rope;                                               // global (full-attention) layers
  RopeSpec rope_local;                 // sliding layers (Gemma3: rope_local_base_freq, no scaling)
  int64_t sliding_window = 0;          // 0 = none
  std::vector<bool> layer_is_sliding;  // per layer
  int64_t max_position_embeddings = 0;
  // Qwen3-VL interleaved M-RoPE (rope_scaling / rope_parameters `mrope_section`): empty = 1D
  // rotary. Frequency i of head_dim/2 takes its angle from axis H when i % 3 == 1 and
  // i < 3 * section[1], from W when i % 3 == 2 and i < 3 * section[2], else from T.
  std::vector<int64_t> mrope_section;
  // DeepStack (Qwen3-VL): feature k is added to the residual after decoder layer
  // deepstack_layers[k] at the visual rows (upstream: layers 0 .. K-1, K = number of vision taps).
  std::vector<int64_t> deepstack_layers;
  DType weight_dtype = DType::kBF16;  // torch_dtype of the checkpoint
  // Matmul weights not multiplied as stored: a checkpoint stored 4-bit ("awq-int4-g128") and/or
  // the format the runtime quantizes to at load ("int8", "int4"). Part of identity (the entry's
  // math changes); empty otherwise, so those identities are unchanged. Set by the loader / emit.
  std::string weight_format;
  std::vector<int64_t> eos_token_ids;
};

// Parses config.json (its text_config for multimodal wrappers). Unknown model_type or unsupported
// options (e.g. an unknown rope_scaling type) fail with kUnsupported naming them.
Result<TextModelSpec> text_spec_from_config(const HfConfig& config);

// The rotary axis (0 = T, 1 = H, 2 = W) of each of the head_dim / 2 frequencies under the spec's
// interleaved M-RoPE (all 0 without mrope_section).
std::vector<int> mrope_axis_of_frequency(const TextModelSpec& spec);

// Inverse frequencies for rotary embedding after rope scaling, length head_dim / 2, in f32.
std::vector<float> rope_inv_freq(const RopeSpec& rope, int64_t head_dim);

struct TensorInfo {
  std::string name;
  Shape shape;
};
// Every checkpoint tensor the model reads, with Hugging Face names and shapes.
std::vector<TensorInfo> text_checkpoint_layout(const TextModelSpec& spec);

}  // namespace hlx::models
