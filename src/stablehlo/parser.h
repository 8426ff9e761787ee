// Reads StableHLO modules in MLIR text form: the pretty syntax hlx prints, the pretty syntax
// stablehlo-opt prints, and the generic form ("stablehlo.gather"(...) <{...}> : (...) -> ...).
#pragma once

#include <string>
#include <string_view>

#include "core/status.h"
#include "stablehlo/ir.h"

namespace hlx::shlo {

// Errors are ErrorKind::kParse with "file:line:col: message" naming what was expected and found.
Result<Module> parse_module(std::string_view text, std::string_view filename = "<input>");
Result<Module> parse_module_file(const std::string& path);

}  // namespace hlx::shlo
