#include "cli/int_list.h"

#include <string>

namespace hlx::cli {

Result<std::vector<int64_t>> parse_int_list(std::string_view text, std::string_view flag, int64_t lo, int64_t hi) {
  std::vector<int64_t> out;
  size_t i = 0;
  while (i < text.size()) {
    size_t j = text.find_first_of(", \t\n", i);
    if (j == std::string_view::npos) j = text.size();
    const std::string_view part = text.substr(i, j - i);
    i = j + 1;
    if (part.empty()) continue;
    const bool negative = part[0] == '-';
    const std::string_view digits = part.substr(negative ? 1 : 0);
    if (digits.empty() || digits.find_first_not_of("0123456789") != std::string_view::npos)
      return make_error(ErrorKind::kInvalidArgument, flag, ": \"", part, "\" is not an integer");
    // 18 digits always fit an int64; a longer number is outside any bounds given here.
    int64_t value = 0;
    for (char c : digits.substr(0, 18)) value = value * 10 + (c - '0');
    if (negative) value = -value;
    if (digits.size() > 18 || value < lo || value > hi)
      return make_error(ErrorKind::kOutOfRange, flag, ": ", part, " is outside [", lo, ", ", hi, "]");
    out.push_back(value);
  }
  return out;
}

Result<std::vector<uint32_t>> parse_token_ids(std::string_view text, std::string_view flag) {
  HLX_ASSIGN_OR_RETURN(std::vector<int64_t> v, parse_int_list(text, flag, 0, 0xFFFFFFFFll));
  return std::vector<uint32_t>(v.begin(), v.end());
}

}  // namespace hlx::cli
