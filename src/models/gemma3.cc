// The Gemma3 graph (transformers' Gemma3DecoderLayer): sandwich norms around attention and MLP,
// (1 + w) RMSNorms (spec.norm_weight_offset = 1), per-head q/k norms, local rotary frequencies and
// a sliding window on sliding layers, global frequencies (with linear scaling) on full layers,
// attention scale 1/sqrt(query_pre_attn_scalar), gelu-tanh MLP. The embedding scale and the
// final logit softcap are spec fields applied by the shared entry code.
#include "models/decoder_common.h"

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

}  // namespace hlx::models
