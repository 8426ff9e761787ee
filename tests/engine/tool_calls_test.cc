// Tool calls: the <tool_call> parser (whole text and streamed in every split, which must agree),
// malformed blocks kept as text, and the forced-call grammar (what it accepts and refuses, on
// bytes, checked against nlohmann::json for the outputs).
#include "engine/tool_calls.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "engine/json_constraint.h"

namespace hlx::engine {
namespace {

const std::vector<std::string> kNames = {"get_weather", "add"};

struct Parsed {
  std::string content;
  std::vector<ToolCall> calls;
};

Parsed parse(std::string_view text) {
  Parsed p;
  parse_tool_calls(text, kNames, p.content, p.calls);
  return p;
}

// The same text fed in pieces of `step` bytes.
Parsed parse_streamed(std::string_view text, size_t step) {
  ToolCallParser parser(kNames);
  Parsed p;
  auto take = [&](std::vector<ToolCallParser::Piece> pieces) {
    for (auto& piece : pieces) {
      if (piece.call)
        p.calls.push_back(*piece.call);
      else
        p.content += piece.content;
    }
  };
  for (size_t i = 0; i < text.size(); i += step) take(parser.feed(text.substr(i, step)));
  take(parser.finish());
  return p;
}

void expect_same_streamed(std::string_view text) {
  const Parsed whole = parse(text);
  for (size_t step = 1; step <= text.size(); ++step) {
    const Parsed s = parse_streamed(text, step);
    ASSERT_EQ(s.content, whole.content) << "step " << step << " of " << text;
    ASSERT_EQ(s.calls.size(), whole.calls.size()) << "step " << step;
    for (size_t i = 0; i < s.calls.size(); ++i) {
      EXPECT_EQ(s.calls[i].name, whole.calls[i].name);
      EXPECT_EQ(s.calls[i].arguments, whole.calls[i].arguments);
    }
  }
}

TEST(ToolCalls, ParsesHermesBlocks) {
  const std::string text =
      "Let me check.\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 2}}\n"
      "</tool_call>\n<tool_call>\n{\"name\": \"add\", \"arguments\": {}}\n</tool_call>";
  const Parsed p = parse(text);
  EXPECT_EQ(p.content, "Let me check.");
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.calls[0].name, "get_weather");
  EXPECT_EQ(p.calls[0].arguments, R"({"city": "Paris", "days": 2})");  // as written
  EXPECT_EQ(p.calls[1].name, "add");
  EXPECT_EQ(p.calls[1].arguments, "{}");
  expect_same_streamed(text);
  // Valid JSON that no double holds (the forced grammar allows 3 exponent digits), keys in
  // either order, nested objects and escapes.
  const Parsed big = parse(
      "<tool_call>{\"arguments\": {\"v\": [-1e999, 0.5E+3], \"s\": \"a\\\"}\", \"o\": {}}, \"name\": \"add\"}"
      "</tool_call>");
  ASSERT_EQ(big.calls.size(), 1u) << big.content;
  EXPECT_EQ(big.calls[0].arguments, R"({"v": [-1e999, 0.5E+3], "s": "a\"}", "o": {}})");
  EXPECT_EQ(big.content, "");
}

TEST(ToolCalls, PlainTextAndNearTags) {
  const std::pair<const char*, const char*> cases[] = {
      {"", ""},
      {"  hello \n", "hello"},
      {"a < b <tool", "a < b <tool"},
      {"x <tool_cal y", "x <tool_cal y"},
      {"<tool_call", "<tool_call"},
      {"</tool_call> after", "</tool_call> after"},
  };
  for (const auto& [text, content] : cases) {
    const Parsed p = parse(text);
    EXPECT_EQ(p.content, content) << text;
    EXPECT_TRUE(p.calls.empty()) << text;
    expect_same_streamed(text);
  }
}

