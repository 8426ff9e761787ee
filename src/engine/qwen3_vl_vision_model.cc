#include "engine/qwen3_vl_vision_model.h"

#include <chrono>
#include <cstring>
#include <filesystem>
#include <tuple>

#include "core/clock.h"
#include "engine/vision_model.h"
#include "io/hf_config.h"
#include "runtime/program.h"

namespace hlx::engine {

Qwen3VLVisionModel::~Qwen3VLVisionModel() = default;

Result<std::unique_ptr<Qwen3VLVisionModel>> Qwen3VLVisionModel::load(const std::string& model_dir,
                                                                     Qwen3VLVisionModelOptions options) {
  std::unique_ptr<Qwen3VLVisionModel> m(new Qwen3VLVisionModel());
  auto t0 = std::chrono::steady_clock::now();
  HLX_ASSIGN_OR_RETURN(HfConfig config, HfConfig::load(model_dir));
  HLX_ASSIGN_OR_RETURN(std::string type, config.model_type());
  if (type != "qwen3_vl")
    return make_error(ErrorKind::kInvalidArgument, model_dir, ": model_type '", type, "' is not qwen3_vl");
  HLX_ASSIGN_OR_RETURN(m->spec_, models::qwen3_vl_spec_from_config(config));
  const std::string pp = (std::filesystem::path(model_dir) / "preprocessor_config.json").string();
  std::error_code ec;
  if (!std::filesystem::exists(pp, ec))
    return make_error(ErrorKind::kNotFound, "'", pp,
                      "' does not exist: image requests need the checkpoint's processor config");
  HLX_ASSIGN_OR_RETURN(m->image_config_, mm::Qwen2VLImageConfig::load(pp));
  const auto& v = m->spec_.vision;
  const auto& ic = m->image_config_;
  // The processor must cut the patches the tower was built for; a mismatch would fail every image.
  if (ic.patch_size != v.patch_size || ic.merge_size != v.spatial_merge_size ||
      ic.temporal_patch_size != v.temporal_patch_size)
    return make_error(ErrorKind::kInvalidArgument, pp, ": patch_size ", ic.patch_size, ", merge_size ", ic.merge_size,
                      ", temporal_patch_size ", ic.temporal_patch_size, " do not match the tower's ", v.patch_size,
                      ", ", v.spatial_merge_size, ", ", v.temporal_patch_size);
  const int64_t unit = v.merge_unit();
  m->max_patches_ = (ic.max_pixels / (ic.patch_size * ic.patch_size) + unit - 1) / unit * unit;
  m->buckets_ = options.patch_buckets.empty() ? models::qwen3_vl_default_patch_buckets(v, m->max_patches_)
                                              : options.patch_buckets;
  for (size_t i = 0; i < m->buckets_.size(); ++i)
    if (m->buckets_[i] <= 0 || m->buckets_[i] % unit != 0 || (i > 0 && m->buckets_[i] <= m->buckets_[i - 1]))
      return make_error(ErrorKind::kInvalidArgument, "patch bucket ", m->buckets_[i], " (index ", i,
                        ") must be ascending positive multiples of the merge unit ", unit);
  if (m->buckets_.empty()) return make_error(ErrorKind::kInvalidArgument, "no patch buckets");
  m->threads_ = options.threads;
  m->stats_.config_ms = ms_since(t0);

  HLX_ASSIGN_OR_RETURN(Checkpoint ckpt, Checkpoint::open(model_dir));
  m->checkpoint_ = std::make_unique<Checkpoint>(std::move(ckpt));
  for (const auto& info : models::qwen3_vl_vision_layout(m->spec_)) {
    HLX_ASSIGN_OR_RETURN(Tensor t, m->checkpoint_->weight(info.name, info.shape));
    m->stats_.weight_bytes += t.nbytes();
    m->weights_.emplace_back(info.name, std::move(t));
  }
  t0 = std::chrono::steady_clock::now();
  for (int64_t b : m->buckets_) {
    HLX_ASSIGN_OR_RETURN(shlo::Module module, models::emit_qwen3_vl_vision_padded_entry(m->spec_, b));
    m->modules_[b] = std::make_shared<const shlo::Module>(std::move(module));
  }
  m->stats_.emit_ms = ms_since(t0);
  if (options.eager_compile)
    for (int64_t b : m->buckets_) HLX_RETURN_IF_ERROR(m->program_for(b).status());
  return m;
}

Result<rt::Program*> Qwen3VLVisionModel::program_for(int64_t bucket) {
  auto it = programs_.find(bucket);
  if (it != programs_.end()) return it->second.get();
  auto t0 = std::chrono::steady_clock::now();
  HLX_ASSIGN_OR_RETURN(std::shared_ptr<rt::Program> p,
                       rt::Program::compile(modules_.at(bucket), tower_program_options(threads_)));
  stats_.compile_ms += ms_since(t0);
  t0 = std::chrono::steady_clock::now();
  for (const auto& [name, t] : weights_) HLX_RETURN_IF_ERROR(p->bind_weight(name, t));
  stats_.bind_ms += ms_since(t0);
  ++stats_.compiled;
  rt::Program* raw = p.get();
  programs_[bucket] = std::move(p);
  return raw;
}

Result<mm::Qwen2VLImage> Qwen3VLVisionModel::preprocess(const mm::Image& image) const {
  return mm::qwen_preprocess(image, image_config_);
}

Result<Qwen3VLImageFeatures> Qwen3VLVisionModel::encode(const mm::Qwen2VLImage& image) {
  const auto& v = spec_.vision;
  const mm::ImageGrid& g = image.grid;
  if (g.t != 1)
    return make_error(ErrorKind::kUnsupported, "qwen3_vl vision: grid t = ", g.t,
                      " (video) is not implemented; still images have t = 1");
  const int64_t n = g.h * g.w, d = v.patch_dim();
  if (g.h <= 0 || g.w <= 0 || g.h % v.spatial_merge_size || g.w % v.spatial_merge_size)
    return make_error(ErrorKind::kInvalidArgument, "qwen3_vl vision: grid ", g.h, "x", g.w,
                      " must be positive multiples of spatial_merge_size ", v.spatial_merge_size);
  if (image.patches.dtype() != DType::kF32 || image.patches.shape() != Shape{n, d})
    return make_error(ErrorKind::kInvalidArgument, "qwen3_vl vision: patches are ", image.patches.type_string(),
                      ", expected f32 [", n, ", ", d, "] for grid ", g.h, "x", g.w);
  int64_t bucket = 0;
  for (int64_t b : buckets_)
    if (b >= n) {
      bucket = b;
      break;
    }
  if (bucket == 0)
    return make_error(ErrorKind::kOutOfRange, "qwen3_vl vision: ", n, " patches (grid ", g.h, "x", g.w,
                      ") exceed the largest patch bucket ", buckets_.back());
  HLX_ASSIGN_OR_RETURN(models::Qwen3VLVisionPositions pos,
                       models::qwen3_vl_vision_positions(v, models::VisionGrid{1, g.h, g.w}, bucket));
  HLX_ASSIGN_OR_RETURN(rt::Program * program, program_for(bucket));
  // Padding patches are zeros: finite, masked out of attention, dropped below.
  Tensor patches = Tensor::zeros(DType::kF32, {bucket, d});
  std::memcpy(patches.data<float>(), image.patches.data<float>(), size_t(n * d) * sizeof(float));
  Tensor valid = Tensor::empty(DType::kI32, {});
  *valid.data<int32_t>() = int32_t(n);
  HLX_ASSIGN_OR_RETURN(
      std::vector<Tensor> out,
      program->run("vision_encode_padded", {patches, pos.embed_index, pos.embed_weight, pos.rotary, valid}));
  const int64_t rows = bucket / v.merge_unit(), tokens = n / v.merge_unit(), hidden = v.out_hidden_size,
                k = int64_t(v.deepstack_visual_indexes.size());
  if (out.size() != 2 || out[0].shape() != Shape{rows, hidden} || out[1].shape() != Shape{k, rows, hidden})
    return make_error(ErrorKind::kInternal, "vision_encode_padded returned ", out.size(), " results");
  Qwen3VLImageFeatures r;
  r.grid = g;
  r.bucket = bucket;
  r.features = Tensor::empty(DType::kF32, {tokens, hidden});
  std::memcpy(r.features.data<float>(), out[0].data<float>(), size_t(tokens * hidden) * sizeof(float));
  r.deepstack = Tensor::empty(DType::kF32, {k, tokens, hidden});
  for (int64_t i = 0; i < k; ++i)
    std::memcpy(r.deepstack.data<float>() + i * tokens * hidden, out[1].data<float>() + i * rows * hidden,
                size_t(tokens * hidden) * sizeof(float));
  return r;
}

}  // namespace hlx::engine

