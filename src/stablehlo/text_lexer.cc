#include "stablehlo/text_lexer.h"

namespace hlx::shlo::text {

void Scanner::skip_ws() {
  while (pos_ < text_.size()) {
    char c = text_[pos_];
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      ++pos_;
    } else if (c == '/' && pos_ + 1 < text_.size() && text_[pos_ + 1] == '/') {
      while (pos_ < text_.size() && text_[pos_] != '\n') ++pos_;
    } else {
      break;
    }
  }
}

bool Scanner::try_consume(std::string_view s) {
  skip_ws();
  if (!text_.substr(pos_).starts_with(s)) return false;
  pos_ += s.size();
  return true;
}

bool Scanner::try_keyword(std::string_view word) {
  skip_ws();
  if (!text_.substr(pos_).starts_with(word)) return false;
  size_t end = pos_ + word.size();
  if (end < text_.size() && is_id_char(text_[end])) return false;
  pos_ = end;
  return true;
}

Status Scanner::expect(std::string_view s) {
  if (try_consume(s)) return ok_status();
  return error("expected '", s, "', found ", found());
}

Status Scanner::expect_keyword(std::string_view word) {
  if (try_keyword(word)) return ok_status();
  return error("expected '", word, "', found ", found());
}

std::string_view Scanner::bare_id() {
  skip_ws();
  size_t start = pos_;
  if (pos_ >= text_.size() || !is_id_start(text_[pos_])) return {};
  while (pos_ < text_.size() && is_id_char(text_[pos_])) ++pos_;
  return text_.substr(start, pos_ - start);
}

std::string_view Scanner::suffix_id() {
  size_t start = pos_;
  while (pos_ < text_.size() && (is_id_char(text_[pos_]) || text_[pos_] == '-')) ++pos_;
  return text_.substr(start, pos_ - start);
}

static int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

Result<std::string> Scanner::string_literal() {
  skip_ws();
  size_t start = pos_;
  if (pos_ >= text_.size() || text_[pos_] != '"') return error("expected string literal, found ", found());
  ++pos_;
  std::string out;
  while (true) {
    if (pos_ >= text_.size() || text_[pos_] == '\n') return error_at(start, "unterminated string literal");
    char c = text_[pos_++];
    if (c == '"') break;
    if (c != '\\') {
      out.push_back(c);
      continue;
    }
    if (pos_ >= text_.size()) return error_at(start, "unterminated string literal");
    char e = text_[pos_++];
    switch (e) {
      case '\\':
        out.push_back('\\');
        break;
      case '"':
        out.push_back('"');
        break;
      case 'n':
        out.push_back('\n');
        break;
      case 't':
        out.push_back('\t');
        break;
      default: {
        int hi = hex_value(e), lo = pos_ < text_.size() ? hex_value(text_[pos_]) : -1;
        if (hi < 0 || lo < 0) return error_at(pos_ - 2, "invalid escape sequence in string literal");
        ++pos_;
        out.push_back(char(hi * 16 + lo));
      }
    }
  }
  return out;
}

bool Scanner::at_number() {
  skip_ws();
  size_t p = pos_;
  if (p < text_.size() && text_[p] == '-') ++p;
  return p < text_.size() && is_digit(text_[p]);
}

Result<std::string_view> Scanner::number_spelling() {
  skip_ws();
  size_t start = pos_, p = pos_;
  if (p < text_.size() && text_[p] == '-') ++p;
  if (p >= text_.size() || !is_digit(text_[p])) return error("expected number, found ", found());
  if (text_[p] == '0' && p + 1 < text_.size() && text_[p + 1] == 'x') {
    p += 2;
    size_t digits = p;
    while (p < text_.size() && hex_value(text_[p]) >= 0) ++p;
    if (p == digits) return error_at(start, "expected hexadecimal digits after '0x'");
  } else {
    while (p < text_.size() && is_digit(text_[p])) ++p;
    if (p < text_.size() && text_[p] == '.') {
      ++p;
      while (p < text_.size() && is_digit(text_[p])) ++p;
      if (p < text_.size() && (text_[p] == 'e' || text_[p] == 'E')) {
        size_t q = p + 1;
        if (q < text_.size() && (text_[q] == '+' || text_[q] == '-')) ++q;
        if (q < text_.size() && is_digit(text_[q])) {
          p = q;
          while (p < text_.size() && is_digit(text_[p])) ++p;
        }
      }
    }
  }
  pos_ = p;
  return text_.substr(start, p - start);
}

Result<int64_t> Scanner::integer() {
  skip_ws();
  size_t start = pos_;
  HLX_ASSIGN_OR_RETURN(std::string_view s, number_spelling());
  bool neg = s.starts_with('-');
  std::string_view digits = neg ? s.substr(1) : s;
  if (digits.find_first_of(".eE") != std::string_view::npos && !digits.starts_with("0x"))
    return error_at(start, "expected integer, found '", s, "'");
  uint64_t v = 0;
  const uint64_t limit = neg ? (uint64_t(1) << 63) : uint64_t(INT64_MAX);
  if (digits.starts_with("0x")) {
    for (char c : digits.substr(2)) {
      if (v > (limit >> 4)) return error_at(start, "integer '", s, "' is out of range for i64");
      v = v * 16 + uint64_t(hex_value(c));
    }
  } else {
    for (char c : digits) {
      uint64_t d = uint64_t(c - '0');
      if (v > (limit - d) / 10) return error_at(start, "integer '", s, "' is out of range for i64");
      v = v * 10 + d;
    }
  }
  if (v > limit) return error_at(start, "integer '", s, "' is out of range for i64");
  return neg ? int64_t(0 - v) : int64_t(v);
}

std::string Scanner::where(size_t offset) const {
  size_t line = 1, col = 1;
  for (size_t i = 0; i < offset && i < text_.size(); ++i) {
    if (text_[i] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
  return str_cat(file_, ":", line, ":", col);
}

std::string Scanner::found() {
  skip_ws();
  if (pos_ >= text_.size()) return "end of input";
  size_t n = 0;
  while (pos_ + n < text_.size() && n < 16 && text_[pos_ + n] != '\n') ++n;
  std::string s(text_.substr(pos_, n));
  for (char& c : s)
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) c = '?';
  return "'" + s + "'";
}

}  // namespace hlx::shlo::text
