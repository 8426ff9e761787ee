#include "server/openai.h"

#include "engine/json_constraint.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <random>

#include "engine/json_constraint.h"
#include "engine/tool_calls.h"
#include "tokenizer/template.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace hlx::server {
namespace {

// The field `key` of `obj`, or nullptr when absent or JSON null.
const json* field(const json& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

std::string type_name(const json& v) {
  if (v.is_number_integer() || v.is_number_unsigned()) return "integer";
  if (v.is_number_float()) return "number";
  return v.type_name();
}

ApiError wrong_type(const std::string& param, const char* expected, const json& got) {
  return bad_request("'" + param + "' must be " + expected + ", got " + type_name(got), param, "invalid_type");
}

ApiError out_of_range(const std::string& param, const std::string& value, const char* range) {
  return bad_request("'" + param + "' is " + value + "; allowed: " + range, param, "invalid_value");
}

std::string num_text(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// A number field within [lo, hi] (inclusive flags), stored to `out` when present.
ApiError number(const json& body, const char* key, float& out, double lo, double hi, bool lo_open, const char* range) {
  const json* v = field(body, key);
  if (!v) return {};
  if (!v->is_number()) return wrong_type(key, "a number", *v);
  double d = v->get<double>();
  if (!std::isfinite(d) || d < lo || d > hi || (lo_open && d == lo)) return out_of_range(key, num_text(d), range);
  out = float(d);
  return {};
}

ApiError integer(const json& body, const char* key, std::optional<int64_t>& out) {
  const json* v = field(body, key);
  if (!v) return {};
  if (v->is_number_float()) {  // 16.0 is an integer; 16.5 is not
    double d = v->get<double>();
    if (!std::isfinite(d) || d != std::floor(d) || std::fabs(d) > 9.0e15) return wrong_type(key, "an integer", *v);
    out = int64_t(d);
    return {};
  }
  if (v->is_number_unsigned()) {
    uint64_t u = v->get<uint64_t>();
    if (u > uint64_t(INT64_MAX)) return out_of_range(key, std::to_string(u), "an integer below 2^63");
    out = int64_t(u);
    return {};
  }
  if (!v->is_number_integer()) return wrong_type(key, "an integer", *v);
  out = v->get<int64_t>();
  return {};
}

constexpr int64_t kMaxTokensLimit = 2147483647;

ApiError boolean(const json& body, const char* key, bool& out) {
  const json* v = field(body, key);
  if (!v) return {};
  if (!v->is_boolean()) return wrong_type(key, "a boolean", *v);
  out = v->get<bool>();
  return {};
}

// logit_bias: {"<token id>": bias, ...}, bias in [-100, 100], at most engine::kMaxLogitBias entries.
// Ids past the vocabulary are refused by the engine (it knows the vocabulary).
ApiError parse_logit_bias(const json& body, std::vector<std::pair<int64_t, float>>& out) {
  const json* v = field(body, "logit_bias");
  if (!v) return {};
  if (!v->is_object()) return wrong_type("logit_bias", "an object mapping token ids to biases", *v);
  if (v->size() > engine::kMaxLogitBias)
    return bad_request(
        "'logit_bias' has " + std::to_string(v->size()) + " entries; at most " + std::to_string(engine::kMaxLogitBias),
        "logit_bias");
  for (const auto& [key, bias] : v->items()) {
    const std::string param = "logit_bias." + key;
    int64_t id = 0;
    const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
    if (ec != std::errc() || end != key.data() + key.size() || key.empty() || id < 0)
      return bad_request("'logit_bias' key '" + key + "' is not a token id (a non-negative integer)", param,
                         "invalid_value");
    if (!bias.is_number()) return wrong_type(param, "a number", bias);
    const double b = bias.get<double>();
    if (!std::isfinite(b) || b < -100 || b > 100) return out_of_range(param, num_text(b), "[-100, 100]");
    out.emplace_back(id, float(b));
  }
  return {};
}

// response_format: {"type": "text"}, {"type": "json_object"}, or {"type": "json_schema",
// "json_schema": {"name": ..., "schema": {...}, "strict": bool, "description": ...}}.
ApiError parse_response_format(const json& body, std::shared_ptr<const engine::JsonGrammar>& out) {
  const json* v = field(body, "response_format");
  if (!v) return {};
  if (!v->is_object()) return wrong_type("response_format", "an object", *v);
  const json* t = field(*v, "type");
  if (!t) return bad_request("'response_format.type' is required", "response_format.type", "missing_field");
  if (!t->is_string()) return wrong_type("response_format.type", "a string", *t);
  const std::string type = t->get<std::string>();
  if (type == "text") return {};
  if (type == "json_object") {
    out = engine::JsonGrammar::any_object();
    return {};
  }
  if (type != "json_schema")
    return bad_request(
        "'response_format.type' is '" + type.substr(0, 32) + "'; expected text, json_object or json_schema",
        "response_format.type", "invalid_value");
  const json* js = field(*v, "json_schema");
  if (!js)
    return bad_request("'response_format.json_schema' is required for type json_schema", "response_format.json_schema",
                       "missing_field");
  if (!js->is_object()) return wrong_type("response_format.json_schema", "an object", *js);
  const json* name = field(*js, "name");
  if (!name)
    return bad_request("'response_format.json_schema.name' is required", "response_format.json_schema.name",
                       "missing_field");
  if (!name->is_string()) return wrong_type("response_format.json_schema.name", "a string", *name);
  const std::string& n = name->get_ref<const std::string&>();
  if (n.empty() || n.size() > 64 ||
      !std::all_of(n.begin(), n.end(), [](char c) { return std::isalnum(uint8_t(c)) || c == '_' || c == '-'; }))
    return bad_request("'response_format.json_schema.name' must be 1-64 characters of a-z, A-Z, 0-9, '_' and '-'",
                       "response_format.json_schema.name", "invalid_value");
  if (const json* strict = field(*js, "strict"); strict && !strict->is_boolean())
    return wrong_type("response_format.json_schema.strict", "a boolean", *strict);
  if (const json* d = field(*js, "description"); d && !d->is_string())
    return wrong_type("response_format.json_schema.description", "a string", *d);
  const json* schema = field(*js, "schema");
  if (!schema)
    return bad_request("'response_format.json_schema.schema' is required", "response_format.json_schema.schema",
                       "missing_field");
  if (!schema->is_object()) return wrong_type("response_format.json_schema.schema", "an object", *schema);
  auto g = engine::JsonGrammar::compile_cached(schema->dump());
  if (!g.ok()) {
    const bool unsupported = g.status().kind() == ErrorKind::kUnsupported;
    return bad_request(g.status().message(), "response_format.json_schema.schema",
                       unsupported ? "unsupported" : "invalid_value");
  }
  out = *g;
  return {};
}

ApiError parse_common(const json& body, GenerationParams& p) {
  if (const json* m = field(body, "model")) {
    if (!m->is_string()) return wrong_type("model", "a string", *m);
    p.model = m->get<std::string>();
  }
  // Sampling. OpenAI's defaults: temperature 1, top_p 1; a random seed unless one is given.
  p.sampling.temperature = 1.0f;
  ApiError e;
  if (!(e = number(body, "temperature", p.sampling.temperature, 0, 2, false, "[0, 2]")).ok()) return e;
  if (!(e = number(body, "top_p", p.sampling.top_p, 0, 1, true, "(0, 1]")).ok()) return e;
  if (!(e = number(body, "min_p", p.sampling.min_p, 0, 1, false, "[0, 1]")).ok()) return e;
  if (!(e = number(body, "presence_penalty", p.sampling.presence_penalty, -2, 2, false, "[-2, 2]")).ok()) return e;
  if (!(e = number(body, "frequency_penalty", p.sampling.frequency_penalty, -2, 2, false, "[-2, 2]")).ok()) return e;
  if (!(e = number(body, "repetition_penalty", p.sampling.repetition_penalty, 0, 1e6, true, "(0, 1e6]")).ok()) return e;
  std::optional<int64_t> top_k, seed, n, best_of, max_tokens, max_completion_tokens;
  if (!(e = integer(body, "top_k", top_k)).ok()) return e;
  if (top_k) {
    if (*top_k < -1) return out_of_range("top_k", std::to_string(*top_k), "-1 or 0 (off), or a positive count");
    p.sampling.top_k = *top_k < 0 ? 0 : *top_k;
  }
  if (const json* s = field(body, "seed")) {
    if (s->is_number_unsigned()) {
      p.sampling.seed = s->get<uint64_t>();
    } else {
      if (!(e = integer(body, "seed", seed)).ok()) return e;
      p.sampling.seed = uint64_t(*seed);
    }
    p.seed_given = true;
  } else {
    p.sampling.seed = std::random_device{}() ^ (uint64_t(std::random_device{}()) << 32);
  }
  if (!(e = integer(body, "n", n)).ok()) return e;
  if (n && (*n < 1 || *n > kMaxChoices))
    return out_of_range("n", std::to_string(*n), ("an integer from 1 to " + std::to_string(kMaxChoices)).c_str());
  p.n = n ? *n : 1;
  if (!(e = integer(body, "best_of", best_of)).ok()) return e;
  if (best_of && *best_of != 1)
    return bad_request("'best_of' = " + std::to_string(*best_of) + " is not supported (only 1)", "best_of",
                       "unsupported");
  if (!(e = integer(body, "max_tokens", max_tokens)).ok()) return e;
  if (!(e = integer(body, "max_completion_tokens", max_completion_tokens)).ok()) return e;
  // No context comes near 2^31 tokens; the bound also keeps prompt + max_tokens far from overflow.
  for (auto [key, v] : {std::pair{"max_tokens", max_tokens}, std::pair{"max_completion_tokens", max_completion_tokens}})
    if (v && (*v < 1 || *v > kMaxTokensLimit))
      return out_of_range(key, std::to_string(*v), "an integer from 1 to 2147483647");
  p.max_tokens = max_completion_tokens ? max_completion_tokens : max_tokens;

  if (const json* s = field(body, "stop")) {
    if (s->is_string()) {
      p.stop.push_back(s->get<std::string>());
    } else if (s->is_array()) {
      if (s->size() > 16)
        return bad_request("'stop' has " + std::to_string(s->size()) + " entries; at most 16", "stop");
      for (const json& x : *s) {
        if (!x.is_string()) return wrong_type("stop", "a string or a list of strings", x);
        p.stop.push_back(x.get<std::string>());
      }
    } else {
      return wrong_type("stop", "a string or a list of strings", *s);
    }
    for (const std::string& x : p.stop)
      if (x.empty()) return bad_request("'stop' contains an empty string", "stop", "invalid_value");
  }
  if (!(e = boolean(body, "stream", p.stream)).ok()) return e;
  if (const json* so = field(body, "stream_options")) {
    if (!so->is_object()) return wrong_type("stream_options", "an object", *so);
    if (!p.stream) return bad_request("'stream_options' is only allowed when 'stream' is true", "stream_options");
    if (!(e = boolean(*so, "include_usage", p.include_usage)).ok()) {
      e.param = "stream_options.include_usage";
      return e;
    }
  }
  if (!(e = boolean(body, "ignore_eos", p.ignore_eos)).ok()) return e;
  if (!(e = parse_logit_bias(body, p.sampling.logit_bias)).ok()) return e;

  // Features that would change the output if silently ignored.
  if (const json* v = field(body, "functions"); v && !(v->is_array() && v->empty()))
    return bad_request("'functions' (the legacy form of tool calling) is not supported; use 'tools'", "functions",
                       "unsupported");
  return parse_response_format(body, p.json_grammar);
}

// Token ids of a completions prompt (a JSON array of integers).
ApiError token_ids(const json& arr, const std::string& param, std::vector<int64_t>& out) {
  for (size_t i = 0; i < arr.size(); ++i) {
    const json& t = arr[i];
    if (!t.is_number_integer() && !t.is_number_unsigned())
      return wrong_type(param + "[" + std::to_string(i) + "]", "an integer token id", t);
    if (t.is_number_unsigned() && t.get<uint64_t>() > uint64_t(INT64_MAX))
      return bad_request("token id at '" + param + "[" + std::to_string(i) + "]' is out of range", param);
    out.push_back(t.get<int64_t>());
  }
  return {};
}

// Chat: logprobs (boolean), top_logprobs (0..20, only with logprobs: true, as OpenAI).
ApiError chat_logprobs(const json& body, engine::SamplingParams& s) {
  ApiError e;
  if (!(e = boolean(body, "logprobs", s.logprobs)).ok()) return e;
  std::optional<int64_t> top;
  if (!(e = integer(body, "top_logprobs", top)).ok()) return e;
  if (!top) return {};
  if (*top < 0 || *top > engine::kMaxTopLogprobs)
    return out_of_range("top_logprobs", std::to_string(*top), "an integer from 0 to 20");
  if (!s.logprobs)
    return bad_request("'top_logprobs' = " + std::to_string(*top) + " needs 'logprobs': true", "top_logprobs",
                       "invalid_value");
  s.top_logprobs = *top;
  return {};
}

// Completions: logprobs (integer 0..5, OpenAI's legacy field; false or null = off).
ApiError completion_logprobs(const json& body, engine::SamplingParams& s) {
  if (field(body, "top_logprobs"))
    return bad_request("'top_logprobs' is a chat field; completions take 'logprobs': 0..5", "top_logprobs",
                       "unsupported");
  const json* v = field(body, "logprobs");
  if (!v || (v->is_boolean() && !v->get<bool>())) return {};
  std::optional<int64_t> k;
  ApiError e;
  if (!(e = integer(body, "logprobs", k)).ok()) return e;
  if (*k < 0 || *k > 5) return out_of_range("logprobs", std::to_string(*k), "an integer from 0 to 5");
  s.logprobs = true;
  s.top_logprobs = *k;
  return {};
}

json choice_envelope(const std::string& id, const char* object, int64_t created, const std::string& model) {
  return json{{"id", id}, {"object", object}, {"created", created}, {"model", model}};
}

json finish_value(const std::string& finish) { return finish.empty() ? json(nullptr) : json(finish); }

}  // namespace

ApiError parse_json_body(std::string_view body, json& out, int max_depth) {
  // nlohmann's parser is iterative, but bounding the nesting keeps hostile bodies cheap.
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char c : body) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"')
      in_string = true;
    else if (c == '[' || c == '{') {
      if (++depth > max_depth)
        return bad_request("JSON nesting deeper than " + std::to_string(max_depth) + " levels", "", "invalid_json");
    } else if (c == ']' || c == '}')
      --depth;
  }
  try {
    out = json::parse(body);
  } catch (const json::exception& e) {
    // parse_error, and out_of_range 406 for a number that overflows a double (1e999): both are
    // the client's malformed input, never an exception that escapes the request.
    return bad_request(std::string("malformed JSON body: ") + e.what(), "", "invalid_json");
  }
  if (!out.is_object())
    return bad_request("the JSON body must be an object, got " + type_name(out), "", "invalid_json");
  return {};
}

