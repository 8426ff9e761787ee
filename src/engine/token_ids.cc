#include "engine/token_ids.h"

#include <string>

namespace hlx::engine {

Result<std::vector<int64_t>> parse_token_ids(std::string_view text) {
  std::vector<int64_t> ids;
  size_t index = 0, pos = 0;
  while (true) {
    size_t comma = text.find(',', pos);
    std::string_view piece = text.substr(pos, comma == std::string_view::npos ? std::string_view::npos : comma - pos);
    while (!piece.empty() && piece.front() == ' ') piece.remove_prefix(1);
    while (!piece.empty() && piece.back() == ' ') piece.remove_suffix(1);
    if (piece.empty())
      return make_error(ErrorKind::kInvalidArgument, "token id #", index, " is empty in '", std::string(text), "'");
    int64_t v = 0;
    for (char c : piece) {
      if (c < '0' || c > '9')
        return make_error(ErrorKind::kInvalidArgument, "token id #", index, " '", std::string(piece),
                          "' is not a non-negative decimal integer");
      if (v > (INT64_MAX - (c - '0')) / 10)
        return make_error(ErrorKind::kInvalidArgument, "token id #", index, " '", std::string(piece),
                          "' overflows int64");
      v = v * 10 + (c - '0');
    }
    ids.push_back(v);
    ++index;
    if (comma == std::string_view::npos) break;
    pos = comma + 1;
  }
  return ids;
}

}  // namespace hlx::engine
