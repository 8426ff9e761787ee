// The Llama graph, shared by Llama 2/3, Qwen2 (q/k/v biases) and Qwen3 (per-head q/k RMSNorm):
// the differences are spec flags handled inside self_attention (transformers' LlamaDecoderLayer,
// Qwen2DecoderLayer and Qwen3DecoderLayer are the same pre-norm residual block).
#include "models/decoder_common.h"

namespace hlx::models {

shlo::Value llama_layer(DecoderContext& c, int64_t layer, const shlo::Value& x) {
  shlo::FunctionBuilder& f = c.f;
  f.set_scope(str_cat("layer ", layer, " input_layernorm"));
  shlo::Value h = norm(c, x, c.layer_weight(layer, "input_layernorm.weight"));
  shlo::Value r = f.add(x, self_attention(c, layer, h, /*sliding=*/false));
  f.set_scope(str_cat("layer ", layer, " post_attention_layernorm"));
  h = norm(c, r, c.layer_weight(layer, "post_attention_layernorm.weight"));
  return f.add(r, gated_mlp(c, layer, h));
}

}  // namespace hlx::models