namespace {

ApiError prompt_too_large(const char* param, size_t bytes, size_t limit) {
  return bad_request(
      "the prompt text is " + std::to_string(bytes) + " bytes, over the limit of " + std::to_string(limit) + " bytes",
      param, "prompt_too_large");
}

ApiError template_kwargs(const json& kw, json& out) {
  if (!kw.is_object()) return wrong_type("chat_template_kwargs", "an object", kw);
  if (kw.size() > kMaxTemplateKwargs)
    return bad_request("'chat_template_kwargs' has " + std::to_string(kw.size()) + " entries; at most " +
                           std::to_string(kMaxTemplateKwargs),
                       "chat_template_kwargs", "invalid_value");
  for (auto it = kw.begin(); it != kw.end(); ++it) {
    const std::string& key = it.key();
    const std::string param = "chat_template_kwargs." + key.substr(0, 64);
    if (ChatTemplate::is_reserved_variable(key))
      return bad_request("'" + param + "' is set by the server and cannot be overridden through chat_template_kwargs",
                         param, "reserved_template_variable");
    bool ident = !key.empty() && key.size() <= 64 && !(key[0] >= '0' && key[0] <= '9');
    for (char c : key)
      ident = ident && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_');
    if (!ident)
      return bad_request("'chat_template_kwargs' key '" + key.substr(0, 64) +
                             "' is not a template variable name (letters, digits, '_', at most 64)",
                         param, "invalid_value");
  }
  const size_t bytes = dump_json(kw).size();
  if (bytes > kMaxTemplateKwargsBytes)
    return bad_request("'chat_template_kwargs' is " + std::to_string(bytes) + " bytes of JSON; at most " +
                           std::to_string(kMaxTemplateKwargsBytes),
                       "chat_template_kwargs", "invalid_value");
  out = kw;
  return {};
}

bool function_name_ok(const std::string& n) {
  return !n.empty() && n.size() <= 64 &&
         std::all_of(n.begin(), n.end(), [](char c) { return std::isalnum(uint8_t(c)) || c == '_' || c == '-'; });
}

// tools, tool_choice, parallel_tool_calls (see ChatRequest).
ApiError parse_tools(const json& body, ChatRequest& out) {
  const json* tools = field(body, "tools");
  if (tools && !tools->is_array()) return wrong_type("tools", "an array of tool objects", *tools);
  if (tools && tools->size() > kMaxTools)
    return bad_request(
        "'tools' has " + std::to_string(tools->size()) + " entries; at most " + std::to_string(kMaxTools), "tools",
        "invalid_value");
  std::vector<std::string> names;
  if (tools)
    for (size_t i = 0; i < tools->size(); ++i) {
      const json& t = (*tools)[i];
      const std::string at = "tools[" + std::to_string(i) + "]";
      if (!t.is_object()) return wrong_type(at, "an object", t);
      const json* type = field(t, "type");
      if (!type) return bad_request("'" + at + ".type' is required", at + ".type", "missing_field");
      if (!type->is_string() || type->get<std::string>() != "function")
        return bad_request("'" + at + ".type' must be \"function\" (the only tool type hlx supports)", at + ".type",
                           "invalid_value");
      const json* fn = field(t, "function");
      if (!fn) return bad_request("'" + at + ".function' is required", at + ".function", "missing_field");
      if (!fn->is_object()) return wrong_type(at + ".function", "an object", *fn);
      const json* name = field(*fn, "name");
      if (!name) return bad_request("'" + at + ".function.name' is required", at + ".function.name", "missing_field");
      if (!name->is_string()) return wrong_type(at + ".function.name", "a string", *name);
      const std::string& n = name->get_ref<const std::string&>();
      if (!function_name_ok(n))
        return bad_request("'" + at + ".function.name' is '" + n.substr(0, 64) +
                               "'; names are 1-64 characters of a-z, A-Z, 0-9, '_' and '-'",
                           at + ".function.name", "invalid_value");
      if (std::find(names.begin(), names.end(), n) != names.end())
        return bad_request("'" + at + ".function.name' '" + n + "' is declared twice", at + ".function.name",
                           "invalid_value");
      if (const json* d = field(*fn, "description"); d && !d->is_string())
        return wrong_type(at + ".function.description", "a string", *d);
      if (const json* p = field(*fn, "parameters"); p && !p->is_object())
        return wrong_type(at + ".function.parameters", "a JSON schema object", *p);
      if (const json* st = field(*fn, "strict"); st && !st->is_boolean())
        return wrong_type(at + ".function.strict", "a boolean", *st);
      names.push_back(n);
    }
  if (const json* p = field(body, "parallel_tool_calls")) {
    if (!p->is_boolean()) return wrong_type("parallel_tool_calls", "a boolean", *p);
    out.parallel_tool_calls = p->get<bool>();
  }
  // tool_choice: "none", "auto", "required" or {"type":"function","function":{"name"}}.
  std::string choice = names.empty() ? "none" : "auto", named;
  if (const json* tc = field(body, "tool_choice")) {
    if (tc->is_string()) {
      choice = tc->get<std::string>();
      if (choice != "none" && choice != "auto" && choice != "required")
        return bad_request("'tool_choice' is '" + choice.substr(0, 32) +
                               "'; expected none, auto, required or {\"type\": \"function\", \"function\": "
                               "{\"name\": ...}}",
                           "tool_choice", "invalid_value");
    } else if (tc->is_object()) {
      const json* type = field(*tc, "type");
      if (!type || !type->is_string() || type->get<std::string>() != "function")
        return bad_request("'tool_choice.type' must be \"function\"", "tool_choice.type", "invalid_value");
      const json* fn = field(*tc, "function");
      const json* name = fn && fn->is_object() ? field(*fn, "name") : nullptr;
      if (!name || !name->is_string())
        return bad_request("'tool_choice.function.name' must be a string", "tool_choice.function.name", "invalid_type");
      named = name->get<std::string>();
      if (std::find(names.begin(), names.end(), named) == names.end())
        return bad_request(
            "'tool_choice.function.name' is '" + named.substr(0, 64) + "', which is not among the functions in 'tools'",
            "tool_choice.function.name", "invalid_value");
      choice = "named";
    } else {
      return wrong_type("tool_choice", "a string or an object", *tc);
    }
    if ((choice == "required" || choice == "auto") && names.empty())
      return bad_request("'tool_choice' is '" + choice + "' but no 'tools' are given", "tool_choice", "invalid_value");
  }
  if (names.empty()) return {};
  out.tools = *tools;
  if (choice == "none") {
    out.tool_mode = ToolMode::kOff;
    return {};
  }
  if (out.params.json_grammar)
    return bad_request(
        "'response_format' json_object / json_schema together with 'tools' is not supported (the "
        "output could not be both); send tool_choice \"none\" or drop one",
        "response_format", "unsupported");
  out.tool_names = choice == "named" ? std::vector<std::string>{named} : names;
  if (choice == "auto") {
    out.tool_names = names;
    out.tool_mode = ToolMode::kAuto;
    return {};
  }
  // Forced: one call of these functions, its arguments valid for the function's schema.
  std::vector<engine::ToolFunction> fns;
  for (size_t i = 0; i < tools->size(); ++i) {
    const json& fn = (*tools)[i]["function"];
    const std::string& n = fn["name"].get_ref<const std::string&>();
    if (choice == "named" && n != named) continue;
    const json* params = field(fn, "parameters");
    const std::string param = "tools[" + std::to_string(i) + "].function.parameters";
    if (params) {
      auto g = engine::JsonGrammar::compile_cached(params->dump());
      if (!g.ok()) {
        const bool unsupported = g.status().kind() == ErrorKind::kUnsupported;
        return bad_request("'" + param + "' cannot constrain a forced tool call: " + g.status().message(), param,
                           unsupported ? "unsupported" : "invalid_value");
      }
    }
    fns.push_back({n, params ? params->dump() : std::string()});
  }
  auto g = engine::tool_call_grammar(fns);
  if (!g.ok()) return bad_request(g.status().message(), "tools", "invalid_value");
  out.params.json_grammar = *g;
  out.tool_mode = ToolMode::kForced;
  return {};
}

// An assistant message's tool_calls: [{id, type "function", function {name, arguments: JSON
// text}}], passed to the template as given (Qwen3's writes the arguments string verbatim).
ApiError check_tool_calls(const json& calls, const std::string& at) {
  if (!calls.is_array()) return wrong_type(at, "an array", calls);
  for (size_t k = 0; k < calls.size(); ++k) {
    const json& c = calls[k];
    const std::string p = at + "[" + std::to_string(k) + "]";
    if (!c.is_object()) return wrong_type(p, "an object", c);
    if (const json* id = field(c, "id"); id && !id->is_string()) return wrong_type(p + ".id", "a string", *id);
    if (const json* t = field(c, "type"); t && !(t->is_string() && t->get<std::string>() == "function"))
      return bad_request("'" + p + ".type' must be \"function\"", p + ".type", "invalid_value");
    const json* fn = field(c, "function");
    if (!fn) return bad_request("'" + p + ".function' is required", p + ".function", "missing_field");
    if (!fn->is_object()) return wrong_type(p + ".function", "an object", *fn);
    const json* name = field(*fn, "name");
    if (!name || !name->is_string())
      return bad_request("'" + p + ".function.name' must be a string", p + ".function.name", "invalid_type");
    const json* args = field(*fn, "arguments");
    if (!args || !args->is_string())
      return bad_request("'" + p + ".function.arguments' must be a string of JSON (as OpenAI sends it)",
                         p + ".function.arguments", "invalid_type");
  }
  return {};
}

}  // namespace

