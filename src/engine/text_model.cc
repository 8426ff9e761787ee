#include "engine/text_model.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "core/clock.h"
#include "engine/prefill_plan.h"
#include "engine/quantized_weight.h"
#include "core/sha256.h"
#include "io/hf_config.h"
#include "io/quantized.h"
#include "models/qwen3_vl.h"
#include "models/vision_spec.h"
#include "runtime/program.h"
#include "stablehlo/parser.h"
#include "stablehlo/verifier.h"

namespace hlx::engine {

using models::EntryRequest;
using models::TextEntry;

namespace {

std::string type_str(const shlo::TensorType& t) { return t.to_string(); }
shlo::TensorType tt(DType d, Shape s) { return shlo::TensorType{d, std::move(s)}; }

Tensor scalar_i32(int64_t v) {
  Tensor t = Tensor::empty(DType::kI32, {});
  *t.data<int32_t>() = int32_t(v);
  return t;
}

// Non-weight inputs and results of an entry, as text_entries.h defines them.
void expected_signature(const models::TextModelSpec& spec, const models::EngineShape& shape, const EntryRequest& r,
                        std::vector<std::pair<std::string, shlo::TensorType>>* inputs,
                        std::vector<std::pair<std::string, shlo::TensorType>>* results) {
  const DType i32 = DType::kI32;
  switch (r.entry) {
    case TextEntry::kPrefill:
    case TextEntry::kPrefillAllLogits:
    case TextEntry::kPrefillEmbeddings:
    case TextEntry::kPrefillEmbeddingsMasked:
    case TextEntry::kPrefillEmbeddingsMaskedAllLogits:
      if (models::entry_takes_embeddings(r.entry))
        inputs->push_back({"embeddings", tt(DType::kF32, {r.rows, spec.hidden_size})});
      else
        inputs->push_back({"tokens", tt(i32, {r.rows})});
      if (models::entry_takes_mask(r.entry)) inputs->push_back({"mask", tt(DType::kF32, {1, 1, r.rows, r.rows})});
      inputs->push_back({"length", tt(i32, {})});
      inputs->push_back({"start", tt(i32, {})});
      inputs->push_back({"slot", tt(i32, {})});
      results->push_back({"logits", models::entry_all_logits(r.entry) ? tt(DType::kF32, {r.rows, spec.vocab_size})
                                                                      : tt(DType::kF32, {spec.vocab_size})});
      break;
    case TextEntry::kPrefillEmbeddingsMrope:
    case TextEntry::kPrefillEmbeddingsDeepstack: {
      const int64_t nv = r.visual_rows > 0 ? r.visual_rows : r.rows;
      inputs->push_back({"embeddings", tt(DType::kF32, {r.rows, spec.hidden_size})});
      if (r.entry == TextEntry::kPrefillEmbeddingsMrope || !spec.mrope_section.empty())
        inputs->push_back({"rope_positions", tt(i32, {3, r.rows})});
      if (r.entry == TextEntry::kPrefillEmbeddingsDeepstack) {
        inputs->push_back({"visual_positions", tt(i32, {nv})});
        inputs->push_back(
            {"layer_features", tt(DType::kF32, {int64_t(spec.deepstack_layers.size()), nv, spec.hidden_size})});
        inputs->push_back({"visual_count", tt(i32, {})});
      }
      inputs->push_back({"length", tt(i32, {})});
      inputs->push_back({"start", tt(i32, {})});
      inputs->push_back({"slot", tt(i32, {})});
      results->push_back({"logits", tt(DType::kF32, {spec.vocab_size})});
      break;
    }
    case TextEntry::kDecode:
    case TextEntry::kDecodeMrope:
      inputs->push_back({"tokens", tt(i32, {r.rows})});
      inputs->push_back({"positions", tt(i32, {r.rows})});
      if (r.entry == TextEntry::kDecodeMrope) inputs->push_back({"rope_positions", tt(i32, {r.rows})});
      inputs->push_back({"slots", tt(i32, {r.rows})});
      results->push_back({"logits", tt(DType::kF32, {r.rows, spec.vocab_size})});
      break;
  }
  shlo::TensorType cache = tt(shape.kv_dtype, {shape.slots, shape.context_capacity, spec.num_kv_heads, spec.head_dim});
  shlo::TensorType scale = tt(DType::kF32, {shape.slots, shape.context_capacity, spec.num_kv_heads});  // int8 KV
  const std::vector<std::string> names = models::text_cache_names(shape);
  for (int64_t l = 0; l < spec.num_layers; ++l)
    for (size_t i = 0; i < names.size(); ++i) {
      inputs->push_back({str_cat(names[i], l), i < 2 ? cache : scale});
      results->push_back({str_cat(names[i], l), i < 2 ? cache : scale});
    }
}

// A capacity mismatch reads better than "shape differs": name the dimension when it is one.
std::string explain_cache_mismatch(const shlo::TensorType& want, const shlo::TensorType& got) {
  if (want.rank() != 4 || got.rank() != 4) return "";
  std::string s;
  if (got.shape[0] != want.shape[0])
    s += str_cat(" (module slots ", got.shape[0], ", engine slots ", want.shape[0], ")");
  if (got.shape[1] != want.shape[1])
    s += str_cat(" (module context_capacity ", got.shape[1], ", engine context_capacity ", want.shape[1], ")");
  if (got.dtype != want.dtype)
    s += str_cat(" (module kv dtype ", dtype_name(got.dtype), ", engine kv dtype ", dtype_name(want.dtype), ")");
  return s;
}

}  // namespace

int64_t default_context_capacity(const models::TextModelSpec& spec) {
  if (spec.max_position_embeddings > 0) return std::min(kDefaultContextCapacity, spec.max_position_embeddings);
  return kDefaultContextCapacity;
}

const char* finish_reason_name(FinishReason r) { return r == FinishReason::kStop ? "stop" : "length"; }

std::string text_module_file_name(const EntryRequest& request) {
  return str_cat(models::entry_name(request.entry), "_", request.rows, ".mlir");
}

Status check_text_module(const shlo::Module& module, const models::TextModelSpec& spec,
                         const models::EngineShape& shape, const EntryRequest& request, const std::string& source) {
  const char* name = models::entry_name(request.entry);
  const shlo::Function* fn = module.find_function(name);
  if (!fn || !fn->is_public) {
    std::string names;
    for (const auto& f : module.functions)
      if (f.is_public) names += (names.empty() ? "@" : ", @") + f.name;
    return make_error(ErrorKind::kNotFound, source, ": expected a public function @", name, ", found ",
                      names.empty() ? std::string("none") : names);
  }
  // Shapes first: a capacity or slot mismatch is named precisely before the (opaque) hash check.
  std::vector<std::pair<std::string, shlo::TensorType>> inputs, results;
  expected_signature(spec, shape, request, &inputs, &results);
  std::vector<models::TensorInfo> layout = models::text_checkpoint_layout(spec);
  size_t next_weight = 0, next_input = 0;
  for (size_t k = 0; k < fn->args.size(); ++k) {
    const shlo::TensorType& got = fn->type_of(fn->args[k]);
    const shlo::Attr* w = k < fn->arg_attrs.size() ? shlo::find_attr(fn->arg_attrs[k], shlo::kWeightAttr) : nullptr;
    if (w) {
      if (next_weight >= layout.size())
        return make_error(ErrorKind::kInvalidArgument, source, ": @", name, " argument #", k, " is weight '", w->str,
                          "' but the checkpoint layout has only ", layout.size(), " tensors");
      const auto& info = layout[next_weight++];
      if (w->str != info.name || got.shape != info.shape)
        return make_error(ErrorKind::kInvalidArgument, source, ": @", name, " argument #", k, ": expected weight '",
                          info.name, "' [", shape_to_string(info.shape), "], found '", w->str, "' [",
                          shape_to_string(got.shape), "]");
      continue;
    }
    if (next_input >= inputs.size())
      return make_error(ErrorKind::kInvalidArgument, source, ": @", name, " has more inputs than the ", inputs.size(),
                        " the contract defines (argument #", k, ", ", type_str(got), ")");
    const auto& [label, want] = inputs[next_input++];
    if (got != want)
      return make_error(ErrorKind::kInvalidArgument, source, ": @", name, " input '", label, "': expected ",
                        type_str(want), ", found ", type_str(got), explain_cache_mismatch(want, got));
  }
  if (next_weight != layout.size())
    return make_error(ErrorKind::kInvalidArgument, source, ": @", name, " binds ", next_weight, " weights, expected ",
                      layout.size(), " (text_checkpoint_layout)");
  if (next_input != inputs.size())
    return make_error(ErrorKind::kInvalidArgument, source, ": @", name, " has ", next_input, " inputs, expected ",
                      inputs.size());
  if (fn->result_types.size() != results.size())
    return make_error(ErrorKind::kInvalidArgument, source, ": @", name, " returns ", fn->result_types.size(),
                      " results, expected ", results.size());
  for (size_t i = 0; i < results.size(); ++i)
    if (fn->result_types[i] != results[i].second)
      return make_error(ErrorKind::kInvalidArgument, source, ": @", name, " result '", results[i].first, "': expected ",
                        type_str(results[i].second), ", found ", type_str(fn->result_types[i]),
                        explain_cache_mismatch(results[i].second, fn->result_types[i]));
  const shlo::Attr* id = shlo::find_attr(module.attrs, shlo::kIdentityAttr);
  std::string want_id = hlx::sha256_hex(models::text_entry_description(spec, shape, request));
  if (!id || id->kind != shlo::Attr::Kind::kString)
    return make_error(ErrorKind::kInvalidArgument, source, ": no string attribute ", shlo::kIdentityAttr,
                      " (expected \"", want_id, "\")");
  if (id->str != want_id)
    return make_error(ErrorKind::kInvalidArgument, source, ": ", shlo::kIdentityAttr, " is \"", id->str,
                      "\", expected \"", want_id, "\" for ", name, " rows=", request.rows,
                      " context_capacity=", shape.context_capacity, " slots=", shape.slots,
                      " kv=", dtype_name(shape.kv_dtype));
  return ok_status();
}

TextModel::~TextModel() = default;

Result<std::unique_ptr<TextModel>> TextModel::load(const std::string& model_dir, TextModelOptions options) {
  std::unique_ptr<TextModel> m(new TextModel());
  auto t0 = std::chrono::steady_clock::now();
  HLX_ASSIGN_OR_RETURN(HfConfig config, HfConfig::load(model_dir));
  HLX_ASSIGN_OR_RETURN(m->spec_, models::text_spec_from_config(config));
  m->stats_.config_ms = ms_since(t0);
  const models::TextModelSpec& spec = m->spec_;

  if (options.slots < 1) return make_error(ErrorKind::kInvalidArgument, "slots must be >= 1, got ", options.slots);
  if (options.kv_dtype && *options.kv_dtype != DType::kBF16 && *options.kv_dtype != DType::kF32 &&
      *options.kv_dtype != DType::kI8)
    return make_error(ErrorKind::kInvalidArgument, "kv dtype must be bf16, f32 or i8, got ",
                      dtype_name(*options.kv_dtype));
  int64_t capacity = options.context_capacity ? options.context_capacity : default_context_capacity(spec);
  if (capacity < 1) return make_error(ErrorKind::kInvalidArgument, "context capacity must be >= 1, got ", capacity);
  // i32 positions and slot ids in the modules.
  if (capacity > INT32_MAX || options.slots > INT32_MAX)
    return make_error(ErrorKind::kInvalidArgument, "context capacity ", capacity, " / slots ", options.slots,
                      " exceed the i32 range of positions");
  m->buckets_ = options.prefill_buckets.empty() ? models::default_prefill_buckets(capacity) : options.prefill_buckets;
  HLX_RETURN_IF_ERROR(validate_buckets(m->buckets_, capacity).with_context("prefill buckets"));
  m->options_ = options;

  // Weights: every layout tensor must exist with the layout's shape; it stays in its stored dtype
  // and is borrowed from the mapping (no copy).
  t0 = std::chrono::steady_clock::now();
  HLX_ASSIGN_OR_RETURN(Checkpoint ckpt, Checkpoint::open(model_dir));
  m->checkpoint_ = std::make_unique<Checkpoint>(std::move(ckpt));
  const std::vector<std::string> names = m->checkpoint_->names();
  if (models::is_vision_language(config) || models::is_gemma3_vlm(config, names)) {
    // The text tower's tensor prefix depends on the checkpoint's naming scheme (legacy
    // `language_model.model.*` or `model.language_model.*`), and image prompts need the
    // embeddings entries (Gemma3: the masked ones, with the model's image variant).
    HLX_ASSIGN_OR_RETURN(models::VlmSpec vlm, models::vlm_spec_from_config(config, names));
    m->spec_ = std::move(vlm.text);
    m->options_.embeddings = true;
    if (vlm.family == models::VlmFamily::kGemma3) {
      m->masked_variant_ = vlm.prefill_variant();
      m->image_token_id_ = vlm.image_token_id;
      m->mask_rule_ = vlm.mask_mode == models::ImageMaskMode::kBidirectional ? mm::MaskRule::kBidirectional
                                                                             : mm::MaskRule::kImageBlocks;
    }
  }
  if (!spec.mrope_section.empty()) {
    // Qwen3-VL: image prompts run the M-RoPE entries; visual rows must hold the image token.
    m->options_.embeddings = true;
    if (auto type = config.model_type(); type.ok() && *type == "qwen3_vl") {
      HLX_ASSIGN_OR_RETURN(models::Qwen3VLSpec vl, models::qwen3_vl_spec_from_config(config));
      m->image_token_id_ = vl.image_token_id;
    }
  }
  if (options.deepstack_visual_rows < 0)
    return make_error(ErrorKind::kInvalidArgument, "deepstack_visual_rows ", options.deepstack_visual_rows,
                      " must be >= 0");
  // A checkpoint stored 4-bit (quantization_config): each linear layer with `<base>.qweight` is
  // packed from its stored tensors here and bound as a placeholder (runtime/program.h); an FP8 one:
  // each linear layer stored F8_E4M3 (or with a weight_scale_inv), packed int8 (engine/quantized_weight.h).
  HLX_ASSIGN_OR_RETURN(QuantConfig quant, quant_config(config));
  std::vector<float> fp8_scratch;
  const std::string embed_name = spec.weight_prefix + "embed_tokens.weight";
  const bool untied = spec.lm_head_name != embed_name;
  // Bytes of a weight as the model holds it (matmul weights as the kernels pack them; an untied
  // embedding table is gathered from as stored).
  auto held_bytes = [&](const std::string& name, const Tensor& t) -> size_t {
    if (t.shape().size() != 2 || (name == embed_name && untied)) return t.nbytes();
    const int64_t n = t.shape()[0], k = t.shape()[1];  // [N, K] as Hugging Face stores a linear layer
    if (options.weight_format == kernels::WeightFormat::kInt8) return kernels::int8_packed_bytes(k, n);
    if (options.weight_format == kernels::WeightFormat::kInt4) return kernels::int4_packed_bytes(k, n);
    return t.nbytes();
  };
  for (const auto& info : models::text_checkpoint_layout(spec)) {
    const std::string suffix = ".weight";
    const bool linear = info.shape.size() == 2 && info.name.size() > suffix.size() &&
                        info.name.compare(info.name.size() - suffix.size(), suffix.size(), suffix) == 0;
    const std::string base = linear ? info.name.substr(0, info.name.size() - suffix.size()) : "";
    // A linear layer stored quantized is packed from its stored tensors and bound as a placeholder.
    Result<std::unique_ptr<kernels::PackedWeight>> packed{std::unique_ptr<kernels::PackedWeight>()};
    if (quant.method == QuantMethod::kFp8 && linear &&
        (Fp8Linear::stored(*m->checkpoint_, base) || m->checkpoint_->has(base + ".weight_scale_inv"))) {
      HLX_ASSIGN_OR_RETURN(Fp8Linear l, Fp8Linear::load(*m->checkpoint_, base, quant, info.shape[0], info.shape[1]));
      packed = pack_fp8_linear(l, options.weight_format, fp8_scratch);
      if (packed.ok()) m->checkpoint_->release_pages(info.name);  // the stored bytes need not stay resident
    } else if (quant.method != QuantMethod::kNone && linear && m->checkpoint_->has(base + ".qweight")) {
      HLX_ASSIGN_OR_RETURN(Int4Linear l, Int4Linear::load(*m->checkpoint_, base, quant, info.shape[0], info.shape[1]));
      packed = pack_quantized_linear(l);
    }
    if (!packed.ok()) return packed.status().with_context(str_cat(model_dir, ": ", info.name));
    if (*packed) {
      m->stats_.weight_bytes += (*packed)->packed_bytes();
      m->stats_.held_weight_bytes += (*packed)->packed_bytes();
      m->stats_.decode_weight_bytes += (*packed)->packed_bytes();
      HLX_ASSIGN_OR_RETURN(Tensor t, rt::packed_placeholder(spec.weight_dtype, info.shape));
      m->packed_weights_.push_back(rt::register_packed_weight(t, std::move(*packed)));
      m->weights_.emplace_back(info.name, std::move(t));
      continue;
    }
    HLX_ASSIGN_OR_RETURN(Tensor t, m->checkpoint_->weight(info.name, info.shape));
    m->stats_.weight_bytes += t.nbytes();
    m->stats_.held_weight_bytes += held_bytes(info.name, t);
    // A decode step gathers one row of an untied embedding table.
    m->stats_.decode_weight_bytes +=
        info.name == embed_name && untied ? size_t(spec.hidden_size) * dtype_size(t.dtype()) : held_bytes(info.name, t);
    m->weights_.emplace_back(info.name, std::move(t));
  }
  if (options.weight_format == kernels::WeightFormat::kAsStored && options.stored_weight_dtype &&
      !m->weights_.empty() && m->weights_.front().second.dtype() != *options.stored_weight_dtype)
    return make_error(ErrorKind::kInvalidArgument, "weights ", dtype_name(*options.stored_weight_dtype), " asked, but ",
                      model_dir, " stores ", dtype_name(m->weights_.front().second.dtype()), " weights (",
                      m->weights_.front().first, "); use its own type or int8");
  m->stats_.checkpoint_ms = ms_since(t0);
  if (!options.kv_dtype)
    options.kv_dtype =
        !m->weights_.empty() && m->weights_.front().second.dtype() == DType::kF32 ? DType::kF32 : DType::kBF16;
  m->options_.kv_dtype = options.kv_dtype;
  m->shape_ = models::EngineShape{capacity, options.slots, *options.kv_dtype};
  // Identity: the stored quantization method (its tensors are packed, not the module's weights)
  // and the format the runtime quantizes the remaining matmul weights to.
  m->spec_.weight_format = weight_format_tag(quant, options.weight_format == kernels::WeightFormat::kAsStored
                                                        ? ""
                                                        : kernels::weight_format_name(options.weight_format));

  // Every module is emitted (or read and checked) now, so identity and capacity mismatches fail
  // here; only compilation may be deferred.
  t0 = std::chrono::steady_clock::now();
  for (int64_t b : m->buckets_) {
    HLX_RETURN_IF_ERROR(m->prepare_entry({TextEntry::kPrefill, b}));
    if (options.all_logits) HLX_RETURN_IF_ERROR(m->prepare_entry({TextEntry::kPrefillAllLogits, b}));
    if (m->options_.embeddings) HLX_RETURN_IF_ERROR(m->prepare_entry({TextEntry::kPrefillEmbeddings, b}));
    if (!m->masked_variant_.empty())
      HLX_RETURN_IF_ERROR(m->prepare_entry({TextEntry::kPrefillEmbeddingsMasked, b, m->masked_variant_}));
    if (!spec.mrope_section.empty()) {
      HLX_RETURN_IF_ERROR(m->prepare_entry({TextEntry::kPrefillEmbeddingsMrope, b}));
      if (!spec.deepstack_layers.empty())
        HLX_RETURN_IF_ERROR(m->prepare_entry({TextEntry::kPrefillEmbeddingsDeepstack, b, m->deepstack_rows(b)}));
    }
  }
  for (int64_t b = 1; b <= options.slots; ++b) {
    HLX_RETURN_IF_ERROR(m->prepare_entry({TextEntry::kDecode, b}));
    if (!spec.mrope_section.empty()) HLX_RETURN_IF_ERROR(m->prepare_entry({TextEntry::kDecodeMrope, b}));
  }
  m->stats_.emit_ms = ms_since(t0);
  if (options.eager_compile)
    for (auto& [key, e] : m->entries_) HLX_RETURN_IF_ERROR(m->compile(e));

  // KV caches: allocated once, zero-filled so padding rows are deterministic bytes.
  // int8 KV adds per layer the f32 [slots, S, kv_heads] scales of K and V (models::text_cache_names order).
  Shape cache_shape{options.slots, capacity, spec.num_kv_heads, spec.head_dim};
  Shape scale_shape{options.slots, capacity, spec.num_kv_heads};
  HLX_RETURN_IF_ERROR(checked_num_elements(cache_shape).status());  // overflow check
  const size_t per_layer = models::text_cache_names(m->shape_).size();
  for (int64_t l = 0; l < spec.num_layers; ++l)
    for (size_t i = 0; i < per_layer; ++i) {
      m->caches_.push_back(i < 2 ? Tensor::zeros(*options.kv_dtype, cache_shape)
                                 : Tensor::zeros(DType::kF32, scale_shape));
      m->stats_.kv_bytes += m->caches_.back().nbytes();
    }
  m->pool_ = SlotPool(options.slots);
  m->history_.assign(size_t(options.slots), {});
  m->embedded_end_.assign(size_t(options.slots), 0);
  m->rope_delta_.assign(size_t(options.slots), 0);
  m->prefilled_end_.assign(size_t(options.slots), 0);
  m->retained_.assign(size_t(options.slots), {});
  m->images_.assign(size_t(options.slots), {});
  m->image_writer_.assign(size_t(options.slots), false);
  return m;
}

Status TextModel::prepare_entry(const EntryRequest& request) {
  Entry e;
  e.request = request;
  if (options_.modules_dir) {
    std::string path = (std::filesystem::path(*options_.modules_dir) / text_module_file_name(request)).string();
    HLX_ASSIGN_OR_RETURN(shlo::Module module, shlo::parse_module_file(path));
    HLX_RETURN_IF_ERROR(shlo::verify_module(module).with_context(path));
    HLX_RETURN_IF_ERROR(check_text_module(module, spec_, shape_, request, path));
    e.source = path;
    e.module = std::make_shared<const shlo::Module>(std::move(module));
  } else {
    HLX_ASSIGN_OR_RETURN(shlo::Module module, models::emit_text_entry(spec_, shape_, request));
    // Our own emitter is held to the same contract as a file: a drift between emitter and engine
    // shows up here, at load, not as a wrong result.
    HLX_RETURN_IF_ERROR(check_text_module(module, spec_, shape_, request, "emitted module"));
    e.source = "emitted";
    e.module = std::make_shared<const shlo::Module>(std::move(module));
  }
  ++stats_.modules;
  entries_[{int(request.entry), request.rows}] = std::move(e);
  return ok_status();
}

Status TextModel::compile(Entry& e) {
  if (e.program) return ok_status();
  auto t0 = std::chrono::steady_clock::now();
  rt::ProgramOptions po;
  po.threads = options_.threads;
  po.weight_format = options_.weight_format;
  po.product_order = options_.product_order;
  HLX_ASSIGN_OR_RETURN(std::shared_ptr<rt::Program> program, rt::Program::compile(e.module, po));
  stats_.compile_ms += ms_since(t0);
  t0 = std::chrono::steady_clock::now();
  for (const auto& [name, tensor] : weights_)
    HLX_RETURN_IF_ERROR(program->bind_weight(name, tensor).with_context(e.source));
  stats_.bind_ms += ms_since(t0);
  auto ps = program->plan_stats(models::entry_name(e.request.entry));
  if (ps.ok()) stats_.arena_bytes += ps->arena_bytes;
  e.program = std::move(program);
  ++stats_.compiled;
  return ok_status();
}

Result<TextModel::Entry*> TextModel::compiled(TextEntry entry, int64_t rows) {
  auto it = entries_.find({int(entry), rows});
  if (it == entries_.end())
    return make_error(ErrorKind::kNotFound, "no ", models::entry_name(entry), " entry for ", rows, " rows was prepared",
                      entry == TextEntry::kPrefillAllLogits ? " (load with all_logits)" : "");
  HLX_RETURN_IF_ERROR(compile(it->second));
  return &it->second;
}

Status TextModel::warm_up(int64_t prompt_len, bool all_logits, int64_t decode_batch, bool embeddings) {
  if (embeddings && has_mrope_entries()) return warm_up_mrope(prompt_len, decode_batch);
  if (prompt_len > 0) {
    HLX_ASSIGN_OR_RETURN(std::vector<PrefillChunk> chunks,
                         plan_prefill_chunks(buckets_, shape_.context_capacity, 0, prompt_len));
    TextEntry kind = embeddings
                         ? (has_masked_entries() ? TextEntry::kPrefillEmbeddingsMasked : TextEntry::kPrefillEmbeddings)
                     : all_logits ? TextEntry::kPrefillAllLogits
                                  : TextEntry::kPrefill;
    for (const auto& c : chunks) HLX_RETURN_IF_ERROR(compiled(kind, c.bucket).status());
  }
  if (decode_batch > 0) HLX_RETURN_IF_ERROR(compiled(TextEntry::kDecode, decode_batch).status());
  return ok_status();
}

Status TextModel::warm_up_mrope(int64_t prompt_len, int64_t decode_batch) {
  if (spec_.mrope_section.empty())
    return make_error(ErrorKind::kInvalidArgument, "warm_up_mrope: the model (", spec_.model_type,
                      ") has no mrope_section");
  if (prompt_len > 0) {
    HLX_ASSIGN_OR_RETURN(std::vector<PrefillChunk> chunks,
                         plan_prefill_chunks(buckets_, shape_.context_capacity, 0, prompt_len));
    for (const auto& c : chunks) {
      HLX_RETURN_IF_ERROR(compiled(TextEntry::kPrefillEmbeddingsMrope, c.bucket).status());
      if (!spec_.deepstack_layers.empty())
        HLX_RETURN_IF_ERROR(compiled(TextEntry::kPrefillEmbeddingsDeepstack, c.bucket).status());
    }
  }
  if (decode_batch > 0) HLX_RETURN_IF_ERROR(compiled(TextEntry::kDecodeMrope, decode_batch).status());
  return ok_status();
}

Result<std::vector<Tensor>> TextModel::run(Entry& e, std::vector<Tensor> inputs) {
  for (const Tensor& c : caches_) inputs.push_back(c);
  const char* name = models::entry_name(e.request.entry);
  HLX_ASSIGN_OR_RETURN(std::vector<Tensor> out, e.program->run(name, std::move(inputs)));
  if (out.size() != 1 + caches_.size())
    return make_error(ErrorKind::kInternal, "@", name, " returned ", out.size(), " results, expected ",
                      1 + caches_.size());
  // Donated caches must come back as the same storage; anything else would silently fork state.
  // This cannot tell a true in-place update from Program::run's copy-back fallback (both end in
  // the argument's storage); the plan dump (HLX_DUMP_PLAN=1) shows the scatters as in-place.
  for (size_t i = 0; i < caches_.size(); ++i)
    if (out[1 + i].raw() != caches_[i].raw())
      return make_error(ErrorKind::kInternal, "@", name, " result #", 1 + i, " does not alias its donated cache");
  return out;
}

Result<int64_t> TextModel::admit(std::span<const int64_t> prompt, int64_t max_new_tokens, Admission* admission) {
  return admit(AdmissionRequest{int64_t(prompt.size()), max_new_tokens, prompt}, admission);
}

Result<int64_t> TextModel::admit(const AdmissionRequest& request, Admission* admission, int64_t wanted) {
  Admission a = check_admission(limits(), request);
  if (admission) *admission = a;
  if (!a.ok()) return a.status;
  int64_t slot = wanted;
  if (slot >= 0) {
    HLX_RETURN_IF_ERROR(pool_.acquire(slot));
  } else {
    HLX_ASSIGN_OR_RETURN(slot, pool_.acquire());
  }
  start_slot(slot, {}, 0);
  return slot;
}

void TextModel::start_slot(int64_t slot, std::vector<int32_t> history, int64_t prefilled,
                           std::vector<ImageSpanKey> images) {
  history_[size_t(slot)] = std::move(history);
  image_writer_[size_t(slot)] = !images.empty();
  // Kept rows of an image prompt came from embeddings: a token prefill must not replay them.
  embedded_end_[size_t(slot)] = images.empty() ? 0 : prefilled;
  rope_delta_[size_t(slot)] = 0;
  prefilled_end_[size_t(slot)] = prefilled;
  retained_[size_t(slot)].clear();
  images_[size_t(slot)] = std::move(images);
}

std::span<const int32_t> TextModel::reusable_prefix(int64_t slot) const {
  if (slot < 0 || slot >= shape_.slots) return {};
  if (!pool_.in_use(slot)) return retained_[size_t(slot)];
  return std::span<const int32_t>(history_[size_t(slot)]).first(size_t(prefilled_end_[size_t(slot)]));
}

int64_t TextModel::reusable_rows(int64_t slot, const PromptKey& prompt) const {
  if (slot < 0 || slot >= shape_.slots || prompt.ids.empty()) return 0;
  // Rows of the other writer are other programs' bits.
  if (image_writer_[size_t(slot)] != !prompt.images.empty()) return 0;
  std::span<const int32_t> have = reusable_prefix(slot);
  const std::span<const int64_t> ids = prompt.ids;
  int64_t n = 0;
  const int64_t limit = std::min(int64_t(ids.size()) - 1, int64_t(have.size()));
  while (n < limit && have[size_t(n)] == ids[size_t(n)]) ++n;
  // Image rows carry one id for every image: the same span with the same key on both sides, else
  // the prefix ends where the first differing span begins; and never inside a span.
  auto cut = [&](std::span<const ImageSpanKey> mine, std::span<const ImageSpanKey> theirs) {
    for (const ImageSpanKey& s : mine) {
      if (s.begin >= n) break;
      const bool same = std::find(theirs.begin(), theirs.end(), s) != theirs.end();
      if (!same || s.end > n) n = s.begin;
    }
  };
  cut(prompt.images, images_[size_t(slot)]);
  cut(images_[size_t(slot)], prompt.images);
  // Gemma3's blocks are atomic prefill spans: nor inside a run of image-token rows.
  while (image_token_id_ >= 0 && n > 0 && ids[size_t(n)] == image_token_id_ && ids[size_t(n - 1)] == image_token_id_)
    --n;
  return n;
}

Result<int64_t> TextModel::admit_reusing(const PromptKey& key, int64_t max_new_tokens, int64_t slot, int64_t keep,
                                         int64_t source, Admission* admission) {
  const std::span<const int64_t> prompt = key.ids;
  const bool image_prompt = !key.images.empty();
  // Image prompts' ids were checked by their caller (image rows are not embedding-table ids).
  Admission a = check_admission(limits(), AdmissionRequest{int64_t(prompt.size()), max_new_tokens,
                                                           image_prompt ? std::span<const int64_t>() : prompt});
  if (admission) *admission = a;
  if (!a.ok()) return a.status;
  HLX_RETURN_IF_ERROR(check_slot(slot));
  HLX_RETURN_IF_ERROR(check_slot(source).with_context("prefix source"));
  if (pool_.in_use(slot)) return make_error(ErrorKind::kOutOfRange, "slot ", slot, " is in use");
  // At least the last prompt row is prefilled: its logits give the first token.
  if (keep < 0 || keep >= int64_t(prompt.size()))
    return make_error(ErrorKind::kInvalidArgument, "reused prefix of ", keep, " rows is outside [0, prompt of ",
                      prompt.size(), " tokens)");
  for (size_t i = 0; i < key.images.size(); ++i) {
    const ImageSpanKey& s = key.images[i];
    if (s.begin < (i ? key.images[i - 1].end : 0) || s.end <= s.begin || s.end > int64_t(prompt.size()))
      return make_error(ErrorKind::kInvalidArgument, "image span ", i, " [", s.begin, ", ", s.end,
                        ") is not ascending inside the prompt of ", prompt.size(), " rows");
  }
  std::span<const int32_t> have = reusable_prefix(source);
  if (keep > int64_t(have.size()))
    return make_error(ErrorKind::kInvalidArgument, "reused prefix of ", keep, " rows, but slot ", source, " holds ",
                      have.size(), " reusable rows");
  for (int64_t i = 0; i < keep; ++i)
    if (have[size_t(i)] != prompt[size_t(i)])
      return make_error(ErrorKind::kInvalidArgument, "reused prefix: row ", i, " of slot ", source, " holds token ",
                        have[size_t(i)], " but the prompt has ", prompt[size_t(i)]);
  if (const int64_t can = reusable_rows(source, key); keep > can)
    return make_error(ErrorKind::kInvalidArgument, "reused prefix of ", keep, " rows, but slot ", source,
                      " holds only ", can,
                      " rows of this prompt (its images or their keys differ, or the prefix "
                      "would end inside an image)");
  std::vector<int32_t> hist(have.begin(), have.begin() + keep);  // before retained_ is cleared
  HLX_RETURN_IF_ERROR(pool_.acquire(slot));
  if (source != slot && keep > 0) {
    // [slots, S, kv_heads, head_dim] (int8 scales: [slots, S, kv_heads]): a slot's leading rows are
    // one contiguous run per tensor.
    for (Tensor& c : caches_) {
      const size_t row = c.nbytes() / size_t(c.dim(0) * c.dim(1));
      char* base = static_cast<char*>(c.raw());
      const size_t slot_bytes = size_t(shape_.context_capacity) * row;
      std::memcpy(base + size_t(slot) * slot_bytes, base + size_t(source) * slot_bytes, size_t(keep) * row);
    }
  }
  start_slot(slot, std::move(hist), keep, std::vector<ImageSpanKey>(key.images.begin(), key.images.end()));
  return slot;
}

Status TextModel::release(int64_t slot) {
  HLX_RETURN_IF_ERROR(pool_.release(slot));
  std::vector<int32_t>& h = history_[size_t(slot)];
  h.resize(size_t(prefilled_end_[size_t(slot)]));
  retained_[size_t(slot)] = std::move(h);
  h.clear();
  // The retained rows' image spans (one cut by the end stays: matching cuts back before it).
  std::vector<ImageSpanKey>& im = images_[size_t(slot)];
  while (!im.empty() && im.back().begin >= prefilled_end_[size_t(slot)]) im.pop_back();
  embedded_end_[size_t(slot)] = 0;
  rope_delta_[size_t(slot)] = 0;
  prefilled_end_[size_t(slot)] = 0;
  return ok_status();
}

void TextModel::reset() {
  pool_ = SlotPool(shape_.slots);
  for (auto& h : history_) h.clear();
  for (auto& r : retained_) r.clear();
  for (auto& im : images_) im.clear();
  std::fill(image_writer_.begin(), image_writer_.end(), false);
  std::fill(embedded_end_.begin(), embedded_end_.end(), 0);
  std::fill(rope_delta_.begin(), rope_delta_.end(), 0);
  std::fill(prefilled_end_.begin(), prefilled_end_.end(), 0);
}

Status TextModel::check_slot(int64_t slot) const {
  if (slot < 0 || slot >= shape_.slots)
    return make_error(ErrorKind::kOutOfRange, "slot ", slot, " is outside [0, ", shape_.slots, ")");
  return ok_status();
}

Result<int64_t> TextModel::cache_length(int64_t slot) const {
  HLX_RETURN_IF_ERROR(check_slot(slot));
  return int64_t(history_[size_t(slot)].size());
}

Result<int64_t> TextModel::rope_delta(int64_t slot) const {
  HLX_RETURN_IF_ERROR(check_slot(slot));
  return rope_delta_[size_t(slot)];
}

int64_t TextModel::deepstack_rows(int64_t bucket) const {
  return options_.deepstack_visual_rows > 0 ? std::min(options_.deepstack_visual_rows, bucket) : 0;
}

Status TextModel::check_plain_rope(int64_t slot, const char* what) const {
  // Rows after an image continue at cache row + delta; 1D entries would rotate them at the row.
  if (rope_delta_[size_t(slot)] != 0)
    return make_error(ErrorKind::kUnsupported, what, " on slot ", slot, " whose M-RoPE delta is ",
                      rope_delta_[size_t(slot)], ": continue an image prompt with prefill_embeddings_mrope");
  return ok_status();
}

Result<Tensor> TextModel::prefill(int64_t slot, std::span<const int64_t> tokens) {
  return run_prefill(slot, tokens, false);
}

Result<Tensor> TextModel::prefill_all_logits(int64_t slot, std::span<const int64_t> tokens) {
  return run_prefill(slot, tokens, true);
}

Result<Tensor> TextModel::run_prefill(int64_t slot, std::span<const int64_t> tokens, bool all_rows) {
  // Every check before the first call: a bad request leaves the caches untouched.
  HLX_RETURN_IF_ERROR(check_slot(slot));
  HLX_RETURN_IF_ERROR(check_plain_rope(slot, "prefill"));
  std::vector<int32_t>& hist = history_[size_t(slot)];
  retained_[size_t(slot)].clear();  // a write into a slot without admit() ends what it retained
  const int64_t start = int64_t(hist.size()), n = int64_t(tokens.size());
  if (n < 1) return make_error(ErrorKind::kInvalidArgument, "prefill needs at least one token");
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] < 0 || tokens[i] >= spec_.vocab_size)
      return make_error(ErrorKind::kInvalidArgument, "token id ", tokens[i], " at index ", i,
                        " is outside the vocabulary [0, ", spec_.vocab_size, ")");
  if (n > shape_.context_capacity - start)
    return make_error(ErrorKind::kOutOfRange, "prefill of ", n, " tokens at cache length ", start, " of slot ", slot,
                      " would end at ", start + n, " > context_capacity ", shape_.context_capacity);
  HLX_ASSIGN_OR_RETURN(std::vector<PrefillChunk> chunks,
                       plan_prefill_chunks(buckets_, shape_.context_capacity, start, n));
  TextEntry kind = all_rows ? TextEntry::kPrefillAllLogits : TextEntry::kPrefill;
  for (const auto& c : chunks) {
    if (c.start < std::min(start, embedded_end_[size_t(slot)]))
      return make_error(ErrorKind::kUnsupported, "prefill of ", n, " tokens at row ", start, " of slot ", slot,
                        " would replay rows from ", c.start, " that were written from embeddings");
    HLX_RETURN_IF_ERROR(compiled(kind, c.bucket).status());
  }

  // Row r of the slot holds token all_tokens(r): history for r < start, then the new tokens.
  auto token_at = [&](int64_t r) -> int32_t {
    return r < start ? hist[size_t(r)] : int32_t(tokens[size_t(r - start)]);
  };
  Tensor logits_all;
  if (all_rows) logits_all = Tensor::empty(DType::kF32, {n, spec_.vocab_size});
  Tensor last;
  for (const auto& c : chunks) {
    Entry* e = *compiled(kind, c.bucket);
    Tensor tok = Tensor::zeros(DType::kI32, {c.bucket});
    for (int64_t i = 0; i < c.length; ++i) tok.data<int32_t>()[i] = token_at(c.start + i);
    auto out = run(*e, {tok, scalar_i32(c.length), scalar_i32(c.start), scalar_i32(slot)});
    if (!out.ok()) {
      // Rows of this slot may be partly written; the slot's length keeps only what completed.
      return out.status().with_context(str_cat("prefill chunk at row ", c.start, " (bucket ", c.bucket, ")"));
    }
    for (int64_t r = std::max(c.start, int64_t(hist.size())); r < c.start + c.length; ++r) hist.push_back(token_at(r));
    // Rows contiguous with the prefilled ones extend them (the all-logits entry is another
    // program: its rows are not counted).
    int64_t& pre = prefilled_end_[size_t(slot)];
    const bool counted = !all_rows && !image_writer_[size_t(slot)];
    pre = !counted ? std::min(pre, c.start) : pre >= c.start ? std::max(pre, c.start + c.length) : pre;
    Tensor& lg = (*out)[0];
    if (all_rows) {
      // Chunk row i is slot row c.start + i; new-token index = c.start + i - start.
      const size_t row_bytes = size_t(spec_.vocab_size) * sizeof(float);
      for (int64_t i = 0; i < c.length; ++i) {
        int64_t dst = c.start + i - start;
        if (dst < 0) continue;  // a replayed row from before this call
        std::memcpy(logits_all.data<float>() + dst * spec_.vocab_size, lg.data<float>() + i * spec_.vocab_size,
                    row_bytes);
      }
    } else {
      last = lg;
    }
  }
  return all_rows ? logits_all : last;
}

