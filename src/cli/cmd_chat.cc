// `hlx chat -m DIR [-n N] [--system TEXT] [--stop STR]... [--capacity C] [--kv-dtype ...]`
// Interactive multi-turn chat: reads one user message per line from stdin until EOF or "/exit",
// renders the whole conversation with the checkpoint's chat template (add_generation_prompt) each
// turn, streams the reply to stdout and keeps it in the conversation. A turn that no longer fits
// the capacity is reported (typed error on stderr) and the conversation ends with exit code 1.
// --image PATH (repeatable; vision-language checkpoints) attaches the images to the first user
// message as {"type":"image"} parts; every turn re-renders (and re-encodes) them with the history.
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include "cli/command.h"
#include "cli/model_flags.h"
#include "cli/text_gen.h"

namespace hlx::cli {
namespace {

struct ChatArgs {
  std::string model, system;
  std::vector<std::string> images;
  int64_t n = 128;
  ModelFlags flags;
  TextGenParams gen;
};

Status run_chat(const ChatArgs& a) {
  HLX_ASSIGN_OR_RETURN(std::shared_ptr<const tok::Tokenizer> tokenizer, load_checkpoint_tokenizer(a.model));
  HLX_ASSIGN_OR_RETURN(ChatTemplate tmpl, load_checkpoint_template(a.model));
  HLX_ASSIGN_OR_RETURN(engine::TextModelOptions o, a.flags.options());
  HLX_ASSIGN_OR_RETURN(std::vector<mm::Image> images, load_image_files(a.images));
  std::unique_ptr<engine::VisionModel> vision;
  if (!images.empty()) {
    HLX_RETURN_IF_ERROR(require_vision_language_dir(a.model));
    HLX_ASSIGN_OR_RETURN(vision, load_vision_with_progress(a.model, a.flags.threads, tokenizer));
  }
  HLX_ASSIGN_OR_RETURN(std::unique_ptr<engine::TextModel> model, load_model_with_progress(a.model, o));
  const bool interactive = isatty(STDIN_FILENO);
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  if (!a.system.empty()) messages.push_back({{"role", "system"}, {"content", a.system}});
  TextGenParams gen = a.gen;
  gen.max_new_tokens = a.n;
  gen.prefix_cache = a.flags.prefix_cache_on();  // each turn reuses the previous turn's prompt rows
  std::string line;
  for (int turn = 1;; ++turn) {
    if (interactive) {
      std::fputs("> ", stdout);
      std::fflush(stdout);
    }
    if (!std::getline(std::cin, line)) break;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line == "/exit" || line == "/quit") break;
    if (line.empty()) continue;
    const bool first_user = turn == 1;
    messages.push_back(user_message(line, first_user ? images.size() : 0));
    auto rendered = tmpl.render(messages, /*add_generation_prompt=*/true);
    if (!rendered.ok()) return rendered.status().with_context("chat: rendering the chat template");
    if (!images.empty()) {
      auto expanded = expand_image_text(*vision, *rendered, images);
      if (!expanded.ok()) return expanded.status().with_context(str_cat("chat: turn ", turn));
      *rendered = std::move(*expanded);
    }
    auto ids = tokenizer->encode(*rendered, /*add_special_tokens=*/false);
    if (!ids.ok()) return ids.status().with_context(str_cat("chat: turn ", turn));
    std::vector<int64_t> prompt(ids->begin(), ids->end());
    if (images.empty()) {  // image prompts: the engine admits them (image rows are not table ids)
      engine::Admission adm = engine::check_text_admission(model->limits(), prompt, gen.max_new_tokens);
      if (!adm.ok()) return adm.status.with_context(str_cat("chat: turn ", turn, " (the conversation is too long)"));
    }
    auto r = generate_text(
        *model, tokenizer, prompt, gen,
        [](std::string_view piece) {
          std::fwrite(piece.data(), 1, piece.size(), stdout);
          std::fflush(stdout);
        },
        ImageInput{images, vision.get()});
    if (!r.ok()) return r.status().with_context(str_cat("chat: turn ", turn));
    std::fputc('\n', stdout);
    std::fflush(stdout);
    std::fprintf(stderr, "[turn %d] %s\n", turn, summary_line(*r).c_str());
    messages.push_back({{"role", "assistant"}, {"content", r->text}});
  }
  return ok_status();
}

CommandRun setup_chat(CLI::App& root) {
  auto a = std::make_shared<ChatArgs>();
  CLI::App* sub = root.add_subcommand("chat", "Interactive multi-turn chat with a checkpoint's chat template");
  sub->add_option("-m,--model", a->model, "checkpoint directory (with tokenizer.json and tokenizer_config.json)")
      ->required();
  sub->add_option("--system", a->system, "system message opening the conversation");
  sub->add_option("--image", a->images,
                  "image file attached to the first message (repeatable; vision-language checkpoints)");
  sub->add_option("-n,--max-new-tokens", a->n, "tokens per reply (default 128)");
  add_sampling_flags(sub, a->gen);
  a->flags.add_to(sub);
  return [a] { return report(run_chat(*a)); };
}
HLX_REGISTER_COMMAND(setup_chat);

}  // namespace
}  // namespace hlx::cli
