#include "models/decoder_common.h"

#include <cmath>

namespace hlx::models {

using shlo::DotDims;
using shlo::ScatterDims;
using shlo::TensorType;
using shlo::Value;

Value DecoderContext::weight(const std::string& name) {
  auto it = weights.find(name);
  if (it != weights.end()) return it->second;
  // Ops on the invalid Value are skipped by the builder; the emitter reports this error first.
  if (status.ok())
    status = make_error(ErrorKind::kInternal, "the checkpoint layout of model_type ", spec.model_type,
                        " has no tensor '", name, "'");
  return Value();
}

Value DecoderContext::layer_weight(int64_t layer, const std::string& suffix) {
  return weight(str_cat(spec.weight_prefix, "layers.", layer, ".", suffix));
}

Value matmul_input(DecoderContext& c, const Value& x) {
  return c.spec.weight_dtype == DType::kF32 || !x.valid() ? x : c.f.convert(x, c.spec.weight_dtype);
}

Value linear(DecoderContext& c, const Value& x, const Value& w, const Value* bias) {
  shlo::FunctionBuilder& f = c.f;
  Value in = x.dtype() == w.dtype() ? x : f.convert(x, w.dtype());
  Value y = f.dot_general(in, w, DotDims{{}, {}, {1}, {1}}, DType::kF32);
  if (bias) y = f.add(y, f.broadcast_in_dim(f.convert(*bias, DType::kF32), y.shape(), {1}));
  return y;
}

Value norm(DecoderContext& c, const Value& x, const Value& w) {
  return shlo::rms_norm(c.f, x, w, float(c.spec.rms_norm_eps), c.spec.norm_weight_offset);
}

Value self_attention(DecoderContext& c, int64_t layer, const Value& h, bool sliding) {
  shlo::FunctionBuilder& f = c.f;
  const TextModelSpec& s = c.spec;
  const int64_t t = c.rows, hq = s.num_heads, hkv = s.num_kv_heads, dh = s.head_dim;
  const Value hin = matmul_input(c, h);  // rounded once for q, k and v
  auto proj = [&](const char* name, int64_t heads) {
    Value w = c.layer_weight(layer, str_cat("self_attn.", name, ".weight"));
    Value b;
    if (s.attention_bias) b = c.layer_weight(layer, str_cat("self_attn.", name, ".bias"));
    return f.reshape(linear(c, hin, w, s.attention_bias ? &b : nullptr), {t, heads, dh});
  };
  f.set_scope(str_cat("layer ", layer, " attention q/k/v"));
  Value q = proj("q_proj", hq), k = proj("k_proj", hkv), v = proj("v_proj", hkv);
  if (s.qk_norm) {  // per-head RMSNorm over head_dim, before rotary (Qwen3, Gemma3)
    q = norm(c, q, c.layer_weight(layer, "self_attn.q_norm.weight"));
    k = norm(c, k, c.layer_weight(layer, "self_attn.k_norm.weight"));
  }
  f.set_scope(str_cat("layer ", layer, " rotary"));
  if (c.mrope_positions.valid()) {
    for (int64_t a = 0; a < 3; ++a) {
      Value pos = f.reshape(f.slice(c.mrope_positions, {a, 0}, {a + 1, t}), {t});
      q = shlo::rotary(f, q, pos, c.inv_freq_mrope[size_t(a)]);
      k = shlo::rotary(f, k, pos, c.inv_freq_mrope[size_t(a)]);
    }
  } else {
    const Value& inv_freq = sliding ? c.inv_freq_local : c.inv_freq_global;
    const Value& pos = c.rotary_positions.valid() ? c.rotary_positions : c.positions;
    q = shlo::rotary(f, q, pos, inv_freq);
    k = shlo::rotary(f, k, pos, inv_freq);
  }

  // Write this step's K/V rows at (slot, position) before attending, so a row sees itself.
  f.set_scope(str_cat("layer ", layer, " kv write"));
  ScatterDims sd;
  sd.update_window_dims = {1, 2};
  sd.inserted_window_dims = {0, 1};
  sd.scatter_dims_to_operand_dims = {0, 1};
  sd.index_vector_dim = 1;
  const bool i8 = c.shape.kv_dtype == DType::kI8;
  const size_t per_layer = i8 ? 4 : 2;  // k, v (, k_scale, v_scale)
  Value& k_cache = c.caches[per_layer * size_t(layer)];
  Value& v_cache = c.caches[per_layer * size_t(layer) + 1];
  std::optional<std::pair<Value, Value>> scales;
  if (i8) {
    // int8 KV (docs/COMPOSITES.md): per row and kv head, scale = max|x| / 127 over head_dim and
    // code = clamp(round_half_even(x / scale), -127, 127); a zero row has scale 0 and codes 0.
    ScatterDims ssd;
    ssd.update_window_dims = {1};
    ssd.inserted_window_dims = {0, 1};
    ssd.scatter_dims_to_operand_dims = {0, 1};
    ssd.index_vector_dim = 1;
    const TensorType rows_type{DType::kF32, {t, hkv}};
    auto quantize = [&](const Value& x, Value& cache, Value& scale_cache) {
      Value scale = f.div(f.reduce_max(f.abs(x), {2}), f.full(127.0, rows_type));
      Value zero = f.compare(shlo::CompareDir::kEQ, scale, f.zeros(rows_type));
      Value divisor = f.broadcast_in_dim(f.select(zero, f.full(1.0, rows_type), scale), {t, hkv, dh}, {0, 1});
      const TensorType x_type{DType::kF32, {t, hkv, dh}};
      Value code = f.clamp(f.full(-127.0, x_type), f.round_even(f.div(x, divisor)), f.full(127.0, x_type));
      cache = f.scatter(cache, c.cache_index, f.convert(code, DType::kI8), sd, shlo::Reducer::kReplace);
      scale_cache = f.scatter(scale_cache, c.cache_index, scale, ssd, shlo::Reducer::kReplace);
    };
    Value& k_scale = c.caches[per_layer * size_t(layer) + 2];
    Value& v_scale = c.caches[per_layer * size_t(layer) + 3];
    quantize(k, k_cache, k_scale);
    quantize(v, v_cache, v_scale);
    scales = std::make_pair(k_scale, v_scale);
  } else {
    const DType kv = k_cache.dtype();
    k_cache = f.scatter(k_cache, c.cache_index, f.convert(k, kv), sd, shlo::Reducer::kReplace);
    v_cache = f.scatter(v_cache, c.cache_index, f.convert(v, kv), sd, shlo::Reducer::kReplace);
  }

  f.set_scope(str_cat("layer ", layer, " attention"));
  shlo::AttentionOptions o;
  o.scale = float(s.attention_scale);
  // With a mask, the mask decides visibility inside the chunk (image blocks look ahead); cache rows
  // before the chunk are all in the past, so dropping the causal rule changes nothing for them.
  o.causal = !c.attn_bias.valid();
  o.sliding_window = sliding ? s.sliding_window : 0;
  o.logit_softcap = float(s.attn_logit_softcap);
  Value q4 = f.reshape(q, {c.batch, c.q_len, hq, dh});
  // A bf16 cache takes a bf16 Q, as upstream run in bf16 holds it: rounded after rotary / q-norm,
  // before the scale (applied to the f32 scores), so every entry and kernel sees the same Q and
  // Q.K^T is one bf16 dot product per pair. f32 and i8 caches keep the f32 Q.
  if (k_cache.dtype() == DType::kBF16) q4 = f.convert(q4, DType::kBF16);
  std::optional<Value> bias;
  if (c.attn_bias.valid()) bias = c.attn_bias;
  Value a = shlo::attention(f, q4, k_cache, v_cache, c.attn_slot, c.attn_q_pos, c.attn_kv_len, bias, o, scales);
  f.set_scope(str_cat("layer ", layer, " o_proj"));
  return linear(c, f.reshape(a, {t, hq * dh}), c.layer_weight(layer, "self_attn.o_proj.weight"));
}

Value gated_mlp(DecoderContext& c, int64_t layer, const Value& h) {
  shlo::FunctionBuilder& f = c.f;
  f.set_scope(str_cat("layer ", layer, " mlp"));
  const Value hin = matmul_input(c, h);  // rounded once for gate and up
  Value gate = linear(c, hin, c.layer_weight(layer, "mlp.gate_proj.weight"));
  Value up = linear(c, hin, c.layer_weight(layer, "mlp.up_proj.weight"));
  const TensorType& ty = gate.type();
  Value act;
  if (c.spec.activation == Activation::kSilu) {
    act = f.mul(gate, f.logistic(gate));
  } else {
    // gelu_pytorch_tanh: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
    Value x3 = f.mul(f.mul(gate, gate), gate);
    Value inner = f.mul(f.full(std::sqrt(2.0 / M_PI), ty), f.add(gate, f.mul(f.full(0.044715, ty), x3)));
    act = f.mul(f.mul(f.full(0.5, ty), gate), f.add(f.full(1.0, ty), f.tanh(inner)));
  }
  return linear(c, f.mul(act, up), c.layer_weight(layer, "mlp.down_proj.weight"));
}

}  // namespace hlx::models
