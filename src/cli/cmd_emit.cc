// `hlx emit -m DIR --entry prefill|prefill_embeddings|prefill_all_logits|decode --capacity C
//  [--slots N] [--rows L|B] [--kv-dtype bf16|f32] -o FILE.mlir`: writes one text-decoder entry as
// StableHLO text (M-RoPE models also: prefill_embeddings_mrope, prefill_embeddings_deepstack
// [--visual-rows Nv], decode_mrope; and a qwen3_vl checkpoint's `--entry vision_encode --grid H,W`,
// the tower for one image of H x W patches). It
// Default rows: the largest default prefill bucket (= the capacity) for prefill
// entries, the slot count for decode.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>

#include "cli/command.h"
#include "io/hf_config.h"
#include "models/qwen3_vl.h"
#include "models/text_entries.h"
#include "stablehlo/printer.h"

namespace hlx::cli {
namespace {

struct EmitArgs {
  std::string model, entry, out, kv_dtype = "bf16", grid;
  int64_t capacity = 0, slots = 1, rows = 0, visual_rows = 0;
};

Result<models::TextEntry> parse_entry(const std::string& name) {
  using models::TextEntry;
  for (TextEntry e : {TextEntry::kPrefill, TextEntry::kPrefillEmbeddings, TextEntry::kPrefillAllLogits,
                      TextEntry::kDecode, TextEntry::kPrefillEmbeddingsMrope, TextEntry::kPrefillEmbeddingsDeepstack,
                      TextEntry::kDecodeMrope})
    if (name == models::entry_name(e)) return e;
  return make_error(ErrorKind::kInvalidArgument, "--entry '", name,
                    "' (expected prefill, prefill_embeddings, prefill_all_logits, decode, prefill_embeddings_mrope, "
                    "prefill_embeddings_deepstack or decode_mrope)");
}

Status write_text(const std::string& path, const shlo::Module& module) {
  std::string text = shlo::print_module(module);
  if (path.empty() || path == "-") {
    std::cout << text;
    return ok_status();
  }
  std::ofstream out(path, std::ios::binary);
  out << text;
  out.close();
  if (!out) return make_error(ErrorKind::kIo, "cannot write ", path);
  return ok_status();
}

Status run_emit_vision(const EmitArgs& a) {
  HLX_ASSIGN_OR_RETURN(HfConfig config, HfConfig::load(a.model));
  HLX_ASSIGN_OR_RETURN(models::Qwen3VLSpec spec, models::qwen3_vl_spec_from_config(config));
  models::VisionGrid g;
  if (std::sscanf(a.grid.c_str(), "%ld,%ld", &g.h, &g.w) != 2)
    return make_error(ErrorKind::kInvalidArgument, "--grid '", a.grid, "' (expected H,W in patches)");
  HLX_ASSIGN_OR_RETURN(shlo::Module module, models::emit_qwen3_vl_vision_entry(spec, g));
  return write_text(a.out, module);
}

Status run_emit(const EmitArgs& a) {
  if (a.entry == "vision_encode") return run_emit_vision(a);
  HLX_ASSIGN_OR_RETURN(models::TextEntry entry, parse_entry(a.entry));
  models::EngineShape shape;
  shape.context_capacity = a.capacity;
  shape.slots = a.slots;
  if (a.kv_dtype == "bf16") {
    shape.kv_dtype = DType::kBF16;
  } else if (a.kv_dtype == "f32") {
    shape.kv_dtype = DType::kF32;
  } else {
    return make_error(ErrorKind::kInvalidArgument, "--kv-dtype '", a.kv_dtype, "' (expected bf16 or f32)");
  }
  if (a.capacity <= 0) return make_error(ErrorKind::kInvalidArgument, "--capacity ", a.capacity, " must be positive");
  if (a.slots <= 0) return make_error(ErrorKind::kInvalidArgument, "--slots ", a.slots, " must be positive");
  models::EntryRequest req;
  req.entry = entry;
  req.rows = a.rows;
  req.visual_rows = a.visual_rows;
  const bool decode = entry == models::TextEntry::kDecode || entry == models::TextEntry::kDecodeMrope;
  if (req.rows == 0) req.rows = decode ? a.slots : models::default_prefill_buckets(a.capacity).back();
  HLX_ASSIGN_OR_RETURN(HfConfig config, HfConfig::load(a.model));
  HLX_ASSIGN_OR_RETURN(models::TextModelSpec spec, models::text_spec_from_config(config));
  HLX_ASSIGN_OR_RETURN(shlo::Module module, models::emit_text_entry(spec, shape, req));
  return write_text(a.out, module);
}

CommandRun setup_emit(CLI::App& root) {
  auto args = std::make_shared<EmitArgs>();
  CLI::App* sub = root.add_subcommand("emit", "Emit a text-decoder entry of a checkpoint as StableHLO text");
  sub->add_option("-m,--model", args->model, "Checkpoint directory (config.json)")->required();
  sub->add_option("--entry", args->entry, "prefill | prefill_embeddings | prefill_all_logits | decode | prefill_embeddings_mrope | "
                  "prefill_embeddings_deepstack | decode_mrope")->required();
  sub->add_option("--capacity", args->capacity, "Context capacity S (tokens per slot; text entries)");
  sub->add_option("--grid", args->grid, "vision_encode (qwen3_vl): H,W of the image in patches");
  sub->add_option("--slots", args->slots, "KV slots N (default 1)");
  sub->add_option("--rows", args->rows,
                  "Prefill rows (a bucket; default the largest, = capacity) or decode batch B (default N)");
  sub->add_option("--visual-rows", args->visual_rows, "prefill_embeddings_deepstack: static max Nv (default rows)");
  sub->add_option("--kv-dtype", args->kv_dtype, "KV cache dtype: bf16 (default) or f32");
  sub->add_option("-o,--out", args->out, "Output .mlir file (default stdout)");
  return [args]() -> int { return report(run_emit(*args)); };
}
HLX_REGISTER_COMMAND(setup_emit);

}  // namespace
}  // namespace hlx::cli
