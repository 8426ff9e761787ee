// The Qwen text families on the Llama graph (llama.cc): Qwen2 (q/k/v biases), Qwen3 (per-head
// q/k RMSNorm) and Qwen3-VL's text model (Qwen3 plus interleaved M-RoPE and DeepStack).
#include <nlohmann/json.hpp>

#include "models/decoder_common.h"
#include "models/fixture_arch.h"
#include "models/text_family.h"

namespace hlx::models {
namespace {

Status parse_qwen_keys(const HfConfig& config, TextModelSpec& s, bool mrope) {
  const ConfigView& c = config.text();
  HLX_RETURN_IF_ERROR(parse_silu_activation(c, s));
  HLX_RETURN_IF_ERROR(parse_single_rope(c, s));
  HLX_RETURN_IF_ERROR(parse_mrope(c, mrope, s));
  return refuse_sliding_window(c, s);
}

Status parse_qwen2_keys(const HfConfig& config, TextModelSpec& s) {
  s.attention_bias = true;  // Qwen2 always has q/k/v biases (and none on o_proj)
  return parse_qwen_keys(config, s, /*mrope=*/false);
}

Status parse_qwen3_keys(const HfConfig& config, TextModelSpec& s) {
  s.qk_norm = true;
  return parse_qwen_keys(config, s, /*mrope=*/false);
}

Status parse_qwen3_vl_text_keys(const HfConfig& config, TextModelSpec& s) {
  s.qk_norm = true;
  HLX_RETURN_IF_ERROR(parse_qwen_keys(config, s, /*mrope=*/true));
  // DeepStack: one feature per vision tap, added after decoder layers 0 .. K-1.
  HLX_ASSIGN_OR_RETURN(ConfigView vision, config.root().optional_sub("vision_config"));
  std::vector<int64_t> taps = {8, 16, 24};  // Qwen3VLVisionConfig default
  if (vision.has("deepstack_visual_indexes")) {
    HLX_ASSIGN_OR_RETURN(taps, vision.require_int_array("deepstack_visual_indexes"));
  }
  if (int64_t(taps.size()) > s.num_layers)
    return config_invalid(vision, "deepstack_visual_indexes",
                          str_cat(taps.size(), " taps for ", s.num_layers, " decoder layers"));
  for (size_t k = 0; k < taps.size(); ++k) s.deepstack_layers.push_back(int64_t(k));
  return ok_status();
}

void qwen2_fixture_tiny(FixtureArch& a) {
  a.layers = 2;
  a.intermediate = 160;
  a.rope_theta = 1000000.0;
  a.eos = {2};
}

// Qwen2 has no attention_bias field: q/k/v always carry biases. sliding_window is set but disabled
// by use_sliding_window=false, exactly as in the released Qwen2.5 configs.
void qwen2_fixture_config(const FixtureArch& a, nlohmann::json& c) {
  c["architectures"] = {"Qwen2ForCausalLM"};
  c["hidden_act"] = "silu";
  c["max_window_layers"] = a.layers;
  c["rope_scaling"] = nullptr;
  c["sliding_window"] = 4096;
  c["use_sliding_window"] = false;
}

// head_dim * heads (96) != hidden (64), as in real Qwen3 (2048 vs 1024).
void qwen3_fixture_tiny(FixtureArch& a) {
  a.layers = 3;
  a.head_dim = 24;
  a.rope_theta = 1000000.0;
  a.tied = true;
  a.eos = {2, 3};
}

void qwen3_fixture_config(const FixtureArch& a, nlohmann::json& c) {
  c["architectures"] = {"Qwen3ForCausalLM"};
  c["attention_bias"] = false;
  c["eos_token_id"] = a.eos[0];  // the released Qwen3 configs name one eos; generation_config lists both
  c["head_dim"] = a.head_dim;
  c["hidden_act"] = "silu";
  c["max_window_layers"] = a.layers;
  c["rope_scaling"] = nullptr;
  c["sliding_window"] = nullptr;
  c["use_sliding_window"] = false;
}

const TextFixture kQwen2Fixture{qwen2_fixture_tiny, qwen2_fixture_config};
const TextFixture kQwen3Fixture{qwen3_fixture_tiny, qwen3_fixture_config};

}  // namespace

// Qwen2Config: 151936/4096/22016/32/32, multi-head attention, 32768, rope_theta 1e4, untied.
const TextFamily kQwen2Family{
    "qwen2",          Family::kQwen2, {151936, 4096, 22016, 32, 32, 0, 0, 32768, 10000.0, false},
    parse_qwen2_keys, llama_layer,    &kQwen2Fixture};
// Qwen3Config: as Qwen2 plus num_key_value_heads 32 and head_dim 128.
const TextFamily kQwen3Family{
    "qwen3",          Family::kQwen3, {151936, 4096, 22016, 32, 32, 32, 128, 32768, 10000.0, false},
    parse_qwen3_keys, llama_layer,    &kQwen3Fixture};
// Qwen3VLTextConfig: as Qwen3 with max_position_embeddings 128000 and rope_theta 5e5.
const TextFamily kQwen3VLTextFamily{"qwen3_vl_text",
                                    Family::kQwen3,
                                    {151936, 4096, 22016, 32, 32, 32, 128, 128000, 500000.0, false},
                                    parse_qwen3_vl_text_keys,
                                    llama_layer};

}  // namespace hlx::models