Result<Tensor> TextModel::embed_tokens(std::span<const int64_t> tokens) const {
  const std::string name = spec_.weight_prefix + "embed_tokens.weight";
  const Tensor* table = nullptr;
  for (const auto& [n, t] : weights_)
    if (n == name) table = &t;
  if (!table) return make_error(ErrorKind::kInternal, "embedding table '", name, "' is not loaded");
  const int64_t hidden = spec_.hidden_size, n = int64_t(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] < 0 || tokens[i] >= spec_.vocab_size)
      return make_error(ErrorKind::kInvalidArgument, "token id ", tokens[i], " at index ", i,
                        " is outside the vocabulary [0, ", spec_.vocab_size, ")");
  Tensor out = Tensor::empty(DType::kF32, {n, hidden});
  // The entry gathers the row, converts it to f32 (exact from bf16/f16) and multiplies by the
  // scale as an f32 constant; the same two steps here give the same bits.
  const float scale = float(spec_.embedding_scale);
  const bool scaled = spec_.embedding_scale != 1.0;
  // A tied table's rows from the lm_head's exact packed copy, as the entries' gather takes them.
  const std::shared_ptr<const kernels::PackedWeight> packed = rt::exact_packed_copy(*table);
  const DType dt = table->dtype();
  if (!packed && n > 0 && dt != DType::kF32 && dt != DType::kBF16 && dt != DType::kF16)
    return make_error(ErrorKind::kInternal, "embedding table '", name, "' has dtype ", dtype_name(dt));
  std::vector<bf16> row(packed ? size_t(hidden) : 0);
  auto embed_row = [&](size_t r) {
    float* dst = out.data<float>() + int64_t(r) * hidden;
    const int64_t base = tokens[r] * hidden;
    if (packed) {
      packed->copy_row(tokens[r], row.data());
      for (int64_t c = 0; c < hidden; ++c) dst[c] = bf16_to_f32(row[size_t(c)]);
    } else if (dt == DType::kF32) {
      std::memcpy(dst, table->data<float>() + base, size_t(hidden) * sizeof(float));
    } else if (dt == DType::kBF16) {
      for (int64_t c = 0; c < hidden; ++c) dst[c] = bf16_to_f32(table->data<bf16>()[base + c]);
    } else {
      for (int64_t c = 0; c < hidden; ++c) dst[c] = f16_to_f32(table->data<f16>()[base + c]);
    }
    if (scaled)
      for (int64_t c = 0; c < hidden; ++c) dst[c] *= scale;
  };
  // Rows read from the stored table leave the resident set as they are read, as the gather op's do.
  if (packed)
    for (size_t r = 0; r < tokens.size(); ++r) embed_row(r);
  else
    rt::read_table_rows(*table, tokens.data(), tokens.size(), embed_row);
  return out;
}

