#include "tokenizer/bpe.h"

#include <gtest/gtest.h>

#include <cstdio>

namespace hlx::tok {
namespace {

TokenMap small_vocab() { return {{"a", 0}, {"b", 1}, {"c", 2}, {"ab", 3}, {"bc", 4}, {"abc", 5}, {"<unk>", 6}}; }

std::vector<uint32_t> run(const Bpe& bpe, std::string_view word) {
  std::vector<uint32_t> out;
  Status s = bpe.tokenize(word, &out);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return out;
}

TEST(Bpe, MergesLowestRankFirst) {
  auto bpe = Bpe::create(small_vocab(), {{"b", "c"}, {"a", "b"}, {"a", "bc"}}, {});
  ASSERT_TRUE(bpe.ok()) << bpe.status().to_string();
  EXPECT_EQ(run(**bpe, "abc"), (std::vector<uint32_t>{5}));  // b+c (rank 0), then a+bc
  EXPECT_EQ(run(**bpe, "abab"), (std::vector<uint32_t>{3, 3}));
  EXPECT_EQ(run(**bpe, "abc"), (std::vector<uint32_t>{5}));  // from the cache
  // With a+b ranked first, "abc" stops at ab + c: there is no (ab, c) merge.
  auto other = Bpe::create(small_vocab(), {{"a", "b"}, {"b", "c"}, {"a", "bc"}}, {});
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(run(**other, "abc"), (std::vector<uint32_t>{3, 2}));
}

TEST(Bpe, LeftmostOnEqualRank) {
  TokenMap v{{"a", 0}, {"aa", 1}};
  auto bpe = Bpe::create(v, {{"a", "a"}}, {});
  ASSERT_TRUE(bpe.ok());
  EXPECT_EQ(run(**bpe, "aaa"), (std::vector<uint32_t>{1, 0}));
}

TEST(Bpe, ByteFallbackAndUnknown) {
  TokenMap v{{"a", 0}, {"<unk>", 1}};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    v.emplace(name, uint32_t(2 + b));
  }
  BpeOptions fb;
  fb.byte_fallback = true;
  fb.unk_token = "<unk>";
  auto bpe = Bpe::create(v, {}, fb);
  ASSERT_TRUE(bpe.ok());
  // é = C3 A9
  EXPECT_EQ(run(**bpe, "a\xC3\xA9"), (std::vector<uint32_t>{0, 2 + 0xC3, 2 + 0xA9}));

  BpeOptions unk;
  unk.unk_token = "<unk>";
  unk.fuse_unk = true;
  auto fused = Bpe::create(v, {}, unk);
  ASSERT_TRUE(fused.ok());
  EXPECT_EQ(run(**fused, "xya"), (std::vector<uint32_t>{1, 0}));

  auto none = Bpe::create(v, {}, {});
  ASSERT_TRUE(none.ok());
  std::vector<uint32_t> out;
  Status s = (*none)->tokenize("x", &out);
  EXPECT_EQ(s.kind(), ErrorKind::kInvalidArgument);
  EXPECT_NE(s.message().find("\"x\""), std::string::npos) << s.message();
}

TEST(Bpe, RejectsMergesOutsideVocabulary) {
  auto bad = Bpe::create(small_vocab(), {{"a", "zz"}}, {});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().kind(), ErrorKind::kParse);
  EXPECT_NE(bad.status().message().find("zz"), std::string::npos);
  auto bad_unk = Bpe::create(small_vocab(), {}, BpeOptions{std::string("<nope>"), false, false, false});
  EXPECT_FALSE(bad_unk.ok());
}

TEST(Bpe, LongWordStaysFast) {
  // Gemma encodes a whole input as one word; the heap-based merge must not rescan quadratically.
  TokenMap v{{"a", 0}, {"aa", 1}, {"aaaa", 2}};
  auto bpe = Bpe::create(v, {{"a", "a"}, {"aa", "aa"}}, {});
  ASSERT_TRUE(bpe.ok());
  std::string word(200000, 'a');
  auto ids = run(**bpe, word);
  EXPECT_EQ(ids.size(), 50000u);
  for (uint32_t id : ids) ASSERT_EQ(id, 2u);
}

}  // namespace
}  // namespace hlx::tok
