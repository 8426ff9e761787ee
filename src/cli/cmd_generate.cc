// `hlx generate -m DIR --tokens 1,2,3 -n N [--capacity C] [--slots N] [--kv-dtype bf16|f32]`
// Greedy generation by token ids. stdout: the generated ids, comma-separated, on one line.
// stderr: load / emit / compile times and prefill and decode tokens/s.
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include "cli/command.h"
#include "engine/text_model.h"
#include "engine/token_ids.h"

namespace hlx::cli {
namespace {

struct GenerateArgs {
  std::string model;
  std::string tokens;
  int64_t n = 16;
  int64_t capacity = 0;
  int64_t slots = 1;
  std::string kv_dtype = "bf16";
  int threads = 0;
  std::string modules_dir;
  bool compile_all = false;
};

double per_second(int64_t count, double ms) { return ms > 0 ? double(count) * 1000.0 / ms : 0.0; }

Status run_generate(const GenerateArgs& a) {
  HLX_ASSIGN_OR_RETURN(std::vector<int64_t> prompt, engine::parse_token_ids(a.tokens));
  engine::TextModelOptions o;
  o.context_capacity = a.capacity;
  o.slots = a.slots;
  auto kv = dtype_from_name(a.kv_dtype);
  if (!kv) return make_error(ErrorKind::kInvalidArgument, "--kv-dtype '", a.kv_dtype, "' (expected bf16 or f32)");
  o.kv_dtype = *kv;
  o.threads = a.threads;
  if (!a.modules_dir.empty()) o.modules_dir = a.modules_dir;
  o.eager_compile = a.compile_all;
  HLX_ASSIGN_OR_RETURN(std::unique_ptr<engine::TextModel> model, engine::TextModel::load(a.model, o));
  // Admission before compiling anything for this request: an oversize request fails fast.
  engine::Admission adm = engine::check_text_admission(model->limits(), prompt, a.n);
  if (!adm.ok()) return adm.status;
  HLX_RETURN_IF_ERROR(model->warm_up(int64_t(prompt.size()), false, a.n > 1 ? 1 : 0));
  const engine::TextModelStats& st = model->stats();
  std::fprintf(stderr,
               "load: config %.1f ms, checkpoint %.1f ms (%.1f MiB mapped), emit %.1f ms (%d modules), "
               "compile %.1f ms + bind %.1f ms (%d entries, arenas %.1f MiB); capacity %lld, slots %lld, kv %s (%.1f MiB)\n",
               st.config_ms, st.checkpoint_ms, double(st.weight_bytes) / (1 << 20), st.emit_ms, st.modules,
               st.compile_ms, st.bind_ms, st.compiled, double(st.arena_bytes) / (1 << 20), (long long)model->shape().context_capacity,
               (long long)model->shape().slots, std::string(dtype_name(model->shape().kv_dtype)).c_str(),
               double(st.kv_bytes) / (1 << 20));
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

CommandRun setup_generate(CLI::App& root) {
  auto args = std::make_shared<GenerateArgs>();
  CLI::App* sub = root.add_subcommand("generate", "Greedy generation from token ids");
  sub->add_option("-m,--model", args->model, "checkpoint directory (config.json + safetensors)")->required();
  sub->add_option("--tokens", args->tokens, "prompt token ids, comma-separated")->required();
  sub->add_option("-n,--max-new-tokens", args->n, "tokens to generate (default 16)");
  sub->add_option("--capacity", args->capacity,
                  "context capacity (default: min(4096, max_position_embeddings); see docs/CAPACITY.md)");
  sub->add_option("--slots", args->slots, "KV slots (default 1)");
  sub->add_option("--kv-dtype", args->kv_dtype, "bf16 (default) | f32");
  sub->add_option("--threads", args->threads, "runtime threads (default: all cores)");
  sub->add_option("--modules-dir", args->modules_dir, "load pre-emitted prefill_<Lp>.mlir / decode_<B>.mlir from here");
  sub->add_flag("--compile-all", args->compile_all,
               "compile every prefill bucket and decode batch at load (default: on first use)");
  return [args] { return report(run_generate(*args)); };
}
HLX_REGISTER_COMMAND(setup_generate);

}  // namespace
}  // namespace hlx::cli
