#include <iostream>
#include <vector>

#include "cli/command.h"

namespace hlx::cli {

static std::vector<CommandSetup>& registry() {
  static std::vector<CommandSetup> commands;
  return commands;
}

bool register_command(CommandSetup setup) {
  registry().push_back(setup);
  return true;
}

int report(const Status& status) {
  if (status.ok()) return 0;
  std::cerr << "hlx: " << status.to_string() << "\n";
  return 1;
}

}  // namespace hlx::cli

int main(int argc, char** argv) {
  CLI::App app{"hlx: StableHLO inference engine for language and vision-language models"};
  app.require_subcommand(1);
  std::vector<std::pair<CLI::App*, hlx::cli::CommandRun>> commands;
  for (hlx::cli::CommandSetup setup : hlx::cli::registry()) {
    size_t before = app.get_subcommands({}).size();
    hlx::cli::CommandRun run = setup(app);
    commands.emplace_back(app.get_subcommands({})[before], std::move(run));
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  for (auto& [sub, run] : commands)
    if (sub->parsed()) return run();
  return 1;
}
