#include <iostream>

#include "cli/command.h"
#include "hlx/hlx.h"

namespace hlx::cli {

static CommandRun setup_version(CLI::App& root) {
  root.add_subcommand("version", "Print the hlx version");
  return [] {
    std::cout << "hlx " << hlx_version() << "\n";  // one source: the C API's version macros
    return 0;
  };
}
HLX_REGISTER_COMMAND(setup_version);

}  // namespace hlx::cli
