// `hlx fixture --family F --out DIR [--preset tiny|qwen3-0.6b] [--dtype f32|bf16] [--seed N]`
// writes a deterministic random-weight checkpoint in Hugging Face layout (see models/fixture.h).
#include <iostream>
#include <memory>
#include <string>

#include "cli/command.h"
#include "models/fixture.h"

namespace hlx::cli {
namespace {

struct FixtureArgs {
  std::string family;
  std::string out;
  std::string preset = "tiny";
  std::string dtype;  // empty: f32 for tiny, bf16 for real-shape presets (as those models ship)
  uint64_t seed = 0;
};

Status run_fixture(const FixtureArgs& a) {
  models::FixtureOptions o;
  o.family = a.family;
  o.preset = a.preset;
  o.seed = a.seed;
  std::string dtype = a.dtype.empty() ? (a.preset == "tiny" ? "f32" : "bf16") : a.dtype;
  if (dtype == "f32") o.dtype = DType::kF32;
  else if (dtype == "bf16") o.dtype = DType::kBF16;
  else return make_error(ErrorKind::kInvalidArgument, "--dtype '", dtype, "' (expected f32 or bf16)");
  HLX_RETURN_IF_ERROR(models::write_text_fixture(a.out, o));
  std::cout << "wrote " << a.family << " fixture (" << a.preset << ", " << dtype << ", seed " << a.seed
            << ") to " << a.out << "\n";
  return ok_status();
}

CommandRun setup_fixture(CLI::App& root) {
  auto args = std::make_shared<FixtureArgs>();
  CLI::App* sub = root.add_subcommand("fixture", "Write a deterministic random-weight checkpoint in Hugging Face layout");
  sub->add_option("--family", args->family, "llama | qwen2 | qwen3 | gemma3_text | gemma3")->required();
  sub->add_option("--out", args->out, "output directory (created)")->required();
  sub->add_option("--preset", args->preset, "tiny (default) | qwen3-0.6b");
  sub->add_option("--dtype", args->dtype, "f32 | bf16 (default: f32 for tiny, bf16 otherwise)");
  sub->add_option("--seed", args->seed, "generator seed (default 0)");
  return [args] { return report(run_fixture(*args)); };
}
HLX_REGISTER_COMMAND(setup_fixture);

}  // namespace
}  // namespace hlx::cli
