// `hlx verify MODULE.mlir [--print]`: parse + verify; prints "ok: N functions, M ops" (or the
// error, exit code 1). --print writes the parsed module in canonical pretty form to stdout (the
// "ok" line then goes to stderr, so stdout stays a valid module).
#include <iostream>
#include <string>

#include "cli/command.h"
#include "stablehlo/parser.h"
#include "stablehlo/printer.h"
#include "stablehlo/verifier.h"

namespace hlx::cli {
namespace {

size_t count_ops(const std::vector<shlo::Op>& ops) {
  size_t n = 0;
  for (const shlo::Op& op : ops) {
    ++n;
    for (const shlo::Block& b : op.regions) n += count_ops(b.ops);
  }
  return n;
}

struct VerifyArgs {
  std::string module;
  bool print = false;
};

CommandRun setup_verify(CLI::App& root) {
  auto args = std::make_shared<VerifyArgs>();
  CLI::App* sub = root.add_subcommand("verify", "Parse and verify a StableHLO module (MLIR text)");
  sub->add_option("MODULE", args->module, "Path of the .mlir file")->required();
  sub->add_flag("--print", args->print, "Print the parsed module in canonical pretty form");
  return [args]() -> int {
    Result<shlo::Module> m = shlo::parse_module_file(args->module);
    if (!m.ok()) return report(m.status());
    // Print before verifying so a module that parses but fails verification can still be inspected.
    if (args->print) std::cout << shlo::print_module(*m);
    Status s = shlo::verify_module(*m);
    if (!s.ok()) return report(s);
    size_t ops = 0;
    for (const shlo::Function& f : m->functions) ops += count_ops(f.body);
    (args->print ? std::cerr : std::cout) << "ok: " << m->functions.size() << " functions, " << ops << " ops\n";
    return 0;
  };
}
HLX_REGISTER_COMMAND(setup_verify);

}  // namespace
}  // namespace hlx::cli
