#include "stablehlo/composites.h"

#include <cmath>
#include <limits>

namespace hlx::shlo {
namespace {

// Decompositions are shared by every use with the same operand types and attributes; the name
// carries a stable hash of both so different shapes get different functions.
std::string decomposition_name(const std::string& composite, const std::vector<Value>& operands,
                               const AttrDict& attrs) {
  std::string key;
  for (const Value& v : operands) key += v.type().to_string() + ";";
  for (const NamedAttr& a : attrs) {
    key += a.name + "=";
    key += a.value.kind == Attr::Kind::kFloat  ? str_cat(a.value.f)
           : a.value.kind == Attr::Kind::kBool ? str_cat(a.value.b)
                                               : str_cat(a.value.i);
    key += ";";
  }
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : key) h = (h ^ c) * 1099511628211ull;
  char hex[17];
  snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return composite + ".decomposition." + hex;
}

Value emit(FunctionBuilder& f, const std::string& name, const std::vector<Value>& operands, AttrDict attrs,
           const BodyFn& body) {
  std::string decomposition = decomposition_name(name, operands, attrs);
  std::vector<Value> results = f.composite(name, operands, std::move(attrs), decomposition, body);
  return results.empty() ? Value() : results[0];
}

Dims iota_dims(int64_t n) {
  Dims d(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) d[size_t(i)] = i;
  return d;
}

// Broadcasts a [..] tensor holding x's leading dims (all but the last) back to x's shape.
Value expand_last(FunctionBuilder& f, const Value& v, const Shape& shape) {
  return f.broadcast_in_dim(v, shape, iota_dims(int64_t(shape.size()) - 1));
}

}  // namespace

Value rms_norm(FunctionBuilder& f, const Value& x, const Value& weight, float epsilon, float weight_offset) {
  AttrDict attrs = {{"epsilon", Attr::floating(epsilon, DType::kF32)},
                    {"weight_offset", Attr::floating(weight_offset, DType::kF32)}};
  return emit(f, "hlx.rms_norm", {x, weight}, std::move(attrs), [=](FunctionBuilder& g, const std::vector<Value>& a) {
    const Shape& shape = a[0].shape();
    int64_t last = int64_t(shape.size()) - 1;
    Value xf = g.convert(a[0], DType::kF32);
    Value mean =
        g.div(g.reduce_sum(g.mul(xf, xf), {last}),
              g.full(double(shape[size_t(last)]), TensorType{DType::kF32, Shape(shape.begin(), shape.end() - 1)}));
    Value inv = g.rsqrt(g.add(mean, g.full(epsilon, mean.type())));
    Value w = g.add(g.convert(a[1], DType::kF32), g.full(weight_offset, TensorType{DType::kF32, a[1].shape()}));
    Value y = g.mul(g.mul(xf, expand_last(g, inv, shape)), g.broadcast_in_dim(w, shape, {last}));
    return std::vector<Value>{g.convert(y, a[0].dtype())};
  });
}

Value layer_norm(FunctionBuilder& f, const Value& x, const Value& weight, const Value& bias, float epsilon) {
  AttrDict attrs = {{"epsilon", Attr::floating(epsilon, DType::kF32)}};
  return emit(f, "hlx.layer_norm", {x, weight, bias}, std::move(attrs),
              [=](FunctionBuilder& g, const std::vector<Value>& a) {
                const Shape& shape = a[0].shape();
                int64_t last = int64_t(shape.size()) - 1;
                TensorType rows{DType::kF32, Shape(shape.begin(), shape.end() - 1)};
                Value n = g.full(double(shape[size_t(last)]), rows);
                Value xf = g.convert(a[0], DType::kF32);
                Value mean = g.div(g.reduce_sum(xf, {last}), n);
                Value xc = g.sub(xf, expand_last(g, mean, shape));
                Value var = g.div(g.reduce_sum(g.mul(xc, xc), {last}), n);
                Value inv = g.rsqrt(g.add(var, g.full(epsilon, rows)));
                Value w = g.broadcast_in_dim(g.convert(a[1], DType::kF32), shape, {last});
                Value b = g.broadcast_in_dim(g.convert(a[2], DType::kF32), shape, {last});
                Value y = g.add(g.mul(g.mul(xc, expand_last(g, inv, shape)), w), b);
                return std::vector<Value>{g.convert(y, a[0].dtype())};
              });
}

Value rotary(FunctionBuilder& f, const Value& x, const Value& positions, const Value& inv_freq) {
  return emit(f, "hlx.rotary", {x, positions, inv_freq}, {}, [](FunctionBuilder& g, const std::vector<Value>& a) {
    const Shape& shape = a[0].shape();  // [T, H, Dh]
    int64_t t = shape[0], h = shape[1], dh = shape[2], half = a[2].dim(0), r = 2 * half;
    Shape angles_shape = {t, half};
    Value theta = g.mul(g.broadcast_in_dim(g.convert(a[1], DType::kF32), angles_shape, {0}),
                        g.broadcast_in_dim(a[2], angles_shape, {1}));
    Shape rot_shape = {t, h, half};
    Value c = g.broadcast_in_dim(g.cos(theta), rot_shape, {0, 2});
    Value s = g.broadcast_in_dim(g.sin(theta), rot_shape, {0, 2});
    Value xf = g.convert(a[0], DType::kF32);
    Value lo = g.slice(xf, {0, 0, 0}, {t, h, half});
    Value hi = g.slice(xf, {0, 0, half}, {t, h, r});
    std::vector<Value> parts = {g.sub(g.mul(lo, c), g.mul(hi, s)), g.add(g.mul(hi, c), g.mul(lo, s))};
    if (r < dh) parts.push_back(g.slice(xf, {0, 0, r}, {t, h, dh}));
    return std::vector<Value>{g.convert(g.concatenate(parts, 2), a[0].dtype())};
  });
}

