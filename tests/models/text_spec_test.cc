#include "models/text_spec.h"

#include <gtest/gtest.h>

#include <cmath>

namespace hlx::models {
namespace {

Result<TextModelSpec> spec_of(const std::string& json, const std::optional<std::string>& generation = std::nullopt) {
  HLX_ASSIGN_OR_RETURN(HfConfig c, HfConfig::parse(json, "config.json", generation));
  return text_spec_from_config(c);
}

TextModelSpec must(const std::string& json, const std::optional<std::string>& generation = std::nullopt) {
  Result<TextModelSpec> s = spec_of(json, generation);
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return s.ok() ? *s : TextModelSpec{};
}

void expect_error(const std::string& json, ErrorKind kind, const std::string& needle) {
  Result<TextModelSpec> s = spec_of(json);
  ASSERT_FALSE(s.ok()) << json;
  EXPECT_EQ(s.status().kind(), kind) << s.status().to_string();
  EXPECT_NE(s.status().message().find(needle), std::string::npos) << s.status().to_string();
}

// An independent double-precision transcription of transformers' default / linear / llama3 rope.
std::vector<double> ref_inv_freq(double theta, int64_t dim, const std::string& type, double factor = 1, double low = 1,
                                 double high = 4, double orig = 8192) {
  std::vector<double> out;
  for (int64_t i = 0; i < dim; i += 2) {
    double f = 1.0 / std::pow(theta, double(i) / double(dim));
    if (type == "linear") f /= factor;
    if (type == "llama3") {
      double wavelen = 2 * M_PI / f;
      if (wavelen > orig / low) {
        f /= factor;
      } else if (wavelen >= orig / high) {
        double smooth = (orig / wavelen - low) / (high - low);
        f = (1 - smooth) * f / factor + smooth * f;
      }
    }
    out.push_back(f);
  }
  return out;
}

void expect_inv_freq_near(const std::vector<float>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 2e-6 * want[i]) << "index " << i;
}

TEST(TextSpec, LlamaDefaults) {
  TextModelSpec s = must(R"({"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 64,
      "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100})");
  EXPECT_EQ(s.family, Family::kLlama);
  EXPECT_STREQ(family_name(s.family), "llama");
  EXPECT_EQ(s.num_kv_heads, 4);  // None -> num_attention_heads
  EXPECT_EQ(s.head_dim, 16);     // hidden / heads
  EXPECT_EQ(s.weight_prefix, "model.");
  EXPECT_FALSE(s.tie_word_embeddings);
  EXPECT_EQ(s.lm_head_name, "lm_head.weight");
  EXPECT_DOUBLE_EQ(s.rope.theta, 10000.0);
  EXPECT_EQ(s.rope.type, "default");
  EXPECT_DOUBLE_EQ(s.rms_norm_eps, 1e-6);
  EXPECT_EQ(s.max_position_embeddings, 2048);
  EXPECT_EQ(s.weight_dtype, DType::kF32);  // torch_dtype absent
  EXPECT_DOUBLE_EQ(s.attention_scale, 0.25);
  EXPECT_DOUBLE_EQ(s.embedding_scale, 1.0);
  EXPECT_EQ(s.activation, Activation::kSilu);
  EXPECT_FALSE(s.attention_bias || s.qk_norm || s.sandwich_norms);
  EXPECT_EQ(s.norm_weight_offset, 0.f);
  EXPECT_EQ(s.sliding_window, 0);
  EXPECT_EQ(s.layer_is_sliding, std::vector<bool>(2, false));
  expect_inv_freq_near(rope_inv_freq(s.rope, s.head_dim), ref_inv_freq(10000, 16, "default"));
}

TEST(TextSpec, Llama3RopeScaling) {
  // Llama 3.2 1B's values.
  TextModelSpec s = must(R"({"model_type": "llama", "hidden_size": 2048, "intermediate_size": 8192,
      "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 64,
      "vocab_size": 128256, "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "tie_word_embeddings": true,
      "torch_dtype": "bfloat16", "eos_token_id": [128001, 128008, 128009],
      "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                       "original_max_position_embeddings": 8192, "rope_type": "llama3"}})");
  EXPECT_EQ(s.rope.type, "llama3");
  EXPECT_DOUBLE_EQ(s.rope.factor, 32.0);
  EXPECT_EQ(s.rope.original_max_position, 8192);
  EXPECT_EQ(s.num_kv_heads, 8);
  EXPECT_EQ(s.weight_dtype, DType::kBF16);
  EXPECT_TRUE(s.tie_word_embeddings);
  EXPECT_EQ(s.lm_head_name, "model.embed_tokens.weight");
  EXPECT_EQ(s.eos_token_ids, (std::vector<int64_t>{128001, 128008, 128009}));
  std::vector<float> inv = rope_inv_freq(s.rope, 64);
  expect_inv_freq_near(inv, ref_inv_freq(500000, 64, "llama3", 32, 1, 4, 8192));
  // High frequencies untouched, the lowest divided by the factor.
  EXPECT_FLOAT_EQ(inv[0], 1.0f);
  EXPECT_NEAR(inv.back(), ref_inv_freq(500000, 64, "default").back() / 32, 1e-12);
}

TEST(TextSpec, LinearRopeAndOldTypeKey) {
  TextModelSpec s = must(R"({"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
      "num_hidden_layers": 1, "num_attention_heads": 2, "vocab_size": 10,
      "rope_scaling": {"type": "linear", "factor": 4.0}})");
  EXPECT_EQ(s.rope.type, "linear");
  expect_inv_freq_near(rope_inv_freq(s.rope, 32), ref_inv_freq(10000, 32, "linear", 4));
}

