#include "engine/vision_model.h"

#include <chrono>
#include <filesystem>

#include "io/hf_config.h"
#include "runtime/program.h"
#include "tokenizer/tokenizer.h"

namespace hlx::engine {

namespace {
double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

VisionModel::~VisionModel() = default;

Result<std::unique_ptr<VisionModel>> VisionModel::load(const std::string& model_dir, VisionModelOptions options) {
  std::unique_ptr<VisionModel> m(new VisionModel());
  auto t0 = std::chrono::steady_clock::now();
  HLX_ASSIGN_OR_RETURN(HfConfig config, HfConfig::load(model_dir));
  if (!models::is_vision_language(config))
    return make_error(ErrorKind::kInvalidArgument, model_dir,
                      ": config.json does not describe a vision-language model (supported: llava)");
  HLX_ASSIGN_OR_RETURN(Checkpoint ckpt, Checkpoint::open(model_dir));
  m->checkpoint_ = std::make_unique<Checkpoint>(std::move(ckpt));
  HLX_ASSIGN_OR_RETURN(m->spec_, models::llava_spec_from_config(config, m->checkpoint_->names()));
  const std::string pp = (std::filesystem::path(model_dir) / "preprocessor_config.json").string();
  std::error_code ec;
  if (!std::filesystem::exists(pp, ec))
    return make_error(ErrorKind::kNotFound, "'", pp, "' does not exist: image requests need the checkpoint's processor config");
  HLX_ASSIGN_OR_RETURN(m->preprocess_, mm::PreprocessConfig::load(pp));
  m->stats_.config_ms = ms_since(t0);

  // The processor must produce what the tower was built for; a mismatch would fail every request.
  const int64_t side = m->spec_.vision.image_size;
  const mm::PreprocessConfig& p = m->preprocess_;
  const bool fixed = p.do_center_crop ? (p.crop_height == side && p.crop_width == side)
                                      : (p.do_resize && p.height == side && p.width == side);
  if (!fixed)
    return make_error(ErrorKind::kInvalidArgument, pp, ": the processor does not produce ", side, "x", side,
                      " images (the vision tower's image_size); crop ", p.crop_height, "x", p.crop_width,
                      ", resize ", p.height, "x", p.width, " / shortest_edge ", p.shortest_edge);

  if (options.tokenizer) {
    m->image_token_text_ = options.tokenizer->id_to_token(uint32_t(m->spec_.image_token_id)).value_or("");
  } else {
    const std::string tj = (std::filesystem::path(model_dir) / "tokenizer.json").string();
    if (std::filesystem::exists(tj, ec)) {
      HLX_ASSIGN_OR_RETURN(std::shared_ptr<const tok::Tokenizer> tk, tok::Tokenizer::load(tj));
      m->image_token_text_ = tk->id_to_token(uint32_t(m->spec_.image_token_id)).value_or("");
    }
  }

  t0 = std::chrono::steady_clock::now();
  HLX_ASSIGN_OR_RETURN(shlo::Module module, models::emit_vision_entry(m->spec_));
  m->stats_.emit_ms = ms_since(t0);
  t0 = std::chrono::steady_clock::now();
  rt::ProgramOptions po;
  po.threads = options.threads;
  HLX_ASSIGN_OR_RETURN(m->program_, rt::Program::compile(std::make_shared<const shlo::Module>(std::move(module)), po));
  m->stats_.compile_ms = ms_since(t0);
  t0 = std::chrono::steady_clock::now();
  for (const auto& info : models::vision_checkpoint_layout(m->spec_)) {
    HLX_ASSIGN_OR_RETURN(Tensor t, m->checkpoint_->weight(info.name, info.shape));
    m->stats_.weight_bytes += t.nbytes();
    HLX_RETURN_IF_ERROR(m->program_->bind_weight(info.name, std::move(t)));
  }
  m->stats_.bind_ms = ms_since(t0);
  return m;
}

Result<Tensor> VisionModel::preprocess(const mm::Image& image) const {
  HLX_ASSIGN_OR_RETURN(Tensor chw, mm::preprocess(image, preprocess_));
  const int64_t side = spec_.vision.image_size;
  if (chw.shape() != Shape{spec_.vision.num_channels, side, side})
    return make_error(ErrorKind::kInvalidArgument, "preprocessed image is [", shape_to_string(chw.shape()),
                      "], the vision tower takes [", spec_.vision.num_channels, ", ", side, ", ", side, "]");
  return chw.reshaped({1, spec_.vision.num_channels, side, side});
}

Result<Tensor> VisionModel::encode(const Tensor& pixels) {
  const int64_t side = spec_.vision.image_size;
  const Shape want{1, spec_.vision.num_channels, side, side};
  if (pixels.dtype() != DType::kF32 || pixels.shape() != want)
    return make_error(ErrorKind::kInvalidArgument, "vision_encode takes f32 [", shape_to_string(want), "], got ",
                      pixels.type_string());
  HLX_ASSIGN_OR_RETURN(std::vector<Tensor> out, program_->run("vision_encode", {pixels}));
  if (out.size() != 1 || out[0].shape() != Shape{tokens_per_image(), hidden_size()})
    return make_error(ErrorKind::kInternal, "vision_encode returned ", out.size(), " results",
                      out.empty() ? std::string() : str_cat(", the first ", out[0].type_string()), "; expected f32 [",
                      tokens_per_image(), ", ", hidden_size(), "]");
  return std::move(out[0]);
}

}  // namespace hlx::engine