Result<Tensor> TextModel::prefill_embeddings(int64_t slot, const Tensor& embeddings, std::span<const int64_t> token_ids,
                                             int64_t end_row) {
  return run_prefill_embeddings(slot, embeddings, token_ids, end_row, false, nullptr, 0, nullptr);
}

Result<Tensor> TextModel::prefill_embeddings_masked(int64_t slot, const Tensor& embeddings,
                                                    std::span<const int64_t> token_ids, int64_t end_row) {
  if (masked_variant_.empty())
    return make_error(ErrorKind::kInvalidArgument,
                      "prefill_embeddings_masked: this model has no masked image prefill (a Gemma3 vision-language "
                      "checkpoint has)");
  return run_prefill_embeddings(slot, embeddings, token_ids, end_row, true, nullptr, 0, nullptr);
}

Result<Tensor> TextModel::prefill_embeddings_mrope(int64_t slot, const Tensor& embeddings,
                                                   std::span<const int64_t> token_ids, const Tensor& rope_positions,
                                                   int64_t rope_delta, int64_t end_row,
                                                   const DeepstackPayload* deepstack) {
  return run_prefill_embeddings(slot, embeddings, token_ids, end_row, false, &rope_positions, rope_delta, deepstack);
}

Result<Tensor> TextModel::prefill_image_prompt(int64_t slot, const Tensor& embeddings,
                                               std::span<const int64_t> token_ids, int64_t end_row,
                                               const MropeInputs* mrope) {
  if (has_mrope_entries() != (mrope != nullptr))
    return make_error(ErrorKind::kInvalidArgument, "prefill_image_prompt: the model (", spec_.model_type, ") ",
                      has_mrope_entries() ? "needs" : "takes no", " M-RoPE positions");
  if (mrope)
    return prefill_embeddings_mrope(slot, embeddings, token_ids, mrope->positions, mrope->rope_delta, end_row,
                                    mrope->deepstack ? &*mrope->deepstack : nullptr);
  if (has_masked_entries()) return prefill_embeddings_masked(slot, embeddings, token_ids, end_row);
  return prefill_embeddings(slot, embeddings, token_ids, end_row);
}