ApiError parse_chat_request(const json& body, ChatRequest& out, const PromptLimits& limits) {
  ApiError e = parse_common(body, out.params);
  if (!e.ok()) return e;
  if (!(e = chat_logprobs(body, out.params.sampling)).ok()) return e;
  const json* msgs = field(body, "messages");
  if (!msgs) return bad_request("'messages' is required", "messages", "missing_field");
  if (!msgs->is_array()) return wrong_type("messages", "an array", *msgs);
  if (msgs->empty()) return bad_request("'messages' is empty", "messages", "invalid_value");
  // The text the prompt is made of, counted before anything is copied.
  size_t text_bytes = 0;
  for (const json& m : *msgs) {
    const json* content = m.is_object() ? field(m, "content") : nullptr;
    if (content && content->is_string()) text_bytes += content->get_ref<const std::string&>().size();
    if (content && content->is_array())
      for (const json& part : *content)
        if (const json* t = part.is_object() ? field(part, "text") : nullptr; t && t->is_string())
          text_bytes += t->get_ref<const std::string&>().size();
  }
  if (text_bytes > limits.max_bytes) return prompt_too_large("messages", text_bytes, limits.max_bytes);
  for (size_t i = 0; i < msgs->size(); ++i) {
    const json& m = (*msgs)[i];
    const std::string at = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) return wrong_type(at, "an object", m);
    const json* role = field(m, "role");
    if (!role) return bad_request("'" + at + ".role' is required", at + ".role", "missing_field");
    if (!role->is_string()) return wrong_type(at + ".role", "a string", *role);
    std::string r = role->get<std::string>();
    if (r == "developer") r = "system";
    if (r != "system" && r != "user" && r != "assistant" && r != "tool")
      return bad_request(
          "'" + at + ".role' is '" + r.substr(0, 32) + "'; expected system, developer, user, assistant or tool",
          at + ".role", "invalid_value");
    json msg = json::object();
    msg["role"] = r;
    const json* content = field(m, "content");
    if (!content) {
      if (r != "assistant" && r != "tool")
        return bad_request("'" + at + ".content' is required", at + ".content", "missing_field");
      msg["content"] = "";
    } else if (content->is_string()) {
      msg["content"] = *content;
    } else if (content->is_array()) {
      json parts = json::array();
      std::string joined;
      bool has_image = false;
      for (size_t k = 0; k < content->size(); ++k) {
        const json& part = (*content)[k];
        const std::string pat = at + ".content[" + std::to_string(k) + "]";
        if (!part.is_object()) return wrong_type(pat, "an object", part);
        const json* type = field(part, "type");
        if (!type || !type->is_string())
          return bad_request("'" + pat + ".type' must be a string", pat + ".type", "invalid_type");
        const std::string t = type->get<std::string>();
        if (t == "text") {
          const json* text = field(part, "text");
          if (!text || !text->is_string())
            return bad_request("'" + pat + ".text' must be a string", pat + ".text", "invalid_type");
          parts.push_back({{"type", "text"}, {"text", *text}});
          if (!joined.empty()) joined += "\n";
          joined += text->get<std::string>();
        } else if (t == "image_url") {
          const json* iu = field(part, "image_url");
          const json* url = iu && iu->is_object() ? field(*iu, "url") : iu;
          if (!url || !url->is_string())
            return bad_request("'" + pat + ".image_url.url' must be a string", pat + ".image_url.url", "invalid_type");
          parts.push_back({{"type", "image"}});
          out.images.push_back({url->get<std::string>(), pat + ".image_url.url"});
          has_image = true;
        } else {
          return bad_request("content part type '" + t.substr(0, 32) + "' is not supported (text, image_url)",
                             pat + ".type", "unsupported");
        }
      }
      // Text-only part lists become one string: templates such as Qwen3's only render strings.
      msg["content"] = has_image ? parts : json(joined);
    } else {
      return wrong_type(at + ".content", "a string, an array of content parts or null", *content);
    }
    if (const json* tc = field(m, "tool_calls")) {
      if (r != "assistant")
        return bad_request("'" + at + ".tool_calls' is only allowed on assistant messages", at + ".tool_calls",
                           "invalid_value");
      if (!(e = check_tool_calls(*tc, at + ".tool_calls")).ok()) return e;
    }
    if (const json* id = field(m, "tool_call_id"); id && !id->is_string())
      return wrong_type(at + ".tool_call_id", "a string", *id);
    if (r == "tool" && !field(m, "tool_call_id"))
      return bad_request("'" + at + ".tool_call_id' is required for a tool message", at + ".tool_call_id",
                         "missing_field");
    for (const char* key : {"name", "tool_calls", "tool_call_id", "reasoning_content"})
      if (const json* v = field(m, key)) msg[key] = *v;
    out.messages.push_back(std::move(msg));
  }
  if (const json* kw = field(body, "chat_template_kwargs"))
    if (!(e = template_kwargs(*kw, out.template_kwargs)).ok()) return e;
  return parse_tools(body, out);
}

