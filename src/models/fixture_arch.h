// What a text family contributes to `hlx fixture` (internal to src/models/): the tiny preset's
// architecture numbers and the config.json keys only that family writes. fixture.cc writes the
// keys every family shares; each family's file (llama.cc, qwen.cc, gemma3.cc) writes its own.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace hlx::models {

// The numbers a preset chooses; everything else follows from the family.
struct FixtureArch {
  std::string family;   // fixture family name
  int64_t vocab = 320;  // 320, not 256: a dimension equal to a power of two hides transposes
  int64_t hidden = 64, intermediate = 128, layers = 3, heads = 4, kv_heads = 2, head_dim = 16;
  double rope_theta = 10000.0;
  double rms_eps = 1e-6;
  bool tied = false;
  int64_t max_pos = 512;
  std::vector<int64_t> eos;
  int64_t bos = 1, pad = 0;
  int64_t boi = -1, eoi = -1, image = -1;  // gemma3 image tokens; -1: vocab - 20, -19, -18
};

struct TextFixture {
  void (*tiny)(FixtureArch& a);  // the tiny preset's choices for this family
  // This family's own config.json keys (architectures, biases, activation, rotary, windows, ...);
  // `c` already holds the shared ones. Keys are sorted on output, as Hugging Face writes them.
  void (*config)(const FixtureArch& a, nlohmann::json& c);
};

// A single eos id as a number, several as a list (as the released configs write them).
nlohmann::json fixture_eos_json(const std::vector<int64_t>& eos);

}  // namespace hlx::models
