// Qwen3-VL: config parsing and the `vision_encode` entry (contract in qwen3_vl.h), written from
// transformers' Qwen3VLVisionModel (patch embed, fast_pos_embed_interpolate, rot_pos_emb,
// Qwen3VLVisionBlock, Qwen3VLVisionPatchMerger). Activations f32, weights in their stored dtype.
#include <algorithm>
#include <cmath>
#include <map>
#include <utility>

#include "models/identity.h"
#include "models/qwen3_vl.h"
#include "stablehlo/builder.h"
#include "stablehlo/composites.h"

namespace hlx::models {

using shlo::Attr;
using shlo::DotDims;
using shlo::FunctionBuilder;
using shlo::TensorType;
using shlo::Value;

namespace {

constexpr const char* kSchema = "hlx.qwen3_vl_vision/1";

Status invalid(const ConfigView& c, const std::string& what) {
  return make_error(ErrorKind::kInvalidArgument, c.where(), ": ", what);
}

Status validate_vision(const Qwen3VLVisionSpec& v, int64_t text_hidden, const ConfigView& where) {
  if (v.depth <= 0 || v.hidden_size <= 0 || v.num_heads <= 0 || v.hidden_size % v.num_heads != 0 ||
      v.head_dim() % 4 != 0 || v.intermediate_size <= 0 || v.in_channels != 3 || v.patch_size <= 0 ||
      v.spatial_merge_size <= 0 || v.temporal_patch_size <= 0 || v.out_hidden_size <= 0 ||
      v.num_position_embeddings <= 0 || v.position_side() * v.position_side() != v.num_position_embeddings)
    return invalid(where, str_cat("vision_config has invalid dimensions (depth ", v.depth, ", hidden_size ",
                                  v.hidden_size, ", num_heads ", v.num_heads,
                                  " (head_dim must be a multiple of 4), "
                                  "intermediate_size ",
                                  v.intermediate_size, ", in_channels ", v.in_channels, ", patch_size ", v.patch_size,
                                  ", spatial_merge_size ", v.spatial_merge_size, ", temporal_patch_size ",
                                  v.temporal_patch_size, ", out_hidden_size ", v.out_hidden_size,
                                  ", num_position_embeddings ", v.num_position_embeddings, " (must be a square))"));
  if (v.out_hidden_size != text_hidden)
    return invalid(where, str_cat("out_hidden_size ", v.out_hidden_size, " != text hidden_size ", text_hidden));
  for (size_t k = 0; k < v.deepstack_visual_indexes.size(); ++k) {
    const int64_t i = v.deepstack_visual_indexes[k];
    if (i < 0 || i >= v.depth || (k > 0 && i <= v.deepstack_visual_indexes[k - 1]))
      return invalid(where, str_cat("deepstack_visual_indexes[", k, "] = ", i,
                                    " must be increasing block indices in [0, ", v.depth, ")"));
  }
  return ok_status();
}

struct Ctx {
  FunctionBuilder& f;
  const Qwen3VLVisionSpec& v;
  std::map<std::string, Value> weights;
  Status status;

