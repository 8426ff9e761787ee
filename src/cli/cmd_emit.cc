// `hlx emit -m DIR --entry ENTRY --capacity C [--slots N] [--rows L|B] [--kv-dtype bf16|f32|int8]
//  -o FILE.mlir`: writes one text-decoder entry (prefill, prefill_embeddings, prefill_all_logits,
// decode, prefill_embeddings_masked, prefill_embeddings_masked_all_logits; M-RoPE models also
// prefill_embeddings_mrope, prefill_embeddings_deepstack [--visual-rows Nv], decode_mrope) as
// StableHLO text. Default rows: the largest default prefill bucket (= the capacity) for prefill
// entries, the slot count for decode. On a vision-language checkpoint (llava, or gemma3 with tower
// weights) the text tensors are named as in the checkpoint and the masked entries carry the
// model's image variant; `--entry vision_encode [--vision-stage features|tower|pooled]` writes the
// vision entry (no capacity needed); a qwen3_vl checkpoint's `--entry vision_encode --grid H,W`
// writes the tower for one image of H x W patches.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>

#include "cli/command.h"
#include "io/checkpoint.h"
#include "io/hf_config.h"
#include "io/quantized.h"
#include "models/qwen3_vl.h"
#include "models/text_entries.h"
#include "models/vision_spec.h"
#include "stablehlo/printer.h"

