#include "tokenizer/pretokenize.h"

#include <unordered_map>

#include "tokenizer/unicode.h"

namespace hlx::tok {
namespace {

enum Cls : uint8_t { kLetter, kNumber, kSpace, kOther };

Cls classify(char32_t c) {
  if (is_letter(c)) return kLetter;
  if (is_number(c)) return kNumber;
  if (is_whitespace(c)) return kSpace;
  return kOther;
}

bool is_crlf(char32_t c) { return c == '\r' || c == '\n'; }

// ASCII-case-insensitive match of a contraction suffix; U+017F (long s) case-folds to 's' in
// Oniguruma, so it matches too.
bool ci_eq(char32_t c, char lower) {
  if (c == char32_t(lower) || c == char32_t(lower - 'a' + 'A')) return true;
  return lower == 's' && c == 0x17F;
}

}  // namespace

Result<std::vector<std::string_view>> split_qwen(std::string_view text) {
  HLX_ASSIGN_OR_RETURN(std::vector<CodePoint> cps, decode_utf8(text));
  const size_t n = cps.size();
  std::vector<Cls> cls(n);
  for (size_t i = 0; i < n; ++i) cls[i] = classify(cps[i].cp);
  auto byte_at = [&](size_t i) { return i < n ? size_t(cps[i].offset) : text.size(); };

  std::vector<std::string_view> pieces;
  size_t i = 0;
  while (i < n) {
    size_t end = 0;  // exclusive code point index of the match; 0 = no match yet
    // 1. (?i:'s|'t|'re|'ve|'m|'ll|'d)
    if (cps[i].cp == '\'' && i + 1 < n) {
      char32_t a = cps[i + 1].cp;
      char32_t b = i + 2 < n ? cps[i + 2].cp : 0;
      if (ci_eq(a, 's') || ci_eq(a, 't') || ci_eq(a, 'm') || ci_eq(a, 'd'))
        end = i + 2;
      else if ((ci_eq(a, 'r') && ci_eq(b, 'e')) || (ci_eq(a, 'v') && ci_eq(b, 'e')) || (ci_eq(a, 'l') && ci_eq(b, 'l')))
        end = i + 3;
    }
    // 2. [^\r\n\p{L}\p{N}]?\p{L}+
    if (!end) {
      size_t j = i;
      if (cls[i] != kLetter && cls[i] != kNumber && !is_crlf(cps[i].cp) && i + 1 < n && cls[i + 1] == kLetter)
        j = i + 1;
      if (cls[j] == kLetter) {
        while (j < n && cls[j] == kLetter) ++j;
        end = j;
      }
    }
    // 3. \p{N}
    if (!end && cls[i] == kNumber) end = i + 1;
    // 4. ' ?[^\s\p{L}\p{N}]+[\r\n]*'
    if (!end) {
      size_t j = i;
      if (cps[i].cp == ' ' && i + 1 < n && cls[i + 1] == kOther) j = i + 1;
      if (cls[j] == kOther) {
        while (j < n && cls[j] == kOther) ++j;
        while (j < n && is_crlf(cps[j].cp)) ++j;
        end = j;
      }
    }
    if (!end && cls[i] == kSpace) {
      size_t run = i;
      while (run < n && cls[run] == kSpace) ++run;
      // 5. \s*[\r\n]+ : backtracking stops at the last CR/LF of the whitespace run.
      for (size_t k = run; k > i; --k)
        if (is_crlf(cps[k - 1].cp)) {
          end = k;
          break;
        }
      // 6. \s+(?!\S) : the whole run at end of text, else all but its last character.
      if (!end) {
        if (run == n)
          end = run;
        else if (run - i >= 2)
          end = run - 1;
      }
      // 7. \s+
      if (!end) end = run;
    }
    if (!end) end = i + 1;  // unreachable: every class is covered above; keeps coverage total
    pieces.push_back(text.substr(byte_at(i), byte_at(end) - byte_at(i)));
    i = end;
  }
  return pieces;
}

std::vector<std::string_view> split_merged_with_previous(std::string_view text, std::string_view delimiter) {
  std::vector<std::string_view> out;
  if (delimiter.empty()) {
    if (!text.empty()) out.push_back(text);
    return out;
  }
  size_t start = 0;
  while (start < text.size()) {
    size_t pos = text.find(delimiter, start);
    if (pos == std::string_view::npos) {
      out.push_back(text.substr(start));
      break;
    }
    out.push_back(text.substr(start, pos + delimiter.size() - start));
    start = pos + delimiter.size();
  }
  return out;
}

const std::array<std::string, 256>& byte_level_chars() {
  // GPT-2's bytes_to_unicode: printable Latin-1 bytes map to themselves, the rest to U+0100+.
  static const std::array<std::string, 256> table = [] {
    std::array<std::string, 256> t;
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      bool keep = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      append_utf8(t[b], keep ? char32_t(b) : next++);
    }
    return t;
  }();
  return table;
}

std::string byte_level_encode(std::string_view text) {
  const auto& t = byte_level_chars();
  std::string out;
  out.reserve(text.size() * 2);
  for (unsigned char c : text) out += t[c];
  return out;
}

bool byte_level_decode(std::string_view token, std::string* bytes) {
  static const std::unordered_map<char32_t, uint8_t> inverse = [] {
    std::unordered_map<char32_t, uint8_t> m;
    const auto& t = byte_level_chars();
    for (int b = 0; b < 256; ++b) {
      auto cps = decode_utf8(t[b]);
      m[cps.value()[0].cp] = uint8_t(b);
    }
    return m;
  }();
  auto cps = decode_utf8(token);
  if (!cps.ok()) return false;
  std::string out;
  out.reserve(cps->size());
  for (const CodePoint& cp : *cps) {
    auto it = inverse.find(cp.cp);
    if (it == inverse.end()) return false;
    out += char(it->second);
  }
  *bytes += out;
  return true;
}

}  // namespace hlx::tok
