// The `vision_encode` entry (contract in vision_spec.h): patch embedding, CLIP/SigLIP encoder layers
// up to the selected feature layer, feature selection, then LLaVA's MLP projector or Gemma3's
// (avg-pool, (1 + w) RMSNorm, x . W). Written from transformers' CLIPVisionTransformer /
// SiglipVisionTransformer / LlavaModel.get_image_features / Gemma3MultiModalProjector. Activations
// are f32; weights stay in their stored dtype (16-bit weights meet activations rounded to their
// dtype, as in the text entries).
#include <cmath>
#include <map>

#include "models/identity.h"
#include "models/vision_spec.h"
#include "stablehlo/builder.h"
#include "stablehlo/composites.h"

namespace hlx::models {

using shlo::Attr;
using shlo::AttrDict;
using shlo::DotDims;
using shlo::FunctionBuilder;
using shlo::TensorType;
using shlo::Value;

namespace {

// Bump when the graph or the signature changes incompatibly.
constexpr const char* kSchema = "hlx.vision_encoder/1";

struct VisionContext {
  FunctionBuilder& f;
  const VlmSpec& spec;
  std::map<std::string, Value> weights;
  Status status;

  Value weight(const std::string& name) {
    auto it = weights.find(name);
    if (it != weights.end()) return it->second;
    if (status.ok()) status = make_error(ErrorKind::kInternal, "the vision layout has no tensor '", name, "'");
    return Value();
  }
  Value layer_weight(int64_t layer, const std::string& suffix) {
    return weight(str_cat(spec.vision.weight_prefix, "encoder.layers.", layer, ".", suffix));
  }
};

// x [M, K] times a Linear weight [N, K] (+ bias [N]) -> [M, N] f32.
Value linear(FunctionBuilder& f, const Value& x, const Value& w, const Value* bias) {
  Value in = x.dtype() == w.dtype() ? x : f.convert(x, w.dtype());
  Value y = f.dot_general(in, w, DotDims{{}, {}, {1}, {1}}, DType::kF32);
  if (bias) y = f.add(y, f.broadcast_in_dim(f.convert(*bias, DType::kF32), y.shape(), {1}));
  return y;
}

// GELU with erf, 0.5 x (1 + erf(x / sqrt 2)), in plain StableHLO (erf is a CHLO op, not StableHLO).
// erfc(z) for z = |x|/sqrt 2 >= 0 uses Abramowitz & Stegun 7.1.26:
//   erfc(z) ~ t (a1 + t (a2 + t (a3 + t (a4 + t a5)))) exp(-z^2),  t = 1 / (1 + p z),
// absolute error <= 1.5e-7 for all z >= 0 (checked against math.erf in
// tests/models/test_vision_reference.py). Then GELU(x) = x - 0.5 x erfc(z) for x >= 0 and
// 0.5 x erfc(z) for x < 0, so the GELU error is <= 0.75e-7 |x| (plus f32 rounding), with no
// cancellation on the negative side.
Value gelu_erf(FunctionBuilder& f, const Value& x) {
  const TensorType& ty = x.type();
  auto k = [&](double v) { return f.full(v, ty); };
  Value z = f.mul(f.abs(x), k(M_SQRT1_2));
  Value t = f.div(k(1.0), f.add(k(1.0), f.mul(k(0.3275911), z)));
  Value poly = k(1.061405429);
  for (double a : {-1.453152027, 1.421413741, -0.284496736, 0.254829592}) poly = f.add(k(a), f.mul(t, poly));
  Value erfc = f.mul(f.mul(t, poly), f.exp(f.neg(f.mul(z, z))));
  Value half_x_erfc = f.mul(f.mul(k(0.5), x), erfc);
  Value positive = f.compare(shlo::CompareDir::kGE, x, k(0.0));
  return f.select(positive, f.sub(x, half_x_erfc), half_x_erfc);
}

}  // namespace

Value vision_activation(FunctionBuilder& f, VisionActivation a, const Value& x) {
  const TensorType& ty = x.type();
  switch (a) {
    case VisionActivation::kQuickGelu:  // x * sigmoid(1.702 x)
      return f.mul(x, f.logistic(f.mul(f.full(1.702, ty), x)));
    case VisionActivation::kGeluTanh: {  // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
      Value x3 = f.mul(f.mul(x, x), x);
      Value inner = f.mul(f.full(std::sqrt(2.0 / M_PI), ty), f.add(x, f.mul(f.full(0.044715, ty), x3)));
      return f.mul(f.mul(f.full(0.5, ty), x), f.add(f.full(1.0, ty), f.tanh(inner)));
    }
    case VisionActivation::kGeluErf:
      return gelu_erf(f, x);
  }
  return Value();
}

namespace {

// [1, C, H, W] pixels -> [N, D] patch projections: each P x P patch (row-major over the patch grid)
// flattened as (c, py, px), the conv weight [D, C, P, P] flattened the same way, one dot_general.
Value patch_embedding(VisionContext& c, const Value& pixels) {
  FunctionBuilder& f = c.f;
  const VisionSpec& v = c.spec.vision;
  const int64_t ch = v.num_channels, g = v.patches_per_side(), p = v.patch_size, d = v.hidden_size;
  // Like the VALID convolution, ignore the border pixels beyond the last whole patch.
  Value x = pixels;
  if (g * p != v.image_size) x = f.slice(x, {0, 0, 0, 0}, {1, ch, g * p, g * p});
  x = f.reshape(x, {ch, g, p, g, p});   // (c, gy, py, gx, px)
  x = f.transpose(x, {1, 3, 0, 2, 4});  // (gy, gx, c, py, px)
  x = f.reshape(x, {g * g, ch * p * p});
  Value w = f.reshape(c.weight(v.weight_prefix + "embeddings.patch_embedding.weight"), {d, ch * p * p});
  Value bias;
  if (v.family == VisionFamily::kSiglip) bias = c.weight(v.weight_prefix + "embeddings.patch_embedding.bias");
  return linear(f, x, w, bias.valid() ? &bias : nullptr);
}

// One CLIPEncoderLayer / SiglipEncoderLayer on x [T, D].
Value encoder_layer(VisionContext& c, int64_t layer, const Value& x) {
  FunctionBuilder& f = c.f;
  const VisionSpec& v = c.spec.vision;
  const int64_t t = x.dim(0), d = v.hidden_size, heads = v.num_heads, dh = v.head_dim();
  const float eps = float(v.layer_norm_eps);
  auto lw = [&](const std::string& s) { return c.layer_weight(layer, s); };
  auto lin = [&](const Value& in, const std::string& name) {
    Value b = lw(name + ".bias");
    return linear(f, in, lw(name + ".weight"), &b);
  };

  f.set_scope(str_cat("vision layer ", layer, " attention"));
  Value h = shlo::layer_norm(f, x, lw("layer_norm1.weight"), lw("layer_norm1.bias"), eps);
  if (v.weight_dtype != DType::kF32) h = f.convert(h, v.weight_dtype);  // rounded once for q, k and v
  const DType qkv_dtype = tower_attention_dtype(v.weight_dtype);
  auto qkv = [&](const std::string& name) {
    Value x = f.reshape(lin(h, name), {1, t, heads, dh});
    return qkv_dtype == DType::kF32 ? x : f.convert(x, qkv_dtype);
  };
  Value q = qkv("self_attn.q_proj"), k = qkv("self_attn.k_proj"), vv = qkv("self_attn.v_proj");
  // Bidirectional attention: k/v are a one-slot "cache" of exactly the T rows, all visible.
  shlo::AttentionOptions o;
  o.scale = float(1.0 / std::sqrt(double(dh)));
  o.causal = false;
  Value slot = f.zeros(TensorType{DType::kI32, {1}});
  Value q_pos = f.iota(TensorType{DType::kI32, {1, t}}, 1);
  Value kv_len = f.full(double(t), TensorType{DType::kI32, {1}});
  Value a = shlo::attention(f, q, k, vv, slot, q_pos, kv_len, std::nullopt, o);
  Value r = f.add(x, lin(f.reshape(a, {t, d}), "self_attn.out_proj"));

  f.set_scope(str_cat("vision layer ", layer, " mlp"));
  h = shlo::layer_norm(f, r, lw("layer_norm2.weight"), lw("layer_norm2.bias"), eps);
  h = vision_activation(f, v.activation, lin(h, "mlp.fc1"));
  return f.add(r, lin(h, "mlp.fc2"));
}

// LlavaMultiModalProjector on the tower rows x [N, D]: feature selection, linear_1 -> act -> linear_2.
Value llava_projector(VisionContext& c, const Value& tower) {
  FunctionBuilder& f = c.f;
  const VlmSpec& spec = c.spec;
  const VisionSpec& v = spec.vision;
  Value x = tower;
  if (v.select_strategy == "default") x = f.slice(x, {1, 0}, {v.num_positions(), v.hidden_size});
  const std::string& p = spec.projector_prefix;
  Value b1, b2;
  if (spec.projector_bias) {
    b1 = c.weight(p + "linear_1.bias");
    b2 = c.weight(p + "linear_2.bias");
  }
  Value h = linear(f, x, c.weight(p + "linear_1.weight"), spec.projector_bias ? &b1 : nullptr);
  h = vision_activation(f, spec.projector_activation, h);
  return linear(f, h, c.weight(p + "linear_2.weight"), spec.projector_bias ? &b2 : nullptr);
}

// Gemma3MultiModalProjector on the tower's rows x [N, D] (row-major over the G x G patch grid):
// AvgPool2d(k, stride k) over the grid -> [side^2, D] (row-major over the pooled grid), then
// mm_soft_emb_norm (Gemma RMSNorm, x * (1 + w), the vision eps), then x . W with W stored
// [D, text_hidden]. `stage` kPooled stops after the pooling.
Value gemma3_projector(VisionContext& c, const Value& x, VisionStage stage) {
  FunctionBuilder& f = c.f;
  const VlmSpec& s = c.spec;
  const int64_t d = s.vision.hidden_size, side = s.pooled_side(), k = s.pool_kernel();
  // Patch (gy, gx) with gy = oy * k + ky, gx = ox * k + kx: sum over (ky, kx), divide by k^2.
  Value grid = f.reshape(x, {side, k, side, k, d});  // (oy, ky, ox, kx, d)
  Value sum = f.reduce_sum(grid, {1, 3});            // (oy, ox, d)
  Value pooled =
      f.div(f.reshape(sum, {side * side, d}), f.full(double(k * k), TensorType{DType::kF32, {side * side, d}}));
  if (stage == VisionStage::kPooled) return pooled;
  Value normed = shlo::rms_norm(f, pooled, c.weight(s.projector_prefix + "mm_soft_emb_norm.weight"),
                                float(s.projector_norm_eps), 1.f);
  Value w = c.weight(s.projector_prefix + "mm_input_projection_weight");  // [D, text_hidden]
  Value in = normed.dtype() == w.dtype() ? normed : f.convert(normed, w.dtype());
  return f.dot_general(in, w, DotDims{{}, {}, {1}, {0}}, DType::kF32);
}

Status validate(const VlmSpec& s) {
  const VisionSpec& v = s.vision;
  auto bad = [](const auto&... args) { return make_error(ErrorKind::kInvalidArgument, args...); };
  if (v.hidden_size <= 0 || v.num_heads <= 0 || v.hidden_size % v.num_heads != 0 || v.intermediate_size <= 0 ||
      v.patch_size <= 0 || v.image_size < v.patch_size || v.num_channels <= 0 || v.num_layers <= 0)
    return bad("vision spec has invalid dimensions (hidden ", v.hidden_size, ", heads ", v.num_heads, ", intermediate ",
               v.intermediate_size, ", image ", v.image_size, ", patch ", v.patch_size, ", channels ", v.num_channels,
               ", layers ", v.num_layers, ")");
  if (v.feature_layer < 0 || v.feature_layer > v.num_layers)
    return bad("vision feature layer ", v.feature_layer, " is outside [0, ", v.num_layers, "]");
  if (v.select_strategy != "default" && v.select_strategy != "full")
    return bad("vision select strategy '", v.select_strategy, "' (default or full)");
  if (s.tokens_per_image() <= 0) return bad("vision spec yields ", s.tokens_per_image(), " tokens per image");
  if (s.family == VlmFamily::kGemma3) {
    const int64_t side = s.pooled_side();
    if (side * side != s.mm_tokens_per_image || v.patches_per_side() % side != 0 || !v.use_post_layernorm ||
        v.feature_layer != v.num_layers || v.family != VisionFamily::kSiglip)
      return bad("gemma3 vision spec: ", s.mm_tokens_per_image, " tokens do not pool a ", v.patches_per_side(), " x ",
                 v.patches_per_side(), " SigLIP grid read after all ", v.num_layers, " layers and post_layernorm");
  }
  if (s.text.hidden_size <= 0) return bad("text hidden size ", s.text.hidden_size, " must be positive");
  if (!is_float(v.weight_dtype)) return bad("vision weight dtype ", dtype_name(v.weight_dtype), " is not a float type");
  return ok_status();
}

}  // namespace

std::string vision_entry_description(const VlmSpec& s, VisionStage stage) {
  const VisionSpec& v = s.vision;
  std::string d;
  d += str_cat("schema=", kSchema, "\nentry=vision_encode\n");
  // LLaVA's description (features stage) reads as it did before other families existed.
  if (s.family != VlmFamily::kLlava) d += str_cat("vlm_family=", vlm_family_name(s.family), "\n");
  if (stage != VisionStage::kFeatures) d += str_cat("stage=", vision_stage_name(stage), "\n");
  d += str_cat("vision_family=", vision_family_name(v.family), "\nvision_model_type=", v.model_type, "\n");
  d += str_cat("image_size=", v.image_size, "\npatch_size=", v.patch_size, "\nnum_channels=", v.num_channels,
               "\nhidden_size=", v.hidden_size, "\nintermediate_size=", v.intermediate_size,
               "\nnum_layers=", v.num_layers, "\nnum_heads=", v.num_heads, "\n");
  d += str_cat("layer_norm_eps=", identity_number(v.layer_norm_eps),
               "\nactivation=", vision_activation_name(v.activation), "\n");
  d += str_cat("feature_layer=", v.feature_layer, "\nselect_strategy=", v.select_strategy,
               "\nuse_post_layernorm=", v.use_post_layernorm, "\n");
  d += str_cat("vision_weight_prefix=", v.weight_prefix, "\nvision_weight_dtype=", dtype_name(v.weight_dtype), "\n");
  d += str_cat("attention_dtype=", dtype_name(tower_attention_dtype(v.weight_dtype)), "\n");
  if (s.family == VlmFamily::kGemma3) {
    d += str_cat("projector_prefix=", s.projector_prefix,
                 "\nprojector=avg_pool+gemma_rms_norm+matmul\nmm_tokens_per_image=", s.mm_tokens_per_image,
                 "\npool_kernel=", s.pool_kernel(), "\nprojector_norm_eps=", identity_number(s.projector_norm_eps),
                 "\n");
    d += str_cat("image_token=", s.image_token_id, "\nboi=", s.boi_token_id, "\neoi=", s.eoi_token_id,
                 "\nmask_mode=", image_mask_mode_name(s.mask_mode), "\nimage_rows=unscaled\n");
  } else {
    d += str_cat("projector_prefix=", s.projector_prefix,
                 "\nprojector_activation=", vision_activation_name(s.projector_activation),
                 "\nprojector_bias=", s.projector_bias, "\n");
  }
  d += str_cat("text_hidden_size=", s.text.hidden_size, "\nactivation_dtype=f32\n");
  return d;
}

Result<shlo::Module> emit_vision_entry(const VlmSpec& spec, VisionStage stage) {
  HLX_RETURN_IF_ERROR(validate(spec));
  if (stage == VisionStage::kPooled && spec.family != VlmFamily::kGemma3)
    return make_error(ErrorKind::kInvalidArgument, "vision stage 'pooled' exists for gemma3 only, not ",
                      vlm_family_name(spec.family));
  const VisionSpec& v = spec.vision;
  shlo::ModuleBuilder mb(str_cat("hlx_", vision_family_name(v.family), "_vision_encode"));
  FunctionBuilder& f = mb.function("vision_encode");
  VisionContext c{f, spec, {}, ok_status()};

  // ---- signature: pixels, then the weights in layout order.
  const int64_t side = v.image_size, d = v.hidden_size;
  Value pixels = f.arg(TensorType{DType::kF32, {1, v.num_channels, side, side}}, "pixels");
  for (const TensorInfo& info : vision_checkpoint_layout(spec)) {
    Value w = f.arg(TensorType{v.weight_dtype, info.shape});
    f.set_arg_attr(w, shlo::kWeightAttr, Attr::string(info.name));
    c.weights[info.name] = w;
  }

  // ---- embeddings (hidden_states[0]; CLIP: after pre_layrnorm).
  f.set_scope("vision embeddings");
  Value x = patch_embedding(c, pixels);  // [N, D]
  if (v.has_class_token()) {
    Value cls = f.reshape(f.convert(c.weight(v.weight_prefix + "embeddings.class_embedding"), DType::kF32), {1, d});
    x = f.concatenate({cls, x}, 0);
  }
  x = f.add(x, f.convert(c.weight(v.weight_prefix + "embeddings.position_embedding.weight"), DType::kF32));
  if (v.family == VisionFamily::kClip)
    x = shlo::layer_norm(f, x, c.weight(v.weight_prefix + "pre_layrnorm.weight"),
                         c.weight(v.weight_prefix + "pre_layrnorm.bias"), float(v.layer_norm_eps));

  // ---- encoder layers up to the selected hidden state.
  for (int64_t l = 0; l < v.feature_layer; ++l) x = encoder_layer(c, l, x);
  if (v.use_post_layernorm)
    x = shlo::layer_norm(f, x, c.weight(v.weight_prefix + "post_layernorm.weight"),
                         c.weight(v.weight_prefix + "post_layernorm.bias"), float(v.layer_norm_eps));

  // ---- projector (or an intermediate stage, for tests).
  f.set_scope("projector");
  Value out = x;
  if (stage != VisionStage::kTower)
    out = spec.family == VlmFamily::kGemma3 ? gemma3_projector(c, x, stage) : llava_projector(c, x);
  const char* out_name = stage == VisionStage::kFeatures ? "features" : vision_stage_name(stage);
  f.ret({out}, {{{shlo::kArgNameAttr, Attr::string(out_name)}}});
  HLX_RETURN_IF_ERROR(c.status);
  set_identity(mb, vision_entry_description(spec, stage));
  mb.set_attr("hlx.entry", Attr::string("vision_encode"));
  mb.set_attr("hlx.tokens_per_image", Attr::integer(spec.tokens_per_image()));
  HLX_ASSIGN_OR_RETURN(shlo::Module m, mb.finish());
  return m;
}

}  // namespace hlx::models
