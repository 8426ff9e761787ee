// Random-weight Qwen3-VL checkpoints (family "qwen3-vl") in the Qwen3VLForConditionalGeneration
// layout: model.language_model.* (the tiny qwen3 text fixture of the same seed, with interleaved
// M-RoPE), model.visual.* (every tower tensor, DeepStack mergers included), lm_head.weight;
// preprocessor_config.json for Qwen2VLImageProcessor; with a tokenizer, the Qwen3 tokenizer files
// and a Qwen3-VL-style chat template (an image part renders as
// <|vision_start|><|image_pad|><|vision_end|>).
#include <cmath>

#include <nlohmann/json.hpp>

#include "io/file.h"
#include "io/hf_config.h"
#include "models/fixture.h"
#include "models/qwen3_vl.h"

namespace hlx::models {
namespace {

using ojson = nlohmann::ordered_json;

// Tiny tower: patch 4, merge 2 (factor 8), 4 blocks with taps after 0, 1 and 3 (first, middle,
// last), hidden 48 / 4 heads (head_dim 12: rotary quarters of 3), a 6x6 position table so every
// real grid is interpolated. Text: the tiny qwen3 (3 layers, head_dim 24 -> mrope [6, 3, 3]).
struct VisionArch {
  int64_t depth, hidden, intermediate, heads, patch, merge, temporal, positions;
  std::vector<int64_t> taps;
  int64_t min_pixels, max_pixels;
};
const VisionArch kTiny{4, 48, 80, 4, 4, 2, 2, 36, {0, 1, 3}, 8 * 8 * 4, 8 * 8 * 48};
const std::vector<int64_t> kTinySection{6, 3, 3};
// Qwen/Qwen3-VL-2B-Instruct (config.json, preprocessor_config.json), for benchmarks.
const VisionArch k2B{24, 1024, 4096, 16, 16, 2, 2, 2304, {5, 11, 17}, 65536, 16777216};
const std::vector<int64_t> k2BSection{24, 20, 20};

constexpr const char* kChatTemplate =
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' -}}"
    "{%- if message['content'] is string -%}{{- message['content'] -}}"
    "{%- else -%}{%- for part in message['content'] -%}"
    "{%- if part['type'] == 'image' -%}{{- '<|vision_start|><|image_pad|><|vision_end|>' -}}"
    "{%- elif part['type'] == 'text' -%}{{- part['text'] -}}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}";

Result<int64_t> added_token(const FixtureOptions& o, const std::string& content, int64_t fallback) {
  if (o.tokenizer_dir.empty()) return fallback;
  const std::string path = o.tokenizer_dir + "/tokenizer.json";
  HLX_ASSIGN_OR_RETURN(std::string text, read_file(path));
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_object() && j.contains("added_tokens") && j["added_tokens"].is_array())
    for (const auto& t : j["added_tokens"])
      if (t.is_object() && t.value("content", "") == content && t.contains("id") && t["id"].is_number_integer())
        return t["id"].get<int64_t>();
  return make_error(ErrorKind::kNotFound, "fixture: '", path, "' has no added token \"", content, "\"");
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Norm weights 1 +- 0.2, biases +-0.17, the position table std 0.5, linear and patch weights std
// 1/sqrt(fan_in).
FixtureTensor vision_tensor(const TensorInfo& info) {
  constexpr float kSqrt3 = 1.7320508f;
  const std::string& n = info.name;
  if (ends_with(n, "norm.weight") || ends_with(n, "norm1.weight") || ends_with(n, "norm2.weight"))
    return {info, 1.f, 0.2f};
  if (ends_with(n, ".bias")) return {info, 0.f, 0.1f * kSqrt3};
  if (ends_with(n, "pos_embed.weight")) return {info, 0.f, 0.5f * kSqrt3};
  int64_t fan_in = 1;
  for (size_t i = 1; i < info.shape.size(); ++i) fan_in *= info.shape[i];
  return {info, 0.f, kSqrt3 / std::sqrt(float(fan_in))};
}

struct Qwen3VLFixture {
  std::string config_json, generation_json, preprocessor_json;
  Qwen3VLSpec spec;
};

Result<Qwen3VLFixture> make_configs(const FixtureOptions& o) {
  if (o.preset != "tiny" && o.preset != "qwen3-vl-2b")
    return make_error(ErrorKind::kInvalidArgument, "fixture: unknown preset '", o.preset,
                      "' for qwen3-vl (expected tiny or qwen3-vl-2b)");
  const bool big = o.preset == "qwen3-vl-2b";
  const VisionArch& v = big ? k2B : kTiny;
  FixtureOptions to = o;
  to.family = "qwen3";
  // The 2B decoder is Qwen3-0.6B's depth, heads and vocabulary at twice the width.
  to.preset = big ? "qwen3-0.6b" : "tiny";
  HLX_ASSIGN_OR_RETURN(FixtureConfigs text, fixture_configs(to));
  ojson text_cfg = ojson::parse(text.config_json);
  const int64_t vocab = text_cfg["vocab_size"].get<int64_t>();
  text_cfg["model_type"] = "qwen3_vl_text";
  text_cfg["rope_scaling"] = {
      {"mrope_interleaved", true}, {"mrope_section", big ? k2BSection : kTinySection}, {"rope_type", "default"}};
  if (big) {
    text_cfg["hidden_size"] = 2048;
    text_cfg["intermediate_size"] = 6144;
    text_cfg["max_position_embeddings"] = 262144;
    text_cfg["rope_theta"] = 5000000.0;
  }
  HLX_ASSIGN_OR_RETURN(int64_t image_id, added_token(o, "<|image_pad|>", vocab - 20));
  HLX_ASSIGN_OR_RETURN(int64_t video_id, added_token(o, "<|video_pad|>", vocab - 19));
  HLX_ASSIGN_OR_RETURN(int64_t start_id, added_token(o, "<|vision_start|>", vocab - 18));
  HLX_ASSIGN_OR_RETURN(int64_t end_id, added_token(o, "<|vision_end|>", vocab - 17));

  ojson vc = ojson::object();
  vc["deepstack_visual_indexes"] = v.taps;
  vc["depth"] = v.depth;
  vc["hidden_act"] = "gelu_pytorch_tanh";
  vc["hidden_size"] = v.hidden;
  vc["in_channels"] = 3;
  vc["intermediate_size"] = v.intermediate;
  vc["model_type"] = "qwen3_vl";
  vc["num_heads"] = v.heads;
  vc["num_position_embeddings"] = v.positions;
  vc["out_hidden_size"] = text_cfg["hidden_size"];
  vc["patch_size"] = v.patch;
  vc["spatial_merge_size"] = v.merge;
  vc["temporal_patch_size"] = v.temporal;

  ojson c = ojson::object();
  c["architectures"] = {"Qwen3VLForConditionalGeneration"};
  c["image_token_id"] = image_id;
  c["model_type"] = "qwen3_vl";
  c["text_config"] = text_cfg;
  c["tie_word_embeddings"] = text_cfg.value("tie_word_embeddings", false);
  c["torch_dtype"] = o.dtype == DType::kBF16 ? "bfloat16" : "float32";
  c["video_token_id"] = video_id;
  c["vision_config"] = vc;
  c["vision_end_token_id"] = end_id;
  c["vision_start_token_id"] = start_id;

  ojson p = ojson::object();
  p["do_convert_rgb"] = true;
  p["do_normalize"] = true;
  p["do_rescale"] = true;
  p["do_resize"] = true;
  p["image_mean"] = {0.5, 0.5, 0.5};
  p["image_processor_type"] = "Qwen2VLImageProcessorFast";
  p["image_std"] = {0.5, 0.5, 0.5};
  p["merge_size"] = v.merge;
  p["patch_size"] = v.patch;
  p["processor_class"] = "Qwen3VLProcessor";
  p["resample"] = 3;
  p["rescale_factor"] = 1.0 / 255.0;
  p["size"] = {{"longest_edge", v.max_pixels}, {"shortest_edge", v.min_pixels}};
  p["temporal_patch_size"] = v.temporal;

  Qwen3VLFixture out;
  out.generation_json = text.generation_config_json;
  HLX_ASSIGN_OR_RETURN(HfConfig parsed, HfConfig::parse(c.dump(2), "fixture config.json", out.generation_json));
  Result<Qwen3VLSpec> spec = qwen3_vl_spec_from_config(parsed);
  if (!spec.ok()) return spec.status().with_context(str_cat("fixture ", o.family, "/", o.preset));
  out.spec = std::move(*spec);
  out.config_json = c.dump(2) + "\n";
  out.preprocessor_json = p.dump(2) + "\n";
  return out;
}

}  // namespace

bool is_qwen3_vl_fixture_family(const std::string& family) { return family == "qwen3-vl"; }

Status write_qwen3_vl_fixture(const std::string& dir, const FixtureOptions& options) {
  HLX_ASSIGN_OR_RETURN(Qwen3VLFixture fx, make_configs(options));
  HLX_RETURN_IF_ERROR(write_fixture_files(dir,
                                          {{"config.json", fx.config_json},
                                           {"generation_config.json", fx.generation_json},
                                           {"preprocessor_config.json", fx.preprocessor_json}},
                                          options, kChatTemplate));
  std::vector<FixtureTensor> tensors;
  for (const TensorInfo& t : text_checkpoint_layout(fx.spec.text))
    tensors.push_back(text_fixture_tensor(fx.spec.text, t));
  for (const TensorInfo& t : qwen3_vl_vision_layout(fx.spec)) tensors.push_back(vision_tensor(t));
  return write_fixture_weights(dir, tensors, options);
}

}  // namespace hlx::models