TEST(TextSpec, UnsupportedRopeTypes) {
  for (const char* type : {"dynamic", "yarn", "longrope"})
    expect_error(str_cat(R"({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 2,
        "rope_scaling": {"rope_type": ")",
                         type, R"(", "factor": 2.0}})"),
                 ErrorKind::kUnsupported, type);
  // llama3 without its required keys names the missing one.
  expect_error(R"({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 2,
      "rope_scaling": {"rope_type": "llama3", "factor": 8.0}})",
               ErrorKind::kNotFound, "low_freq_factor");
}

TEST(TextSpec, Qwen2HasQkvBiases) {
  TextModelSpec s = must(R"({"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "hidden_size": 896,
      "intermediate_size": 4864, "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2,
      "vocab_size": 151936, "rope_theta": 1000000.0, "sliding_window": 32768, "use_sliding_window": false,
      "tie_word_embeddings": true, "torch_dtype": "bfloat16", "max_window_layers": 21})");
  EXPECT_EQ(s.family, Family::kQwen2);
  EXPECT_TRUE(s.attention_bias);
  EXPECT_FALSE(s.qk_norm);
  EXPECT_EQ(s.head_dim, 64);
  EXPECT_EQ(s.sliding_window, 0);  // use_sliding_window false
  EXPECT_DOUBLE_EQ(s.rope.theta, 1e6);
  EXPECT_DOUBLE_EQ(s.attention_scale, 0.125);
}

TEST(TextSpec, Qwen2SlidingWindowIsUnsupported) {
  expect_error(R"({"model_type": "qwen2", "hidden_size": 64, "num_attention_heads": 2, "use_sliding_window": true})",
               ErrorKind::kUnsupported, "use_sliding_window");
}

TEST(TextSpec, Qwen3ExplicitHeadDimAndQkNorm) {
  // Qwen3-0.6B: head_dim 128 although hidden / heads = 64.
  TextModelSpec s = must(R"({"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "hidden_size": 1024,
      "intermediate_size": 3072, "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 8,
      "head_dim": 128, "vocab_size": 151936, "rope_theta": 1000000, "rms_norm_eps": 1e-06,
      "tie_word_embeddings": true, "torch_dtype": "bfloat16", "eos_token_id": 151645,
      "max_position_embeddings": 40960, "attention_bias": false})",
                         std::string(R"({"eos_token_id": [151645, 151643]})"));
  EXPECT_EQ(s.family, Family::kQwen3);
  EXPECT_EQ(s.head_dim, 128);
  EXPECT_TRUE(s.qk_norm);
  EXPECT_FALSE(s.attention_bias);
  EXPECT_DOUBLE_EQ(s.attention_scale, 1.0 / std::sqrt(128.0));
  EXPECT_EQ(s.eos_token_ids, (std::vector<int64_t>{151645, 151643}));  // generation_config wins
  EXPECT_EQ(s.max_position_embeddings, 40960);
  // Qwen3 defaults when omitted: head_dim 128, 32 kv heads.
  TextModelSpec d = must(R"({"model_type": "qwen3", "hidden_size": 64, "num_attention_heads": 32})");
  EXPECT_EQ(d.head_dim, 128);
  EXPECT_EQ(d.num_kv_heads, 32);
}

