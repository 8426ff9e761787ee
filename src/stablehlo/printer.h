// Writes a module as MLIR text in the pretty form the official StableHLO tools accept.
// Canonical: values are renumbered (%0, %1, %arg0, ...), so print(parse(print(m))) == print(m).
#pragma once

#include <string>

#include "stablehlo/ir.h"

namespace hlx::shlo {

std::string print_module(const Module& module);
std::string print_type(const TensorType& type);

}  // namespace hlx::shlo