Result<std::vector<PrefillChunk>> TextModel::plan_chunks(std::span<const int64_t> ids, int64_t start, int64_t count,
                                                         bool image_prompt) const {
  const bool masked = image_prompt && has_masked_entries();
  const std::vector<RowSpan> spans = masked ? runs_of(ids, image_token_id_) : std::vector<RowSpan>{};
  return plan_prefill_chunks(buckets_, shape_.context_capacity, start, count, spans);
}

namespace {

// The boundary checks of a whole-prompt DeepStack payload (per-chunk ones: check_deepstack_payload).
Status check_payload(const models::TextModelSpec& spec, const DeepstackPayload& p, std::span<const int64_t> token_ids,
                     int64_t image_token_id) {
  auto bad = [](const auto&... args) {
    return make_error(ErrorKind::kInvalidArgument, "deepstack payload: ", args...);
  };
  if (spec.deepstack_layers.empty()) return bad("the model (", spec.model_type, ") has no DeepStack layers");
  const Tensor& vp = p.visual_positions;
  const Tensor& lf = p.layer_features;
  if (vp.dtype() != DType::kI32 || vp.rank() != 1 || !vp.defined())
    return bad("visual_positions must be i32 [Nv], got ", vp.type_string());
  const int64_t nv = vp.dim(0), k = int64_t(spec.deepstack_layers.size()), hidden = spec.hidden_size;
  if (lf.dtype() != DType::kF32 || lf.shape() != Shape{k, nv, hidden} || !lf.defined())
    return bad("layer_features must be f32 [", k, ", ", nv, ", ", hidden, "] (K layers, Nv = ", nv,
               " visual_positions, hidden), got ", lf.type_string());
  if (p.count < 0 || p.count > nv) return bad("visual count ", p.count, " outside [0, Nv ", nv, "]");
  const int32_t* pos = vp.data<int32_t>();
  for (int64_t i = 0; i < p.count; ++i) {
    // Rows at or past end_row belong to a later call on the same prompt; this one ignores them.
    if (pos[i] < 0 || pos[i] >= int64_t(token_ids.size()))
      return bad("visual_positions[", i, "] = ", pos[i], " is outside the prompt rows [0, ", token_ids.size(), ")");
    if (i > 0 && pos[i] <= pos[i - 1])
      return bad("visual_positions[", i, "] = ", pos[i], " after ", pos[i - 1], " (must be sorted and unique)");
    if (image_token_id >= 0 && token_ids[size_t(pos[i])] != image_token_id)
      return bad("visual_positions[", i, "] = row ", pos[i], " holds token ", token_ids[size_t(pos[i])],
                 ", not the image token ", image_token_id);
  }
  return ok_status();
}

}  // namespace