TEST(TextSpec, Gemma3TextPatternAndScales) {
  // Gemma 3 1B's values (sliding_window_pattern instead of layer_types).
  TextModelSpec s = must(R"({"model_type": "gemma3_text", "architectures": ["Gemma3ForCausalLM"],
      "hidden_size": 1152, "intermediate_size": 6912, "num_hidden_layers": 26, "num_attention_heads": 4,
      "num_key_value_heads": 1, "head_dim": 256, "vocab_size": 262144, "query_pre_attn_scalar": 256,
      "rope_local_base_freq": 10000, "rope_theta": 1000000, "rope_scaling": null, "sliding_window": 512,
      "sliding_window_pattern": 6, "final_logit_softcapping": null, "attn_logit_softcapping": null,
      "torch_dtype": "bfloat16", "eos_token_id": [1, 106], "max_position_embeddings": 32768})");
  EXPECT_EQ(s.family, Family::kGemma3);
  EXPECT_STREQ(family_name(s.family), "gemma3");
  EXPECT_EQ(s.weight_prefix, "model.");
  EXPECT_TRUE(s.tie_word_embeddings);  // Gemma3TextConfig default
  EXPECT_EQ(s.lm_head_name, "model.embed_tokens.weight");
  EXPECT_EQ(s.activation, Activation::kGeluTanh);
  EXPECT_TRUE(s.qk_norm && s.sandwich_norms);
  EXPECT_EQ(s.norm_weight_offset, 1.f);
  EXPECT_DOUBLE_EQ(s.attention_scale, 1.0 / 16);
  // sqrt(1152) = 33.94..., rounded to bf16 = 34.
  EXPECT_DOUBLE_EQ(s.embedding_scale, 34.0);
  EXPECT_EQ(s.sliding_window, 512);
  ASSERT_EQ(s.layer_is_sliding.size(), 26u);
  for (size_t i = 0; i < 26; ++i) EXPECT_EQ(s.layer_is_sliding[i], (i + 1) % 6 != 0) << "layer " << i;
  EXPECT_DOUBLE_EQ(s.rope.theta, 1e6);
  EXPECT_DOUBLE_EQ(s.rope_local.theta, 1e4);
  EXPECT_EQ(s.attn_logit_softcap, 0.0);
  EXPECT_EQ(s.final_logit_softcap, 0.0);
  // f32 checkpoints keep sqrt(hidden) at f32 precision.
  TextModelSpec f = must(R"({"model_type": "gemma3_text", "hidden_size": 1152, "torch_dtype": "float32"})");
  EXPECT_DOUBLE_EQ(f.embedding_scale, double(float(std::sqrt(1152.0))));
  // All defaults: 26 layers, head_dim 256, 4 kv heads, window 4096.
  TextModelSpec d = must(R"({"model_type": "gemma3_text"})");
  EXPECT_EQ(d.num_layers, 26);
  EXPECT_EQ(d.head_dim, 256);
  EXPECT_EQ(d.num_kv_heads, 4);
  EXPECT_EQ(d.sliding_window, 4096);
  EXPECT_EQ(d.vocab_size, 262208);
}

TEST(TextSpec, Gemma3LayerTypesLinearGlobalRopeAndSoftcaps) {
  TextModelSpec s = must(R"({"model_type": "gemma3_text", "hidden_size": 96, "num_hidden_layers": 4,
      "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "query_pre_attn_scalar": 24,
      "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
      "sliding_window_pattern": 6, "rope_scaling": {"rope_type": "linear", "factor": 8.0},
      "rope_local_base_freq": 5000, "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0})");
  EXPECT_EQ(s.layer_is_sliding, (std::vector<bool>{true, false, true, false}));  // layer_types wins
  EXPECT_EQ(s.rope.type, "linear");
  EXPECT_DOUBLE_EQ(s.rope.factor, 8.0);
  EXPECT_EQ(s.rope_local.type, "default");  // local rope is never scaled
  EXPECT_DOUBLE_EQ(s.rope_local.theta, 5000);
  EXPECT_DOUBLE_EQ(s.attention_scale, 1.0 / std::sqrt(24.0));
  EXPECT_DOUBLE_EQ(s.attn_logit_softcap, 50.0);
  EXPECT_DOUBLE_EQ(s.final_logit_softcap, 30.0);
  expect_inv_freq_near(rope_inv_freq(s.rope, 16), ref_inv_freq(1e6, 16, "linear", 8));
  expect_inv_freq_near(rope_inv_freq(s.rope_local, 16), ref_inv_freq(5000, 16, "default"));
}

