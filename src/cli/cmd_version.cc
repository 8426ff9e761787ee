#include <iostream>

#include "cli/command.h"

namespace hlx::cli {

static CommandRun setup_version(CLI::App& root) {
  root.add_subcommand("version", "Print the hlx version");
  return [] {
    std::cout << "hlx 0.1.0\n";
    return 0;
  };
}
HLX_REGISTER_COMMAND(setup_version);

}  // namespace hlx::cli
