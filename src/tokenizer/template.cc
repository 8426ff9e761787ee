#include "tokenizer/template.h"

#include <fstream>
#include <sstream>

namespace hlx {

Result<ChatTemplate> ChatTemplate::from_source(const std::string& source,
                                               const nlohmann::ordered_json& special_tokens) {
  if (!special_tokens.is_object())
    return make_error(ErrorKind::kInvalidArgument, "special tokens must be a JSON object");
  jinja::Options opt;  // HF: trim_blocks=True, lstrip_blocks=True
  Result<jinja::Template> t = jinja::Template::parse(source, opt);
  if (!t.ok()) return t.status().with_context("chat template");
  ChatTemplate ct;
  ct.source_ = source;
  ct.template_ = std::move(t).value();
  ct.special_tokens_ = special_tokens;
  return ct;
}

Result<ChatTemplate> ChatTemplate::from_tokenizer_config_json(const nlohmann::ordered_json& config) {
  if (!config.is_object()) return make_error(ErrorKind::kParse, "tokenizer_config: expected a JSON object");
  auto it = config.find("chat_template");
  if (it == config.end() || it->is_null())
    return make_error(ErrorKind::kNotFound, "tokenizer_config has no chat_template");
  std::string source;
  if (it->is_string()) {
    source = it->get<std::string>();
  } else if (it->is_array()) {
    // HF allows several named templates; apply_chat_template uses "default".
    bool found = false;
    for (const auto& e : *it) {
      if (e.is_object() && e.value("name", "") == "default" && e.contains("template") && e["template"].is_string()) {
        source = e["template"].get<std::string>();
        found = true;
      }
    }
    if (!found) return make_error(ErrorKind::kNotFound, "tokenizer_config chat_template list has no 'default' entry");
  } else {
    return make_error(ErrorKind::kParse, "tokenizer_config chat_template must be a string or list, got ",
                      it->type_name());
  }
  nlohmann::ordered_json special = nlohmann::ordered_json::object();
  for (const char* name :
       {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}) {
    auto t = config.find(name);
    if (t == config.end()) continue;
    if (t->is_string())
      special[name] = *t;
    else if (t->is_object() && t->contains("content") && (*t)["content"].is_string())
      special[name] = (*t)["content"];
    // null: HF leaves the variable undefined
  }
  return from_source(source, special);
}

Result<ChatTemplate> ChatTemplate::from_tokenizer_config(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return make_error(ErrorKind::kIo, "cannot open tokenizer config '", path, "'");
  std::stringstream ss;
  ss << f.rdbuf();
  nlohmann::ordered_json config = nlohmann::ordered_json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded()) return make_error(ErrorKind::kParse, "'", path, "' is not valid JSON");
  Result<ChatTemplate> t = from_tokenizer_config_json(config);
  if (!t.ok()) return t.status().with_context(path);
  return t;
}

const std::vector<std::string_view>& ChatTemplate::reserved_variables() {
  static const std::vector<std::string_view> names = {
      "messages",  "tools",     "documents",      "add_generation_prompt",
      "bos_token", "eos_token", "unk_token",      "sep_token",
      "pad_token", "cls_token", "mask_token",     "range",
      "namespace", "dict",      "raise_exception"};
  return names;
}

bool ChatTemplate::is_reserved_variable(std::string_view name) {
  for (std::string_view r : reserved_variables())
    if (r == name) return true;
  return false;
}

Result<std::string> ChatTemplate::render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                         const nlohmann::ordered_json& extra_vars, size_t max_output_bytes,
                                         const nlohmann::ordered_json& tools) const {
  if (!messages.is_array())
    return make_error(ErrorKind::kInvalidArgument, "messages must be a JSON array, got ", messages.type_name());
  for (size_t i = 0; i < messages.size(); ++i) {
    const auto& m = messages[i];
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
      return make_error(ErrorKind::kInvalidArgument, "message ", i, " must be an object with a string 'role'");
  }
  if (!extra_vars.is_null() && !extra_vars.is_object())
    return make_error(ErrorKind::kInvalidArgument, "extra template variables must be a JSON object");
  if (extra_vars.is_object())
    for (auto it = extra_vars.begin(); it != extra_vars.end(); ++it)
      if (is_reserved_variable(it.key()))
        return make_error(ErrorKind::kInvalidArgument, "template variable '", it.key(),
                          "' is set by the renderer and cannot be overridden");
  // Same variables as transformers' apply_chat_template: special tokens, then caller kwargs
  // (which cannot replace any of them, see reserved_variables()).
  nlohmann::ordered_json ctx = special_tokens_;
  ctx["messages"] = messages;
  if (!tools.is_null() && !tools.is_array())
    return make_error(ErrorKind::kInvalidArgument, "tools must be a JSON array or null, got ", tools.type_name());
  ctx["tools"] = tools;
  ctx["documents"] = nullptr;
  ctx["add_generation_prompt"] = add_generation_prompt;
  if (extra_vars.is_object())
    for (auto it = extra_vars.begin(); it != extra_vars.end(); ++it) ctx[it.key()] = *it;
  return template_.render(ctx, max_output_bytes);
}

}  // namespace hlx