  Value w(const std::string& suffix) {
    auto it = weights.find(v.weight_prefix + suffix);
    if (it != weights.end()) return it->second;
    if (status.ok()) status = make_error(ErrorKind::kInternal, "qwen3_vl vision layout has no '", suffix, "'");
    return Value();
  }
  // x [M, K] by Linear `name` (weight [N, K] + bias [N]) -> [M, N] f32.
  Value linear(const Value& x, const std::string& name) {
    Value wt = w(name + ".weight"), b = w(name + ".bias");
    Value in = x.dtype() == wt.dtype() ? x : f.convert(x, wt.dtype());
    Value y = f.dot_general(in, wt, DotDims{{}, {}, {1}, {1}}, DType::kF32);
    return f.add(y, f.broadcast_in_dim(f.convert(b, DType::kF32), y.shape(), {1}));
  }
  Value layer_norm(const Value& x, const std::string& name) {
    return shlo::layer_norm(f, x, w(name + ".weight"), w(name + ".bias"), float(v.layer_norm_eps));
  }
};

Value f32_constant(FunctionBuilder& f, const std::vector<float>& v) {
  Tensor t = Tensor::empty(DType::kF32, {int64_t(v.size())});
  std::copy(v.begin(), v.end(), t.data<float>());
  return f.constant(t);
}

// torch.linspace(0, side - 1, n) as f32 values (computed in double and rounded once).
std::vector<float> linspace(int64_t side, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out[size_t(i)] = n == 1 ? 0.f : float(double(side - 1) * double(i) / double(n - 1));
  return out;
}

// The learned position table bilinearly resampled to the grid (fast_pos_embed_interpolate): four
// gathers (index [4, N]) weighted (weight [4, N]) and summed in upstream's order.
Value position_embedding(Ctx& c, const Value& index, const Value& weight) {
  FunctionBuilder& f = c.f;
  const int64_t n = index.dim(1), d = c.v.hidden_size;
  shlo::GatherDims gd;
  gd.offset_dims = {1};
  gd.collapsed_slice_dims = {0};
  gd.start_index_map = {0};
  gd.index_vector_dim = 1;
  Value table = c.w("pos_embed.weight");
  Value sum;
  for (int64_t k = 0; k < 4; ++k) {
    Value idx = f.reshape(f.slice(index, {k, 0}, {k + 1, n}), {n, 1});
    Value wk = f.reshape(f.slice(weight, {k, 0}, {k + 1, n}), {n});
    Value rows = f.convert(f.gather(table, idx, gd, {1, d}), DType::kF32);
    Value term = f.mul(rows, f.broadcast_in_dim(wk, {n, d}, {0}));
    sum = k == 0 ? term : f.add(sum, term);
  }
  return sum;
}

// 2D rotary on x [N, heads, hd]: the first hd/4 frequencies rotate by the patch row, the next
// hd/4 by the column (rot_pos_emb). One 1D rotary per axis with the other axis' frequencies zero:
// a zero angle is an exact identity, so the two passes equal upstream's single rotation.
Value rotary_2d(Ctx& c, const Value& x, const Value& rows, const Value& cols) {
  const int64_t quarter = c.v.head_dim() / 4;
  std::vector<float> row_freq(size_t(2 * quarter), 0.f), col_freq(size_t(2 * quarter), 0.f);
  for (int64_t i = 0; i < quarter; ++i) {
    // Qwen3VLVisionRotaryEmbedding(dim = hd/2): 1 / 10000^(2i / dim) in f32.
    const float freq = 1.0f / float(std::pow(10000.0, double(float(2 * i) / float(2 * quarter))));
    row_freq[size_t(i)] = freq;
    col_freq[size_t(quarter + i)] = freq;
  }
  Value y = shlo::rotary(c.f, x, rows, f32_constant(c.f, row_freq));
  return shlo::rotary(c.f, y, cols, f32_constant(c.f, col_freq));
}

// `kv_len` [1]: rows at or past it are padding (bucketed entry), never attended to.
Value block(Ctx& c, int64_t i, const Value& x, const Value& rows, const Value& cols, const Value& kv_len) {
  FunctionBuilder& f = c.f;
  const int64_t n = x.dim(0), d = c.v.hidden_size, heads = c.v.num_heads, hd = c.v.head_dim();
  const std::string p = str_cat("blocks.", i, ".");
  f.set_scope(str_cat("vision block ", i, " attention"));
  Value qkv = f.reshape(c.linear(c.layer_norm(x, p + "norm1"), p + "attn.qkv"), {n, 3, heads, hd});
  auto part = [&](int64_t k) { return f.reshape(f.slice(qkv, {0, k, 0, 0}, {n, k + 1, heads, hd}), {n, heads, hd}); };
  Value q = rotary_2d(c, part(0), rows, cols), k = rotary_2d(c, part(1), rows, cols), v = part(2);
  const DType qkv_dtype = tower_attention_dtype(c.v.weight_dtype);
  auto operand = [&](const Value& x) {
    Value r = f.reshape(x, {1, n, heads, hd});
    return qkv_dtype == DType::kF32 ? r : f.convert(r, qkv_dtype);
  };
  // Bidirectional attention over this image's rows: k/v are a one-slot "cache" of exactly N rows.
  shlo::AttentionOptions o;
  o.scale = float(1.0 / std::sqrt(double(hd)));
  o.causal = false;
  Value a = shlo::attention(f, operand(q), operand(k), operand(v), f.zeros(TensorType{DType::kI32, {1}}),
                            f.iota(TensorType{DType::kI32, {1, n}}, 1), kv_len, std::nullopt, o);
  Value r = f.add(x, c.linear(f.reshape(a, {n, d}), p + "attn.proj"));
  f.set_scope(str_cat("vision block ", i, " mlp"));
  Value h = vision_activation(f, c.v.activation, c.linear(c.layer_norm(r, p + "norm2"), p + "mlp.linear_fc1"));
  return f.add(r, c.linear(h, p + "mlp.linear_fc2"));
}

// Qwen3VLVisionPatchMerger: main (LayerNorm(hidden) then 2x2 merge) or DeepStack (merge then
// LayerNorm(4 hidden)); then fc1, erf GELU (nn.GELU()), fc2.
Value merger(Ctx& c, const Value& x, const std::string& name, bool postshuffle_norm) {
  FunctionBuilder& f = c.f;
  const int64_t merged = c.v.hidden_size * c.v.merge_unit(), rows = x.dim(0) / c.v.merge_unit();
  Value h = postshuffle_norm ? c.layer_norm(f.reshape(x, {rows, merged}), name + ".norm")
                             : f.reshape(c.layer_norm(x, name + ".norm"), {rows, merged});
  h = vision_activation(f, VisionActivation::kGeluErf, c.linear(h, name + ".linear_fc1"));
  return c.linear(h, name + ".linear_fc2");
}

}  // namespace

int64_t Qwen3VLVisionSpec::position_side() const {
  int64_t s = int64_t(std::sqrt(double(num_position_embeddings)));
  while (s * s > num_position_embeddings) --s;
  while ((s + 1) * (s + 1) <= num_position_embeddings) ++s;
  return s;
}

Result<Qwen3VLSpec> qwen3_vl_spec_from_config(const HfConfig& config) {
  HLX_ASSIGN_OR_RETURN(std::string type, config.model_type());
  if (type != "qwen3_vl")
    return make_error(ErrorKind::kUnsupported, config.root().where(), ": model_type '", type, "' is not qwen3_vl");
  Qwen3VLSpec s;
  HLX_ASSIGN_OR_RETURN(s.text, text_spec_from_config(config));
  const ConfigView& root = config.root();
  HLX_ASSIGN_OR_RETURN(ConfigView v, root.optional_sub("vision_config"));
  Qwen3VLVisionSpec& vs = s.vision;
  HLX_ASSIGN_OR_RETURN(vs.depth, v.optional_int("depth", vs.depth));
  HLX_ASSIGN_OR_RETURN(vs.hidden_size, v.optional_int("hidden_size", vs.hidden_size));
  HLX_ASSIGN_OR_RETURN(vs.intermediate_size, v.optional_int("intermediate_size", vs.intermediate_size));
  HLX_ASSIGN_OR_RETURN(vs.num_heads, v.optional_int("num_heads", vs.num_heads));
  HLX_ASSIGN_OR_RETURN(vs.in_channels, v.optional_int("in_channels", vs.in_channels));
  HLX_ASSIGN_OR_RETURN(vs.patch_size, v.optional_int("patch_size", vs.patch_size));
  HLX_ASSIGN_OR_RETURN(vs.spatial_merge_size, v.optional_int("spatial_merge_size", vs.spatial_merge_size));
  HLX_ASSIGN_OR_RETURN(vs.temporal_patch_size, v.optional_int("temporal_patch_size", vs.temporal_patch_size));
  HLX_ASSIGN_OR_RETURN(vs.out_hidden_size, v.optional_int("out_hidden_size", vs.out_hidden_size));
  HLX_ASSIGN_OR_RETURN(vs.num_position_embeddings,
                       v.optional_int("num_position_embeddings", vs.num_position_embeddings));
  if (v.has("deepstack_visual_indexes")) {
    HLX_ASSIGN_OR_RETURN(vs.deepstack_visual_indexes, v.require_int_array("deepstack_visual_indexes"));
  }
  HLX_ASSIGN_OR_RETURN(std::string act, v.optional_string("hidden_act", "gelu_pytorch_tanh"));
  if (act == "gelu_pytorch_tanh" || act == "gelu_new") {
    vs.activation = VisionActivation::kGeluTanh;
  } else if (act == "gelu") {
    vs.activation = VisionActivation::kGeluErf;
  } else {
    return make_error(ErrorKind::kUnsupported, v.where(), ": hidden_act '", act,
                      "' (implemented: gelu_pytorch_tanh, gelu_new, gelu)");
  }
  vs.weight_dtype = s.text.weight_dtype;
  HLX_RETURN_IF_ERROR(validate_vision(vs, s.text.hidden_size, v));
  if (int64_t(vs.deepstack_visual_indexes.size()) != int64_t(s.text.deepstack_layers.size()))
    return make_error(ErrorKind::kInternal, "deepstack taps ", vs.deepstack_visual_indexes.size(), " vs text layers ",
                      s.text.deepstack_layers.size());
  HLX_ASSIGN_OR_RETURN(s.image_token_id, root.optional_int("image_token_id", s.image_token_id));
  HLX_ASSIGN_OR_RETURN(s.video_token_id, root.optional_int("video_token_id", s.video_token_id));
  HLX_ASSIGN_OR_RETURN(s.vision_start_token_id, root.optional_int("vision_start_token_id", s.vision_start_token_id));
  HLX_ASSIGN_OR_RETURN(s.vision_end_token_id, root.optional_int("vision_end_token_id", s.vision_end_token_id));
  if (s.image_token_id < 0 || s.image_token_id >= s.text.vocab_size)
    return invalid(
        root, str_cat("image_token_id ", s.image_token_id, " is outside the vocabulary (", s.text.vocab_size, ")"));
  return s;
}

std::vector<TensorInfo> qwen3_vl_vision_layout(const Qwen3VLSpec& spec) {
  const Qwen3VLVisionSpec& v = spec.vision;
  const std::string& p = v.weight_prefix;
  const int64_t d = v.hidden_size, merged = d * v.merge_unit();
  std::vector<TensorInfo> out = {
      {p + "patch_embed.proj.weight", {d, v.in_channels, v.temporal_patch_size, v.patch_size, v.patch_size}},
      {p + "patch_embed.proj.bias", {d}},
      {p + "pos_embed.weight", {v.num_position_embeddings, d}},
  };
  for (int64_t i = 0; i < v.depth; ++i) {
    const std::string b = str_cat(p, "blocks.", i, ".");
    for (const char* n : {"norm1", "norm2"}) {
      out.push_back({b + n + ".weight", {d}});
      out.push_back({b + n + ".bias", {d}});
    }
    out.push_back({b + "attn.qkv.weight", {3 * d, d}});
    out.push_back({b + "attn.qkv.bias", {3 * d}});
    out.push_back({b + "attn.proj.weight", {d, d}});
    out.push_back({b + "attn.proj.bias", {d}});
    out.push_back({b + "mlp.linear_fc1.weight", {v.intermediate_size, d}});
    out.push_back({b + "mlp.linear_fc1.bias", {v.intermediate_size}});
    out.push_back({b + "mlp.linear_fc2.weight", {d, v.intermediate_size}});
    out.push_back({b + "mlp.linear_fc2.bias", {d}});
  }
  auto add_merger = [&](const std::string& m, int64_t norm_dim) {
    out.push_back({m + ".norm.weight", {norm_dim}});
    out.push_back({m + ".norm.bias", {norm_dim}});
    out.push_back({m + ".linear_fc1.weight", {merged, merged}});
    out.push_back({m + ".linear_fc1.bias", {merged}});
    out.push_back({m + ".linear_fc2.weight", {v.out_hidden_size, merged}});
    out.push_back({m + ".linear_fc2.bias", {v.out_hidden_size}});
  };
  add_merger(p + "merger", d);
  for (size_t k = 0; k < v.deepstack_visual_indexes.size(); ++k)
    add_merger(str_cat(p, "deepstack_merger_list.", k), merged);
  return out;
}

std::string qwen3_vl_vision_description(const Qwen3VLSpec& spec, const VisionGrid& g) {
  const Qwen3VLVisionSpec& v = spec.vision;
  std::string d = str_cat("schema=", kSchema, "\nentry=vision_encode\n");
  d += str_cat("depth=", v.depth, "\nhidden_size=", v.hidden_size, "\nintermediate_size=", v.intermediate_size,
               "\nnum_heads=", v.num_heads, "\nin_channels=", v.in_channels, "\npatch_size=", v.patch_size,
               "\nspatial_merge_size=", v.spatial_merge_size, "\ntemporal_patch_size=", v.temporal_patch_size,
               "\nout_hidden_size=", v.out_hidden_size, "\nnum_position_embeddings=", v.num_position_embeddings, "\n");
  d += "deepstack_visual_indexes=";
  for (size_t i = 0; i < v.deepstack_visual_indexes.size(); ++i)
    d += str_cat(i ? "," : "", v.deepstack_visual_indexes[i]);
  d += str_cat("\nactivation=", vision_activation_name(v.activation),
               "\nlayer_norm_eps=", identity_number(v.layer_norm_eps), "\nweight_prefix=", v.weight_prefix,
               "\nweight_dtype=", dtype_name(v.weight_dtype),
               "\nattention_dtype=", dtype_name(tower_attention_dtype(v.weight_dtype)), "\n");
  d += str_cat("grid=", g.t, "x", g.h, "x", g.w, "\nactivation_dtype=f32\n");
  return d;
}

Result<Qwen3VLVisionPositions> qwen3_vl_vision_positions(const Qwen3VLVisionSpec& v, const VisionGrid& g,
                                                         int64_t rows) {
  const int64_t m = v.spatial_merge_size, n = g.h * g.w, side = v.position_side();
  if (g.t != 1)
    return make_error(ErrorKind::kUnsupported, "qwen3_vl vision: grid t = ", g.t,
                      " (video) is not implemented; still images have t = 1");
  if (g.h <= 0 || g.w <= 0 || m <= 0 || g.h % m || g.w % m || g.h * g.w > (int64_t(1) << 24))
    return make_error(ErrorKind::kInvalidArgument, "qwen3_vl vision: grid ", g.h, "x", g.w,
                      " must be positive multiples of spatial_merge_size ", m);
  if (rows < n)
    return make_error(ErrorKind::kInvalidArgument, "qwen3_vl vision: grid ", g.h, "x", g.w, " has ", n,
                      " patches, more than the ", rows, " rows asked");
  Qwen3VLVisionPositions out{Tensor::zeros(DType::kI32, {4, rows}), Tensor::zeros(DType::kF32, {4, rows}),
                             Tensor::zeros(DType::kI32, {2, rows})};
  int32_t* idx = out.embed_index.data<int32_t>();
  float* wt = out.embed_weight.data<float>();
  int32_t* rot = out.rotary.data<int32_t>();
  const std::vector<float> hs = linspace(side, g.h), ws = linspace(side, g.w);
  int64_t i = 0;  // merge-block order: block row, block col, row in block, col in block
  for (int64_t bh = 0; bh < g.h / m; ++bh)
    for (int64_t bw = 0; bw < g.w / m; ++bw)
      for (int64_t r = 0; r < m; ++r)
        for (int64_t cc = 0; cc < m; ++cc, ++i) {
          const float y = hs[size_t(bh * m + r)], x = ws[size_t(bw * m + cc)];
          const int64_t y0 = int64_t(y), x0 = int64_t(x);
          const int64_t y1 = std::min(y0 + 1, side - 1), x1 = std::min(x0 + 1, side - 1);
          const float dy = y - float(y0), dx = x - float(x0);
          const int64_t cand[4] = {y0 * side + x0, y0 * side + x1, y1 * side + x0, y1 * side + x1};
          const float wv[4] = {(1 - dy) * (1 - dx), (1 - dy) * dx, dy * (1 - dx), dy * dx};
          for (int64_t k = 0; k < 4; ++k) {
            idx[k * rows + i] = int32_t(cand[k]);
            wt[k * rows + i] = wv[k];
          }
          rot[i] = int32_t(bh * m + r);
          rot[rows + i] = int32_t(bw * m + cc);
        }
  return out;
}

std::vector<int64_t> qwen3_vl_default_patch_buckets(const Qwen3VLVisionSpec& v, int64_t max_patches) {
  std::vector<int64_t> out;
  const int64_t unit = v.merge_unit();
  if (unit <= 0 || max_patches <= 0) return out;
  const int64_t top = (max_patches + unit - 1) / unit * unit;
  // 64 patches, then x4 (at most ~4x the work of the exact grid), then the largest image.
  for (int64_t b = std::max(unit, 64 / unit * unit); b < top; b *= 4) out.push_back(b);
  out.push_back(top);
  return out;
}

namespace {

// The body shared by both entries: patch embed, position embedding, blocks with the DeepStack
// taps, mergers. Returns {features, deepstack}.
std::pair<Value, Value> encode_body(Ctx& c, const Value& patches, const Value& embed_index, const Value& embed_weight,
                                    const Value& rotary, const Value& kv_len) {
  FunctionBuilder& f = c.f;
  const Qwen3VLVisionSpec& v = c.v;
  const int64_t n = patches.dim(0), rows = n / v.merge_unit(), k_taps = int64_t(v.deepstack_visual_indexes.size());
  // ---- patch embed (Conv3d with stride = kernel: one dot over the flattened (c, t, y, x) patch).
  f.set_scope("vision patch embed");
  Value pe_w = f.reshape(c.w("patch_embed.proj.weight"), {v.hidden_size, v.patch_dim()});
  Value pe_b = c.w("patch_embed.proj.bias");
  Value in = pe_w.dtype() == DType::kF32 ? patches : f.convert(patches, pe_w.dtype());
  Value x = f.dot_general(in, pe_w, DotDims{{}, {}, {1}, {1}}, DType::kF32);
  x = f.add(x, f.broadcast_in_dim(f.convert(pe_b, DType::kF32), x.shape(), {1}));
  f.set_scope("vision position embedding");
  x = f.add(x, position_embedding(c, embed_index, embed_weight));
  Value rows_pos = f.reshape(f.slice(rotary, {0, 0}, {1, n}), {n});
  Value cols_pos = f.reshape(f.slice(rotary, {1, 0}, {2, n}), {n});

  // ---- blocks, with DeepStack taps.
  std::vector<Value> taps;
  for (int64_t i = 0; i < v.depth; ++i) {
    x = block(c, i, x, rows_pos, cols_pos, kv_len);
    for (int64_t k = 0; k < k_taps; ++k)
      if (v.deepstack_visual_indexes[size_t(k)] == i) {
        f.set_scope(str_cat("vision deepstack merger ", k));
        taps.push_back(
            f.reshape(merger(c, x, str_cat("deepstack_merger_list.", k), true), {1, rows, v.out_hidden_size}));
      }
  }
  f.set_scope("vision merger");
  Value features = merger(c, x, "merger", false);
  Value deep = k_taps ? f.concatenate(taps, 0) : f.zeros(TensorType{DType::kF32, {0, rows, v.out_hidden_size}});
  return {features, deep};
}

void bind_weights(Ctx& c, const Qwen3VLSpec& spec) {
  for (const TensorInfo& info : qwen3_vl_vision_layout(spec)) {
    Value w = c.f.arg(TensorType{spec.vision.weight_dtype, info.shape});
    c.f.set_arg_attr(w, shlo::kWeightAttr, Attr::string(info.name));
    c.weights[info.name] = w;
  }
}

Result<shlo::Module> finish(shlo::ModuleBuilder& mb, Ctx& c, const std::pair<Value, Value>& out,
                            const std::string& description, const char* entry, int64_t rows) {
  c.f.ret({out.first, out.second},
          {{{shlo::kArgNameAttr, Attr::string("features")}}, {{shlo::kArgNameAttr, Attr::string("deepstack")}}});
  HLX_RETURN_IF_ERROR(c.status);
  set_identity(mb, description);
  mb.set_attr("hlx.entry", Attr::string(entry));
  mb.set_attr("hlx.tokens_per_image", Attr::integer(rows));
  HLX_ASSIGN_OR_RETURN(shlo::Module mod, mb.finish());
  return mod;
}

}  // namespace

Result<shlo::Module> emit_qwen3_vl_vision_entry(const Qwen3VLSpec& spec, const VisionGrid& g) {
  const Qwen3VLVisionSpec& v = spec.vision;
  HLX_ASSIGN_OR_RETURN(Qwen3VLVisionPositions pos, qwen3_vl_vision_positions(v, g, g.h * g.w));
  HLX_RETURN_IF_ERROR(validate_vision(v, spec.text.hidden_size, ConfigView()));
  const int64_t n = g.h * g.w;
  shlo::ModuleBuilder mb("hlx_qwen3_vl_vision_encode");
  FunctionBuilder& f = mb.function("vision_encode");
  Ctx c{f, v, {}, ok_status()};
  Value patches = f.arg(TensorType{DType::kF32, {n, v.patch_dim()}}, "patches");
  bind_weights(c, spec);
  // The grid is compiled in: positions are constants of the module.
  auto out = encode_body(c, patches, f.constant(pos.embed_index), f.constant(pos.embed_weight), f.constant(pos.rotary),
                         f.full(double(n), TensorType{DType::kI32, {1}}));
  return finish(mb, c, out, qwen3_vl_vision_description(spec, g), "vision_encode", n / v.merge_unit());
}

std::string qwen3_vl_vision_padded_description(const Qwen3VLSpec& spec, int64_t rows) {
  std::string d = qwen3_vl_vision_description(spec, VisionGrid{1, 0, 0});
  d = d.substr(0, d.find("grid="));
  return str_cat(d, "entry_variant=padded\npatch_rows=", rows, "\nactivation_dtype=f32\n");
}

Result<shlo::Module> emit_qwen3_vl_vision_padded_entry(const Qwen3VLSpec& spec, int64_t rows) {
  const Qwen3VLVisionSpec& v = spec.vision;
  HLX_RETURN_IF_ERROR(validate_vision(v, spec.text.hidden_size, ConfigView()));
  if (rows <= 0 || rows % v.merge_unit() != 0 || rows > (int64_t(1) << 24))
    return make_error(ErrorKind::kInvalidArgument, "qwen3_vl vision_encode_padded: ", rows,
                      " patch rows must be a positive multiple of ", v.merge_unit(), " (merge unit)");
  shlo::ModuleBuilder mb("hlx_qwen3_vl_vision_encode_padded");
  FunctionBuilder& f = mb.function("vision_encode_padded");
  Ctx c{f, v, {}, ok_status()};
  Value patches = f.arg(TensorType{DType::kF32, {rows, v.patch_dim()}}, "patches");
  Value index = f.arg(TensorType{DType::kI32, {4, rows}}, "embed_index");
  Value weight = f.arg(TensorType{DType::kF32, {4, rows}}, "embed_weight");
  Value rotary = f.arg(TensorType{DType::kI32, {2, rows}}, "rotary_positions");
  Value valid = f.arg(TensorType{DType::kI32, {}}, "valid");
  bind_weights(c, spec);
  auto out = encode_body(c, patches, index, weight, rotary, f.reshape(valid, {1}));
  return finish(mb, c, out, qwen3_vl_vision_padded_description(spec, rows), "vision_encode_padded",
                rows / v.merge_unit());
}

}  // namespace hlx::models
