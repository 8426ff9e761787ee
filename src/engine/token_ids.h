// Token id lists as front ends receive them ("1,2,3" on a command line or in a query).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace hlx::engine {

// Comma-separated decimal ids; spaces around ids are allowed. kInvalidArgument naming the
// offending piece and its index for anything else (empty pieces, signs, overflow). Range checks
// against a vocabulary belong to admission.
Result<std::vector<int64_t>> parse_token_ids(std::string_view text);

}  // namespace hlx::engine
