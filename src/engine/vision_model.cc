#include "engine/vision_model.h"

#include <chrono>
#include <filesystem>

#include "core/clock.h"
#include "io/checkpoint.h"
#include "io/hf_config.h"
#include "models/qwen3_vl.h"
#include "multimodal/image_prompt.h"
#include "multimodal/preprocess.h"
#include "runtime/program.h"
#include "tokenizer/tokenizer.h"

namespace hlx::engine {

namespace {

// LLaVA and Gemma3: one square input size, a constant token count per image, one compiled
// vision_encode module with the tower and projector weights bound (memory-mapped, stored dtype).
class FixedVisionModel final : public VisionModel {
 public:
  static Result<std::unique_ptr<VisionModel>> load(const std::string& model_dir, const VisionModelOptions& options);

  std::string describe() const override {
    return str_cat(models::vlm_family_name(spec_.family), " tower ", spec_.vision.image_size, "x",
                   spec_.vision.image_size, ", ", spec_.tokens_per_image(), " tokens per image");
  }
  Result<int64_t> image_tokens(const mm::Image& image) const override {
    if (image.width < 1 || image.height < 1)
      return make_error(ErrorKind::kInvalidArgument, "image ", image.width, "x", image.height, " is empty");
    return spec_.tokens_per_image();
  }
  Result<PreparedImage> preprocess(const mm::Image& image) const override;
  Result<EncodedImage> encode(const PreparedImage& image) override;

