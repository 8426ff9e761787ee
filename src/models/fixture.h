// Deterministic random-weight text checkpoints in real Hugging Face layout, for tests and demos.
//
// A fixture directory holds config.json (the family's real field names), generation_config.json
// and model.safetensors, and, when options.tokenizer_dir names the family's real tokenizer files,
// copies of tokenizer.json and tokenizer_config.json: then the vocabulary is the real model's
// (Qwen3 151936 for llama/qwen2/qwen3, Gemma3 262208 for gemma3/gemma3_text) and bos/eos/pad are
// the ids of the tokenizer's own special tokens, so text prompts and chat templates work. Every parameter is random
// (norm weights around 1, or around 0 for Gemma's (1 + w) norms; biases non-zero), so an identity norm or a dropped
// bias cannot pass a test by accident. Values come from a counter-free generator seeded by (seed, tensor name), so a
// tensor's contents do not depend on which other tensors the layout holds, and the same seed gives the same bytes on
// every machine.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "models/text_spec.h"

namespace hlx::models {

struct FixtureOptions {
  std::string family = "llama";  // llama | qwen2 | qwen3 | gemma3_text | gemma3
  std::string preset = "tiny";   // tiny | qwen3-0.6b (qwen3 only)
  DType dtype = DType::kF32;     // f32 | bf16 (stored weight dtype, written as torch_dtype)
  uint64_t seed = 0;
  // Directory holding the family's real tokenizer.json and tokenizer_config.json (Qwen3's for
  // llama/qwen2/qwen3, Gemma3's for gemma3/gemma3_text; see fixture_tokenizer_name). Empty: no
  // tokenizer files, a small vocabulary (tiny: 320) and placeholder special ids.
  std::string tokenizer_dir;
  // 0: the preset's vocabulary (with a tokenizer: the real model's). Otherwise this many rows; with
  // a tokenizer it must cover every token id (kInvalidArgument otherwise).
  int64_t vocab_size = 0;
  // write_quantized_text_fixture: "awq", "gptq" or "fp8", and the group size (0: 32 for tiny, 128
  // otherwise; unused by fp8, whose blocks are 128 x 128). The tiny preset with fp8 is wider
  // (hidden 200, intermediate 328, head_dim 48) so that edge blocks exist.
  std::string quant;
  int64_t quant_group = 0;
};

// "qwen3" or "gemma3": whose tokenizer a family's fixture ships (empty for an unknown family).
std::string fixture_tokenizer_name(const std::string& family);

// The families and presets write_text_fixture accepts.
std::vector<std::string> fixture_families();
std::vector<std::string> fixture_presets();

// config.json and generation_config.json text for `options` (kInvalidArgument for an unknown
// family, preset or dtype, or a preset that does not apply to the family).
struct FixtureConfigs {
  std::string config_json;
  std::string generation_config_json;
};
Result<FixtureConfigs> fixture_configs(const FixtureOptions& options);

// The architecture the fixture's config describes, as a TextModelSpec (used for the tensor layout).
Result<TextModelSpec> fixture_spec(const FixtureOptions& options);

// Deterministic values for one tensor (f32), as write_text_fixture stores them before any bf16
// rounding. Exposed so tests can check determinism without a file.
std::vector<float> fixture_tensor_values(const TextModelSpec& spec, const TensorInfo& info, uint64_t seed);

// One tensor of a fixture: values center + half_width * u, u uniform in [-1, 1) from the
// (seed, name) stream, as write_text_fixture generates them.
struct FixtureTensor {
  TensorInfo info;
  float center = 0.f, half_width = 0.f;
};
// The distribution write_text_fixture uses for a text-model tensor.
FixtureTensor text_fixture_tensor(const TextModelSpec& spec, const TensorInfo& info);
// Streams `tensors` into a safetensors file at `path` (temporary file, then rename), stored as
// `dtype` (f32 or bf16).
Status write_fixture_safetensors(const std::string& path, const std::vector<FixtureTensor>& tensors, DType dtype,
                                 uint64_t seed);

// The files of a fixture directory besides its weights, shared by every fixture writer: creates
// `dir`, writes each (file name, text) of `files`, and copies tokenizer.json and
// tokenizer_config.json from options.tokenizer_dir (the config's chat_template replaced when
// `chat_template` is not empty), or removes stale copies when there is no tokenizer directory.
Status write_fixture_files(const std::string& dir, const std::vector<std::pair<std::string, std::string>>& files,
                           const FixtureOptions& options, const std::string& chat_template);
// Streams `tensors` into dir/model.safetensors (write_fixture_safetensors) and re-opens it through
// the production reader: the header streamed must be one it accepts.
Status write_fixture_weights(const std::string& dir, const std::vector<FixtureTensor>& tensors,
                             const FixtureOptions& options);

// Vision-language fixtures (llava_fixture.cc): families "llava-clip" (llama text, CLIP tower),
// "llava-siglip" (qwen2 text, SigLIP tower) and "gemma3-vlm" (gemma3 text, SigLIP tower, Gemma3
// projector: 4 x 4 patches pooled to 2 x 2); presets "tiny", "clip-vit-l-336" (llava-clip: real
// CLIP ViT-L/14-336 tower shapes, tiny text model) and "gemma-3-4b" (gemma3-vlm: gemma-3-4b's tower,
// 256 tokens per image, tiny text model). Writes config.json, generation_config.json,
// preprocessor_config.json (gemma3-vlm: also processor_config.json), model.safetensors and, with
// tokenizer_dir, the family's tokenizer files (LLaVA: Qwen3's with image token <|image_pad|> and a
// LLaVA-style chat template; gemma3-vlm: Gemma3's, template unchanged).
bool is_vlm_fixture_family(const std::string& family);
Status write_vlm_fixture(const std::string& dir, const FixtureOptions& options);
// The config.json text write_vlm_fixture writes.
Result<std::string> vlm_fixture_config(const FixtureOptions& options);

// Qwen3-VL fixtures (qwen3_vl_fixture.cc): family "qwen3-vl", preset "tiny": the tiny qwen3 text
// model with interleaved M-RoPE ([6, 3, 3]) and a 4-block tower (patch 4, merge 2, DeepStack taps
// after blocks 0, 1, 3); preprocessor_config.json (Qwen2VLImageProcessorFast, 256..3072 pixels)
// and, with tokenizer_dir, the Qwen3 tokenizer with a Qwen3-VL-style chat template. Preset
// "qwen3-vl-2b": Qwen3-VL-2B-Instruct's shapes, for benchmarks.
bool is_qwen3_vl_fixture_family(const std::string& family);
Status write_qwen3_vl_fixture(const std::string& dir, const FixtureOptions& options);

// Creates `dir` (and parents) and writes config.json, generation_config.json, model.safetensors
// and (with tokenizer_dir) tokenizer.json and tokenizer_config.json. The safetensors file is streamed in
// chunks of 1M values (temporary file, then rename), so peak memory is a few MiB whatever the
// checkpoint size (a Qwen3-0.6B-shaped bf16 fixture is 1.2 GB on disk).
Status write_text_fixture(const std::string& dir, const FixtureOptions& options);

// write_text_fixture with every decoder linear layer (q/k/v/o, gate/up/down) stored as
// options.quant's 4-bit tensors (io/quantized.h: AWQ gemm, or GPTQ with a shuffled act-order g_idx)
// and config.json's quantization_config; codes, zero points and f16 scales random. Other tensors
// as write_text_fixture stores them. Built in memory (fine up to Qwen3-0.6B shapes).
Status write_quantized_text_fixture(const std::string& dir, const FixtureOptions& options);

}  // namespace hlx::models