ApiError parse_completion_request(const json& body, CompletionRequest& out, const PromptLimits& limits) {
  ApiError e = parse_common(body, out.params);
  if (!e.ok()) return e;
  if (!(e = completion_logprobs(body, out.params.sampling)).ok()) return e;
  if (const json* v = field(body, "echo"); v && !(v->is_boolean() && !v->get<bool>()))
    return bad_request("'echo' is not supported", "echo", "unsupported");
  if (const json* v = field(body, "suffix"); v && !(v->is_string() && v->get<std::string>().empty()))
    return bad_request("'suffix' is not supported", "suffix", "unsupported");
  const json* prompt = field(body, "prompt");
  if (!prompt) return bad_request("'prompt' is required", "prompt", "missing_field");
  const json* p = prompt;
  if (p->is_array() && p->size() == 1 && ((*p)[0].is_string() || (*p)[0].is_array()))
    p = &(*p)[0];
  else if (p->is_array() && !p->empty() && ((*p)[0].is_string() || (*p)[0].is_array()))
    return bad_request("'prompt' lists " + std::to_string(p->size()) + " prompts; only one per request is supported",
                       "prompt", "unsupported");
  if (p->is_string()) {
    const size_t bytes = p->get_ref<const std::string&>().size();
    if (bytes > limits.max_bytes) return prompt_too_large("prompt", bytes, limits.max_bytes);
    out.prompt_text = p->get<std::string>();
    return {};
  }
  if (p->is_array()) {
    if (p->empty()) return bad_request("'prompt' is empty", "prompt", "invalid_value");
    if (p->size() > limits.max_tokens)
      return bad_request("'prompt' has " + std::to_string(p->size()) + " token ids; at most " +
                             std::to_string(limits.max_tokens) + " fit the context",
                         "prompt", "context_length_exceeded");
    return token_ids(*p, "prompt", out.prompt_ids);
  }
  return wrong_type("prompt", "a string, a list of token ids, or a list of one of these", *prompt);
}