Value attention(FunctionBuilder& f, const Value& q, const Value& k_cache, const Value& v_cache, const Value& slot,
                const Value& q_pos, const Value& kv_len, const std::optional<Value>& bias, const AttentionOptions& o,
                const std::optional<std::pair<Value, Value>>& scales) {
  AttrDict attrs = {{"scale", Attr::floating(o.scale, DType::kF32)},
                    {"causal", Attr::boolean(o.causal)},
                    {"sliding_window", Attr::integer(o.sliding_window, DType::kI64)},
                    {"logit_softcap", Attr::floating(o.logit_softcap, DType::kF32)},
                    {"has_bias", Attr::boolean(bias.has_value())}};
  std::vector<Value> operands = {q, k_cache, v_cache, slot, q_pos, kv_len};
  if (bias) operands.push_back(*bias);
  if (scales) {
    operands.push_back(scales->first);
    operands.push_back(scales->second);
  }
  const bool has_bias = bias.has_value(), quantized = scales.has_value();
  return emit(f, "hlx.attention", operands, std::move(attrs), [=](FunctionBuilder& g, const std::vector<Value>& a) {
    int64_t b = a[0].dim(0), t = a[0].dim(1), hq = a[0].dim(2), dh = a[0].dim(3);
    int64_t s = a[1].dim(1), hkv = a[1].dim(2), groups = hq / hkv;
    // Each row's slot of the caches: [B, S, Hkv, Dh].
    GatherDims by_slot;
    by_slot.offset_dims = {1, 2, 3};
    by_slot.collapsed_slice_dims = {0};
    by_slot.start_index_map = {0};
    by_slot.index_vector_dim = 1;
    Value slot_index = g.reshape(a[3], {b, 1});
    // int8 KV: codes times their row's scale ([N,S,Hkv] gathered the same way), in f32.
    GatherDims scale_by_slot = by_slot;
    scale_by_slot.offset_dims = {1, 2};
    const size_t scale_at = has_bias ? 7 : 6;
    auto rows_of = [&](const Value& cache, size_t scale_index) {
      Value x = g.convert(g.gather(cache, slot_index, by_slot, {1, s, hkv, dh}), DType::kF32);
      if (!quantized) return x;
      Value sc = g.gather(a[scale_index], slot_index, scale_by_slot, {1, s, hkv});
      return g.mul(x, g.broadcast_in_dim(sc, {b, s, hkv, dh}, {0, 1, 2}));
    };
    Value k = rows_of(a[1], scale_at), v = rows_of(a[2], scale_at + 1);
    // Scores [B, Hkv, T, G, S]: query head h reads kv head h / G.
    Value q5 = g.reshape(g.convert(a[0], DType::kF32), {b, t, hkv, groups, dh});
    DotDims qk{{0, 2}, {0, 2}, {4}, {3}};
    Value scores = g.mul(g.dot_general(q5, k, qk), g.full(o.scale, TensorType{DType::kF32, {b, hkv, t, groups, s}}));
    Shape sshape = {b, hkv, t, groups, s};
    TensorType stype{DType::kF32, sshape};
    if (o.logit_softcap > 0) {
      Value cap = g.full(o.logit_softcap, stype);
      scores = g.mul(cap, g.tanh(g.div(scores, cap)));
    }
    if (has_bias) scores = g.add(scores, g.broadcast_in_dim(a[6], sshape, {0, 2, 4}));
    // Visibility of key j to query (b, t).
    TensorType itype{DType::kI32, sshape};
    Value j = g.iota(itype, 4);
    Value visible = g.compare(CompareDir::kLT, j, g.broadcast_in_dim(a[5], sshape, {0}));
    Value pos = g.broadcast_in_dim(a[4], sshape, {0, 2});
    if (o.causal) visible = g.logical_and(visible, g.compare(CompareDir::kLE, j, pos));
    if (o.sliding_window > 0)
      visible =
          g.logical_and(visible, g.compare(CompareDir::kLT, g.sub(pos, j), g.full(double(o.sliding_window), itype)));
    // Softmax over visible keys; a query that sees nothing gets zeros.
    Value neg_inf = g.full(-std::numeric_limits<double>::infinity(), stype);
    Value masked = g.select(visible, scores, neg_inf);
    Value row_max = g.reduce_max(masked, {4});
    Value finite_max = g.select(g.compare(CompareDir::kEQ, row_max, g.full(-INFINITY, row_max.type())),
                                g.zeros(row_max.type()), row_max);
    Value p =
        g.select(visible, g.exp(g.sub(masked, g.broadcast_in_dim(finite_max, sshape, {0, 1, 2, 3}))), g.zeros(stype));
    Value denom = g.reduce_sum(p, {4});
    Value inv = g.select(g.compare(CompareDir::kGT, denom, g.zeros(denom.type())),
                         g.div(g.full(1.0, denom.type()), denom), g.zeros(denom.type()));
    DotDims pv{{0, 1}, {0, 2}, {4}, {1}};
    Value out = g.dot_general(p, v, pv);  // [B, Hkv, T, G, Dh]
    Shape oshape = {b, hkv, t, groups, dh};
    out = g.mul(out, g.broadcast_in_dim(inv, oshape, {0, 1, 2, 3}));
    out = g.transpose(out, {0, 2, 1, 3, 4});
    return std::vector<Value>{g.reshape(out, {b, t, hq, dh})};
  });
}

}  // namespace hlx::shlo
