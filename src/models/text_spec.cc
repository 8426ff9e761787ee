// config.json -> TextModelSpec: the keys every text family reads, the wrappers' layouts, and the
// family table. Each family's defaults (those of its transformers configuration class, so an
// omitted key means what it means to transformers) and its own keys live in its file:
// llama.cc, qwen.cc, gemma3.cc (text_family.h).
#include "models/text_spec.h"

#include <algorithm>
#include <cmath>

#include "models/text_family.h"

namespace hlx::models {

const char* family_name(Family f) {
  switch (f) {
    case Family::kLlama:
      return "llama";
    case Family::kQwen2:
      return "qwen2";
    case Family::kQwen3:
      return "qwen3";
    case Family::kGemma3:
      return "gemma3";
  }
  return "?";
}

Status config_unsupported(const ConfigView& c, const std::string& key, const std::string& what) {
  return make_error(ErrorKind::kUnsupported, c.where(), ": ", key, ": ", what);
}
Status config_invalid(const ConfigView& c, const std::string& key, const std::string& what) {
  return make_error(ErrorKind::kInvalidArgument, c.where(), ": ", key, ": ", what);
}

// Reads one rope dictionary (`rope_scaling`, or a `rope_parameters` entry) into `rope`. The
// theta is left alone unless the dictionary carries `rope_theta` (transformers v5 layout).
Status parse_rope_dict(const ConfigView& d, const std::string& key, RopeSpec& rope) {
  if (d.empty()) return ok_status();
  // Older configs spell the type "type"; newer ones "rope_type".
  HLX_ASSIGN_OR_RETURN(std::string type, d.optional_string("rope_type", ""));
  if (type.empty()) {
    HLX_ASSIGN_OR_RETURN(type, d.optional_string("type", "default"));
  }
  HLX_ASSIGN_OR_RETURN(rope.theta, d.optional_float("rope_theta", rope.theta));
  HLX_ASSIGN_OR_RETURN(double partial, d.optional_float("partial_rotary_factor", 1.0));
  if (partial != 1.0)
    return config_unsupported(d, "partial_rotary_factor", str_cat(partial, " (only 1.0 is implemented)"));
  if (type == "default") {
    rope.type = "default";
    return ok_status();
  }
  if (type == "linear") {
    rope.type = "linear";
    HLX_ASSIGN_OR_RETURN(rope.factor, d.require_float("factor"));
    if (!(rope.factor > 0)) return config_invalid(d, "factor", str_cat(rope.factor, " must be > 0"));
    return ok_status();
  }
  if (type == "llama3") {
    rope.type = "llama3";
    // transformers requires all four keys for llama3 (rope_config_validation).
    HLX_ASSIGN_OR_RETURN(rope.factor, d.require_float("factor"));
    HLX_ASSIGN_OR_RETURN(rope.low_freq_factor, d.require_float("low_freq_factor"));
    HLX_ASSIGN_OR_RETURN(rope.high_freq_factor, d.require_float("high_freq_factor"));
    HLX_ASSIGN_OR_RETURN(rope.original_max_position, d.require_int("original_max_position_embeddings"));
    if (!(rope.factor > 0) || !(rope.low_freq_factor > 0) || !(rope.high_freq_factor > rope.low_freq_factor) ||
        rope.original_max_position <= 0)
      return config_invalid(d, "",
                            str_cat("llama3 rope scaling needs factor > 0 (", rope.factor, "), 0 < low_freq_factor (",
                                    rope.low_freq_factor, ") < high_freq_factor (", rope.high_freq_factor,
                                    ") and original_max_position_embeddings > 0 (", rope.original_max_position, ")"));
    return ok_status();
  }
  return config_unsupported(d, key, str_cat("rope type '", type, "' (implemented: default, linear, llama3)"));
}

// M-RoPE keys live in the same rope dictionary as the type. Qwen3-VL always interleaves (its
// rotary ignores `mrope_interleaved`) and defaults the section to [24, 20, 20]; any other model
// carrying `mrope_section` is refused rather than silently run with 1D rotary.
Status parse_mrope(const ConfigView& c, bool mrope, TextModelSpec& s) {
  HLX_ASSIGN_OR_RETURN(ConfigView scaling, c.optional_sub("rope_scaling"));
  HLX_ASSIGN_OR_RETURN(ConfigView params, c.optional_sub("rope_parameters"));
  const ConfigView* where = nullptr;
  for (const ConfigView* d : {&scaling, &params})
    if (!d->empty() && (d->has("mrope_section") || d->has("mrope_interleaved"))) where = d;
  if (!mrope) {
    if (where)
      return config_unsupported(*where, "mrope_section",
                                str_cat("M-RoPE for model_type ", s.model_type, " (implemented for qwen3_vl_text)"));
    return ok_status();
  }
  std::vector<int64_t> section = {24, 20, 20};
  if (where && where->has("mrope_section")) {
    HLX_ASSIGN_OR_RETURN(section, where->require_int_array("mrope_section"));
  }
  if (where && where->has("mrope_interleaved")) {
    HLX_ASSIGN_OR_RETURN(bool interleaved, where->require_bool("mrope_interleaved"));
    if (!interleaved)
      return config_unsupported(*where, "mrope_interleaved", "false (chunked M-RoPE is not implemented)");
  }
  int64_t sum = 0;
  for (int64_t v : section) sum += v < 0 ? -(int64_t(1) << 40) : v;
  if (section.size() != 3 || sum != s.head_dim / 2)
    return config_invalid(where ? *where : c, "mrope_section",
                          str_cat(
                              "needs 3 non-negative entries summing to head_dim / 2 = ", s.head_dim / 2, ", got [",
                              [&] {
                                std::string t;
                                for (size_t i = 0; i < section.size(); ++i) t += str_cat(i ? ", " : "", section[i]);
                                return t;
                              }(),
                              "]"));
  s.mrope_section = section;
  return ok_status();
}

namespace {

Result<DType> parse_dtype(const ConfigView& text, const ConfigView& root) {
  // "torch_dtype" (transformers v4) or "dtype" (v5), in the text config or at the root.
  std::string name;
  for (const ConfigView* c : {&text, &root})
    for (const char* key : {"torch_dtype", "dtype"})
      if (name.empty() && c->has(key)) {
        HLX_ASSIGN_OR_RETURN(name, c->require_string(key));
      }
  // Absent: transformers loads float32 by default.
  if (name.empty() || name == "float32") return DType::kF32;
  if (name == "bfloat16") return DType::kBF16;
  if (name == "float16") return DType::kF16;
  return config_unsupported(text, "torch_dtype", str_cat("'", name, "' (implemented: float32, bfloat16, float16)"));
}

}  // namespace

double round_to_dtype(double v, DType t) {
  float f = float(v);  // torch.tensor(python float) is f32 first
  if (t == DType::kBF16) return bf16_to_f32(f32_to_bf16(f));
  if (t == DType::kF16) return f16_to_f32(f32_to_f16(f));
  return f;
}

Status parse_single_rope(const ConfigView& c, TextModelSpec& s) {
  HLX_ASSIGN_OR_RETURN(ConfigView scaling, c.optional_sub("rope_scaling"));
  HLX_ASSIGN_OR_RETURN(ConfigView params, c.optional_sub("rope_parameters"));
  HLX_RETURN_IF_ERROR(parse_rope_dict(scaling, "rope_scaling", s.rope));
  HLX_RETURN_IF_ERROR(parse_rope_dict(params, "rope_parameters", s.rope));
  s.rope_local = s.rope;
  return ok_status();
}

Status parse_silu_activation(const ConfigView& c, TextModelSpec& s) {
  HLX_ASSIGN_OR_RETURN(std::string act, c.optional_string("hidden_act", "silu"));
  if (act != "silu" && act != "swish")
    return config_unsupported(c, "hidden_act", str_cat("'", act, "' (implemented: silu)"));
  s.activation = Activation::kSilu;
  return ok_status();
}

Status refuse_sliding_window(const ConfigView& c, TextModelSpec& s) {
  for (size_t i = 0; i < s.layer_is_sliding.size(); ++i)
    if (s.layer_is_sliding[i])
      return config_unsupported(c, str_cat("layer_types[", i, "]"),
                                str_cat("'sliding_attention' for model_type ", s.model_type,
                                        " (sliding window is implemented for gemma3 only)"));
  HLX_ASSIGN_OR_RETURN(bool use_sliding, c.optional_bool("use_sliding_window", false));
  if (use_sliding)
    return config_unsupported(c, "use_sliding_window",
                              str_cat("true for model_type ", s.model_type, " (not implemented)"));
  s.sliding_window = 0;
  return ok_status();
}

std::span<const TextFamily* const> text_families() {
  static const TextFamily* const kAll[] = {&kLlamaFamily, &kQwen2Family, &kQwen3Family, &kQwen3VLTextFamily,
                                           &kGemma3TextFamily};
  return kAll;
}

const TextFamily* find_text_family(const std::string& model_type) {
  for (const TextFamily* f : text_families())
    if (model_type == f->model_type) return f;
  return nullptr;
}

const TextFamily& text_family_of(Family family) {
  for (const TextFamily* f : text_families())
    if (f->family == family) return *f;
  return kLlamaFamily;  // unreachable: every Family has an entry
}

Result<TextModelSpec> text_spec_from_config(const HfConfig& config) {
  const ConfigView& root = config.root();
  const ConfigView& c = config.text();
  TextModelSpec s;
  HLX_ASSIGN_OR_RETURN(std::string root_type, config.model_type());
  HLX_ASSIGN_OR_RETURN(std::vector<std::string> archs, config.architectures());
  auto has_arch = [&](const std::string& a) { return std::find(archs.begin(), archs.end(), a) != archs.end(); };

  // Which text model, and where its tensors live in the checkpoint.
  std::string type = root_type;
  std::string lm_head = "lm_head.weight";
  s.weight_prefix = "model.";
  if (root_type == "gemma3") {
    // Gemma3ForConditionalGeneration: the text model sits in `model.language_model`.
    HLX_ASSIGN_OR_RETURN(type, c.optional_string("model_type", "gemma3_text"));
    s.weight_prefix = "model.language_model.";
  } else if (root_type == "llava") {
    // LLaVA-style wrappers: `language_model` is a whole *ForCausalLM (LlavaConfig's default text
    // model is llama).
    HLX_ASSIGN_OR_RETURN(type, c.optional_string("model_type", "llama"));
    s.weight_prefix = "language_model.model.";
    lm_head = "language_model.lm_head.weight";
  } else if (root_type == "qwen3_vl") {
    // Qwen3VLForConditionalGeneration: `model.language_model` + a top-level lm_head.
    HLX_ASSIGN_OR_RETURN(type, c.optional_string("model_type", "qwen3_vl_text"));
    s.weight_prefix = "model.language_model.";
  } else if (root.has("text_config")) {
    return make_error(ErrorKind::kUnsupported, root.where(), ": model_type '", root_type,
                      "' wraps a text_config (wrappers implemented for text: gemma3, llava, qwen3_vl)");
  }
  if (root_type == "gemma3_text" && has_arch("Gemma3ForConditionalGeneration"))
    s.weight_prefix = "model.language_model.";
  s.model_type = type;

  const TextFamily* family = find_text_family(type);
  if (!family) {
    std::string names;
    for (const TextFamily* f : text_families()) names += str_cat(f->model_type, ", ");
    return make_error(ErrorKind::kUnsupported, c.where(), ": model_type '", type, "' is not a supported text decoder (",
                      names, "gemma3, llava, qwen3_vl)");
  }
  s.family = family->family;
  const FamilyDefaults& def = family->defaults;

  HLX_ASSIGN_OR_RETURN(s.vocab_size, c.optional_int("vocab_size", def.vocab_size));
  HLX_ASSIGN_OR_RETURN(s.hidden_size, c.optional_int("hidden_size", def.hidden_size));
  HLX_ASSIGN_OR_RETURN(s.intermediate_size, c.optional_int("intermediate_size", def.intermediate_size));
  HLX_ASSIGN_OR_RETURN(s.num_layers, c.optional_int("num_hidden_layers", def.num_layers));
  HLX_ASSIGN_OR_RETURN(s.num_heads, c.optional_int("num_attention_heads", def.num_heads));
  HLX_ASSIGN_OR_RETURN(s.num_kv_heads,
                       c.optional_int("num_key_value_heads", def.kv_heads > 0 ? def.kv_heads : s.num_heads));
  for (auto [key, v] : {std::pair<const char*, int64_t>{"vocab_size", s.vocab_size},
                        {"hidden_size", s.hidden_size},
                        {"intermediate_size", s.intermediate_size},
                        {"num_hidden_layers", s.num_layers},
                        {"num_attention_heads", s.num_heads},
                        {"num_key_value_heads", s.num_kv_heads}})
    if (v <= 0) return config_invalid(c, key, str_cat(v, " must be positive"));
  if (s.num_heads % s.num_kv_heads != 0)
    return config_invalid(c, "num_attention_heads",
                          str_cat(s.num_heads, " is not a multiple of num_key_value_heads ", s.num_kv_heads));
  const int64_t hd_default =
      def.head_dim > 0 ? def.head_dim : (s.hidden_size % s.num_heads == 0 ? s.hidden_size / s.num_heads : 0);
  HLX_ASSIGN_OR_RETURN(s.head_dim, c.optional_int("head_dim", hd_default));
  if (s.head_dim <= 0 || s.head_dim % 2 != 0)
    return config_invalid(c, "head_dim",
                          str_cat(s.head_dim, " must be positive and even (hidden_size ", s.hidden_size,
                                  ", num_attention_heads ", s.num_heads, ")"));

  HLX_ASSIGN_OR_RETURN(s.rms_norm_eps, c.optional_float("rms_norm_eps", 1e-6));
  if (!(s.rms_norm_eps > 0)) return config_invalid(c, "rms_norm_eps", str_cat(s.rms_norm_eps, " must be > 0"));
  HLX_ASSIGN_OR_RETURN(s.max_position_embeddings, c.optional_int("max_position_embeddings", def.max_position));

  // Biases: a family with q/k/v biases (Qwen2) sets attention_bias itself; elsewhere the key puts
  // a bias on o_proj as well, which the spec does not model.
  HLX_ASSIGN_OR_RETURN(bool attention_bias, c.optional_bool("attention_bias", false));
  HLX_ASSIGN_OR_RETURN(bool mlp_bias, c.optional_bool("mlp_bias", false));
  if (mlp_bias) return config_unsupported(c, "mlp_bias", "true (MLP biases are not implemented)");

  // Tied head: text config, else the wrapper's root, else the family default.
  bool tie = def.tie_word_embeddings;
  if (c.has("tie_word_embeddings")) {
    HLX_ASSIGN_OR_RETURN(tie, c.require_bool("tie_word_embeddings"));
  } else if (root.has("tie_word_embeddings")) {
    HLX_ASSIGN_OR_RETURN(tie, root.require_bool("tie_word_embeddings"));
  }
  s.tie_word_embeddings = tie;
  s.lm_head_name = tie ? s.weight_prefix + "embed_tokens.weight" : lm_head;

  HLX_ASSIGN_OR_RETURN(s.weight_dtype, parse_dtype(c, root));

  // Rotary base (families read their rope dictionaries), and the upstream default scales.
  HLX_ASSIGN_OR_RETURN(s.rope.theta, c.optional_float("rope_theta", def.rope_theta));
  HLX_ASSIGN_OR_RETURN(double partial, c.optional_float("partial_rotary_factor", 1.0));
  if (partial != 1.0)
    return config_unsupported(c, "partial_rotary_factor", str_cat(partial, " (only 1.0 is implemented)"));
  s.attention_scale = 1.0 / std::sqrt(double(s.head_dim));
  s.embedding_scale = 1.0;

  // Sliding and global layers as listed; a family without a sliding window refuses them.
  s.layer_is_sliding.assign(size_t(s.num_layers), false);
  HLX_ASSIGN_OR_RETURN(std::vector<std::string> layer_types, c.optional_string_array("layer_types"));
  if (!layer_types.empty() && int64_t(layer_types.size()) != s.num_layers)
    return config_invalid(c, "layer_types",
                          str_cat("has ", layer_types.size(), " entries, num_hidden_layers is ", s.num_layers));
  for (size_t i = 0; i < layer_types.size(); ++i) {
    if (layer_types[i] == "sliding_attention") {
      s.layer_is_sliding[i] = true;
    } else if (layer_types[i] != "full_attention") {
      return config_unsupported(c, str_cat("layer_types[", i, "]"),
                                str_cat("'", layer_types[i], "' (implemented: full_attention, sliding_attention)"));
    }
  }

  HLX_RETURN_IF_ERROR(family->parse_own_keys(config, s));
  if (attention_bias && !s.attention_bias)
    return config_unsupported(c, "attention_bias", "true (biases on q/k/v/o projections are not implemented)");
  if (!(s.rope.theta > 0) || !(s.rope_local.theta > 0))
    return config_invalid(c, "rope_theta", str_cat(s.rope.theta, " / local ", s.rope_local.theta, " must be > 0"));

  // End of sequence: generation_config.json wins, then the text config, then the root.
  if (config.has_generation()) {
    HLX_ASSIGN_OR_RETURN(s.eos_token_ids, config.generation().optional_int_list("eos_token_id"));
  }
  if (s.eos_token_ids.empty()) {
    HLX_ASSIGN_OR_RETURN(s.eos_token_ids, c.optional_int_list("eos_token_id"));
  }
  if (s.eos_token_ids.empty()) {
    HLX_ASSIGN_OR_RETURN(s.eos_token_ids, root.optional_int_list("eos_token_id"));
  }
  return s;
}

std::vector<int> mrope_axis_of_frequency(const TextModelSpec& spec) {
  std::vector<int> axis(size_t(std::max<int64_t>(spec.head_dim / 2, 0)), 0);
  if (spec.mrope_section.size() != 3) return axis;
  // apply_interleaved_mrope: H takes slice(1, 3 * section[1], 3), W slice(2, 3 * section[2], 3).
  for (size_t i = 0; i < axis.size(); ++i) {
    const int64_t ii = int64_t(i);
    if (ii % 3 == 1 && ii < 3 * spec.mrope_section[1]) axis[i] = 1;
    if (ii % 3 == 2 && ii < 3 * spec.mrope_section[2]) axis[i] = 2;
  }
  return axis;
}

std::vector<float> rope_inv_freq(const RopeSpec& rope, int64_t head_dim) {
  std::vector<float> inv(size_t(std::max<int64_t>(head_dim / 2, 0)));
  // As transformers computes it in f32: 1 / base ** (arange(0, dim, 2).float() / dim).
  for (size_t i = 0; i < inv.size(); ++i) {
    float exponent = float(2 * i) / float(head_dim);
    inv[i] = 1.0f / float(std::pow(rope.theta, double(exponent)));
  }
  if (rope.type == "linear") {
    for (float& f : inv) f = f / float(rope.factor);
  } else if (rope.type == "llama3") {
    // _compute_llama3_parameters: long wavelengths scaled by 1/factor, short ones kept, a smooth
    // blend in between.
    const double old_ctx = double(rope.original_max_position);
    const double low_freq_wavelen = old_ctx / rope.low_freq_factor;
    const double high_freq_wavelen = old_ctx / rope.high_freq_factor;
    for (float& f : inv) {
      const float wavelen = float(2 * M_PI) / f;
      float scaled = wavelen > low_freq_wavelen ? f / float(rope.factor) : f;
      const bool medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
      if (medium) {
        const float smooth =
            float((old_ctx / wavelen - rope.low_freq_factor) / (rope.high_freq_factor - rope.low_freq_factor));
        scaled = (1 - smooth) * scaled / float(rope.factor) + smooth * scaled;
      }
      f = scaled;
    }
  }
  return inv;
}

}  // namespace hlx::models
