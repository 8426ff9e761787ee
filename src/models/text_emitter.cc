// The text-decoder entries (contract in text_entries.h): signature, embedding, the family's layers
// (llama.cc, gemma3.cc), final norm and logits, identity. Every shape comes from the spec and the
// EngineShape; nothing here knows a capacity, slot count or bucket of its own.
#include <cmath>
#include <limits>

#include "models/identity.h"
#include "models/decoder_common.h"
#include "models/text_family.h"

namespace hlx::models {

using shlo::Attr;
using shlo::AttrDict;
using shlo::TensorType;
using shlo::Value;

namespace {

// Bump when the graph or the signature changes in a way that makes old modules incompatible.
constexpr const char* kSchema = "hlx.text_decoder/1";

void describe_rope(std::string& out, const char* key, const RopeSpec& r) {
  out += str_cat(key, "=", r.type, " theta=", identity_number(r.theta), " factor=", identity_number(r.factor),
                 " low_freq_factor=", identity_number(r.low_freq_factor),
                 " high_freq_factor=", identity_number(r.high_freq_factor),
                 " original_max_position=", r.original_max_position, "\n");
}

bool is_decode(TextEntry e) { return e == TextEntry::kDecode || e == TextEntry::kDecodeMrope; }
bool is_prefill(TextEntry e) { return !is_decode(e); }
// Prefill entries that take [3, Lp] rotary positions.
bool takes_mrope(const TextModelSpec& s, TextEntry e) {
  return e == TextEntry::kPrefillEmbeddingsMrope ||
         (e == TextEntry::kPrefillEmbeddingsDeepstack && !s.mrope_section.empty());
}
int64_t visual_rows(const EntryRequest& r) { return r.visual_rows > 0 ? r.visual_rows : r.rows; }

Status validate(const TextModelSpec& s, const EngineShape& shape, const EntryRequest& req) {
  auto bad = [](const auto&... args) { return make_error(ErrorKind::kInvalidArgument, args...); };
  if (shape.context_capacity <= 0 || shape.context_capacity >= (int64_t(1) << 31) - 1)
    return bad("context_capacity ", shape.context_capacity, " must be in [1, 2^31 - 2] (positions are i32)");
  if (shape.slots <= 0 || shape.slots >= (int64_t(1) << 31))
    return bad("slots ", shape.slots, " must be positive and fit i32");
  if (shape.kv_dtype != DType::kBF16 && shape.kv_dtype != DType::kF32 && shape.kv_dtype != DType::kI8)
    return bad("kv dtype ", dtype_name(shape.kv_dtype), " is not bf16, f32 or i8");
  if (req.rows <= 0) return bad(entry_name(req.entry), " rows ", req.rows, " must be positive");
  if (is_prefill(req.entry) && req.rows > shape.context_capacity)
    return bad(entry_name(req.entry), " rows (bucket) ", req.rows, " exceed context_capacity ", shape.context_capacity);
  if (s.num_layers <= 0 || s.hidden_size <= 0 || s.vocab_size <= 0 || s.intermediate_size <= 0 || s.num_heads <= 0 ||
      s.num_kv_heads <= 0 || s.head_dim <= 0 || s.head_dim % 2 != 0 || s.num_heads % s.num_kv_heads != 0)
    return bad("text spec of ", s.model_type, " has invalid dimensions (layers ", s.num_layers, ", hidden ",
               s.hidden_size, ", vocab ", s.vocab_size, ", intermediate ", s.intermediate_size, ", heads ", s.num_heads,
               "/", s.num_kv_heads, ", head_dim ", s.head_dim, ")");
  if (int64_t(s.layer_is_sliding.size()) != s.num_layers)
    return bad("text spec of ", s.model_type, ": layer_is_sliding has ", s.layer_is_sliding.size(), " entries for ",
               s.num_layers, " layers");
  if (!is_float(s.weight_dtype)) return bad("weight dtype ", dtype_name(s.weight_dtype), " is not a float type");
  if ((req.entry == TextEntry::kPrefillEmbeddingsMrope || req.entry == TextEntry::kDecodeMrope) &&
      s.mrope_section.empty())
    return bad(entry_name(req.entry), " needs an M-RoPE model (", s.model_type, " has no mrope_section)");
  if (!s.mrope_section.empty()) {
    int64_t sum = 0;
    for (int64_t v : s.mrope_section) sum += v;
    if (s.mrope_section.size() != 3 || sum != s.head_dim / 2)
      return bad("mrope_section of ", s.model_type, " must have 3 entries summing to head_dim / 2 = ", s.head_dim / 2);
  }
  if (req.entry == TextEntry::kPrefillEmbeddingsDeepstack) {
    if (s.deepstack_layers.empty())
      return bad("prefill_embeddings_deepstack needs DeepStack layers (", s.model_type, " has none)");
    for (size_t k = 0; k < s.deepstack_layers.size(); ++k)
      if (s.deepstack_layers[k] < 0 || s.deepstack_layers[k] >= s.num_layers ||
          (k > 0 && s.deepstack_layers[k] <= s.deepstack_layers[k - 1]))
        return bad("deepstack layer ", s.deepstack_layers[k], " (index ", k, ") must be increasing and within [0, ",
                   s.num_layers, ")");
    if (req.visual_rows < 0 || visual_rows(req) > req.rows)
      return bad("prefill_embeddings_deepstack visual_rows ", req.visual_rows, " must be in [0, rows ", req.rows, "]");
  } else if (req.visual_rows != 0) {
    return bad(entry_name(req.entry), " takes no visual_rows (got ", req.visual_rows, ")");
  }
  return ok_status();
}

Value inv_freq_constant(shlo::FunctionBuilder& f, const RopeSpec& rope, int64_t head_dim) {
  std::vector<float> v = rope_inv_freq(rope, head_dim);
  Tensor t = Tensor::empty(DType::kF32, {int64_t(v.size())});
  std::copy(v.begin(), v.end(), t.data<float>());
  return f.constant(t);
}

// Scalar i32 argument -> [1].
Value as_vec1(shlo::FunctionBuilder& f, const Value& s) { return f.reshape(s, {1}); }

}  // namespace

const char* entry_name(TextEntry e) {
  switch (e) {
    case TextEntry::kPrefill:
      return "prefill";
    case TextEntry::kPrefillEmbeddings:
      return "prefill_embeddings";
    case TextEntry::kPrefillAllLogits:
      return "prefill_all_logits";
    case TextEntry::kDecode:
      return "decode";
    case TextEntry::kPrefillEmbeddingsMrope:
      return "prefill_embeddings_mrope";
    case TextEntry::kPrefillEmbeddingsDeepstack:
      return "prefill_embeddings_deepstack";
    case TextEntry::kDecodeMrope:
      return "decode_mrope";
    case TextEntry::kPrefillEmbeddingsMasked:
      return "prefill_embeddings_masked";
    case TextEntry::kPrefillEmbeddingsMaskedAllLogits:
      return "prefill_embeddings_masked_all_logits";
  }
  return "?";
}

bool entry_takes_embeddings(TextEntry e) {
  return e == TextEntry::kPrefillEmbeddings || e == TextEntry::kPrefillEmbeddingsMrope ||
         e == TextEntry::kPrefillEmbeddingsDeepstack || entry_takes_mask(e);
}
bool entry_takes_mask(TextEntry e) {
  return e == TextEntry::kPrefillEmbeddingsMasked || e == TextEntry::kPrefillEmbeddingsMaskedAllLogits;
}
bool entry_all_logits(TextEntry e) {
  return e == TextEntry::kPrefillAllLogits || e == TextEntry::kPrefillEmbeddingsMaskedAllLogits;
}

std::vector<std::string> text_cache_names(const EngineShape& shape) {
  if (shape.kv_dtype == DType::kI8) return {"k_cache.", "v_cache.", "k_scale.", "v_scale."};
  return {"k_cache.", "v_cache."};
}

std::vector<int64_t> default_prefill_buckets(int64_t context_capacity) {
  std::vector<int64_t> out;
  if (context_capacity <= 0) return out;
  // Smallest bucket 32 rows; each next one 4x. With the planner's split into full chunks of a
  // smaller bucket (engine/prefill_plan.h) a prompt over 32 rows computes under 2x its rows.
  for (int64_t b = 32; b < context_capacity; b *= 4) out.push_back(b);
  out.push_back(context_capacity);
  return out;
}

Status check_deepstack_payload(const TextModelSpec& spec, const EntryRequest& req, int64_t length,
                               const Tensor& visual_positions, const Tensor& layer_features, int64_t count) {
  auto bad = [](const auto&... args) {
    return make_error(ErrorKind::kInvalidArgument, "deepstack payload: ", args...);
  };
  if (req.entry != TextEntry::kPrefillEmbeddingsDeepstack)
    return bad("entry ", entry_name(req.entry), " is not prefill_embeddings_deepstack");
  const int64_t nv = visual_rows(req), k = int64_t(spec.deepstack_layers.size());
  if (length < 0 || length > req.rows) return bad("length ", length, " outside [0, rows ", req.rows, "]");
  if (visual_positions.dtype() != DType::kI32 || visual_positions.shape() != Shape{nv} || !visual_positions.defined())
    return bad("visual_positions must be i32 [", nv, "], got ", visual_positions.type_string());
  if (layer_features.dtype() != DType::kF32 || layer_features.shape() != Shape{k, nv, spec.hidden_size} ||
      !layer_features.defined())
    return bad("layer_features must be f32 [", k, ", ", nv, ", ", spec.hidden_size,
               "] (K layers, Nv rows, hidden), got ", layer_features.type_string());
  if (count < 0 || count > nv) return bad("visual count ", count, " outside [0, ", nv, "]");
  const int32_t* p = visual_positions.data<int32_t>();
  for (int64_t i = 0; i < count; ++i) {
    if (p[i] < 0 || p[i] >= length)
      return bad("visual_positions[", i, "] = ", p[i], " is not a real row of this chunk [0, ", length, ")");
    if (i > 0 && p[i] <= p[i - 1])
      return bad("visual_positions[", i, "] = ", p[i], " after ", p[i - 1], " (must be sorted and unique)");
  }
  return ok_status();
}

std::string text_entry_description(const TextModelSpec& s, const EngineShape& shape, const EntryRequest& req) {
  std::string d;
  d += str_cat("schema=", kSchema, "\n");
  d += str_cat("family=", family_name(s.family), "\nmodel_type=", s.model_type, "\n");
  d += str_cat("weight_prefix=", s.weight_prefix, "\nlm_head_name=", s.lm_head_name, "\n");
  d += str_cat("vocab_size=", s.vocab_size, "\nhidden_size=", s.hidden_size,
               "\nintermediate_size=", s.intermediate_size, "\nnum_layers=", s.num_layers, "\nnum_heads=", s.num_heads,
               "\nnum_kv_heads=", s.num_kv_heads, "\nhead_dim=", s.head_dim, "\n");
  d += str_cat("rms_norm_eps=", identity_number(s.rms_norm_eps),
               "\nnorm_weight_offset=", identity_number(s.norm_weight_offset), "\n");
  d += str_cat("activation=", s.activation == Activation::kSilu ? "silu" : "gelu_tanh", "\n");
  d += str_cat("attention_bias=", s.attention_bias, "\nqk_norm=", s.qk_norm, "\nsandwich_norms=", s.sandwich_norms,
               "\ntie_word_embeddings=", s.tie_word_embeddings, "\n");
  d += str_cat("embedding_scale=", identity_number(s.embedding_scale),
               "\nattention_scale=", identity_number(s.attention_scale),
               "\nattn_logit_softcap=", identity_number(s.attn_logit_softcap),
               "\nfinal_logit_softcap=", identity_number(s.final_logit_softcap), "\n");
  describe_rope(d, "rope", s.rope);
  describe_rope(d, "rope_local", s.rope_local);
  // Lines that exist only for M-RoPE / DeepStack specs (absent otherwise, so the identity of every
  // other model is what it was before these features).
  if (!s.mrope_section.empty())
    d += str_cat("mrope_section=", s.mrope_section[0], ",", s.mrope_section[1], ",", s.mrope_section[2],
                 " interleaved\n");
  if (!s.deepstack_layers.empty()) {
    d += "deepstack_layers=";
    for (size_t i = 0; i < s.deepstack_layers.size(); ++i) d += str_cat(i ? "," : "", s.deepstack_layers[i]);
    d += "\n";
  }
  d += str_cat("sliding_window=", s.sliding_window, "\nlayer_is_sliding=");
  for (bool b : s.layer_is_sliding) d += b ? '1' : '0';
  d += str_cat("\nmax_position_embeddings=", s.max_position_embeddings, "\nweight_dtype=", dtype_name(s.weight_dtype),
               "\neos_token_ids=");
  for (size_t i = 0; i < s.eos_token_ids.size(); ++i) d += str_cat(i ? "," : "", s.eos_token_ids[i]);
  d += str_cat("\nactivation_dtype=f32\ncontext_capacity=", shape.context_capacity, "\nslots=", shape.slots,
               "\nkv_dtype=", dtype_name(shape.kv_dtype), "\n");
  if (!s.weight_format.empty()) d += str_cat("weight_format=", s.weight_format, "\n");
  d += str_cat("entry=", entry_name(req.entry), "\nrows=", req.rows, "\n");
  if (req.entry == TextEntry::kPrefillEmbeddingsDeepstack) d += str_cat("visual_rows=", visual_rows(req), "\n");
  if (!req.variant.empty()) d += str_cat("variant=", req.variant, "\n");
  return d;
}

Result<shlo::Module> emit_text_entry(const TextModelSpec& spec, const EngineShape& shape, const EntryRequest& req) {
  HLX_RETURN_IF_ERROR(validate(spec, shape, req));
  const std::string entry = entry_name(req.entry);
  shlo::ModuleBuilder mb(str_cat("hlx_", family_name(spec.family), "_", entry));
  shlo::FunctionBuilder& f = mb.function(entry);
  DecoderContext c(f, spec, shape);
  const int64_t t = req.rows, hidden = spec.hidden_size, S = shape.context_capacity;
  const bool decode = is_decode(req.entry);

  // ---- signature: weights in layout order, then the entry's inputs, then the donated caches.
  for (const TensorInfo& info : text_checkpoint_layout(spec)) {
    Value w = f.arg(TensorType{spec.weight_dtype, info.shape});
    f.set_arg_attr(w, shlo::kWeightAttr, Attr::string(info.name));
    c.weights[info.name] = w;
  }
  const TensorType i32_scalar{DType::kI32, {}};
  const TensorType i32_rows{DType::kI32, {t}};
  Value tokens, embeddings, mask, length, start, slot, positions, slots;
  Value rope_positions, visual_positions, layer_features, visual_count;
  const int64_t nv = visual_rows(req), n_deep = int64_t(spec.deepstack_layers.size());
  if (decode) {
    tokens = f.arg(i32_rows, "tokens");
    positions = f.arg(i32_rows, "positions");
    if (req.entry == TextEntry::kDecodeMrope) rope_positions = f.arg(i32_rows, "rope_positions");
    slots = f.arg(i32_rows, "slots");
  } else {
    if (entry_takes_embeddings(req.entry))
      embeddings = f.arg(TensorType{DType::kF32, {t, hidden}}, "embeddings");
    else
      tokens = f.arg(i32_rows, "tokens");
    if (entry_takes_mask(req.entry)) mask = f.arg(TensorType{DType::kF32, {1, 1, t, t}}, "mask");
    if (takes_mrope(spec, req.entry)) rope_positions = f.arg(TensorType{DType::kI32, {3, t}}, "rope_positions");
    if (req.entry == TextEntry::kPrefillEmbeddingsDeepstack) {
      visual_positions = f.arg(TensorType{DType::kI32, {nv}}, "visual_positions");
      layer_features = f.arg(TensorType{DType::kF32, {n_deep, nv, hidden}}, "layer_features");
      visual_count = f.arg(i32_scalar, "visual_count");
    }
    length = f.arg(i32_scalar, "length");
    start = f.arg(i32_scalar, "start");
    slot = f.arg(i32_scalar, "slot");
  }
  const TensorType cache_type{shape.kv_dtype, {shape.slots, S, spec.num_kv_heads, spec.head_dim}};
  const std::vector<std::string> cache_names = text_cache_names(shape);
  const TensorType scale_type{DType::kF32, {shape.slots, S, spec.num_kv_heads}};
  for (int64_t l = 0; l < spec.num_layers; ++l)
    for (size_t i = 0; i < cache_names.size(); ++i)
      c.caches.push_back(f.arg(i < 2 ? cache_type : scale_type, str_cat(cache_names[i], l), int(1 + c.caches.size())));

  // ---- positions and cache addressing.
  f.set_scope("positions");
  c.rows = t;
  if (decode) {
    c.batch = t;
    c.q_len = 1;
    c.positions = positions;
    c.cache_index = f.concatenate({f.reshape(slots, {t, 1}), f.reshape(positions, {t, 1})}, 1);
    c.attn_slot = slots;
    c.attn_q_pos = f.reshape(positions, {t, 1});
    c.attn_kv_len = f.add(positions, f.full(1, i32_rows));
  } else {
    c.batch = 1;
    c.q_len = t;
    Value iota = f.iota(i32_rows, 0);
    c.positions = f.add(f.broadcast_in_dim(start, {t}, {}), iota);
    // Padding rows (i >= length) are sent to position S, outside the cache: scatter drops them.
    Value real = f.compare(shlo::CompareDir::kLT, iota, f.broadcast_in_dim(length, {t}, {}));
    Value write_pos = f.select(real, c.positions, f.full(double(S), i32_rows));
    c.cache_index = f.concatenate({f.broadcast_in_dim(slot, {t, 1}, {}), f.reshape(write_pos, {t, 1})}, 1);
    c.attn_slot = as_vec1(f, slot);
    c.attn_q_pos = f.reshape(c.positions, {1, t});
    c.attn_kv_len = as_vec1(f, f.add(start, length));
    if (mask.valid()) {
      // The attention bias [1, Lp, S]: mask[i, j] at key start + j, 0 elsewhere (cache rows before
      // start; keys at or past start + length are outside kv_len). Blocked cells (<= the most
      // negative f32) become -inf, which the attention composite drops: exactly 0 weight, as
      // upstream's softmax gives for min-f32 scores. Placed in [1, Lp, S + Lp] so that
      // dynamic_update_slice never clamps a chunk near the capacity, then cut to S.
      const TensorType mtype{DType::kF32, {1, t, t}};
      Value m = f.reshape(mask, {1, t, t});
      Value blocked = f.compare(shlo::CompareDir::kLE, m, f.full(-double(std::numeric_limits<float>::max()), mtype));
      m = f.select(blocked, f.full(-std::numeric_limits<double>::infinity(), mtype), m);
      Value zero = f.scalar(0, DType::kI32);
      Value wide = f.dynamic_update_slice(f.zeros(TensorType{DType::kF32, {1, t, S + t}}), m, {zero, zero, start});
      c.attn_bias = f.slice(wide, {0, 0, 0}, {1, t, S});
    }
  }
  c.inv_freq_global = inv_freq_constant(f, spec.rope, spec.head_dim);
  c.inv_freq_local = inv_freq_constant(f, spec.rope_local, spec.head_dim);
  if (rope_positions.valid() && !decode) {
    c.mrope_positions = rope_positions;
    const std::vector<float> inv = rope_inv_freq(spec.rope, spec.head_dim);
    const std::vector<int> axis = mrope_axis_of_frequency(spec);
    for (int a = 0; a < 3; ++a) {
      Tensor masked = Tensor::empty(DType::kF32, {int64_t(inv.size())});
      for (size_t i = 0; i < inv.size(); ++i) masked.data<float>()[i] = axis[i] == a ? inv[i] : 0.f;
      c.inv_freq_mrope.push_back(f.constant(masked));
    }
  } else if (rope_positions.valid()) {
    c.rotary_positions = rope_positions;
  }

  // ---- embedding.
  f.set_scope("embedding");
  const std::string embed_name = spec.weight_prefix + "embed_tokens.weight";
  Value x;
  if (embeddings.valid()) {
    x = embeddings;  // already at the post-embedding scale
  } else {
    shlo::GatherDims gd;
    gd.offset_dims = {1};
    gd.collapsed_slice_dims = {0};
    gd.start_index_map = {0};
    gd.index_vector_dim = 1;
    x = f.convert(f.gather(c.weight(embed_name), f.reshape(tokens, {t, 1}), gd, {1, hidden}), DType::kF32);
    // Gemma: sqrt(hidden) already rounded to the weight dtype by the spec parser.
    if (spec.embedding_scale != 1.0) x = f.mul(x, f.full(spec.embedding_scale, x.type()));
  }

  // ---- layers.
  LayerFn layer = text_family_of(spec.family).layer;
  // DeepStack: which feature row (if any) each prefill row takes, found by comparing row indices
  // with visual_positions (no scatter, so nothing depends on how duplicates would collide).
  Value ds_index, ds_has;
  if (visual_positions.valid()) {
    f.set_scope("deepstack rows");
    const TensorType i32_tv{DType::kI32, {t, nv}};
    Value row = f.iota(i32_tv, 0), v = f.iota(i32_tv, 1);
    Value match =
        f.logical_and(f.compare(shlo::CompareDir::kEQ, f.broadcast_in_dim(visual_positions, {t, nv}, {1}), row),
                      f.compare(shlo::CompareDir::kLT, v, f.broadcast_in_dim(visual_count, {t, nv}, {})));
    ds_index = f.reduce_sum(f.select(match, v, f.full(0, i32_tv)), {1});  // [T]
    ds_has = f.compare(shlo::CompareDir::kGT, f.reduce_sum(f.select(match, f.full(1, i32_tv), f.full(0, i32_tv)), {1}),
                       f.full(0, i32_rows));  // [T]
  }
  for (int64_t l = 0; l < spec.num_layers; ++l) {
    x = layer(c, l, x);
    if (!ds_index.valid()) continue;
    for (int64_t k = 0; k < n_deep; ++k) {
      if (spec.deepstack_layers[size_t(k)] != l) continue;
      f.set_scope(str_cat("layer ", l, " deepstack ", k));
      Value feat = f.reshape(f.slice(layer_features, {k, 0, 0}, {k + 1, nv, hidden}), {nv, hidden});
      shlo::GatherDims gd;
      gd.offset_dims = {1};
      gd.collapsed_slice_dims = {0};
      gd.start_index_map = {0};
      gd.index_vector_dim = 1;
      Value rows_feat = f.gather(feat, f.reshape(ds_index, {t, 1}), gd, {1, hidden});  // [T, hidden]
      x = f.select(f.broadcast_in_dim(ds_has, {t, hidden}, {0}), f.add(x, rows_feat), x);
    }
  }

  // ---- final norm and logits.
  f.set_scope("logits");
  Value rows = x;
  if (!decode && !entry_all_logits(req.entry)) {
    // Only row length-1 (dynamic_slice clamps a length of 0 to row 0).
    Value last = f.sub(length, f.scalar(1, DType::kI32));
    rows = f.dynamic_slice(x, {last, f.scalar(0, DType::kI32)}, {1, hidden});
  }
  Value h = norm(c, rows, c.weight(spec.weight_prefix + "norm.weight"));
  Value logits = linear(c, h, c.weight(spec.lm_head_name));
  if (spec.final_logit_softcap > 0) {
    Value cap = f.full(spec.final_logit_softcap, logits.type());
    logits = f.mul(cap, f.tanh(f.div(logits, cap)));
  }
  if (rows.dim(0) == 1 && !(entry_all_logits(req.entry) || decode)) logits = f.reshape(logits, {spec.vocab_size});

  std::vector<Value> results = {logits};
  std::vector<AttrDict> result_attrs = {{{shlo::kArgNameAttr, Attr::string("logits")}}};
  for (size_t i = 0; i < c.caches.size(); ++i) {
    results.push_back(c.caches[i]);
    result_attrs.push_back(
        {{shlo::kArgNameAttr, Attr::string(str_cat(cache_names[i % cache_names.size()], i / cache_names.size()))}});
  }
  f.ret(results, result_attrs);
  HLX_RETURN_IF_ERROR(c.status);

  // Identity and the shape facts a loader checks before running anything.
  set_identity(mb, text_entry_description(spec, shape, req));
  mb.set_attr("hlx.entry", Attr::string(entry));
  mb.set_attr("hlx.context_capacity", Attr::integer(S));
  mb.set_attr("hlx.slots", Attr::integer(shape.slots));
  mb.set_attr("hlx.rows", Attr::integer(t));
  mb.set_attr("hlx.kv_dtype", Attr::string(std::string(dtype_name(shape.kv_dtype))));
  HLX_ASSIGN_OR_RETURN(shlo::Module m, mb.finish());
  return m;
}

}  // namespace hlx::models