namespace hlx::engine {

namespace {

// Qwen3VLVisionModel behind the family-neutral interface: an image's token count follows its
// smart_resize size; encode() also returns the DeepStack features.
class Qwen3VLVision final : public VisionModel {
 public:
  explicit Qwen3VLVision(std::unique_ptr<Qwen3VLVisionModel> tower) : tower_(std::move(tower)) {}

  std::string describe() const override {
    const auto& ic = tower_->image_config();
    return str_cat("qwen3_vl tower, dynamic resolution ", ic.min_pixels, "..", ic.max_pixels, " pixels, ",
                   tower_->patch_buckets().size(), " patch buckets up to ", tower_->max_patches());
  }
  Result<int64_t> image_tokens(const mm::Image& image) const override {
    const auto& ic = tower_->image_config();
    int64_t h = image.height, w = image.width;
    if (ic.do_resize) {
      HLX_ASSIGN_OR_RETURN(auto hw,
                           mm::qwen_smart_resize(image.height, image.width, ic.factor(), ic.min_pixels, ic.max_pixels));
      std::tie(h, w) = hw;
    }
    return mm::qwen_image_tokens(mm::ImageGrid{1, h / ic.patch_size, w / ic.patch_size}, ic.merge_size);
  }
  Result<PreparedImage> preprocess(const mm::Image& image) const override {
    HLX_ASSIGN_OR_RETURN(mm::Qwen2VLImage px, tower_->preprocess(image));
    PreparedImage out;
    out.tokens = mm::qwen_image_tokens(px.grid, tower_->image_config().merge_size);
    out.pixels = std::move(px.patches);
    out.grid = px.grid;
    return out;
  }
  Result<EncodedImage> encode(const PreparedImage& image) override {
    HLX_ASSIGN_OR_RETURN(Qwen3VLImageFeatures f, tower_->encode(mm::Qwen2VLImage{image.pixels, image.grid}));
    return EncodedImage{std::move(f.features), std::move(f.deepstack)};
  }

