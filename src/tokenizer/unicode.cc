#include "tokenizer/unicode.h"

#include <utf8proc.h>

#include <cstdlib>

namespace hlx::tok {
namespace {

// Decodes one well-formed sequence at `p`; returns its length or 0 when ill-formed, and in
// `*maximal` the length of the maximal ill-formed subpart (>= 1) used by the lossy conversion.
// `*truncated` reports that the bytes so far are a valid prefix cut short by the end of input.
size_t decode_one(const unsigned char* p, size_t n, char32_t* cp, size_t* maximal, bool* truncated) {
  *truncated = false;
  *maximal = 1;
  unsigned char b0 = p[0];
  if (b0 < 0x80) {
    *cp = b0;
    return 1;
  }
  size_t need;
  char32_t v;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2;
    v = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    v = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;  // no overlongs
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    v = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;  // <= U+10FFFF
  } else {
    return 0;
  }
  for (size_t i = 1; i < need; ++i) {
    if (i >= n) {
      *truncated = true;
      *maximal = i;
      return 0;
    }
    unsigned char b = p[i];
    unsigned char l = i == 1 ? lo : 0x80, h = i == 1 ? hi : 0xBF;
    if (b < l || b > h) {
      *maximal = i;
      return 0;
    }
    v = (v << 6) | (b & 0x3F);
  }
  *cp = v;
  return need;
}

}  // namespace

Result<std::vector<CodePoint>> decode_utf8(std::string_view text) {
  std::vector<CodePoint> out;
  out.reserve(text.size());
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  size_t i = 0;
  while (i < text.size()) {
    char32_t cp;
    size_t maximal;
    bool truncated;
    size_t len = decode_one(p + i, text.size() - i, &cp, &maximal, &truncated);
    if (len == 0)
      return make_error(ErrorKind::kInvalidArgument, "invalid UTF-8 at byte offset ", i, " (byte 0x", std::hex,
                        int(p[i]), ")");
    out.push_back({cp, uint32_t(i), uint32_t(len)});
    i += len;
  }
  return out;
}

bool is_valid_utf8(std::string_view text) {
  bool incomplete;
  return valid_utf8_prefix(text, &incomplete) == text.size();
}

size_t valid_utf8_prefix(std::string_view bytes, bool* tail_is_incomplete) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  size_t i = 0;
  *tail_is_incomplete = false;
  while (i < bytes.size()) {
    char32_t cp;
    size_t maximal;
    bool truncated;
    size_t len = decode_one(p + i, bytes.size() - i, &cp, &maximal, &truncated);
    if (len == 0) {
      *tail_is_incomplete = truncated;
      return i;
    }
    i += len;
  }
  return i;
}

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  size_t i = 0;
  while (i < bytes.size()) {
    char32_t cp;
    size_t maximal;
    bool truncated;
    size_t len = decode_one(p + i, bytes.size() - i, &cp, &maximal, &truncated);
    if (len == 0) {
      out += "\xEF\xBF\xBD";
      i += maximal;
    } else {
      out.append(bytes.substr(i, len));
      i += len;
    }
  }
  return out;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

bool is_letter(char32_t cp) {
  switch (utf8proc_category(utf8proc_int32_t(cp))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
      return true;
    default:
      return false;
  }
}

bool is_number(char32_t cp) {
  switch (utf8proc_category(utf8proc_int32_t(cp))) {
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_NO:
      return true;
    default:
      return false;
  }
}

bool is_whitespace(char32_t cp) {
  if ((cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85) return true;
  if (cp < 0x80) return false;
  switch (utf8proc_category(utf8proc_int32_t(cp))) {
    case UTF8PROC_CATEGORY_ZS:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
      return true;
    default:
      return false;
  }
}

Result<std::string> nfc(std::string_view text) {
  // ASCII is already in NFC; skipping utf8proc here keeps plain text fast.
  bool ascii = true;
  for (unsigned char c : text)
    if (c >= 0x80) {
      ascii = false;
      break;
    }
  if (ascii) return std::string(text);
  if (!is_valid_utf8(text)) return make_error(ErrorKind::kInvalidArgument, "NFC: input is not valid UTF-8");
  utf8proc_uint8_t* out = nullptr;
  utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()), utf8proc_ssize_t(text.size()), &out,
                   utf8proc_option_t(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (n < 0) {
    std::free(out);
    return make_error(ErrorKind::kInvalidArgument, "NFC failed: ", utf8proc_errmsg(n));
  }
  std::string result(reinterpret_cast<const char*>(out), size_t(n));
  std::free(out);
  return result;
}

}  // namespace hlx::tok
