// Character-level scanner for MLIR text. MLIR's grammar is context sensitive (`2x3xf32` inside a
// tensor type, `[0] x [1]` in dot_general, `]x[` in convolution), so the parser pulls exactly the
// piece it expects from a cursor instead of consuming a fixed token stream.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/status.h"

namespace hlx::shlo::text {

class Scanner {
 public:
  Scanner(std::string_view text, std::string_view filename) : text_(text), file_(filename) {}

  // Skips whitespace and `//` comments.
  void skip_ws();
  bool at_end() {
    skip_ws();
    return pos_ >= text_.size();
  }
  // Next non-blank character, or '\0' at the end.
  char peek() {
    skip_ws();
    return pos_ < text_.size() ? text_[pos_] : '\0';
  }
  // Character `ahead` places after the next non-blank one (no skipping in between).
  char peek_at(size_t ahead) {
    skip_ws();
    return pos_ + ahead < text_.size() ? text_[pos_ + ahead] : '\0';
  }
  bool starts_with(std::string_view s) {
    skip_ws();
    return text_.substr(pos_).starts_with(s);
  }

  // Consumes `s` (punctuation such as "->" or "<{") if it comes next.
  bool try_consume(std::string_view s);
  // Consumes `word` only when it is a whole bare identifier (not a prefix of a longer one).
  bool try_keyword(std::string_view word);
  Status expect(std::string_view s);
  Status expect_keyword(std::string_view word);

  // bare-id: [a-zA-Z_][a-zA-Z0-9_$.]*  (empty when none comes next)
  std::string_view bare_id();
  // suffix-id after a sigil (% @ ^ #): [a-zA-Z0-9_$.-]+
  std::string_view suffix_id();
  // "..." with MLIR escapes (\\ \" \n \t \XX); the cursor must be at the opening quote.
  Result<std::string> string_literal();
  // Decimal or 0x-hex integer with optional leading '-'; errors on overflow of int64.
  Result<int64_t> integer();
  // True when an integer or float literal (optionally negative) comes next.
  bool at_number();
  // Returns the raw spelling of the next numeric literal: -?digits[.digits][e[+-]digits] or 0x...
  Result<std::string_view> number_spelling();

  size_t pos() const { return pos_; }
  void set_pos(size_t p) { pos_ = p; }
  std::string_view text() const { return text_; }

  // "file:line:col" of a byte offset.
  std::string where(size_t offset) const;
  // A parse error at the current position: "file:line:col: message".
  template <class... Args>
  Status error(const Args&... args) {
    skip_ws();
    return error_at(pos_, args...);
  }
  template <class... Args>
  Status error_at(size_t offset, const Args&... args) const {
    return make_error(ErrorKind::kParse, where(offset), ": ", args...);
  }
  // Valid StableHLO that hlx does not implement (an element type, a syntax feature): typed
  // kUnsupported so tools can tell it from malformed text.
  template <class... Args>
  Status unsupported(const Args&... args) {
    skip_ws();
    return unsupported_at(pos_, args...);
  }
  template <class... Args>
  Status unsupported_at(size_t offset, const Args&... args) const {
    return make_error(ErrorKind::kUnsupported, where(offset), ": ", args...);
  }
  // A short quote of what comes next, for "expected X, found Y" messages.
  std::string found();

 private:
  std::string_view text_;
  std::string file_;
  size_t pos_ = 0;
};

inline bool is_id_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
inline bool is_digit(char c) { return c >= '0' && c <= '9'; }
inline bool is_id_char(char c) { return is_id_start(c) || is_digit(c) || c == '$' || c == '.'; }

}  // namespace hlx::shlo::text