namespace hlx::cli {
namespace {

struct EmitArgs {
  std::string model, entry, out, kv_dtype = "bf16", weights, vision_stage = "features", grid;
  int64_t capacity = 0, slots = 1, rows = 0, visual_rows = 0;
};

Result<models::TextEntry> parse_entry(const std::string& name) {
  using models::TextEntry;
  for (TextEntry e :
       {TextEntry::kPrefill, TextEntry::kPrefillEmbeddings, TextEntry::kPrefillAllLogits, TextEntry::kDecode,
        TextEntry::kPrefillEmbeddingsMasked, TextEntry::kPrefillEmbeddingsMaskedAllLogits,
        TextEntry::kPrefillEmbeddingsMrope, TextEntry::kPrefillEmbeddingsDeepstack, TextEntry::kDecodeMrope})
    if (name == models::entry_name(e)) return e;
  return make_error(ErrorKind::kInvalidArgument, "--entry '", name,
                    "' (expected prefill, prefill_embeddings, prefill_all_logits, decode, prefill_embeddings_masked, "
                    "prefill_embeddings_masked_all_logits, prefill_embeddings_mrope, prefill_embeddings_deepstack, "
                    "decode_mrope or vision_encode)");
}

Status write_text(const std::string& text, const std::string& path) {
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

Status run_emit_qwen3_vl_vision(const EmitArgs& a, const HfConfig& config) {
  HLX_ASSIGN_OR_RETURN(models::Qwen3VLSpec spec, models::qwen3_vl_spec_from_config(config));
  models::VisionGrid g;
  if (std::sscanf(a.grid.c_str(), "%ld,%ld", &g.h, &g.w) != 2)
    return make_error(ErrorKind::kInvalidArgument, "--grid '", a.grid, "' (expected H,W in patches)");
  HLX_ASSIGN_OR_RETURN(shlo::Module module, models::emit_qwen3_vl_vision_entry(spec, g));
  return write_text(shlo::print_module(module), a.out);
}

Status run_emit(const EmitArgs& a) {
  HLX_ASSIGN_OR_RETURN(HfConfig config, HfConfig::load(a.model));
  if (a.entry == "vision_encode" && !a.grid.empty()) return run_emit_qwen3_vl_vision(a, config);
  // The checkpoint's tensor names pick a vision-language model's naming scheme (and tell a Gemma3
  // VLM from a text-only Gemma3); a directory without weights emits with the default names.
  std::vector<std::string> names;
  if (Result<Checkpoint> ck = Checkpoint::open(a.model); ck.ok()) names = ck->names();
  const bool vlm = models::is_vision_language(config) || models::is_gemma3_vlm(config, names);
  if (a.entry == "vision_encode") {
    models::VisionStage stage = models::VisionStage::kFeatures;
    if (a.vision_stage == "tower")
      stage = models::VisionStage::kTower;
    else if (a.vision_stage == "pooled")
      stage = models::VisionStage::kPooled;
    else if (a.vision_stage != "features")
      return make_error(ErrorKind::kInvalidArgument, "--vision-stage '", a.vision_stage,
                        "' (expected features, tower or pooled)");
    if (!vlm)
      return make_error(
          ErrorKind::kInvalidArgument, a.model,
          ": --entry vision_encode needs a vision-language checkpoint (llava, or gemma3 with tower weights)");
    HLX_ASSIGN_OR_RETURN(models::VlmSpec vspec, models::vlm_spec_from_config(config, names));
    HLX_ASSIGN_OR_RETURN(shlo::Module module, models::emit_vision_entry(vspec, stage));
    return write_text(shlo::print_module(module), a.out);
  }
  HLX_ASSIGN_OR_RETURN(models::TextEntry entry, parse_entry(a.entry));
  models::EngineShape shape;
  shape.context_capacity = a.capacity;
  shape.slots = a.slots;
  if (a.kv_dtype == "bf16") {
    shape.kv_dtype = DType::kBF16;
  } else if (a.kv_dtype == "f32") {
    shape.kv_dtype = DType::kF32;
  } else if (a.kv_dtype == "int8") {
    shape.kv_dtype = DType::kI8;
  } else {
    return make_error(ErrorKind::kInvalidArgument, "--kv-dtype '", a.kv_dtype, "' (expected bf16, f32 or int8)");
  }
  if (!a.weights.empty() && a.weights != "int8" && a.weights != "int4")
    return make_error(ErrorKind::kInvalidArgument, "--weights '", a.weights, "' (expected int8 or int4)");
  if (a.capacity <= 0) return make_error(ErrorKind::kInvalidArgument, "--capacity ", a.capacity, " must be positive");
  if (a.slots <= 0) return make_error(ErrorKind::kInvalidArgument, "--slots ", a.slots, " must be positive");
  models::EntryRequest req;
  req.entry = entry;
  req.rows = a.rows;
  req.visual_rows = a.visual_rows;
  const bool decode = entry == models::TextEntry::kDecode || entry == models::TextEntry::kDecodeMrope;
  if (req.rows == 0) req.rows = decode ? a.slots : models::default_prefill_buckets(a.capacity).back();
  models::TextModelSpec spec;
  if (vlm) {
    HLX_ASSIGN_OR_RETURN(models::VlmSpec vspec, models::vlm_spec_from_config(config, names));
    spec = vspec.text;
    if (models::entry_takes_mask(entry)) req.variant = vspec.prefill_variant();
  } else {
    HLX_ASSIGN_OR_RETURN(spec, models::text_spec_from_config(config));
  }
  HLX_ASSIGN_OR_RETURN(QuantConfig quant, quant_config(config));
  spec.weight_format = weight_format_tag(quant, a.weights);
  HLX_ASSIGN_OR_RETURN(shlo::Module module, models::emit_text_entry(spec, shape, req));
  return write_text(shlo::print_module(module), a.out);
}

CommandRun setup_emit(CLI::App& root) {
  auto args = std::make_shared<EmitArgs>();
  CLI::App* sub = root.add_subcommand("emit", "Emit a text-decoder entry of a checkpoint as StableHLO text");
  sub->add_option("-m,--model", args->model, "Checkpoint directory (config.json)")->required();
  sub->add_option("--entry", args->entry,
                  "prefill | prefill_embeddings | prefill_all_logits | decode | prefill_embeddings_masked | "
                  "prefill_embeddings_masked_all_logits | prefill_embeddings_mrope | prefill_embeddings_deepstack | "
                  "decode_mrope | vision_encode")
      ->required();
  sub->add_option("--capacity", args->capacity, "Context capacity S (tokens per slot; text entries)");
  sub->add_option("--vision-stage", args->vision_stage,
                  "vision_encode output: features (default) | tower (last rows of the tower) | pooled (gemma3)");
  sub->add_option("--grid", args->grid, "vision_encode (qwen3_vl): H,W of the image in patches");
  sub->add_option("--slots", args->slots, "KV slots N (default 1)");
  sub->add_option("--rows", args->rows,
                  "Prefill rows (a bucket; default the largest, = capacity) or decode batch B (default N)");
  sub->add_option("--visual-rows", args->visual_rows, "prefill_embeddings_deepstack: static max Nv (default rows)");
  sub->add_option("--kv-dtype", args->kv_dtype, "KV cache dtype: bf16 (default), f32 or int8");
  sub->add_option("--weights", args->weights,
                  "int8 | int4: the module is for matmul weights quantized at load (part of its identity)");
  sub->add_option("-o,--out", args->out, "Output .mlir file (default stdout)");
  return [args]() -> int { return report(run_emit(*args)); };
}
HLX_REGISTER_COMMAND(setup_emit);

}  // namespace
}  // namespace hlx::cli
