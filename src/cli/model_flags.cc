#include "cli/model_flags.h"

namespace hlx::cli {

void ModelFlags::add_to(CLI::App* sub) {
  sub->add_option("--capacity", capacity,
                  "context capacity (default: min(4096, max_position_embeddings); see docs/CAPACITY.md)");
  sub->add_option("--kv-dtype", kv_dtype,
                  "auto (default: f32 for an f32 checkpoint, else bf16) | bf16 | f32 | int8 (per-row, per-head "
                  "scales; docs/COMPOSITES.md)");
  sub->add_option("--threads", threads, "runtime threads (default: all cores)");
  sub->add_option("--weights", weights,
                  "matmul weights: int8 (per-channel) | int4 (groups of 128, f32 scale + min) quantized at load | the "
                  "checkpoint's own type (default)");
  sub->add_option("--prefill-buckets", prefill_buckets,
                  "prefill chunk sizes, ascending, comma-separated (default: powers of two up to the capacity)")
      ->delimiter(',');
  sub->add_option("--prefix-cache", prefix_cache,
                  "on (default) | off: reuse the cached KV rows of an earlier prompt's longest shared prefix "
                  "(docs/PERFORMANCE.md)")
      ->check(CLI::IsMember({"on", "off"}));
  sub->add_option("--batch-invariant", batch_invariant,
                  "on (default) | off: on, a token's logits do not depend on the batch or prefill chunking it ran in; "
                  "off lets prefill take faster kernels that break this (AMX on CPUs with AMX-BF16)")
      ->check(CLI::IsMember({"on", "off"}));
}

Result<engine::TextModelOptions> ModelFlags::options() const {
  engine::TextModelOptions o;
  o.context_capacity = capacity;
  if (kv_dtype != "auto") {
    auto kv = kv_dtype == "int8" ? std::optional<DType>(DType::kI8) : dtype_from_name(kv_dtype);
    if (!kv || (*kv != DType::kBF16 && *kv != DType::kF32 && *kv != DType::kI8))
      return make_error(ErrorKind::kInvalidArgument, "--kv-dtype '", kv_dtype, "' (expected auto, bf16, f32 or int8)");
    o.kv_dtype = *kv;
  }
  o.threads = threads;
  o.prefill_buckets = prefill_buckets;  // validated by TextModel::load against the capacity
  if (batch_invariant == "off") o.product_order = kernels::ProductOrder::kAnyOrder;
  if (weights == "int8") {
    o.weight_format = kernels::WeightFormat::kInt8;
  } else if (weights == "int4") {
    o.weight_format = kernels::WeightFormat::kInt4;
  } else if (!weights.empty()) {
    auto w = dtype_from_name(weights);
    if (!w || (*w != DType::kBF16 && *w != DType::kF32 && *w != DType::kF16))
      return make_error(ErrorKind::kInvalidArgument, "--weights '", weights,
                        "' (expected int8, int4, bf16, f16 or f32)");
    o.stored_weight_dtype = *w;
  }
  return o;
}

}  // namespace hlx::cli