Result<Tensor> TextModel::run_prefill_embeddings(int64_t slot, const Tensor& embeddings,
                                                 std::span<const int64_t> token_ids, int64_t end_row, bool masked,
                                                 const Tensor* rope_positions, int64_t rope_delta,
                                                 const DeepstackPayload* deepstack) {
  // Every check before the first call: a bad request leaves the caches untouched.
  HLX_RETURN_IF_ERROR(check_slot(slot));
  const bool mrope = rope_positions != nullptr;
  const char* what = mrope ? "prefill_embeddings_mrope" : masked ? "prefill_embeddings_masked" : "prefill_embeddings";
  if (!options_.embeddings)
    return make_error(
        ErrorKind::kInvalidArgument,
        "prefill_embeddings: the model was loaded without prefill_embeddings entries (options.embeddings)");
  if (!mrope) HLX_RETURN_IF_ERROR(check_plain_rope(slot, what));
  if (mrope && spec_.mrope_section.empty())
    return make_error(ErrorKind::kInvalidArgument, what, ": the model (", spec_.model_type, ") has no mrope_section");
  std::vector<int32_t>& hist = history_[size_t(slot)];
  retained_[size_t(slot)].clear();
  const int64_t start = int64_t(hist.size()), n = int64_t(token_ids.size()), hidden = spec_.hidden_size;
  if (embeddings.dtype() != DType::kF32 || embeddings.rank() != 2 || embeddings.dim(0) != n ||
      embeddings.dim(1) != hidden || !embeddings.defined())
    return make_error(ErrorKind::kInvalidArgument, what, ": embeddings are ", embeddings.type_string(),
                      ", expected f32 [", n, ", ", hidden, "] (one row per token id)");
  if (end_row <= start || end_row > n)
    return make_error(ErrorKind::kInvalidArgument, what, ": end row ", end_row, " must lie in (cache length ", start,
                      ", ", n, " rows given]");
  if (end_row > shape_.context_capacity)
    return make_error(ErrorKind::kOutOfRange, "prefill of rows [", start, ", ", end_row, ") of slot ", slot,
                      " would end past context_capacity ", shape_.context_capacity);
  for (int64_t i = 0; i < end_row; ++i) {
    // Ids are history, not embedding indices (an image token may lie outside the text vocabulary),
    // but they must fit the i32 history and be non-negative.
    if (token_ids[size_t(i)] < 0 || token_ids[size_t(i)] > INT32_MAX)
      return make_error(ErrorKind::kInvalidArgument, "token id ", token_ids[size_t(i)], " at row ", i,
                        " is outside [0, ", INT32_MAX, "]");
    if (i < start && hist[size_t(i)] != token_ids[size_t(i)])
      return make_error(ErrorKind::kInvalidArgument, what, ": row ", i, " of slot ", slot, " holds token ",
                        hist[size_t(i)], " but the given ids have ", token_ids[size_t(i)], " there");
  }
  if (mrope) {
    const Tensor& rp = *rope_positions;
    if (rp.dtype() != DType::kI32 || rp.shape() != Shape{3, n} || !rp.defined())
      return make_error(ErrorKind::kInvalidArgument, what, ": rope_positions are ", rp.type_string(),
                        ", expected i32 [3, ", n, "] (axes T, H, W per row)");
    for (int64_t i = 0; i < 3 * n; ++i)
      if (rp.data<int32_t>()[i] < 0)
        return make_error(ErrorKind::kInvalidArgument, what, ": rope_positions[", i / n, ", ", i % n,
                          "] = ", rp.data<int32_t>()[i], " is negative");
    // Decode rotates row r at r + delta (checked per row there); |delta| must fit i32.
    if (rope_delta < -int64_t(INT32_MAX) || rope_delta > INT32_MAX)
      return make_error(ErrorKind::kOutOfRange, what, ": rope_delta ", rope_delta, " is outside the i32 range");
  }
  if (deepstack) {
    if (!mrope) return make_error(ErrorKind::kInternal, "deepstack payload without M-RoPE positions");
    HLX_RETURN_IF_ERROR(check_payload(spec_, *deepstack, token_ids, image_token_id_).with_context(what));
  }
  // Masked (Gemma3): image blocks are atomic chunks, each chunk gets its own additive mask. The
  // spans cover every given id, so that a prefill stopping inside a block is refused.
  HLX_ASSIGN_OR_RETURN(std::vector<PrefillChunk> chunks, plan_chunks(token_ids, start, end_row - start, masked));
  const bool image_entry =
      image_writer_[size_t(slot)] && masked == has_masked_entries() && mrope == has_mrope_entries();

  // Per chunk: the entry, and with a payload its chunk-relative visual rows and feature slice.
  struct ChunkInputs {
    TextEntry kind = TextEntry::kPrefillEmbeddings;
    Tensor mask, visual_positions, layer_features;
    int64_t count = 0;
  };
  std::vector<ChunkInputs> inputs(chunks.size());
  const int64_t k_layers = int64_t(spec_.deepstack_layers.size());
  for (size_t ci = 0; ci < chunks.size(); ++ci) {
    const PrefillChunk& c = chunks[ci];
    ChunkInputs& in = inputs[ci];
    in.kind = mrope ? TextEntry::kPrefillEmbeddingsMrope : TextEntry::kPrefillEmbeddings;
    if (masked) {
      in.kind = TextEntry::kPrefillEmbeddingsMasked;
      HLX_ASSIGN_OR_RETURN(
          in.mask, mm::prefill_mask(token_ids, image_token_id_, c.start, c.start + c.length, c.bucket, mask_rule_));
    }
    if (deepstack) {
      const int32_t* pos = deepstack->visual_positions.data<int32_t>();
      const int32_t* first = std::lower_bound(pos, pos + deepstack->count, int32_t(c.start));
      const int32_t* last = std::lower_bound(pos, pos + deepstack->count, int32_t(c.start + c.length));
      in.count = last - first;
      if (in.count > 0) {
        in.kind = TextEntry::kPrefillEmbeddingsDeepstack;
        const int64_t nv = deepstack_rows(c.bucket) > 0 ? deepstack_rows(c.bucket) : c.bucket;
        if (in.count > nv)
          return make_error(ErrorKind::kOutOfRange, what, ": the chunk at row ", c.start, " (bucket ", c.bucket,
                            ") has ", in.count, " visual rows, more than the static max Nv ", nv,
                            " (deepstack_visual_rows)");
        // Padding entries: row 0 and zero features (ignored past count).
        in.visual_positions = Tensor::zeros(DType::kI32, {nv});
        in.layer_features = Tensor::zeros(DType::kF32, {k_layers, nv, hidden});
        const int64_t v0 = first - pos, total_nv = deepstack->visual_positions.dim(0);
        for (int64_t v = 0; v < in.count; ++v) in.visual_positions.data<int32_t>()[v] = int32_t(first[v] - c.start);
        for (int64_t k = 0; k < k_layers; ++k)
          std::memcpy(in.layer_features.data<float>() + k * nv * hidden,
                      deepstack->layer_features.data<float>() + (k * total_nv + v0) * hidden,
                      size_t(in.count * hidden) * sizeof(float));
        const EntryRequest req{TextEntry::kPrefillEmbeddingsDeepstack, c.bucket, deepstack_rows(c.bucket)};
        HLX_RETURN_IF_ERROR(
            models::check_deepstack_payload(spec_, req, c.length, in.visual_positions, in.layer_features, in.count)
                .with_context(str_cat(what, " chunk at row ", c.start)));
      }
    }
    HLX_RETURN_IF_ERROR(compiled(in.kind, c.bucket).status());
  }

  const float* src = embeddings.data<float>();
  Tensor last;
  for (size_t ci = 0; ci < chunks.size(); ++ci) {
    const PrefillChunk& c = chunks[ci];
    ChunkInputs& in = inputs[ci];
    Entry* e = *compiled(in.kind, c.bucket);
    // Padding rows are zeros; rows at or past `length` are never read.
    Tensor x = Tensor::zeros(DType::kF32, {c.bucket, hidden});
    std::memcpy(x.data<float>(), src + c.start * hidden, size_t(c.length * hidden) * sizeof(float));
    std::vector<Tensor> args = {x};
    if (masked) args.push_back(std::move(in.mask));  // dropped after its chunk
    if (mrope) {
      Tensor rp = Tensor::zeros(DType::kI32, {3, c.bucket});
      for (int64_t a = 0; a < 3; ++a)
        std::memcpy(rp.data<int32_t>() + a * c.bucket, rope_positions->data<int32_t>() + a * n + c.start,
                    size_t(c.length) * sizeof(int32_t));
      args.push_back(rp);
    }
    if (in.kind == TextEntry::kPrefillEmbeddingsDeepstack) {
      args.push_back(in.visual_positions);
      args.push_back(in.layer_features);
      args.push_back(scalar_i32(in.count));
    }
    args.push_back(scalar_i32(c.length));
    args.push_back(scalar_i32(c.start));
    args.push_back(scalar_i32(slot));
    auto out = run(*e, std::move(args));
    if (!out.ok())
      return out.status().with_context(str_cat(what, " chunk at row ", c.start, " (bucket ", c.bucket, ")"));
    for (int64_t r = std::max(c.start, int64_t(hist.size())); r < c.start + c.length; ++r)
      hist.push_back(int32_t(token_ids[size_t(r)]));
    embedded_end_[size_t(slot)] = int64_t(hist.size());
    // Rows of a slot that declared its image keys, written by the entry prefill_image_prompt
    // picks, extend its prefilled rows; any other embedding rows end them.
    int64_t& pre = prefilled_end_[size_t(slot)];
    pre = image_entry && pre >= c.start ? std::max(pre, c.start + c.length) : std::min(pre, c.start);
    if (mrope) rope_delta_[size_t(slot)] = rope_delta;
    last = (*out)[0];
  }
  return last;
}

