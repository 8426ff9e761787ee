// Flags shared by every command that loads a text model (generate, chat, logits), so they are
// spelled, documented and validated in one place.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "engine/text_model.h"

namespace hlx::cli {

struct ModelFlags {
  int64_t capacity = 0;  // 0: the model's default (docs/CAPACITY.md)
  std::string kv_dtype = "auto";
  int threads = 0;                       // 0: all cores
  std::string weights;                   // empty: as stored; "int8"; or the checkpoint's own type ("bf16", "f32")
  std::vector<int64_t> prefill_buckets;  // empty: the model's default (default_prefill_buckets)
  std::string prefix_cache = "on";       // on | off: BatchEngineOptions::prefix_cache
  std::string batch_invariant = "on";    // on | off: TextModelOptions::product_order

  // Declares --capacity, --kv-dtype, --threads, --weights, --prefill-buckets, --prefix-cache and
  // --batch-invariant on `sub`.
  void add_to(CLI::App* sub);
  // Options for TextModel::load; kInvalidArgument for an unknown --kv-dtype or --weights.
  Result<engine::TextModelOptions> options() const;
  bool prefix_cache_on() const { return prefix_cache == "on"; }
};

}  // namespace hlx::cli