TEST(TextSpec, Gemma3MultimodalWrapperUsesTextConfig) {
  TextModelSpec s = must(R"({"model_type": "gemma3", "architectures": ["Gemma3ForConditionalGeneration"],
      "torch_dtype": "bfloat16", "eos_token_id": [1, 106],
      "text_config": {"model_type": "gemma3_text", "hidden_size": 2560, "intermediate_size": 10240,
                      "num_hidden_layers": 34, "num_attention_heads": 8, "num_key_value_heads": 4,
                      "rope_scaling": {"factor": 8.0, "rope_type": "linear"}, "sliding_window": 1024},
      "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 1152}})");
  EXPECT_EQ(s.family, Family::kGemma3);
  EXPECT_EQ(s.model_type, "gemma3_text");
  EXPECT_EQ(s.weight_prefix, "model.language_model.");
  EXPECT_EQ(s.lm_head_name, "model.language_model.embed_tokens.weight");
  EXPECT_EQ(s.weight_dtype, DType::kBF16);  // from the root
  EXPECT_EQ(s.hidden_size, 2560);
  EXPECT_EQ(s.num_layers, 34);
  EXPECT_EQ(s.sliding_window, 1024);
  EXPECT_EQ(s.eos_token_ids, (std::vector<int64_t>{1, 106}));
  EXPECT_DOUBLE_EQ(s.embedding_scale, 50.5);  // sqrt(2560) = 50.596 -> bf16 50.5
}

TEST(TextSpec, LlavaWrapperPrefixes) {
  TextModelSpec s = must(R"({"model_type": "llava", "architectures": ["LlavaForConditionalGeneration"],
      "text_config": {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4,
                      "num_hidden_layers": 2, "vocab_size": 50}})");
  EXPECT_EQ(s.family, Family::kLlama);
  EXPECT_EQ(s.weight_prefix, "language_model.model.");
  EXPECT_EQ(s.lm_head_name, "language_model.lm_head.weight");
  TextModelSpec q = must(R"({"model_type": "llava", "tie_word_embeddings": true,
      "text_config": {"model_type": "qwen2", "hidden_size": 64, "num_attention_heads": 4}})");
  EXPECT_EQ(q.family, Family::kQwen2);
  EXPECT_EQ(q.lm_head_name, "language_model.model.embed_tokens.weight");
}

TEST(TextSpec, Qwen3VLInterleavedMrope) {
  TextModelSpec s = must(R"({"model_type": "qwen3_vl", "architectures": ["Qwen3VLForConditionalGeneration"],
      "vision_config": {"deepstack_visual_indexes": [5, 11, 17]},
      "text_config": {"model_type": "qwen3_vl_text", "hidden_size": 2048, "num_attention_heads": 16,
                      "num_key_value_heads": 8, "head_dim": 128, "num_hidden_layers": 28, "rope_theta": 5000000,
                      "rope_scaling": {"mrope_interleaved": true, "mrope_section": [24, 20, 20],
                                       "rope_type": "default"}}})");
  EXPECT_EQ(s.family, Family::kQwen3);
  EXPECT_TRUE(s.qk_norm);
  EXPECT_EQ(s.weight_prefix, "model.language_model.");
  EXPECT_EQ(s.lm_head_name, "lm_head.weight");
  EXPECT_EQ(s.mrope_section, (std::vector<int64_t>{24, 20, 20}));
  EXPECT_EQ(s.deepstack_layers, (std::vector<int64_t>{0, 1, 2}));
  EXPECT_DOUBLE_EQ(s.rope.theta, 5000000.0);
  // apply_interleaved_mrope: H at 1, 4, ..., 58; W at 2, 5, ..., 59; T elsewhere (incl. 60..63).
  std::vector<int> axis = mrope_axis_of_frequency(s);
  ASSERT_EQ(axis.size(), 64u);
  for (int i = 0; i < 64; ++i) {
    const int want = (i % 3 == 1 && i < 60) ? 1 : (i % 3 == 2 && i < 60) ? 2 : 0;
    EXPECT_EQ(axis[size_t(i)], want) << i;
  }
  // transformers v5 layout: rope_parameters, section defaults to [24, 20, 20].
  TextModelSpec v5 = must(R"({"model_type": "qwen3_vl", "text_config": {"model_type": "qwen3_vl_text",
      "head_dim": 128, "rope_parameters": {"rope_type": "default", "rope_theta": 5000000}}})");
  EXPECT_EQ(v5.mrope_section, (std::vector<int64_t>{24, 20, 20}));
  EXPECT_DOUBLE_EQ(v5.rope.theta, 5000000.0);
}

