// Each `hlx <command>` lives in its own file and registers itself here, so adding a command never
// touches main.cc. The setup function declares the subcommand's options on `root` and returns the
// function to run when that subcommand is chosen (its return value is the exit code).
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

#include "core/status.h"

namespace hlx::cli {

using CommandRun = std::function<int()>;
using CommandSetup = CommandRun (*)(CLI::App& root);

bool register_command(CommandSetup setup);

// Prints "hlx: <kind>: <message>" to stderr and returns the exit code for a failed status (1).
int report(const Status& status);

}  // namespace hlx::cli

// At namespace scope in a command's .cc: HLX_REGISTER_COMMAND(setup_exec);
#define HLX_REGISTER_COMMAND(fn) \
  static const bool HLX_CONCAT(hlx_registered_, __LINE__) = ::hlx::cli::register_command(fn)
