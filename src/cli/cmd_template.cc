// hlx template: render a checkpoint's chat template for a conversation, to debug prompts.
#include <fstream>
#include <iostream>
#include <sstream>

#include "cli/command.h"
#include "tokenizer/template.h"

namespace hlx::cli {

namespace {

struct TemplateOptions {
  std::string model_dir, tokenizer_config, template_file, messages, tools;
  bool add_generation_prompt = false;
  std::vector<std::string> vars;
};

Result<std::string> read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return make_error(ErrorKind::kIo, "cannot open '", path, "'");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

Status run_template(const TemplateOptions& o) {
  int sources = !o.model_dir.empty() + !o.tokenizer_config.empty() + !o.template_file.empty();
  if (sources != 1)
    return make_error(ErrorKind::kInvalidArgument,
                      "give exactly one of -m DIR, --tokenizer-config PATH, --template FILE");
  nlohmann::ordered_json vars = nlohmann::ordered_json::object();
  nlohmann::ordered_json specials = nlohmann::ordered_json::object();  // for a bare --template
  for (const std::string& kv : o.vars) {
    size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0)
      return make_error(ErrorKind::kInvalidArgument, "--var expects name=value, got '", kv, "'");
    std::string value = kv.substr(eq + 1);
    // JSON when it parses (true, 3, "s", [..]); otherwise the raw text as a string.
    auto j = nlohmann::ordered_json::parse(value, nullptr, false);
    const std::string name = kv.substr(0, eq);
    // A bare template has no special tokens of its own: --var bos_token=... supplies them (the
    // renderer refuses to let extra variables replace the ones it sets).
    const bool special = !o.template_file.empty() && name.size() > 6 &&
                         name.compare(name.size() - 6, 6, "_token") == 0 && ChatTemplate::is_reserved_variable(name);
    (special ? specials : vars)[name] = j.is_discarded() ? nlohmann::ordered_json(value) : j;
  }
  Result<ChatTemplate> tmpl = Status(ErrorKind::kInternal, "unset");
  if (!o.template_file.empty()) {
    HLX_ASSIGN_OR_RETURN(std::string src, read_text(o.template_file));
    tmpl = ChatTemplate::from_source(src, specials);
  } else {
    tmpl = ChatTemplate::from_tokenizer_config(o.tokenizer_config.empty() ? o.model_dir + "/tokenizer_config.json"
                                                                          : o.tokenizer_config);
  }
  if (!tmpl.ok()) return tmpl.status();
  HLX_ASSIGN_OR_RETURN(std::string mtext, read_text(o.messages));
  auto messages = nlohmann::ordered_json::parse(mtext, nullptr, false);
  if (messages.is_discarded()) return make_error(ErrorKind::kParse, "'", o.messages, "' is not valid JSON");
  nlohmann::ordered_json tools = nullptr;
  if (!o.tools.empty()) {
    HLX_ASSIGN_OR_RETURN(std::string ttext, read_text(o.tools));
    tools = nlohmann::ordered_json::parse(ttext, nullptr, false);
    if (tools.is_discarded() || !tools.is_array())
      return make_error(ErrorKind::kParse, "'", o.tools, "' is not a JSON array of tools");
  }
  HLX_ASSIGN_OR_RETURN(std::string out, tmpl->render(messages, o.add_generation_prompt, vars, SIZE_MAX, tools));
  std::cout << out;
  std::cout.flush();
  return ok_status();
}

}  // namespace

static CommandRun setup_template(CLI::App& root) {
  auto o = std::make_shared<TemplateOptions>();
  CLI::App* sub = root.add_subcommand("template", "Render the chat template for a conversation");
  sub->add_option("-m,--model", o->model_dir, "Checkpoint directory (uses its tokenizer_config.json)");
  sub->add_option("--tokenizer-config", o->tokenizer_config, "Path to tokenizer_config.json");
  sub->add_option("--template", o->template_file, "Path to a bare Jinja template file");
  sub->add_option("--messages", o->messages, "JSON file with the messages array")->required();
  sub->add_option("--tools", o->tools, "JSON file with the tools array (the template's `tools` variable)");
  sub->add_flag("--add-generation-prompt", o->add_generation_prompt, "Append the assistant prompt");
  sub->add_option("--var", o->vars, "Extra template variable name=value (JSON value or text)");
  return [o] { return report(run_template(*o)); };
}
HLX_REGISTER_COMMAND(setup_template);

}  // namespace hlx::cli
