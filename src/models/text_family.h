// A text-decoder family as data (internal to src/models/): the model_type it answers to, the
// defaults of its upstream configuration class, the config keys only it reads, and its layer
// graph. text_spec.cc parses what all families share and calls `parse_own_keys`; the emitter
// calls `layer`. Adding a family is one TextFamily in its own file plus its row in
// text_families() (text_spec.cc); docs/ADD_A_MODEL.md has the whole checklist.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "core/status.h"
#include "io/hf_config.h"
#include "models/text_spec.h"

namespace hlx::shlo {
class Value;
}

namespace hlx::models {

struct DecoderContext;
struct TextFixture;
// One decoder layer: x [T, hidden] f32 residual stream in, the same out (decoder_common.h).
using LayerFn = shlo::Value (*)(DecoderContext& c, int64_t layer, const shlo::Value& x);

// Upstream defaults of the fields whose default differs between families. kv_heads 0: the
// attention head count (multi-head attention); head_dim 0: hidden_size / num_attention_heads.
struct FamilyDefaults {
  int64_t vocab_size, hidden_size, intermediate_size, num_layers, num_heads, kv_heads, head_dim;
  int64_t max_position;
  double rope_theta;
  bool tie_word_embeddings;
};

struct TextFamily {
  const char* model_type;  // the text config's model_type, e.g. "qwen3_vl_text"
  Family family;
  FamilyDefaults defaults;
  // Reads the keys only this family has, after the shared ones (sizes, norms' eps, tying, dtype,
  // rope_theta, layer_types): activation, biases, norm layout, rotary dictionaries, attention
  // scale, embedding scale, sliding window. `config` gives the root too (wrappers' side keys).
  Status (*parse_own_keys)(const HfConfig& config, TextModelSpec& s);
  LayerFn layer;
  // `hlx fixture --family <model_type>` (fixture_arch.h); nullptr: no text fixture of its own.
  const TextFixture* fixture = nullptr;
};

// Every family hlx runs, in the order error messages list them.
std::span<const TextFamily* const> text_families();
const TextFamily* find_text_family(const std::string& model_type);  // nullptr when unknown
const TextFamily& text_family_of(Family f);                         // the first entry of that family (its layer graph)

// The families, one per file (llama.cc, qwen.cc, gemma3.cc).
extern const TextFamily kLlamaFamily, kQwen2Family, kQwen3Family, kQwen3VLTextFamily, kGemma3TextFamily;

// Shared config readers the families' own parsers use (text_spec.cc).
Status config_unsupported(const ConfigView& c, const std::string& key, const std::string& what);
Status config_invalid(const ConfigView& c, const std::string& key, const std::string& what);
// One rope dictionary (`rope_scaling`, or a `rope_parameters` entry) into `rope`.
Status parse_rope_dict(const ConfigView& d, const std::string& key, RopeSpec& rope);
// `rope_scaling` and `rope_parameters` into s.rope, and s.rope_local = s.rope (one rotary).
Status parse_single_rope(const ConfigView& c, TextModelSpec& s);
// M-RoPE keys: read when `mrope` (Qwen3-VL), else refused if present.
Status parse_mrope(const ConfigView& c, bool mrope, TextModelSpec& s);
// `hidden_act` must be silu (Llama, Qwen).
Status parse_silu_activation(const ConfigView& c, TextModelSpec& s);
// Families without a sliding window: refuse `use_sliding_window` and sliding layer_types.
Status refuse_sliding_window(const ConfigView& c, TextModelSpec& s);
// Python float -> the weight dtype, as torch.tensor(v, dtype=...) rounds it.
double round_to_dtype(double v, DType t);

}  // namespace hlx::models
