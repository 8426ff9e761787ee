// `hlx preprocess --image PATH --preprocessor-config FILE -o out.npy`: decodes an image and runs
// the checkpoint's image processor pipeline, writing the normalised f32 [3, H, W] tensor.
// `--u8-out` additionally writes the resized/cropped u8 HWC pixels (for parity tests).
#include <iostream>
#include <memory>
#include <string>

#include "cli/command.h"
#include "core/tensor.h"
#include "io/npy.h"
#include "multimodal/image.h"
#include "multimodal/preprocess.h"

namespace hlx::cli {

namespace {

struct PreprocessArgs {
  std::string image, config, out, u8_out, decoded_out;
  int64_t max_pixels = mm::DecodeOptions{}.max_pixels;
  bool no_exif = false;
};

Tensor image_tensor(const mm::Image& img) {
  Tensor t = Tensor::empty(DType::kU8, {img.height, img.width, 3});
  std::copy(img.pixels.begin(), img.pixels.end(), t.data<uint8_t>());
  return t;
}

Status run_preprocess(const PreprocessArgs& a) {
  HLX_ASSIGN_OR_RETURN(mm::PreprocessConfig cfg, mm::PreprocessConfig::load(a.config));
  mm::DecodeOptions opt;
  opt.max_pixels = a.max_pixels;
  opt.apply_exif_orientation = !a.no_exif;
  HLX_ASSIGN_OR_RETURN(mm::Image img, mm::load_image(a.image, opt));
  if (!a.decoded_out.empty()) HLX_RETURN_IF_ERROR(write_npy(a.decoded_out, image_tensor(img)));
  HLX_ASSIGN_OR_RETURN(mm::Image u8, mm::preprocess_u8(img, cfg));
  if (!a.u8_out.empty()) HLX_RETURN_IF_ERROR(write_npy(a.u8_out, image_tensor(u8)));
  HLX_ASSIGN_OR_RETURN(Tensor pixels, mm::to_normalized_chw(u8, cfg));
  return write_npy(a.out, pixels);
}

}  // namespace

static CommandRun setup_preprocess(CLI::App& root) {
  auto args = std::make_shared<PreprocessArgs>();
  auto* sub = root.add_subcommand("preprocess", "Decode an image and apply a preprocessor_config.json pipeline");
  sub->add_option("--image", args->image, "PNG or JPEG file")->required();
  sub->add_option("--preprocessor-config", args->config, "preprocessor_config.json (or its directory)")->required();
  sub->add_option("-o,--output", args->out, "output .npy: f32 [3, H, W]")->required();
  sub->add_option("--u8-out", args->u8_out, "also write the resized/cropped u8 [H, W, 3] .npy");
  sub->add_option("--decoded-out", args->decoded_out, "also write the decoded u8 [H, W, 3] .npy");
  sub->add_option("--max-pixels", args->max_pixels, "refuse images with more pixels than this");
  sub->add_flag("--no-exif-orientation", args->no_exif, "do not apply the EXIF orientation tag");
  return [args] { return report(run_preprocess(*args)); };
}
HLX_REGISTER_COMMAND(setup_preprocess);

}  // namespace hlx::cli
