// The Gemma3 text family (transformers' Gemma3TextConfig and Gemma3DecoderLayer): sandwich norms
// around attention and MLP, (1 + w) RMSNorms (spec.norm_weight_offset = 1), per-head q/k norms,
// local rotary frequencies and a sliding window on sliding layers, global frequencies (with
// linear scaling) on full layers, attention scale 1/sqrt(query_pre_attn_scalar), gelu-tanh MLP.
// The embedding scale and the final logit softcap are spec fields applied by the shared entry code.
#include <cmath>

#include <nlohmann/json.hpp>

#include "models/decoder_common.h"
#include "models/fixture_arch.h"
#include "models/text_family.h"

namespace hlx::models {

shlo::Value gemma3_layer(DecoderContext& c, int64_t layer, const shlo::Value& x) {
  shlo::FunctionBuilder& f = c.f;
  const bool sliding = c.spec.layer_is_sliding[size_t(layer)];
  f.set_scope(str_cat("layer ", layer, " input_layernorm"));
  shlo::Value h = norm(c, x, c.layer_weight(layer, "input_layernorm.weight"));
  h = self_attention(c, layer, h, sliding);
  f.set_scope(str_cat("layer ", layer, " post_attention_layernorm"));
  shlo::Value r = f.add(x, norm(c, h, c.layer_weight(layer, "post_attention_layernorm.weight")));
  f.set_scope(str_cat("layer ", layer, " pre_feedforward_layernorm"));
  h = norm(c, r, c.layer_weight(layer, "pre_feedforward_layernorm.weight"));
  h = gated_mlp(c, layer, h);
  f.set_scope(str_cat("layer ", layer, " post_feedforward_layernorm"));
  return f.add(r, norm(c, h, c.layer_weight(layer, "post_feedforward_layernorm.weight")));
}

namespace {

Status parse_gemma3_keys(const HfConfig& config, TextModelSpec& s) {
  const ConfigView& c = config.text();
  // Activation: Gemma3 reads "hidden_activation" (an older "hidden_act" is its fallback).
  std::string fallback = "gelu_pytorch_tanh";
  if (c.has("hidden_act")) {
    HLX_ASSIGN_OR_RETURN(fallback, c.require_string("hidden_act"));
  }
  HLX_ASSIGN_OR_RETURN(std::string act, c.optional_string("hidden_activation", fallback));
  if (act != "gelu_pytorch_tanh" && act != "gelu_new")
    return config_unsupported(c, "hidden_activation", str_cat("'", act, "' (implemented: gelu_pytorch_tanh)"));
  s.activation = Activation::kGeluTanh;
  s.qk_norm = true;
  s.sandwich_norms = true;
  s.norm_weight_offset = 1.f;

  // Sliding layers: rope_local_base_freq, never scaled. Global layers: rope_theta + rope_scaling.
  HLX_ASSIGN_OR_RETURN(ConfigView scaling, c.optional_sub("rope_scaling"));
  HLX_ASSIGN_OR_RETURN(ConfigView params, c.optional_sub("rope_parameters"));
  s.rope_local = RopeSpec{};
  HLX_ASSIGN_OR_RETURN(s.rope_local.theta, c.optional_float("rope_local_base_freq", 10000.0));
  HLX_RETURN_IF_ERROR(parse_rope_dict(scaling, "rope_scaling", s.rope));
  if (!params.empty()) {  // transformers v5: {"full_attention": {...}, "sliding_attention": {...}}
    HLX_ASSIGN_OR_RETURN(ConfigView full, params.optional_sub("full_attention"));
    HLX_ASSIGN_OR_RETURN(ConfigView sliding, params.optional_sub("sliding_attention"));
    HLX_RETURN_IF_ERROR(parse_rope_dict(full, "rope_parameters.full_attention", s.rope));
    HLX_RETURN_IF_ERROR(parse_rope_dict(sliding, "rope_parameters.sliding_attention", s.rope_local));
  }
  HLX_RETURN_IF_ERROR(parse_mrope(c, /*mrope=*/false, s));

  // Attention scale and softcaps.
  HLX_ASSIGN_OR_RETURN(double qpas, c.optional_float("query_pre_attn_scalar", 256.0));
  if (!(qpas > 0)) return config_invalid(c, "query_pre_attn_scalar", str_cat(qpas, " must be > 0"));
  s.attention_scale = 1.0 / std::sqrt(qpas);
  HLX_ASSIGN_OR_RETURN(s.attn_logit_softcap, c.optional_float("attn_logit_softcapping", 0.0));
  HLX_ASSIGN_OR_RETURN(s.final_logit_softcap, c.optional_float("final_logit_softcapping", 0.0));
  if (s.attn_logit_softcap < 0 || s.final_logit_softcap < 0)
    return config_invalid(
        c, "attn_logit_softcapping",
        str_cat(s.attn_logit_softcap, ", final_logit_softcapping ", s.final_logit_softcap, ": must be >= 0"));
  // Gemma3TextScaledWordEmbedding: embed_scale = hidden_size**0.5, cast to the weight dtype.
  s.embedding_scale = round_to_dtype(std::sqrt(double(s.hidden_size)), s.weight_dtype);

  // Sliding window; without layer_types every `sliding_window_pattern`-th layer is global.
  HLX_ASSIGN_OR_RETURN(s.sliding_window, c.optional_int("sliding_window", 4096));
  if (s.sliding_window <= 0) return config_invalid(c, "sliding_window", str_cat(s.sliding_window, " must be positive"));
  HLX_ASSIGN_OR_RETURN(std::vector<std::string> layer_types, c.optional_string_array("layer_types"));
  if (layer_types.empty()) {
    HLX_ASSIGN_OR_RETURN(int64_t pattern, c.optional_int("sliding_window_pattern", 6));
    if (pattern <= 0) return config_invalid(c, "sliding_window_pattern", str_cat(pattern, " must be positive"));
    for (int64_t i = 0; i < s.num_layers; ++i) s.layer_is_sliding[size_t(i)] = (i + 1) % pattern != 0;
  }
  return ok_status();
}

// hidden 96: sqrt(96) = 9.798 rounds to 9.8125 in bf16, so the embedding-scale rounding shows;
// heads * head_dim (64) != hidden (96), as in real Gemma3.
void gemma3_fixture_tiny(FixtureArch& a) {
  a.hidden = 96;
  a.intermediate = 192;
  a.layers = 4;
  a.rope_theta = 1000000.0;
  a.tied = true;
  a.eos = {1, 106};
  a.bos = 2;
}

// Tiny: 4 layers, sliding pattern 3 -> sliding, sliding, full, sliding. A window of 4 is crossed
// within the first few decode steps of a 32-token generation.
constexpr int64_t kFixtureSlidingWindow = 4;
constexpr int64_t kFixtureSlidingPattern = 3;

void gemma3_fixture_config(const FixtureArch& a, nlohmann::json& c) {
  c["architectures"] = {"Gemma3ForCausalLM"};
  c["attention_bias"] = false;
  // Gemma3's attention ignores attn_logit_softcapping (only Gemma2 applies it); leave it null.
  c["attn_logit_softcapping"] = nullptr;
  c["cache_implementation"] = "hybrid";
  // Small enough that tanh visibly bends the tiny model's logits (raw max ~16 becomes ~10.5).
  c["final_logit_softcapping"] = 12.0;
  c["head_dim"] = a.head_dim;
  c["hidden_activation"] = "gelu_pytorch_tanh";
  std::vector<std::string> types;
  for (int64_t i = 0; i < a.layers; ++i)
    types.push_back((i + 1) % kFixtureSlidingPattern ? "sliding_attention" : "full_attention");
  c["layer_types"] = types;
  c["pad_token_id"] = a.pad;
  // != head_dim (16), so using 1/sqrt(head_dim) instead would show.
  c["query_pre_attn_scalar"] = 24;
  c["rope_local_base_freq"] = 10000.0;
  // Global (full-attention) layers only, as in gemma-3-4b and larger (which use factor 8).
  c["rope_scaling"] = {{"factor", 2.0}, {"rope_type", "linear"}};
  c["sliding_window"] = kFixtureSlidingWindow;
  c["sliding_window_pattern"] = kFixtureSlidingPattern;
}

const TextFixture kGemma3Fixture{gemma3_fixture_tiny, gemma3_fixture_config};

}  // namespace

// Gemma3TextConfig: 262208/2304/9216/26/8 (kv 4, head_dim 256), 131072, rope_theta 1e6, tied.
const TextFamily kGemma3TextFamily{
    "gemma3_text",     Family::kGemma3, {262208, 2304, 9216, 26, 8, 4, 256, 131072, 1000000.0, true},
    parse_gemma3_keys, gemma3_layer,    &kGemma3Fixture};

}  // namespace hlx::models
