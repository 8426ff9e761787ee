// The checkpoint tensors a text decoder reads, with Hugging Face's names and shapes. The order is
// the weight-argument order of every emitted entry (see text_entries.h): embedding, layers in
// order (attention, then MLP, each with its norms), final norm, then the untied lm_head.
#include "models/text_spec.h"

namespace hlx::models {

std::vector<TensorInfo> text_checkpoint_layout(const TextModelSpec& spec) {
  std::vector<TensorInfo> out;
  const std::string& p = spec.weight_prefix;
  const int64_t hidden = spec.hidden_size;
  const int64_t q_dim = spec.num_heads * spec.head_dim;  // may differ from hidden (Qwen3, Gemma3)
  const int64_t kv_dim = spec.num_kv_heads * spec.head_dim;
  const int64_t inter = spec.intermediate_size;
  auto add = [&](std::string name, Shape shape) { out.push_back({std::move(name), std::move(shape)}); };

  add(p + "embed_tokens.weight", {spec.vocab_size, hidden});
  for (int64_t i = 0; i < spec.num_layers; ++i) {
    const std::string l = p + "layers." + std::to_string(i) + ".";
    add(l + "input_layernorm.weight", {hidden});
    // nn.Linear stores [out_features, in_features].
    add(l + "self_attn.q_proj.weight", {q_dim, hidden});
    if (spec.attention_bias) add(l + "self_attn.q_proj.bias", {q_dim});
    add(l + "self_attn.k_proj.weight", {kv_dim, hidden});
    if (spec.attention_bias) add(l + "self_attn.k_proj.bias", {kv_dim});
    add(l + "self_attn.v_proj.weight", {kv_dim, hidden});
    if (spec.attention_bias) add(l + "self_attn.v_proj.bias", {kv_dim});
    add(l + "self_attn.o_proj.weight", {hidden, q_dim});
    if (spec.qk_norm) {
      // One weight of length head_dim shared by every head (Qwen3RMSNorm / Gemma3RMSNorm(head_dim)).
      add(l + "self_attn.q_norm.weight", {spec.head_dim});
      add(l + "self_attn.k_norm.weight", {spec.head_dim});
    }
    // Llama/Qwen: the pre-MLP norm. Gemma3: the norm applied to the attention output.
    add(l + "post_attention_layernorm.weight", {hidden});
    if (spec.sandwich_norms) {
      add(l + "pre_feedforward_layernorm.weight", {hidden});
      add(l + "post_feedforward_layernorm.weight", {hidden});
    }
    add(l + "mlp.gate_proj.weight", {inter, hidden});
    add(l + "mlp.up_proj.weight", {inter, hidden});
    add(l + "mlp.down_proj.weight", {hidden, inter});
  }
  add(p + "norm.weight", {hidden});
  if (!spec.tie_word_embeddings) add(spec.lm_head_name, {spec.vocab_size, hidden});
  return out;
}

}  // namespace hlx::models
