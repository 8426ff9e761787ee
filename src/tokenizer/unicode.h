// UTF-8 and Unicode property helpers for the tokenizers (utf8proc underneath).
// All functions are pure and thread-safe; none of them throws or aborts on malformed input.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace hlx::tok {

// One decoded code point and the byte range it came from.
struct CodePoint {
  char32_t cp;
  uint32_t offset;  // byte offset in the source string
  uint32_t length;  // bytes (1..4)
};

// Strict decode: kInvalidArgument naming the byte offset on the first ill-formed sequence.
Result<std::vector<CodePoint>> decode_utf8(std::string_view text);

// True when `text` is well-formed UTF-8 (no surrogates, no overlongs, <= U+10FFFF).
bool is_valid_utf8(std::string_view text);

// Length of the longest prefix of `bytes` that is complete, well-formed UTF-8, plus whether the
// remainder is only a *truncated* (still completable) sequence rather than an invalid one.
size_t valid_utf8_prefix(std::string_view bytes, bool* tail_is_incomplete);

// Rust's String::from_utf8_lossy: each maximal ill-formed subpart becomes one U+FFFD.
std::string utf8_lossy(std::string_view bytes);

void append_utf8(std::string& out, char32_t cp);

// Unicode classes as Oniguruma (the regex engine behind Hugging Face's Split) defines them.
bool is_letter(char32_t cp);      // \p{L}: Lu Ll Lt Lm Lo
bool is_number(char32_t cp);      // \p{N}: Nd Nl No
bool is_whitespace(char32_t cp);  // \s: \t \n \v \f \r U+0085 plus Zs Zl Zp

// Canonical composition (NFC). kInvalidArgument when `text` is not valid UTF-8.
Result<std::string> nfc(std::string_view text);

}  // namespace hlx::tok