 private:
  models::VlmSpec spec_;
  mm::PreprocessConfig preprocess_;
  std::unique_ptr<Checkpoint> checkpoint_;  // keeps the bound weights mapped
  std::shared_ptr<rt::Program> program_;
};

Result<std::unique_ptr<VisionModel>> FixedVisionModel::load(const std::string& model_dir,
                                                            const VisionModelOptions& options) {
  std::unique_ptr<FixedVisionModel> m(new FixedVisionModel());
  auto t0 = std::chrono::steady_clock::now();
  HLX_ASSIGN_OR_RETURN(HfConfig config, HfConfig::load(model_dir));
  HLX_ASSIGN_OR_RETURN(Checkpoint ckpt, Checkpoint::open(model_dir));
  m->checkpoint_ = std::make_unique<Checkpoint>(std::move(ckpt));
  HLX_ASSIGN_OR_RETURN(m->spec_, models::vlm_spec_from_config(config, m->checkpoint_->names()));
  const std::string pp = (std::filesystem::path(model_dir) / "preprocessor_config.json").string();
  std::error_code ec;
  if (!std::filesystem::exists(pp, ec))
    return make_error(ErrorKind::kNotFound, "'", pp,
                      "' does not exist: image requests need the checkpoint's processor config");
  HLX_ASSIGN_OR_RETURN(m->preprocess_, mm::PreprocessConfig::load(pp));
  m->stats_.config_ms = ms_since(t0);

  // The processor must produce what the tower was built for; a mismatch would fail every request.
  const int64_t side = m->spec_.vision.image_size;
  const mm::PreprocessConfig& p = m->preprocess_;
  const bool fixed = p.do_center_crop ? (p.crop_height == side && p.crop_width == side)
                                      : (p.do_resize && p.height == side && p.width == side);
  if (!fixed)
    return make_error(ErrorKind::kInvalidArgument, pp, ": the processor does not produce ", side, "x", side,
                      " images (the vision tower's image_size); crop ", p.crop_height, "x", p.crop_width, ", resize ",
                      p.height, "x", p.width, " / shortest_edge ", p.shortest_edge);
  const bool gemma = m->spec_.family == models::VlmFamily::kGemma3;
  m->family_ = m->spec_.family;
  m->image_token_id_ = m->spec_.image_token_id;
  m->hidden_size_ = m->spec_.text.hidden_size;
  HLX_RETURN_IF_ERROR(m->set_placeholders(model_dir, options, gemma ? m->spec_.boi_token_id : -1,
                                          gemma ? m->spec_.eoi_token_id : -1, -1, -1));

  t0 = std::chrono::steady_clock::now();
  HLX_ASSIGN_OR_RETURN(shlo::Module module, models::emit_vision_entry(m->spec_));
  m->stats_.emit_ms = ms_since(t0);
  t0 = std::chrono::steady_clock::now();
  HLX_ASSIGN_OR_RETURN(m->program_, rt::Program::compile(std::make_shared<const shlo::Module>(std::move(module)),
                                                         tower_program_options(options.threads)));
  m->stats_.compile_ms = ms_since(t0);
  t0 = std::chrono::steady_clock::now();
  for (const auto& info : models::vision_checkpoint_layout(m->spec_)) {
    HLX_ASSIGN_OR_RETURN(Tensor t, m->checkpoint_->weight(info.name, info.shape));
    m->stats_.weight_bytes += t.nbytes();
    HLX_RETURN_IF_ERROR(m->program_->bind_weight(info.name, std::move(t)));
  }
  m->stats_.bind_ms = ms_since(t0);
  return std::unique_ptr<VisionModel>(std::move(m));
}

Result<PreparedImage> FixedVisionModel::preprocess(const mm::Image& image) const {
  HLX_ASSIGN_OR_RETURN(Tensor chw, mm::preprocess(image, preprocess_));
  const int64_t side = spec_.vision.image_size;
  if (chw.shape() != Shape{spec_.vision.num_channels, side, side})
    return make_error(ErrorKind::kInvalidArgument, "preprocessed image is [", shape_to_string(chw.shape()),
                      "], the vision tower takes [", spec_.vision.num_channels, ", ", side, ", ", side, "]");
  PreparedImage out;
  HLX_ASSIGN_OR_RETURN(out.pixels, chw.reshaped({1, spec_.vision.num_channels, side, side}));
  out.tokens = spec_.tokens_per_image();
  return out;
}

Result<EncodedImage> FixedVisionModel::encode(const PreparedImage& image) {
  const int64_t side = spec_.vision.image_size, tokens = spec_.tokens_per_image();
  const Shape want{1, spec_.vision.num_channels, side, side};
  if (image.pixels.dtype() != DType::kF32 || image.pixels.shape() != want)
    return make_error(ErrorKind::kInvalidArgument, "vision_encode takes f32 [", shape_to_string(want), "], got ",
                      image.pixels.type_string());
  HLX_ASSIGN_OR_RETURN(std::vector<Tensor> out, program_->run("vision_encode", {image.pixels}));
  if (out.size() != 1 || out[0].shape() != Shape{tokens, hidden_size()})
    return make_error(ErrorKind::kInternal, "vision_encode returned ", out.size(), " results",
                      out.empty() ? std::string() : str_cat(", the first ", out[0].type_string()), "; expected f32 [",
                      tokens, ", ", hidden_size(), "]");
  return EncodedImage{std::move(out[0]), Tensor()};
}

}  // namespace

VisionModel::~VisionModel() = default;

Status text_only_model_error(std::string_view context, std::string_view model_dir) {
  return make_error(ErrorKind::kInvalidArgument, context, ": the model at '", model_dir,
                    "' is text-only (not a llava, gemma3 or qwen3_vl vision-language checkpoint)");
}

Result<int64_t> checkpoint_image_token_id(const std::string& dir) {
  HLX_ASSIGN_OR_RETURN(HfConfig config, HfConfig::load(dir));
  HLX_ASSIGN_OR_RETURN(std::string type, config.model_type());
  if (type == "qwen3_vl") {
    HLX_ASSIGN_OR_RETURN(models::Qwen3VLSpec spec, models::qwen3_vl_spec_from_config(config));
    return spec.image_token_id;
  }
  if (type != "llava" && type != "gemma3") return -1;
  HLX_ASSIGN_OR_RETURN(Checkpoint ckpt, Checkpoint::open(dir));
  if (type == "gemma3" && !models::is_gemma3_vlm(config, ckpt.names())) return -1;
  HLX_ASSIGN_OR_RETURN(models::VlmSpec spec, models::vlm_spec_from_config(config, ckpt.names()));
  return spec.image_token_id;
}

Result<std::unique_ptr<VisionModel>> VisionModel::load(const std::string& model_dir, VisionModelOptions options) {
  HLX_ASSIGN_OR_RETURN(HfConfig config, HfConfig::load(model_dir));
  HLX_ASSIGN_OR_RETURN(std::string type, config.model_type());
  if (type == "qwen3_vl") return load_qwen3_vl_vision_model(model_dir, options);
  if (type == "llava" || type == "gemma3") return load_fixed_vision_model(model_dir, options);
  return make_error(ErrorKind::kInvalidArgument, model_dir, ": model_type '", type,
                    "' is not a vision-language model (implemented: llava, gemma3, qwen3_vl)");
}

rt::ProgramOptions tower_program_options(int threads) {
  rt::ProgramOptions po;
  po.threads = threads;
  po.product_order = kernels::ProductOrder::kAnyOrder;
  return po;
}

Result<std::unique_ptr<VisionModel>> load_fixed_vision_model(const std::string& model_dir,
                                                             const VisionModelOptions& options) {
  return FixedVisionModel::load(model_dir, options);
}

Status VisionModel::set_placeholders(const std::string& model_dir, const VisionModelOptions& options, int64_t boi_id,
                                     int64_t eoi_id, int64_t vision_start_id, int64_t vision_end_id) {
  std::shared_ptr<const tok::Tokenizer> tk = options.tokenizer;
  const std::string tj = (std::filesystem::path(model_dir) / "tokenizer.json").string();
  std::error_code ec;
  if (!tk && std::filesystem::exists(tj, ec)) {
    HLX_ASSIGN_OR_RETURN(tk, tok::Tokenizer::load(tj));
  }
  if (!tk) return ok_status();  // no tokenizer: ids-only use, placeholder() stays empty
  auto text_of = [&](int64_t id, std::string* out) -> Status {
    std::optional<std::string> t = tk->id_to_token(uint32_t(id));
    if (!t) return make_error(ErrorKind::kInvalidArgument, model_dir, ": token id ", id, " is not in the tokenizer");
    *out = *t;
    return ok_status();
  };
  HLX_RETURN_IF_ERROR(text_of(image_token_id_, &image_text_));
  marker_ = placeholder_ = image_text_;
  if (boi_id >= 0) {  // Gemma3: the template writes <start_of_image>, the processor expands it
    HLX_RETURN_IF_ERROR(text_of(boi_id, &boi_text_));
    HLX_RETURN_IF_ERROR(text_of(eoi_id, &eoi_text_));
    marker_ = placeholder_ = boi_text_;
  }
  if (vision_start_id >= 0) {  // Qwen3-VL: the template writes the pad between start and end
    std::string start, end;
    HLX_RETURN_IF_ERROR(text_of(vision_start_id, &start));
    HLX_RETURN_IF_ERROR(text_of(vision_end_id, &end));
    placeholder_ = start + image_text_ + end;
  }
  return ok_status();
}

Result<std::string> VisionModel::expand_prompt(std::string_view text, std::span<const int64_t> tokens_per_image) const {
  if (marker_.empty())
    return make_error(ErrorKind::kNotFound,
                      "the checkpoint has no tokenizer: image prompts cannot be expanded as text");
  const int64_t found = mm::count_placeholders(text, marker_);
  if (found != int64_t(tokens_per_image.size()))
    return make_error(ErrorKind::kInvalidArgument, "the prompt has ", found, " image placeholder(s) ('", marker_,
                      "') but the request has ", tokens_per_image.size(),
                      " image(s); each image needs exactly one placeholder");
  mm::ImageBlockText layout;
  layout.placeholder = marker_;
  layout.image = image_text_;
  if (family_ == models::VlmFamily::kGemma3) {
    layout.boi = boi_text_;
    layout.eoi = eoi_text_;
  } else {
    layout.around.clear();
  }
  return mm::expand_image_placeholders(text, layout, nullptr, tokens_per_image);
}

Result<mm::MropePositions> VisionModel::mrope_positions(std::span<const int64_t>,
                                                        std::span<const PreparedImage>) const {
  return make_error(ErrorKind::kInvalidArgument, models::vlm_family_name(family_), " prompts have no M-RoPE positions");
}

std::string VisionModel::with_placeholders(std::string_view text, size_t images) const {
  if (images == 0 || placeholder_.empty() || text.find(marker_) != std::string_view::npos) return std::string(text);
  std::string out;
  for (size_t i = 0; i < images; ++i) out += placeholder_ + "\n";
  return out.append(text);
}

}  // namespace hlx::engine