json Usage::to_json() const {
  return json{{"prompt_tokens", prompt_tokens},
              {"completion_tokens", completion_tokens},
              {"total_tokens", prompt_tokens + completion_tokens},
              {"prompt_tokens_details", json{{"cached_tokens", cached_tokens}}}};
}

namespace {

// JSON has no infinity: a token whose logit was -inf gets OpenAI's floor value.
double json_logprob(double lp) { return std::isfinite(lp) ? lp : -9999.0; }

struct TokenText {
  std::string text;    // valid UTF-8
  std::string bytes;   // raw
  bool known = false;  // false: no tokenizer, or an id it does not know
};

TokenText token_text(const tok::Tokenizer* tokenizer, int64_t id) {
  if (tokenizer && id >= 0 && id <= int64_t(UINT32_MAX))
    if (auto b = tokenizer->token_bytes(uint32_t(id)); b.ok()) return {tok::utf8_lossy(*b), std::move(*b), true};
  return {"token_id:" + std::to_string(id), "", false};
}

json bytes_json(const TokenText& t) {
  if (!t.known) return nullptr;
  json b = json::array();
  for (unsigned char c : t.bytes) b.push_back(int(c));
  return b;
}

}  // namespace

json chat_logprobs_json(std::span<const engine::TokenLogprobs> lps, const tok::Tokenizer* tokenizer) {
  json content = json::array();
  for (const engine::TokenLogprobs& lp : lps) {
    const TokenText t = token_text(tokenizer, lp.token);
    json top = json::array();
    for (const auto& [id, v] : lp.top) {
      const TokenText tt = token_text(tokenizer, id);
      top.push_back(json{{"token", tt.text}, {"logprob", json_logprob(v)}, {"bytes", bytes_json(tt)}});
    }
    content.push_back(json{
        {"token", t.text}, {"logprob", json_logprob(lp.logprob)}, {"bytes", bytes_json(t)}, {"top_logprobs", top}});
  }
  return json{{"content", content}};
}

