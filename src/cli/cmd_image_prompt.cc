// `hlx image-prompt -m DIR -p TEXT [--add-special] [--rows N --mask-out MASK.npy] [--chunk B,E]`:
// the host side of an image prompt for a vision-language checkpoint, for tests and debugging.
// Gemma3: every <start_of_image> in TEXT (a rendered chat template) is expanded on the text,
// the expanded string is tokenized, and one JSON line is printed:
//   {"text": expanded, "ids": [...], "token_type_ids": [...], "images": n, "tokens_per_image": T}
// With --mask-out, the additive prefill mask of rows [B, E) (default: all) in an N-row chunk is
// written as f32 [1, 1, N, N] .npy.
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/command.h"
#include "io/checkpoint.h"
#include "io/hf_config.h"
#include "io/npy.h"
#include "models/vision_spec.h"
#include "multimodal/image_prompt.h"
#include "tokenizer/tokenizer.h"

namespace hlx::cli {
namespace {

struct ImagePromptArgs {
  std::string model, text, mask_out, chunk;
  bool add_special = false;
  int64_t rows = 0;
};

Status run_image_prompt(const ImagePromptArgs& a) {
  HLX_ASSIGN_OR_RETURN(HfConfig config, HfConfig::load(a.model));
  HLX_ASSIGN_OR_RETURN(Checkpoint ck, Checkpoint::open(a.model));
  if (!models::is_gemma3_vlm(config, ck.names()))
    return make_error(
        ErrorKind::kUnsupported, a.model,
        ": image-prompt implements Gemma3 vision-language checkpoints (text expansion before tokenization)");
  HLX_ASSIGN_OR_RETURN(models::VlmSpec spec, models::vlm_spec_from_config(config, ck.names()));
  HLX_ASSIGN_OR_RETURN(auto tok, tok::Tokenizer::load(a.model + "/tokenizer.json"));
  mm::ImageBlockText layout;
  for (auto [id, out] : {std::pair<int64_t, std::string*>{spec.boi_token_id, &layout.boi},
                         {spec.image_token_id, &layout.image},
                         {spec.eoi_token_id, &layout.eoi}}) {
    std::optional<std::string> t = tok->id_to_token(uint32_t(id));
    if (!t) return make_error(ErrorKind::kInvalidArgument, a.model, ": token id ", id, " is not in tokenizer.json");
    *out = *t;
  }
  layout.placeholder = layout.boi;
  layout.tokens_per_image = spec.tokens_per_image();
  int64_t images = 0;
  const std::string expanded = mm::expand_image_placeholders(a.text, layout, &images);
  HLX_ASSIGN_OR_RETURN(std::vector<uint32_t> ids32, tok->encode(expanded, a.add_special));
  std::vector<int64_t> ids(ids32.begin(), ids32.end());
  nlohmann::json j;
  j["text"] = expanded;
  j["ids"] = ids;
  j["token_type_ids"] = mm::image_token_types(ids, spec.image_token_id);
  j["images"] = images;
  j["tokens_per_image"] = spec.tokens_per_image();
  std::cout << j.dump() << "\n";
  if (!a.mask_out.empty()) {
    int64_t begin = 0, end = int64_t(ids.size());
    if (!a.chunk.empty() && std::sscanf(a.chunk.c_str(), "%ld,%ld", &begin, &end) != 2)
      return make_error(ErrorKind::kInvalidArgument, "--chunk '", a.chunk, "' (expected B,E)");
    const mm::MaskRule rule = spec.mask_mode == models::ImageMaskMode::kBidirectional ? mm::MaskRule::kBidirectional
                                                                                      : mm::MaskRule::kImageBlocks;
    HLX_ASSIGN_OR_RETURN(
        Tensor mask, mm::prefill_mask(ids, spec.image_token_id, begin, end, a.rows > 0 ? a.rows : end - begin, rule));
    HLX_RETURN_IF_ERROR(write_npy(a.mask_out, mask));
  }
  return ok_status();
}

CommandRun setup_image_prompt(CLI::App& root) {
  auto args = std::make_shared<ImagePromptArgs>();
  CLI::App* sub = root.add_subcommand("image-prompt", "Expand, tokenize and mask an image prompt (Gemma3), as JSON");
  sub->add_option("-m,--model", args->model, "Checkpoint directory (config.json, tokenizer.json)")->required();
  sub->add_option("-p,--prompt", args->text, "Prompt text with one <start_of_image> per image")->required();
  sub->add_flag("--add-special", args->add_special, "let the tokenizer add its special tokens (Gemma: <bos>)");
  sub->add_option("--rows", args->rows, "rows of the mask's chunk (default: the prompt's)");
  sub->add_option("--chunk", args->chunk, "B,E: the prompt rows the mask covers (default: all)");
  sub->add_option("--mask-out", args->mask_out, "write the additive prefill mask here (.npy, f32 [1,1,N,N])");
  return [args] { return report(run_image_prompt(*args)); };
}
HLX_REGISTER_COMMAND(setup_image_prompt);

}  // namespace
}  // namespace hlx::cli
