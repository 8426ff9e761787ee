#include "tokenizer/unicode.h"

#include <gtest/gtest.h>

#include "tokenizer/pretokenize.h"

namespace hlx::tok {
namespace {

const std::string kFffd = "\xEF\xBF\xBD";

TEST(Unicode, LossyMatchesRustMaximalSubparts) {
  EXPECT_EQ(utf8_lossy("ok"), "ok");
  EXPECT_EQ(utf8_lossy("\xF0\x9F\x98"), kFffd);                  // truncated 4-byte: one U+FFFD
  EXPECT_EQ(utf8_lossy("\xC0\x80"), kFffd + kFffd);              // overlong lead: each byte
  EXPECT_EQ(utf8_lossy("\xED\xA0\x80"), kFffd + kFffd + kFffd);  // surrogate
  EXPECT_EQ(utf8_lossy("a\xE4\xB8z"), "a" + kFffd + "z");
  EXPECT_EQ(utf8_lossy("\xF0\x9F\x98\x80"), "\xF0\x9F\x98\x80");
}

TEST(Unicode, ValidPrefixReportsIncompleteTail) {
  bool incomplete = false;
  EXPECT_EQ(valid_utf8_prefix("ab\xF0\x9F", &incomplete), 2u);
  EXPECT_TRUE(incomplete);
  EXPECT_EQ(valid_utf8_prefix("ab\xFF", &incomplete), 2u);
  EXPECT_FALSE(incomplete);
  EXPECT_FALSE(decode_utf8("a\xFF").ok());
}

TEST(Unicode, ClassesFollowOniguruma) {
  for (char32_t c : {U' ', U'\t', U'\n', U'\r', U'\v', U'\f', char32_t(0x85), char32_t(0xA0), char32_t(0x3000),
                     char32_t(0x2028), char32_t(0x2029), char32_t(0x1680)})
    EXPECT_TRUE(is_whitespace(c)) << uint32_t(c);
  for (char32_t c : {char32_t(0x200B), char32_t(0x1C), U'a', char32_t(0xFEFF)})
    EXPECT_FALSE(is_whitespace(c)) << uint32_t(c);
  EXPECT_TRUE(is_letter(U'é'));
  EXPECT_TRUE(is_letter(char32_t(0x4E2D)));
  EXPECT_FALSE(is_letter(char32_t(0x0301)));  // combining mark is Mn, not L
  EXPECT_TRUE(is_number(U'7'));
  EXPECT_TRUE(is_number(char32_t(0x00BD)));  // ½ is No
  EXPECT_TRUE(is_number(char32_t(0x216B)));  // Ⅻ is Nl
  EXPECT_FALSE(is_number(U'x'));
}

TEST(Unicode, NfcComposes) {
  EXPECT_EQ(nfc("e\xCC\x81").value(), "\xC3\xA9");     // e + U+0301 -> é
  EXPECT_EQ(nfc("\xE2\x84\xAB").value(), "\xC3\x85");  // Angstrom sign -> Å
  EXPECT_EQ(nfc("plain ascii").value(), "plain ascii");
  EXPECT_FALSE(nfc("\xC3").ok());
}

std::vector<std::string> qwen(std::string_view s) {
  auto r = split_qwen(s);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? std::vector<std::string>(r->begin(), r->end()) : std::vector<std::string>{};
}

using V = std::vector<std::string>;

TEST(QwenSplit, HandCheckedExamples) {
  EXPECT_EQ(qwen("Hello world's"), (V{"Hello", " world", "'s"}));
  EXPECT_EQ(qwen("THEY'LL don't"), (V{"THEY", "'LL", " don", "'t"}));
  EXPECT_EQ(qwen("x   y"), (V{"x", "  ", " y"}));          // \s+(?!\S) leaves one space for " y"
  EXPECT_EQ(qwen("x  "), (V{"x", "  "}));                  // trailing run stays whole
  EXPECT_EQ(qwen("a  \n\n b"), (V{"a", "  \n\n", " b"}));  // \s*[\r\n]+ ends at the last LF
  EXPECT_EQ(qwen("123"), (V{"1", "2", "3"}));
  EXPECT_EQ(qwen("a...\n\nb"), (V{"a", "...\n\n", "b"}));
  EXPECT_EQ(qwen(" (x)"), (V{" (", "x", ")"}));
  EXPECT_EQ(qwen("\xE3\x80\x80"
                 "abc"),
            (V{"\xE3\x80\x80"
               "abc"}));  // U+3000 prefixes letters
  EXPECT_EQ(qwen("\tfoo\nbar"), (V{"\tfoo", "\n", "bar"}));
  EXPECT_EQ(qwen("'sa"), (V{"'s", "a"}));  // contraction alternative wins (leftmost-first)
  EXPECT_EQ(qwen(""), V{});
  EXPECT_FALSE(split_qwen("\xFF").ok());
}

TEST(ByteLevel, Gpt2AlphabetRoundTrips) {
  const auto& t = byte_level_chars();
  EXPECT_EQ(t[' '], "\xC4\xA0");   // Ġ
  EXPECT_EQ(t['\n'], "\xC4\x8A");  // Ċ
  EXPECT_EQ(t['a'], "a");
  std::string all;
  for (int b = 0; b < 256; ++b) all += char(b);
  std::string back;
  ASSERT_TRUE(byte_level_decode(byte_level_encode(all), &back));
  EXPECT_EQ(back, all);
  std::string ignored;
  EXPECT_FALSE(byte_level_decode("\xE4\xB8\xAD", &ignored));  // 中 is outside the alphabet
}

}  // namespace
}  // namespace hlx::tok
