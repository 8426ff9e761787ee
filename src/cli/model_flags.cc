#include "cli/model_flags.h"

namespace hlx::cli {

void ModelFlags::add_to(CLI::App* sub) {
  sub->add_option("--capacity", capacity,
                  "context capacity (default: min(4096, max_position_embeddings); see docs/CAPACITY.md)");
  sub->add_option("--kv-dtype", kv_dtype, "bf16 (default) | f32");
  sub->add_option("--threads", threads, "runtime threads (default: all cores)");
}

Result<engine::TextModelOptions> ModelFlags::options() const {
  engine::TextModelOptions o;
  o.context_capacity = capacity;
  auto kv = dtype_from_name(kv_dtype);
  if (!kv) return make_error(ErrorKind::kInvalidArgument, "--kv-dtype '", kv_dtype, "' (expected bf16 or f32)");
  o.kv_dtype = *kv;
  o.threads = threads;
  return o;
}

}  // namespace hlx::cli
