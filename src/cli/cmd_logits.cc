// `hlx logits -m DIR --tokens 1,2,3 [--all] [--image PATH]... [--capacity C] -o out.npy`
// Prefill logits as f32 .npy: [vocab] for the last token, or [T, vocab] with --all.
// With --image (vision-language checkpoints) the ids hold the image token id once per image; the
// prompt runs through the engine's image path (expansion, encode, merged prefill_embeddings) and the
// logits are those of the last expanded row.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include "cli/command.h"
#include "cli/model_flags.h"
#include "cli/text_gen.h"
#include "engine/text_model.h"
#include "engine/token_ids.h"
#include "io/npy.h"

namespace hlx::cli {
namespace {

struct LogitsArgs {
  std::string model;
  std::string tokens;
  std::vector<std::string> images;
  std::string out;
  bool all = false;
  ModelFlags flags;
  std::string modules_dir;
};

// The prefill logits are the row the first generated token is chosen from.
Status run_image_logits(const LogitsArgs& a, const std::vector<int64_t>& prompt, engine::TextModelOptions o) {
  if (a.all) return make_error(ErrorKind::kUnsupported, "--all with --image: only the last row's logits are available");
  HLX_RETURN_IF_ERROR(require_vision_language_dir(a.model));
  HLX_ASSIGN_OR_RETURN(std::vector<mm::Image> images, load_image_files(a.images));
  if (!a.modules_dir.empty()) o.modules_dir = a.modules_dir;
  HLX_ASSIGN_OR_RETURN(std::unique_ptr<engine::TextModel> model, engine::TextModel::load(a.model, o));
  HLX_ASSIGN_OR_RETURN(std::unique_ptr<engine::VisionModel> vision,
                       engine::VisionModel::load(a.model, {o.threads, nullptr}));
  HLX_ASSIGN_OR_RETURN(std::vector<int64_t> expanded, expand_image_ids(*vision, prompt, images));
  Tensor logits;
  TextGenParams gen;
  gen.max_new_tokens = 1;
  HLX_ASSIGN_OR_RETURN(TextGenResult r, generate_text(
                                            *model, nullptr, expanded, gen, [](std::string_view) {},
                                            ImageInput{std::move(images), vision.get()},
                                            [&](std::span<const float> row) {
                                              if (logits.raw()) return;
                                              logits = Tensor::empty(DType::kF32, {int64_t(row.size())});
                                              std::copy(row.begin(), row.end(), logits.data<float>());
                                            }));
  if (!logits.raw()) return make_error(ErrorKind::kInternal, "no logits row was produced");
  std::fprintf(stderr, "prompt %lld rows (%lld image%s); preprocess %.1f ms, encode %.1f ms, prefill %.1f ms\n",
               (long long)r.prompt_tokens, (long long)r.images, r.images == 1 ? "" : "s", r.preprocess_ms, r.encode_ms,
               r.prefill_ms);
  return write_npy(a.out, logits);
}

Status run_logits(const LogitsArgs& a) {
  HLX_ASSIGN_OR_RETURN(std::vector<int64_t> prompt, engine::parse_token_ids(a.tokens));
  HLX_ASSIGN_OR_RETURN(engine::TextModelOptions o, a.flags.options());
  if (!a.images.empty()) return run_image_logits(a, prompt, o);
  HLX_RETURN_IF_ERROR(check_no_image_tokens(a.model, prompt));
  o.all_logits = a.all;
  if (!a.modules_dir.empty()) o.modules_dir = a.modules_dir;
  HLX_ASSIGN_OR_RETURN(std::unique_ptr<engine::TextModel> model, engine::TextModel::load(a.model, o));
  HLX_ASSIGN_OR_RETURN(int64_t slot, model->admit(prompt, 0));
  auto logits = a.all ? model->prefill_all_logits(slot, prompt) : model->prefill(slot, prompt);
  if (!logits.ok()) return logits.status();
  HLX_RETURN_IF_ERROR(write_npy(a.out, *logits));
  return model->release(slot);
}

CommandRun setup_logits(CLI::App& root) {
  auto args = std::make_shared<LogitsArgs>();
  CLI::App* sub = root.add_subcommand("logits", "Write prefill logits for token ids to a .npy file");
  sub->add_option("-m,--model", args->model, "checkpoint directory (config.json + safetensors)")->required();
  sub->add_option("--tokens", args->tokens, "prompt token ids, comma-separated")->required();
  sub->add_option("-o,--out", args->out, "output .npy (f32 [vocab], or [T, vocab] with --all)")->required();
  sub->add_flag("--all", args->all, "logits of every prompt row, not only the last");
  sub->add_option("--image", args->images,
                  "image file (repeatable; vision-language checkpoints): the ids hold its image token once per image");
  args->flags.add_to(sub);
  sub->add_option("--modules-dir", args->modules_dir, "load pre-emitted modules from here");
  return [args] { return report(run_logits(*args)); };
}
HLX_REGISTER_COMMAND(setup_logits);

}  // namespace
}  // namespace hlx::cli
