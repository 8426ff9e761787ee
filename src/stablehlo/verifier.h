// Checks a module against the StableHLO spec's constraints for every op hlx handles. Each failure
// is ErrorKind::kVerify and cites the spec label, e.g. "dot_general_c1: ... (function @main, op #3)".
#pragma once

#include "core/status.h"
#include "stablehlo/ir.h"

namespace hlx::shlo {

Status verify_module(const Module& module);

}  // namespace hlx::shlo
