// `hlx preprocess --image PATH --preprocessor-config FILE -o out.npy`: decodes an image and runs
// the checkpoint's image processor pipeline, writing the normalised f32 [3, H, W] tensor.
// `--u8-out` additionally writes the resized/cropped u8 HWC pixels (for parity tests).
// A Qwen2VLImageProcessor config (image_processor_type) gets its own pipeline: the output is the
// flattened patches f32 [t*h*w, 3*T*P*P] and stdout carries `grid_thw T H W`.
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cli/command.h"
#include "cli/int_list.h"
#include "core/tensor.h"
#include "io/npy.h"
#include "multimodal/image.h"
#include "multimodal/preprocess.h"
#include "multimodal/qwen3_vl_processor.h"

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

Status run_qwen(const PreprocessArgs& a, const mm::Image& img) {
  HLX_ASSIGN_OR_RETURN(mm::Qwen2VLImageConfig cfg, mm::Qwen2VLImageConfig::load(a.config));
  HLX_ASSIGN_OR_RETURN(mm::Image u8, mm::qwen_resize_u8(img, cfg));
  if (!a.u8_out.empty()) HLX_RETURN_IF_ERROR(write_npy(a.u8_out, image_tensor(u8)));
  HLX_ASSIGN_OR_RETURN(mm::Qwen2VLImage out, mm::qwen_preprocess(img, cfg));
  HLX_RETURN_IF_ERROR(write_npy(a.out, out.patches));
  std::cout << "grid_thw " << out.grid.t << " " << out.grid.h << " " << out.grid.w << "\n";
  return ok_status();
}

Status run_preprocess(const PreprocessArgs& a) {
  HLX_ASSIGN_OR_RETURN(mm::ImageProcessorKind kind, mm::image_processor_kind_of_file(a.config));
  mm::DecodeOptions opt;
  opt.max_pixels = a.max_pixels;
  opt.apply_exif_orientation = !a.no_exif;
  HLX_ASSIGN_OR_RETURN(mm::Image img, mm::load_image(a.image, opt));
  if (!a.decoded_out.empty()) HLX_RETURN_IF_ERROR(write_npy(a.decoded_out, image_tensor(img)));
  if (kind == mm::ImageProcessorKind::kQwen2VL) return run_qwen(a, img);
  HLX_ASSIGN_OR_RETURN(mm::PreprocessConfig cfg, mm::PreprocessConfig::load(a.config));
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
  sub->add_option("-o,--output", args->out, "output .npy: f32 [3, H, W] (Qwen2-VL: patches [N, 3*T*P*P])")->required();
  sub->add_option("--u8-out", args->u8_out, "also write the resized/cropped u8 [H, W, 3] .npy");
  sub->add_option("--decoded-out", args->decoded_out, "also write the decoded u8 [H, W, 3] .npy");
  sub->add_option("--max-pixels", args->max_pixels, "refuse images with more pixels than this");
  sub->add_flag("--no-exif-orientation", args->no_exif, "do not apply the EXIF orientation tag");
  return [args] { return report(run_preprocess(*args)); };
}
HLX_REGISTER_COMMAND(setup_preprocess);

// `hlx mrope-positions --tokens 1,2,3 --image-token ID --grid T,H,W ... [--expand] -o pos.npy`:
// Qwen3-VL's [3, L] M-RoPE positions (i32) of an id list; prints `rope_delta D` (and with
// --expand first expands one image token per image to its grid's token count, printing the ids).
namespace {

struct MropeArgs {
  std::string tokens, out;
  std::vector<std::string> grids;
  int64_t image_token = 151655, merge_size = 2;
  bool expand = false;
};

Status run_mrope(const MropeArgs& a) {
  HLX_ASSIGN_OR_RETURN(std::vector<int64_t> t64, parse_int_list(a.tokens, "--tokens", 0, INT32_MAX));
  std::vector<int32_t> ids(t64.begin(), t64.end());
  std::vector<mm::ImageGrid> grids;
  for (const std::string& g : a.grids) {
    HLX_ASSIGN_OR_RETURN(std::vector<int64_t> v, parse_int_list(g, "--grid", 1, INT32_MAX));
    if (v.size() != 3) return make_error(ErrorKind::kInvalidArgument, "--grid wants T,H,W, got '", g, "'");
    grids.push_back({v[0], v[1], v[2]});
  }
  if (a.expand) {
    HLX_ASSIGN_OR_RETURN(ids, mm::qwen_expand_image_tokens(ids, int32_t(a.image_token), grids, a.merge_size));
    std::cout << "ids";
    for (size_t i = 0; i < ids.size(); ++i) std::cout << (i ? "," : " ") << ids[i];
    std::cout << "\n";
  }
  HLX_ASSIGN_OR_RETURN(mm::MropePositions p,
                       mm::qwen_mrope_positions(ids, int32_t(a.image_token), grids, a.merge_size));
  Tensor t = Tensor::empty(DType::kI32, {3, p.length});
  std::copy(p.positions.begin(), p.positions.end(), t.data<int32_t>());
  HLX_RETURN_IF_ERROR(write_npy(a.out, t));
  std::cout << "rope_delta " << p.rope_delta << "\n";
  return ok_status();
}

}  // namespace

static CommandRun setup_mrope(CLI::App& root) {
  auto args = std::make_shared<MropeArgs>();
  auto* sub = root.add_subcommand("mrope-positions", "Qwen3-VL M-RoPE positions [3, L] of a token id list");
  sub->add_option("--tokens", args->tokens, "comma-separated token ids (expanded prompt)")->required();
  sub->add_option("--grid", args->grids, "T,H,W patch grid of each image, in order");
  sub->add_option("--image-token", args->image_token, "image token id (default 151655)");
  sub->add_option("--merge-size", args->merge_size, "spatial merge size (default 2)");
  sub->add_flag("--expand", args->expand, "expand one image token per image first");
  sub->add_option("-o,--output", args->out, "output .npy: i32 [3, L]")->required();
  return [args] { return report(run_mrope(*args)); };
}
HLX_REGISTER_COMMAND(setup_mrope);

}  // namespace hlx::cli
