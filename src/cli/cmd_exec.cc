// `hlx exec MODULE.mlir --entry NAME --input a.npy ... [--weights-from DIR|FILE] --output-dir DIR`
// parse -> verify -> compile -> bind weights -> run; writes out_0.npy, out_1.npy, ...
// bf16 inputs travel as '<u2' .npy files and are reinterpreted when the argument is bf16.
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cli/command.h"
#include "io/checkpoint.h"
#include "io/npy.h"
#include "runtime/program.h"
#include "stablehlo/parser.h"
#include "stablehlo/verifier.h"

namespace hlx::cli {
namespace {

struct ExecArgs {
  std::string module;
  std::string entry = "main";
  std::vector<std::string> inputs;
  std::string weights;
  std::string output_dir;
  bool no_native_composites = false;
  bool dump_plan = false;
};

Status exec(const ExecArgs& a) {
  HLX_ASSIGN_OR_RETURN(shlo::Module parsed, shlo::parse_module_file(a.module));
  HLX_RETURN_IF_ERROR(shlo::verify_module(parsed));
  auto module = std::make_shared<const shlo::Module>(std::move(parsed));
  const shlo::Function* fn = module->find_function(a.entry);
  if (!fn || !fn->is_public) return make_error(ErrorKind::kNotFound, a.module, ": no public function @", a.entry);
  rt::ProgramOptions options;
  options.native_composites = !a.no_native_composites;
  options.dump_plan = a.dump_plan;
  HLX_ASSIGN_OR_RETURN(auto program, rt::Program::compile(module, options));

  // Split the entry's arguments into checkpoint weights and inputs given on the command line.
  std::vector<std::string> weight_names;
  std::vector<shlo::TensorType> input_types;
  for (size_t k = 0; k < fn->args.size(); ++k) {
    const shlo::Attr* w = k < fn->arg_attrs.size() ? shlo::find_attr(fn->arg_attrs[k], shlo::kWeightAttr) : nullptr;
    if (w)
      weight_names.push_back(w->str);
    else
      input_types.push_back(fn->type_of(fn->args[k]));
  }
  if (!weight_names.empty()) {
    if (a.weights.empty())
      return make_error(ErrorKind::kInvalidArgument, "@", a.entry, " has ", weight_names.size(),
                        " weight arguments (e.g. '", weight_names[0], "'); pass --weights-from");
    HLX_ASSIGN_OR_RETURN(Checkpoint ckpt, Checkpoint::open(a.weights));
    for (const auto& name : weight_names) {
      HLX_ASSIGN_OR_RETURN(Tensor t, ckpt.tensor(name));
      HLX_RETURN_IF_ERROR(program->bind_weight(name, std::move(t)));
    }
  }
  if (a.inputs.size() != input_types.size())
    return make_error(ErrorKind::kInvalidArgument, "@", a.entry, " takes ", input_types.size(), " inputs, got ",
                      a.inputs.size(), " --input files");
  std::vector<Tensor> args;
  for (size_t i = 0; i < a.inputs.size(); ++i) {
    DType want = input_types[i].dtype;
    std::optional<DType> reinterpret;
    if (want == DType::kBF16 || want == DType::kF16 || want == DType::kI16) reinterpret = want;
    auto t = read_npy(a.inputs[i], reinterpret);
    if (!t.ok()) return t.status().with_context(str_cat("input #", i));
    args.push_back(std::move(*t));
  }
  HLX_ASSIGN_OR_RETURN(auto outputs, program->run(a.entry, std::move(args)));
  std::error_code ec;
  std::filesystem::create_directories(a.output_dir, ec);
  if (ec) return make_error(ErrorKind::kIo, "cannot create output directory ", a.output_dir, ": ", ec.message());
  for (size_t i = 0; i < outputs.size(); ++i) {
    std::string path = (std::filesystem::path(a.output_dir) / str_cat("out_", i, ".npy")).string();
    HLX_RETURN_IF_ERROR(write_npy(path, outputs[i]));
  }
  return ok_status();
}

CommandRun setup_exec(CLI::App& root) {
  auto args = std::make_shared<ExecArgs>();
  CLI::App* sub = root.add_subcommand("exec", "Run one entry of a StableHLO module on .npy inputs");
  sub->add_option("module", args->module, "StableHLO module (MLIR text)")->required();
  sub->add_option("--entry", args->entry, "public function to run (default: main)");
  sub->add_option("--input", args->inputs, "input .npy files, in argument order (bf16 as '<u2')");
  sub->add_option("--weights-from", args->weights,
                  "checkpoint directory or .safetensors file for hlx.weight arguments");
  sub->add_option("--output-dir", args->output_dir, "directory for out_0.npy, out_1.npy, ...")->required();
  sub->add_flag("--no-native-composites", args->no_native_composites, "run every composite's decomposition");
  sub->add_flag("--dump-plan", args->dump_plan, "print the execution plan to stderr");
  return [args] { return report(exec(*args)); };
}
HLX_REGISTER_COMMAND(setup_exec);

}  // namespace
}  // namespace hlx::cli
