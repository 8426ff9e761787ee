// `hlx generate -m DIR (-p TEXT | --file F | --tokens 1,2,3) [--image PATH]... [--chat] [-n N] [--temp T]
//               [--top-k K] [--top-p P] [--min-p P] [--seed S] [--stop STR]... [--capacity C] [--slots N]
//               [--logprobs K] [--kv-dtype auto|bf16|f32|int8] [--threads N]`
// Text mode (-p / --file): tokenizes with DIR/tokenizer.json (--chat first renders DIR's chat
// template for one user message with add_generation_prompt), streams the generated text to stdout
// as it is decided (never a broken UTF-8 character), and ends with a one-line summary on stderr.
// Token mode (--tokens): greedy, stdout is the generated ids comma-separated on one line.
// Images (--image, repeatable; llava, gemma3, qwen3_vl checkpoints): in text mode a prompt without
// the family's image placeholder gets one per image in front ("<image>\n", "<start_of_image>\n",
// "<|vision_start|><|image_pad|><|vision_end|>\n"); with --chat the user message is
// [{"type":"image"}..., {"type":"text"}]; the placeholders are then expanded on the text for each
// image (VisionModel::expand_prompt) and tokenized. With --tokens the ids hold the image token id
// once per image (not for Gemma3, whose blocks are expanded as text). The summary adds the
// preprocess and encode times.
// --logprobs K (0..20): after the text (or ids), one stderr line per generated token,
// `logprobs: {"i":0,"id":791,"logprob":-1.25,"top":[[791,-1.25],...]}` (see logprobs_lines):
// the chosen token's log-probability and the K most likely ids, from the log-softmax of the
// logits after --logit-bias, before --temp/--top-k/--top-p/--min-p.
// --json / --json-schema F: structured output (engine/json_constraint.h): tokens are sampled from
// the logits masked to what keeps the text valid JSON (an object) / valid against the schema in
// F; generation stops once the value is closed; -n cutting it short ends with finish: length.
// The logprobs are then those of the masked row.
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include "cli/command.h"
#include "cli/model_flags.h"
#include "cli/text_gen.h"
#include "engine/text_model.h"
#include "engine/token_ids.h"
#include "engine/vision_model.h"
#include "io/file.h"