Result<Tensor> TextModel::decode(std::span<const DecodeRow> rows) {
  const int64_t b = int64_t(rows.size());
  if (b < 1 || b > shape_.slots)
    return make_error(ErrorKind::kOutOfRange, "decode batch of ", b, " rows is outside [1, slots ", shape_.slots, "]");
  std::vector<bool> seen(size_t(shape_.slots), false);
  for (int64_t i = 0; i < b; ++i) {
    const DecodeRow& r = rows[size_t(i)];
    HLX_RETURN_IF_ERROR(check_slot(r.slot).with_context(str_cat("decode row ", i)));
    if (seen[size_t(r.slot)])
      return make_error(ErrorKind::kInvalidArgument, "decode row ", i, ": slot ", r.slot, " appears twice");
    seen[size_t(r.slot)] = true;
    if (r.token < 0 || r.token >= spec_.vocab_size)
      return make_error(ErrorKind::kInvalidArgument, "decode row ", i, ": token id ", r.token,
                        " is outside the vocabulary [0, ", spec_.vocab_size, ")");
    int64_t len = int64_t(history_[size_t(r.slot)].size());
    if (r.position < 0 || r.position >= shape_.context_capacity)
      return make_error(ErrorKind::kOutOfRange, "decode row ", i, ": position ", r.position,
                        " is outside [0, context_capacity ", shape_.context_capacity, ")");
    // Rows past the slot's length were never written; attending over them would read stale K/V.
    if (r.position > len)
      return make_error(ErrorKind::kOutOfRange, "decode row ", i, ": position ", r.position, " of slot ", r.slot,
                        " is past its cache length ", len);
    const int64_t rotary = r.position + rope_delta_[size_t(r.slot)];
    if (rotary < 0 || rotary > INT32_MAX)
      return make_error(ErrorKind::kOutOfRange, "decode row ", i, ": position ", r.position, " + rope delta ",
                        rope_delta_[size_t(r.slot)], " of slot ", r.slot, " = ", rotary, " is outside [0, ", INT32_MAX,
                        "]");
  }
  // Any slot with an M-RoPE delta: decode_mrope for the batch (delta-0 rows rotate at their row,
  // as decode does); otherwise the plain entry, so text-only batches are unchanged.
  bool shifted = false;
  for (const DecodeRow& r : rows) shifted = shifted || rope_delta_[size_t(r.slot)] != 0;
  HLX_ASSIGN_OR_RETURN(Entry * e, compiled(shifted ? TextEntry::kDecodeMrope : TextEntry::kDecode, b));
  Tensor tok = Tensor::empty(DType::kI32, {b}), pos = Tensor::empty(DType::kI32, {b}),
         slots = Tensor::empty(DType::kI32, {b}), rope = Tensor::empty(DType::kI32, {b});
  for (int64_t i = 0; i < b; ++i) {
    const DecodeRow& r = rows[size_t(i)];
    tok.data<int32_t>()[i] = int32_t(r.token);
    pos.data<int32_t>()[i] = int32_t(r.position);
    slots.data<int32_t>()[i] = int32_t(r.slot);
    rope.data<int32_t>()[i] = int32_t(r.position + rope_delta_[size_t(r.slot)]);
  }
  HLX_ASSIGN_OR_RETURN(std::vector<Tensor> out,
                       shifted ? run(*e, {tok, pos, rope, slots}) : run(*e, {tok, pos, slots}));
  for (const DecodeRow& r : rows) {
    auto& h = history_[size_t(r.slot)];
    h.resize(size_t(r.position));
    prefilled_end_[size_t(r.slot)] = std::min(prefilled_end_[size_t(r.slot)], r.position);
    retained_[size_t(r.slot)].clear();
    h.push_back(int32_t(r.token));
  }
  return out[0];
}