json completion_logprobs_json(std::span<const engine::TokenLogprobs> lps, const tok::Tokenizer* tokenizer,
                              size_t* offset) {
  json tokens = json::array(), values = json::array(), tops = json::array(), offsets = json::array();
  for (const engine::TokenLogprobs& lp : lps) {
    const TokenText t = token_text(tokenizer, lp.token);
    tokens.push_back(t.text);
    values.push_back(json_logprob(lp.logprob));
    json top = json::object();
    for (const auto& [id, v] : lp.top) {
      const std::string key = token_text(tokenizer, id).text;
      if (!top.contains(key)) top[key] = json_logprob(v);
    }
    if (!top.contains(t.text)) top[t.text] = json_logprob(lp.logprob);
    tops.push_back(std::move(top));
    offsets.push_back(*offset);
    *offset += t.known ? t.bytes.size() : 0;
  }
  return json{{"tokens", tokens}, {"token_logprobs", values}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

json chat_completion_json(const std::string& id, int64_t created, const std::string& model,
                          std::span<const ChoiceResult> choices, const Usage& usage) {
  json r = choice_envelope(id, "chat.completion", created, model);
  r["choices"] = json::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    json message = {{"role", "assistant"}, {"content", choices[i].text}};
    if (!choices[i].tool_calls.is_null()) {
      if (choices[i].text.empty()) message["content"] = nullptr;
      if (!choices[i].tool_calls.empty()) message["tool_calls"] = choices[i].tool_calls;
    }
    r["choices"].push_back(json{{"index", i},
                                {"message", message},
                                {"logprobs", choices[i].logprobs},
                                {"finish_reason", finish_value(choices[i].finish_reason)}});
  }
  r["usage"] = usage.to_json();
  return r;
}

json tool_call_json(const std::string& id, const std::string& name, const std::string& arguments) {
  return json{{"id", id}, {"type", "function"}, {"function", json{{"name", name}, {"arguments", arguments}}}};
}

json text_completion_json(const std::string& id, int64_t created, const std::string& model,
                          std::span<const ChoiceResult> choices, const Usage& usage) {
  json r = choice_envelope(id, "text_completion", created, model);
  r["choices"] = json::array();
  for (size_t i = 0; i < choices.size(); ++i)
    r["choices"].push_back(json{{"index", i},
                                {"text", choices[i].text},
                                {"logprobs", choices[i].logprobs},
                                {"finish_reason", finish_value(choices[i].finish_reason)}});
  r["usage"] = usage.to_json();
  return r;
}

json chat_chunk_json(const std::string& id, int64_t created, const std::string& model, int64_t index, const json& delta,
                     const std::string& finish_reason, bool with_usage_null, const json& logprobs) {
  json r = choice_envelope(id, "chat.completion.chunk", created, model);
  r["choices"] = json::array({json{
      {"index", index}, {"delta", delta}, {"logprobs", logprobs}, {"finish_reason", finish_value(finish_reason)}}});
  if (with_usage_null) r["usage"] = nullptr;
  return r;
}

json text_chunk_json(const std::string& id, int64_t created, const std::string& model, int64_t index,
                     const std::string& text, const std::string& finish_reason, bool with_usage_null,
                     const json& logprobs) {
  json r = choice_envelope(id, "text_completion", created, model);
  r["choices"] = json::array(
      {json{{"index", index}, {"text", text}, {"logprobs", logprobs}, {"finish_reason", finish_value(finish_reason)}}});
  if (with_usage_null) r["usage"] = nullptr;
  return r;
}

json usage_chunk_json(const std::string& id, int64_t created, const std::string& model, bool chat, const Usage& usage) {
  json r = choice_envelope(id, chat ? "chat.completion.chunk" : "text_completion", created, model);
  r["choices"] = json::array();
  r["usage"] = usage.to_json();
  return r;
}

std::string dump_json(const json& value) { return value.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string sse_event(const json& value) { return "data: " + dump_json(value) + "\n\n"; }

}  // namespace hlx::server
