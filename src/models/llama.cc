// The Llama family, and the graph it shares with Qwen2 (q/k/v biases) and Qwen3 (per-head q/k
// RMSNorm): the differences are spec flags handled inside self_attention (transformers'
// LlamaDecoderLayer, Qwen2DecoderLayer and Qwen3DecoderLayer are the same pre-norm residual block).
#include <nlohmann/json.hpp>

#include "models/decoder_common.h"
#include "models/fixture_arch.h"
#include "models/text_family.h"

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

namespace {

Status parse_llama_keys(const HfConfig& config, TextModelSpec& s) {
  const ConfigView& c = config.text();
  HLX_RETURN_IF_ERROR(parse_silu_activation(c, s));
  HLX_RETURN_IF_ERROR(parse_single_rope(c, s));
  HLX_RETURN_IF_ERROR(parse_mrope(c, /*mrope=*/false, s));
  return refuse_sliding_window(c, s);
}

// Llama 3.x shape: GQA, llama3 rope scaling, untied head. head_dim 16 with theta 5e5 and
// original_max_position_embeddings 64 puts rotary pairs in all three llama3 bands (wavelengths
// 6.3 < 16 high-frequency, 32.5 in between, >= 168 > 64 low-frequency).
void llama_fixture_tiny(FixtureArch& a) {
  a.layers = 3;
  a.rope_theta = 500000.0;
  a.rms_eps = 1e-5;
  a.eos = {2, 3};
}

void llama_fixture_config(const FixtureArch& a, nlohmann::json& c) {
  c["architectures"] = {"LlamaForCausalLM"};
  c["attention_bias"] = false;
  c["head_dim"] = a.head_dim;
  c["hidden_act"] = "silu";
  c["mlp_bias"] = false;
  c["pretraining_tp"] = 1;
  c["rope_scaling"] = {{"factor", 8.0},
                       {"high_freq_factor", 4.0},
                       {"low_freq_factor", 1.0},
                       {"original_max_position_embeddings", 64},
                       {"rope_type", "llama3"}};
}

const TextFixture kLlamaFixture{llama_fixture_tiny, llama_fixture_config};

}  // namespace

// LlamaConfig: 32000/4096/11008/32/32, multi-head attention, max_position_embeddings 2048,
// rope_theta 1e4, untied.
const TextFamily kLlamaFamily{
    "llama",          Family::kLlama, {32000, 4096, 11008, 32, 32, 0, 0, 2048, 10000.0, false},
    parse_llama_keys, llama_layer,    &kLlamaFixture};

}  // namespace hlx::models