TEST(TextSpec, MropeIsNeverSilentlyDropped) {
  // A plain qwen3 / qwen2 with an mrope_section would run 1D rotary: refused, naming the key.
  expect_error(R"({"model_type": "qwen3", "rope_scaling": {"rope_type": "default", "mrope_section": [16, 24, 24]}})",
               ErrorKind::kUnsupported, "mrope_section");
  expect_error(R"({"model_type": "qwen2", "rope_parameters": {"rope_type": "default", "mrope_section": [16, 24, 24]}})",
               ErrorKind::kUnsupported, "mrope_section");
  expect_error(R"({"model_type": "qwen3_vl", "text_config": {"model_type": "qwen3_vl_text", "head_dim": 128,
      "rope_scaling": {"mrope_section": [24, 20, 21]}}})",
               ErrorKind::kInvalidArgument, "24, 20, 21");
  expect_error(R"({"model_type": "qwen3_vl", "text_config": {"model_type": "qwen3_vl_text", "head_dim": 128,
      "rope_scaling": {"mrope_section": [24, 20, 20], "mrope_interleaved": false}}})",
               ErrorKind::kUnsupported, "mrope_interleaved");
  expect_error(R"({"model_type": "qwen3_vl", "vision_config": {"deepstack_visual_indexes": [1, 2, 3, 4]},
      "text_config": {"model_type": "qwen3_vl_text", "num_hidden_layers": 3}})",
               ErrorKind::kInvalidArgument, "deepstack_visual_indexes");
}

TEST(TextSpec, ErrorsNameTheOffendingValues) {
  expect_error(R"({"model_type": "mistral"})", ErrorKind::kUnsupported, "mistral");
  expect_error(R"({"model_type": "qwen2_vl", "text_config": {"model_type": "qwen2"}})", ErrorKind::kUnsupported,
               "qwen2_vl");
  expect_error(R"({"model_type": "llava", "text_config": {"model_type": "phi3"}})", ErrorKind::kUnsupported, "phi3");
  expect_error(R"({"hidden_size": 64})", ErrorKind::kNotFound, "model_type");
  expect_error(R"({"model_type": "llama", "hidden_act": "gelu"})", ErrorKind::kUnsupported, "gelu");
  expect_error(R"({"model_type": "gemma3_text", "hidden_activation": "gelu"})", ErrorKind::kUnsupported, "gelu");
  expect_error(R"({"model_type": "llama", "attention_bias": true})", ErrorKind::kUnsupported, "attention_bias");
  expect_error(R"({"model_type": "llama", "mlp_bias": true})", ErrorKind::kUnsupported, "mlp_bias");
  expect_error(R"({"model_type": "llama", "torch_dtype": "float8_e4m3fn"})", ErrorKind::kUnsupported, "float8_e4m3fn");
  expect_error(R"({"model_type": "llama", "num_attention_heads": 6, "num_key_value_heads": 4, "hidden_size": 96})",
               ErrorKind::kInvalidArgument, "num_key_value_heads 4");
  expect_error(R"({"model_type": "llama", "hidden_size": 0})", ErrorKind::kInvalidArgument, "hidden_size");
  expect_error(R"({"model_type": "gemma3_text", "num_hidden_layers": 2, "layer_types": ["full_attention"]})",
               ErrorKind::kInvalidArgument, "layer_types");
  expect_error(R"({"model_type": "gemma3_text", "num_hidden_layers": 1, "layer_types": ["chunked_attention"]})",
               ErrorKind::kUnsupported, "chunked_attention");
  expect_error(R"({"model_type": "qwen3", "num_hidden_layers": 1, "layer_types": ["sliding_attention"]})",
               ErrorKind::kUnsupported, "sliding_attention");
  expect_error(R"({"model_type": "llama", "partial_rotary_factor": 0.5})", ErrorKind::kUnsupported,
               "partial_rotary_factor");
}

TEST(TextSpec, RopeParametersV5Layout) {
  TextModelSpec l = must(R"({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 2,
      "rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 20000.0}})");
  EXPECT_EQ(l.rope.type, "linear");
  EXPECT_DOUBLE_EQ(l.rope.theta, 20000.0);
  TextModelSpec g = must(R"({"model_type": "gemma3_text", "rope_parameters": {
      "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0},
      "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}})");
  EXPECT_EQ(g.rope.type, "linear");
  EXPECT_DOUBLE_EQ(g.rope.theta, 1e6);
  EXPECT_EQ(g.rope_local.type, "default");
  EXPECT_DOUBLE_EQ(g.rope_local.theta, 1e4);
}

}  // namespace
}  // namespace hlx::models
