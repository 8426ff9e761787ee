// Integer lists given on the command line (`--ids 1,2,3`, `--grid 1,28,28`).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace hlx::cli {

// Decimal integers separated by commas or whitespace, each within [lo, hi]; `flag` names the
// option in errors: kInvalidArgument for a part that is not an integer, kOutOfRange for one
// outside the bounds.
Result<std::vector<int64_t>> parse_int_list(std::string_view text, std::string_view flag, int64_t lo, int64_t hi);

// Token ids: parse_int_list within [0, 2^32 - 1], as the tokenizer's id type.
Result<std::vector<uint32_t>> parse_token_ids(std::string_view text, std::string_view flag);

}  // namespace hlx::cli
