// `hlx detokenize -m DIR --ids 1,2,3 [--skip-special]` (or --tokenizer PATH): prints the text of the
// ids (ids may be separated by commas and/or spaces, so `hlx tokenize` output can be pasted back).
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "cli/command.h"
#include "cli/int_list.h"
#include "tokenizer/tokenizer.h"

namespace hlx::cli {
namespace {

struct DetokenizeArgs {
  std::string model_dir, tokenizer, ids;
  bool skip_special = false;
};

Status run_detokenize(const DetokenizeArgs& a) {
  if (a.model_dir.empty() == a.tokenizer.empty())
    return make_error(ErrorKind::kInvalidArgument, "detokenize: give exactly one of -m DIR, --tokenizer PATH");
  const std::string path = a.tokenizer.empty() ? a.model_dir + "/tokenizer.json" : a.tokenizer;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return make_error(ErrorKind::kNotFound, "'", path, "' does not exist");
  HLX_ASSIGN_OR_RETURN(std::vector<uint32_t> ids, parse_token_ids(a.ids, "--ids"));
  HLX_ASSIGN_OR_RETURN(std::shared_ptr<const tok::Tokenizer> t, tok::Tokenizer::load(path));
  HLX_ASSIGN_OR_RETURN(std::string text, t->decode(ids, a.skip_special));
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
  return ok_status();
}

CommandRun setup_detokenize(CLI::App& root) {
  auto a = std::make_shared<DetokenizeArgs>();
  CLI::App* sub = root.add_subcommand("detokenize", "Decode token ids to text with a checkpoint's tokenizer");
  sub->add_option("-m,--model", a->model_dir, "checkpoint directory holding tokenizer.json");
  sub->add_option("--tokenizer", a->tokenizer, "path of a tokenizer.json");
  sub->add_option("--ids", a->ids, "token ids, comma- or space-separated")->required();
  sub->add_flag("--skip-special", a->skip_special, "drop special tokens");
  return [a] { return report(run_detokenize(*a)); };
}
HLX_REGISTER_COMMAND(setup_detokenize);

}  // namespace
}  // namespace hlx::cli