namespace hlx::cli {
namespace {

struct GenerateArgs {
  std::string model;
  std::string tokens, prompt, file;
  std::vector<std::string> images;
  bool chat = false;
  int64_t n = 16;
  ModelFlags flags;
  int64_t slots = 1;
  std::string modules_dir;
  bool compile_all = false;
  bool print_ids = false;
  TextGenParams gen;
};

Result<engine::TextModelOptions> model_options(const GenerateArgs& a) {
  HLX_ASSIGN_OR_RETURN(engine::TextModelOptions o, a.flags.options());
  o.slots = a.slots;
  if (!a.modules_dir.empty()) o.modules_dir = a.modules_dir;
  o.eager_compile = a.compile_all;
  return o;
}

Status run_token_ids(const GenerateArgs& a) {
  HLX_ASSIGN_OR_RETURN(std::vector<int64_t> prompt, engine::parse_token_ids(a.tokens));
  HLX_RETURN_IF_ERROR(check_no_image_tokens(a.model, prompt));
  HLX_ASSIGN_OR_RETURN(engine::TextModelOptions o, model_options(a));
  HLX_ASSIGN_OR_RETURN(std::unique_ptr<engine::TextModel> model, engine::TextModel::load(a.model, o));
  // Admission before compiling anything for this request: an oversize request fails fast.
  engine::Admission adm = engine::check_text_admission(model->limits(), prompt, a.n);
  if (!adm.ok()) return adm.status;
  HLX_RETURN_IF_ERROR(model->warm_up(int64_t(prompt.size()), false, a.n > 1 ? 1 : 0));
  const engine::TextModelStats& st = model->stats();
  std::fprintf(
      stderr,
      "load: config %.1f ms, checkpoint %.1f ms (%.1f MiB mapped), emit %.1f ms (%d modules), "
      "compile %.1f ms + bind %.1f ms (%d entries, arenas %.1f MiB); capacity %lld, slots %lld, kv %s (%.1f MiB)\n",
      st.config_ms, st.checkpoint_ms, double(st.weight_bytes) / (1 << 20), st.emit_ms, st.modules, st.compile_ms,
      st.bind_ms, st.compiled, double(st.arena_bytes) / (1 << 20), (long long)model->shape().context_capacity,
      (long long)model->shape().slots, std::string(dtype_name(model->shape().kv_dtype)).c_str(),
      double(st.kv_bytes) / (1 << 20));
  if (a.gen.logprobs >= 0) {  // the engine path computes them; same greedy tokens
    TextGenParams gen;
    gen.max_new_tokens = a.n;
    gen.logprobs = a.gen.logprobs;
    HLX_ASSIGN_OR_RETURN(TextGenResult t, generate_text(*model, nullptr, prompt, gen, [](std::string_view) {}));
    std::string line;
    for (size_t i = 0; i < t.tokens.size(); ++i) line += (i ? "," : "") + std::to_string(t.tokens[i]);
    std::cout << line << "\n" << std::flush;
    std::fputs(logprobs_lines(t.logprobs).c_str(), stderr);
    std::fprintf(stderr, "%s\n", summary_line(t).c_str());
    return ok_status();
  }
  HLX_ASSIGN_OR_RETURN(engine::GenerateResult r, model->generate(prompt, a.n));
  std::string line;
  for (size_t i = 0; i < r.tokens.size(); ++i) line += (i ? "," : "") + std::to_string(r.tokens[i]);
  std::cout << line << "\n" << std::flush;
  std::fprintf(stderr, "prefill: %lld tokens in %.1f ms (%.1f tokens/s)\n", (long long)r.prompt_tokens, r.prefill_ms,
               per_second(r.prompt_tokens, r.prefill_ms));
  std::fprintf(stderr, "decode: %lld tokens in %.1f ms (%.1f tokens/s), finish: %s\n", (long long)r.decode_steps,
               r.decode_ms, per_second(r.decode_steps, r.decode_ms), engine::finish_reason_name(r.finish));
  return ok_status();
}

// --tokens with --image: one image token id per image (expand_image_ids), then through the
// engine (image rows need it), greedy.
Status run_token_ids_images(const GenerateArgs& a) {
  HLX_ASSIGN_OR_RETURN(std::vector<int64_t> prompt, engine::parse_token_ids(a.tokens));
  HLX_ASSIGN_OR_RETURN(std::vector<mm::Image> images, load_image_files(a.images));
  HLX_ASSIGN_OR_RETURN(engine::TextModelOptions o, model_options(a));
  HLX_ASSIGN_OR_RETURN(std::unique_ptr<engine::VisionModel> vision,
                       load_vision_with_progress(a.model, o.threads, nullptr));
  HLX_ASSIGN_OR_RETURN(prompt, expand_image_ids(*vision, prompt, images));
  HLX_ASSIGN_OR_RETURN(std::unique_ptr<engine::TextModel> model, load_model_with_progress(a.model, o));
  HLX_RETURN_IF_ERROR(warm_up_image_prompt(*model, prompt, a.n));
  TextGenParams gen;
  gen.max_new_tokens = a.n;
  gen.logprobs = a.gen.logprobs;
  HLX_ASSIGN_OR_RETURN(TextGenResult r, generate_text(
                                            *model, nullptr, prompt, gen, [](std::string_view) {},
                                            ImageInput{std::move(images), vision.get()}));
  std::string line;
  for (size_t i = 0; i < r.tokens.size(); ++i) line += (i ? "," : "") + std::to_string(r.tokens[i]);
  std::cout << line << "\n" << std::flush;
  std::fputs(logprobs_lines(r.logprobs).c_str(), stderr);
  std::fprintf(stderr, "%s\n", summary_line(r).c_str());
  return ok_status();
}

Status run_text(const GenerateArgs& a) {
  std::string text = a.prompt;
  if (!a.file.empty()) {
    HLX_ASSIGN_OR_RETURN(std::string content, read_file(a.file));
    text = std::move(content);
  }
  // Everything about the prompt is checked before the (possibly large) checkpoint is loaded.
  HLX_ASSIGN_OR_RETURN(std::shared_ptr<const tok::Tokenizer> tokenizer, load_checkpoint_tokenizer(a.model));
  HLX_ASSIGN_OR_RETURN(std::vector<mm::Image> images, load_image_files(a.images));
  std::unique_ptr<engine::VisionModel> vision;
  if (!images.empty()) {
    HLX_ASSIGN_OR_RETURN(vision, load_vision_with_progress(a.model, a.flags.threads, tokenizer));
    if (!a.chat) text = vision->with_placeholders(text, images.size());
  }
  bool add_special = true;
  if (a.chat) {
    HLX_ASSIGN_OR_RETURN(ChatTemplate tmpl, load_checkpoint_template(a.model));
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    messages.push_back(user_message(text, images.size()));
    auto rendered = tmpl.render(messages, /*add_generation_prompt=*/true);
    if (!rendered.ok()) return rendered.status().with_context("--chat: rendering the chat template");
    text = std::move(*rendered);
    add_special = false;  // as apply_chat_template(tokenize=True): the template carries BOS itself
  }
  if (!images.empty()) {
    HLX_ASSIGN_OR_RETURN(text, expand_image_text(*vision, text, images));
  }
  auto ids = tokenizer->encode(text, add_special);
  if (!ids.ok()) return ids.status().with_context("prompt");
  std::vector<int64_t> prompt(ids->begin(), ids->end());
  if (images.empty()) HLX_RETURN_IF_ERROR(check_no_image_tokens(a.model, prompt));
  HLX_ASSIGN_OR_RETURN(engine::TextModelOptions o, model_options(a));
  HLX_ASSIGN_OR_RETURN(std::unique_ptr<engine::TextModel> model, load_model_with_progress(a.model, o));
  if (images.empty()) {
    engine::Admission adm = engine::check_text_admission(model->limits(), prompt, a.n);
    if (!adm.ok()) return adm.status;
    HLX_RETURN_IF_ERROR(model->warm_up(int64_t(prompt.size()), false, a.n > 1 ? 1 : 0));
  } else {  // the engine checks the image rows and admission
    HLX_RETURN_IF_ERROR(warm_up_image_prompt(*model, prompt, a.n));
  }
  TextGenParams gen = a.gen;
  gen.max_new_tokens = a.n;
  gen.prefix_cache = a.flags.prefix_cache_on();
  HLX_ASSIGN_OR_RETURN(TextGenResult r, generate_text(
                                            *model, tokenizer, prompt, gen,
                                            [](std::string_view piece) {
                                              std::fwrite(piece.data(), 1, piece.size(), stdout);
                                              std::fflush(stdout);
                                            },
                                            ImageInput{std::move(images), vision.get()}));
  std::fputc('\n', stdout);
  std::fflush(stdout);
  std::fputs(logprobs_lines(r.logprobs).c_str(), stderr);
  std::fprintf(stderr, "%s\n", summary_line(r).c_str());
  if (a.print_ids) {
    std::string line = "ids:";
    for (size_t i = 0; i < r.tokens.size(); ++i) line += (i ? "," : " ") + std::to_string(r.tokens[i]);
    std::fprintf(stderr, "%s\n", line.c_str());
  }
  return ok_status();
}

Status run_generate(const GenerateArgs& a, int text_sources) {
  if (text_sources + int(!a.tokens.empty()) != 1)
    return make_error(ErrorKind::kInvalidArgument, "generate: give exactly one of -p TEXT, --file F, --tokens IDS");
  if (a.n < 0) return make_error(ErrorKind::kInvalidArgument, "-n ", a.n, " is negative");
  if (a.gen.logprobs < -1 || a.gen.logprobs > engine::kMaxTopLogprobs)
    return make_error(ErrorKind::kInvalidArgument, "--logprobs ", a.gen.logprobs, " is outside [0, ",
                      engine::kMaxTopLogprobs, "]");
  if (a.gen.json && !a.gen.json_schema_file.empty())
    return make_error(ErrorKind::kInvalidArgument, "give one of --json and --json-schema");
  if (!a.images.empty()) HLX_RETURN_IF_ERROR(require_vision_language_dir(a.model));
  if (!a.tokens.empty()) {
    if (a.chat)
      return make_error(ErrorKind::kInvalidArgument, "--chat needs a text prompt (-p or --file), not --tokens");
    if (a.gen.temperature != 0.f || !a.gen.stop.empty() || !a.gen.logit_bias.empty() || a.gen.json ||
        !a.gen.json_schema_file.empty())
      return make_error(
          ErrorKind::kInvalidArgument,
          "--tokens mode is greedy without stop strings, biases or JSON; use -p for --temp/--stop/--logit-bias/--json");
    return a.images.empty() ? run_token_ids(a) : run_token_ids_images(a);
  }
  return run_text(a);
}

CommandRun setup_generate(CLI::App& root) {
  auto args = std::make_shared<GenerateArgs>();
  CLI::App* sub = root.add_subcommand("generate", "Generate text (streamed) or token ids from a checkpoint");
  sub->add_option("-m,--model", args->model, "checkpoint directory (config.json + safetensors [+ tokenizer files])")
      ->required();
  sub->add_option("-p,--prompt", args->prompt, "prompt text (tokenized with DIR/tokenizer.json)");
  sub->add_option("--file", args->file, "read the prompt text from this file");
  sub->add_flag("--chat", args->chat, "wrap the prompt as a user message in the checkpoint's chat template");
  sub->add_option("--tokens", args->tokens, "prompt token ids, comma-separated (greedy; prints ids)");
  sub->add_option("--image", args->images,
                  "image file (PNG/JPEG; repeatable) for a vision-language checkpoint (llava, gemma3, qwen3_vl)");
  sub->add_option("-n,--max-new-tokens", args->n, "tokens to generate (default 16)");
  sub->add_flag("--print-ids", args->print_ids, "text mode: also print the generated ids on stderr (\"ids: 1,2,3\")");
  add_sampling_flags(sub, args->gen);
  sub->add_option("--logprobs", args->gen.logprobs,
                  "K in 0..20: print each token's logprob and the K most likely ids on stderr (see above)");
  sub->add_flag("--json", args->gen.json, "constrain the output to one JSON object");
  sub->add_option("--json-schema", args->gen.json_schema_file,
                  "constrain the output to JSON valid against the JSON schema in this file (see docs/SERVER.md)");
  args->flags.add_to(sub);
  sub->add_option("--slots", args->slots, "KV slots (default 1)");
  sub->add_option("--modules-dir", args->modules_dir, "load pre-emitted prefill_<Lp>.mlir / decode_<B>.mlir from here");
  sub->add_flag("--compile-all", args->compile_all,
                "compile every prefill bucket and decode batch at load (default: on first use)");
  return [args, sub] {
    int text_sources = int(sub->count("--prompt") > 0) + int(!args->file.empty());
    return report(run_generate(*args, text_sources));
  };
}
HLX_REGISTER_COMMAND(setup_generate);

}  // namespace
}  // namespace hlx::cli