TEST(ToolCalls, MalformedBlocksStayText) {
  const char* bad[] = {
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": }\n</tool_call>",  // bad JSON
      "<tool_call>\n{\"name\": \"nope\", \"arguments\": {}}\n</tool_call>",                  // unknown function
      "<tool_call>\n{\"name\": \"add\", \"arguments\": \"{}\"}\n</tool_call>",               // arguments a string
      "<tool_call>\n{\"name\": \"add\"}\n</tool_call>",                                      // no arguments
      "<tool_call>\n{\"name\": \"add\", \"arguments\": {}, \"x\": 1}\n</tool_call>",         // extra key
      "<tool_call>\n[1, 2]\n</tool_call>",                                                   // not an object
      "<tool_call>\n{\"name\": \"add\", \"arguments\": {}}",                                 // never closed
      "<tool_call>{\"name\": \"add\", \"arguments\": {}} {}</tool_call>",                    // two values
      "<tool_call>{\"name\": \"add\", \"name\": \"add\", \"arguments\": {}}</tool_call>",    // repeated key
      "<tool_call>{\"name\": \"add\", \"arguments\": {\"a\": 01}}</tool_call>",              // bad number
      "<tool_call>{\"name\": \"add\", \"arguments\": {\"a\": \"x\ny\"}}</tool_call>",        // raw newline in string
  };
  for (const char* text : bad) {
    const Parsed p = parse(text);
    EXPECT_TRUE(p.calls.empty()) << text;
    EXPECT_EQ(p.content, text);
    expect_same_streamed(text);
  }
  // A good call next to a bad one: the good one is a call, the bad one text.
  const std::string mixed =
      "<tool_call>{\"name\": \"add\", \"arguments\": {\"a\": 1}}</tool_call> <tool_call>oops</tool_call>";
  const Parsed p = parse(mixed);
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].arguments, R"({"a": 1})");
  EXPECT_EQ(p.content, "<tool_call>oops</tool_call>");
  expect_same_streamed(mixed);
}

bool accepts(const std::shared_ptr<const JsonGrammar>& g, std::string_view text) {
  JsonConstraint c(g, TokenTrie::from_bytes({"x"}));
  return c.feed(text) && c.done();
}

TEST(ToolCalls, ForcedGrammar) {
  const std::vector<ToolFunction> fns = {
      {"get_weather",
       R"({"type":"object","properties":{"city":{"type":"string"},"unit":{"enum":["c","f"]}},"required":["city"]})"},
      {"add", R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"}},"required":["a","b"]})"},
      {"now", ""}};
  auto g = tool_call_grammar(fns);
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  EXPECT_TRUE(accepts(*g, R"({"name":"get_weather","arguments":{"city":"Oslo","unit":"c"}})"));
  EXPECT_TRUE(accepts(*g, R"({"name":"add","arguments":{"a":1,"b":-2}})"));
  EXPECT_TRUE(accepts(*g, R"({"name":"now","arguments":{"anything":[1]}})"));
  // The name decides the arguments' schema.
  EXPECT_FALSE(accepts(*g, R"({"name":"add","arguments":{"city":"Oslo"}})"));
  EXPECT_FALSE(accepts(*g, R"({"name":"get_weather","arguments":{"a":1,"b":2}})"));
  EXPECT_FALSE(accepts(*g, R"({"name":"add","arguments":{"a":1}})"));
  EXPECT_FALSE(accepts(*g, R"({"name":"ad","arguments":{"a":1,"b":2}})"));
  EXPECT_FALSE(accepts(*g, R"({"name":"get","arguments":{}})"));
  EXPECT_FALSE(accepts(*g, R"({"arguments":{},"name":"now"})"));
  // One function: a plain object with a const name.
  auto one = tool_call_grammar(std::span(fns).subspan(1, 1));
  ASSERT_TRUE(one.ok());
  EXPECT_TRUE(accepts(*one, R"({"name":"add","arguments":{"a":0,"b":0}})"));
  EXPECT_FALSE(accepts(*one, R"({"name":"now","arguments":{}})"));
  // Errors name the function's parameters.
  const std::vector<ToolFunction> bad = {{"f", R"({"type":"integer","minimum":0})"}};
  auto e = tool_call_grammar(bad);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().kind(), ErrorKind::kUnsupported);
  EXPECT_NE(e.status().message().find("tools[0].function.parameters"), std::string::npos) << e.status().message();
  EXPECT_NE(e.status().message().find("minimum"), std::string::npos);
}

}  // namespace
}  // namespace hlx::engine