  Result<mm::MropePositions> mrope_positions(std::span<const int64_t> ids,
                                             std::span<const PreparedImage> images) const override {
    std::vector<int32_t> ids32(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] < 0 || ids[i] > INT32_MAX)
        return make_error(ErrorKind::kInvalidArgument, "token id ", ids[i], " at row ", i, " is outside the i32 range");
      ids32[i] = int32_t(ids[i]);
    }
    std::vector<mm::ImageGrid> grids;
    for (const PreparedImage& p : images) grids.push_back(p.grid);
    return mm::qwen_mrope_positions(ids32, int32_t(image_token_id_), grids, tower_->image_config().merge_size);
  }

  Status init(const std::string& model_dir, const VisionModelOptions& options) {
    const models::Qwen3VLSpec& s = tower_->spec();
    family_ = models::VlmFamily::kQwen3VL;
    image_token_id_ = s.image_token_id;
    hidden_size_ = s.text.hidden_size;
    stats_ = VisionModelStats{tower_->stats().config_ms, tower_->stats().emit_ms, tower_->stats().compile_ms,
                              tower_->stats().bind_ms, tower_->stats().weight_bytes};
    return set_placeholders(model_dir, options, -1, -1, s.vision_start_token_id, s.vision_end_token_id);
  }

 private:
  std::unique_ptr<Qwen3VLVisionModel> tower_;
};

}  // namespace

Result<std::unique_ptr<VisionModel>> load_qwen3_vl_vision_model(const std::string& model_dir,
                                                                const VisionModelOptions& options) {
  Qwen3VLVisionModelOptions o;
  o.threads = options.threads;
  HLX_ASSIGN_OR_RETURN(std::unique_ptr<Qwen3VLVisionModel> tower, Qwen3VLVisionModel::load(model_dir, o));
  auto m = std::make_unique<Qwen3VLVision>(std::move(tower));
  HLX_RETURN_IF_ERROR(m->init(model_dir, options));
  return std::unique_ptr<VisionModel>(std::move(m));
}

}  // namespace hlx::engine