namespace {
int64_t argmax_row(const float* row, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (row[i] > row[best]) best = i;
  return best;
}
}  // namespace

Result<GenerateResult> TextModel::generate(std::span<const int64_t> prompt, int64_t max_new_tokens) {
  HLX_ASSIGN_OR_RETURN(int64_t slot, admit(prompt, max_new_tokens));
  GenerateResult res;
  res.prompt_tokens = int64_t(prompt.size());
  auto body = [&]() -> Status {
    if (max_new_tokens == 0) return ok_status();
    auto t0 = std::chrono::steady_clock::now();
    HLX_ASSIGN_OR_RETURN(Tensor logits, prefill(slot, prompt));
    res.prefill_ms = ms_since(t0);
    int64_t next = argmax_row(logits.data<float>(), spec_.vocab_size);
    t0 = std::chrono::steady_clock::now();
    int64_t position = int64_t(prompt.size());
    for (;;) {
      res.tokens.push_back(next);
      if (std::find(spec_.eos_token_ids.begin(), spec_.eos_token_ids.end(), next) != spec_.eos_token_ids.end()) {
        res.finish = FinishReason::kStop;
        break;
      }
      if (int64_t(res.tokens.size()) >= max_new_tokens) break;
      DecodeRow row{slot, next, position++};
      HLX_ASSIGN_OR_RETURN(Tensor dl, decode(std::span<const DecodeRow>(&row, 1)));
      ++res.decode_steps;
      next = argmax_row(dl.data<float>(), spec_.vocab_size);
    }
    res.decode_ms = ms_since(t0);
    return ok_status();
  };
  Status s = body();
  Status r = release(slot);
  if (!s.ok()) return s;
  if (!r.ok()) return r;
  return res;
}

}  // namespace hlx::engine
