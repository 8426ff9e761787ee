// `hlx encode -m DIR (--image PATH | --pixels X.npy) [--out F.npy] [--threads N] [--repeat N]
//             [--emit-module F.mlir]`:
// runs a vision-language checkpoint's `vision_encode` entry on one image (decoded and preprocessed
// with the checkpoint's preprocessor_config.json) or on ready pixels (f32 [1,3,H,W] or [3,H,W]),
// writes the projected features f32 [T, text_hidden] and prints the time of each stage.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include "cli/command.h"
#include "core/clock.h"
#include "engine/vision_model.h"
#include "io/checkpoint.h"
#include "io/file.h"
#include "io/hf_config.h"
#include "io/npy.h"
#include "models/vision_spec.h"
#include "multimodal/image.h"
#include "multimodal/preprocess.h"
#include "runtime/program.h"
#include "stablehlo/printer.h"

namespace hlx::cli {
namespace {

struct EncodeArgs {
  std::string model, image, pixels, out, emit_module;
  int threads = 0;
  int repeat = 1;
};

Status run_encode(const EncodeArgs& a) {
  if (a.image.empty() == a.pixels.empty())
    return make_error(ErrorKind::kInvalidArgument, "give exactly one of --image and --pixels");
  if (a.repeat < 1) return make_error(ErrorKind::kInvalidArgument, "--repeat ", a.repeat, " must be >= 1");
  HLX_ASSIGN_OR_RETURN(HfConfig config, HfConfig::load(a.model));
  HLX_ASSIGN_OR_RETURN(Checkpoint ckpt, Checkpoint::open(a.model));
  if (!models::is_vision_language(config) && !models::is_gemma3_vlm(config, ckpt.names())) {
    HLX_ASSIGN_OR_RETURN(std::string type, config.model_type());
    return make_error(ErrorKind::kUnsupported, "'", a.model, "': model_type '", type,
                      "' has no vision encoder (implemented: llava, gemma3 with vision tower weights)");
  }
  HLX_ASSIGN_OR_RETURN(models::VlmSpec spec, models::vlm_spec_from_config(config, ckpt.names()));
  const models::VisionSpec& v = spec.vision;
  const Shape want = {1, v.num_channels, v.image_size, v.image_size};

  // ---- pixels.
  auto t0 = std::chrono::steady_clock::now();
  Tensor pixels;
  double preprocess_ms = 0;
  if (!a.image.empty()) {
    HLX_ASSIGN_OR_RETURN(mm::PreprocessConfig pc, mm::PreprocessConfig::load(a.model));
    HLX_ASSIGN_OR_RETURN(mm::Image img, mm::load_image(a.image));
    HLX_ASSIGN_OR_RETURN(Tensor chw, mm::preprocess(img, pc));
    preprocess_ms = ms_since(t0);
    if (chw.shape() != Shape{want[1], want[2], want[3]})
      return make_error(ErrorKind::kInvalidArgument, "preprocessor_config.json gives pixels ",
                        shape_to_string(chw.shape()), " but the vision tower takes ", shape_to_string(want));
    HLX_ASSIGN_OR_RETURN(pixels, chw.reshaped(want));
  } else {
    HLX_ASSIGN_OR_RETURN(Tensor p, read_npy(a.pixels));
    if (p.dtype() != DType::kF32)
      return make_error(ErrorKind::kInvalidArgument, "--pixels '", a.pixels, "': dtype ", dtype_name(p.dtype()),
                        " (expected f32)");
    if (p.shape() == Shape{want[1], want[2], want[3]}) {
      HLX_ASSIGN_OR_RETURN(p, p.reshaped(want));
    }
    if (p.shape() != want)
      return make_error(ErrorKind::kInvalidArgument, "--pixels '", a.pixels, "': shape ", shape_to_string(p.shape()),
                        " (the vision tower takes ", shape_to_string(want), ")");
    pixels = std::move(p);
  }

  // ---- compile and bind.
  t0 = std::chrono::steady_clock::now();
  HLX_ASSIGN_OR_RETURN(shlo::Module module, models::emit_vision_entry(spec));
  if (!a.emit_module.empty()) HLX_RETURN_IF_ERROR(write_file(a.emit_module, shlo::print_module(module)));
  HLX_ASSIGN_OR_RETURN(std::shared_ptr<rt::Program> program,
                       rt::Program::compile(std::make_shared<const shlo::Module>(std::move(module)),
                                            engine::tower_program_options(a.threads)));
  for (const models::TensorInfo& info : models::vision_checkpoint_layout(spec)) {
    HLX_ASSIGN_OR_RETURN(Tensor w, ckpt.tensor(info.name));
    HLX_RETURN_IF_ERROR(program->bind_weight(info.name, w).with_context(ckpt.source()));
  }
  const double compile_ms = ms_since(t0);

  // ---- encode (the first run includes one-time packing; --repeat reports the best run too).
  std::vector<Tensor> out;
  double first_ms = 0, best_ms = 0;
  for (int i = 0; i < a.repeat; ++i) {
    t0 = std::chrono::steady_clock::now();
    HLX_ASSIGN_OR_RETURN(out, program->run("vision_encode", {pixels}));
    const double ms = ms_since(t0);
    if (i == 0) first_ms = best_ms = ms;
    best_ms = std::min(best_ms, ms);
  }
  if (!a.out.empty()) HLX_RETURN_IF_ERROR(write_npy(a.out, out[0]));
  std::printf("features %s (%s tower %lldx%lld, %lld tokens per image)\n", shape_to_string(out[0].shape()).c_str(),
              models::vision_family_name(v.family), static_cast<long long>(v.image_size),
              static_cast<long long>(v.image_size), static_cast<long long>(spec.tokens_per_image()));
  std::printf("preprocess_ms %.2f compile_ms %.2f encode_ms %.2f", preprocess_ms, compile_ms, first_ms);
  if (a.repeat > 1) std::printf(" best_encode_ms %.2f (of %d)", best_ms, a.repeat);
  std::printf("\n");
  return ok_status();
}

CommandRun setup_encode(CLI::App& root) {
  auto args = std::make_shared<EncodeArgs>();
  CLI::App* sub = root.add_subcommand("encode", "Run a vision-language model's image encoder (vision_encode)");
  sub->add_option("-m,--model", args->model, "checkpoint directory")->required();
  sub->add_option("--image", args->image, "PNG or JPEG file (preprocessed with preprocessor_config.json)");
  sub->add_option("--pixels", args->pixels, "preprocessed pixels .npy, f32 [1,3,H,W] or [3,H,W]");
  sub->add_option("--out", args->out, "write the features f32 [T, text_hidden] to this .npy");
  sub->add_option("--threads", args->threads, "runtime threads (default: all cores)");
  sub->add_option("--emit-module", args->emit_module, "also write the vision_encode module (MLIR text) here");
  sub->add_option("--repeat", args->repeat, "run the encoder N times and report the best time too");
  return [args] { return report(run_encode(*args)); };
}
HLX_REGISTER_COMMAND(setup_encode);

}  // namespace
}  // namespace hlx::cli
