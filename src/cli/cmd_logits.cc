// `hlx logits -m DIR --tokens 1,2,3 [--all] [--capacity C] -o out.npy`
// Prefill logits as f32 .npy: [vocab] for the last token, or [T, vocab] with --all.
#include <iostream>
#include <memory>
#include <string>

#include "cli/command.h"
#include "cli/model_flags.h"
#include "engine/text_model.h"
#include "engine/token_ids.h"
#include "io/npy.h"

namespace hlx::cli {
namespace {

struct LogitsArgs {
  std::string model;
  std::string tokens;
  std::string out;
  bool all = false;
  ModelFlags flags;
  std::string modules_dir;
};

Status run_logits(const LogitsArgs& a) {
  HLX_ASSIGN_OR_RETURN(std::vector<int64_t> prompt, engine::parse_token_ids(a.tokens));
  HLX_ASSIGN_OR_RETURN(engine::TextModelOptions o, a.flags.options());
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
  args->flags.add_to(sub);
  sub->add_option("--modules-dir", args->modules_dir, "load pre-emitted modules from here");
  return [args] { return report(run_logits(*args)); };
}
HLX_REGISTER_COMMAND(setup_logits);

}  // namespace
}  // namespace hlx::cli
