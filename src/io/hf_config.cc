#include "io/hf_config.h"

#include <cmath>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "io/file.h"

namespace hlx {

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

const char* json_type_name(const json& v) { return v.type_name(); }

Result<std::shared_ptr<const json>> parse_object(const std::string& text, const std::string& source) {
  json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return make_error(ErrorKind::kParse, source, ": not valid JSON");
  if (!doc.is_object())
    return make_error(ErrorKind::kParse, source, ": top level is a JSON ", doc.type_name(), ", not an object");
  return std::make_shared<const json>(std::move(doc));
}

}  // namespace

ConfigView::ConfigView() = default;

ConfigView::ConfigView(std::shared_ptr<const json> doc, const json* node, std::string file, std::string path)
    : doc_(std::move(doc)), node_(node), file_(std::move(file)), path_(std::move(path)) {}

const json* ConfigView::find(const std::string& key) const {
  if (!node_) return nullptr;
  auto it = node_->find(key);
  if (it == node_->end() || it->is_null()) return nullptr;
  return &*it;
}

bool ConfigView::has(const std::string& key) const { return find(key) != nullptr; }
bool ConfigView::empty() const { return !node_ || node_->empty(); }

std::vector<std::string> ConfigView::keys() const {
  std::vector<std::string> out;
  if (node_)
    for (const auto& item : node_->items()) out.push_back(item.key());
  return out;
}

std::string ConfigView::where() const { return path_.empty() ? file_ : file_ + ": " + path_; }
std::string ConfigView::key_path(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }

Status ConfigView::missing(const std::string& key) const {
  return make_error(ErrorKind::kNotFound, file_.empty() ? "config" : file_, ": required key '", key_path(key),
                    "' is missing");
}

Status ConfigView::wrong_type(const std::string& key, const char* expected) const {
  const json* v = find(key);
  return make_error(
      ErrorKind::kParse, file_, ": key '", key_path(key), "' should be ", expected, " but is ",
      v ? (v->is_number_float() ? str_cat("the float ", v->get<double>()) : std::string("a ") + json_type_name(*v))
        : std::string("absent"));
}

Result<int64_t> ConfigView::to_int(const std::string& key, const json& v) const {
  if (v.is_number_unsigned()) {
    if (v.get<uint64_t>() > uint64_t(INT64_MAX)) return wrong_type(key, "an int64");
    return int64_t(v.get<uint64_t>());
  }
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) {
    double d = v.get<double>();
    // Some exporters write 4096.0 for integer fields.
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.2e18) return int64_t(d);
  }
  return make_error(
      ErrorKind::kParse, file_, ": key '", key_path(key), "' should be an integer but is ",
      v.is_number_float() ? str_cat("the float ", v.get<double>()) : std::string("a ") + json_type_name(v));
}

Result<double> ConfigView::to_float(const std::string& key, const json& v) const {
  if (!v.is_number())
    return make_error(ErrorKind::kParse, file_, ": key '", key_path(key), "' should be a number but is a ",
                      json_type_name(v));
  return v.get<double>();
}

Result<int64_t> ConfigView::require_int(const std::string& key) const {
  const json* v = find(key);
  if (!v) return missing(key);
  return to_int(key, *v);
}

Result<int64_t> ConfigView::optional_int(const std::string& key, int64_t fallback) const {
  const json* v = find(key);
  if (!v) return fallback;
  return to_int(key, *v);
}

Result<double> ConfigView::require_float(const std::string& key) const {
  const json* v = find(key);
  if (!v) return missing(key);
  return to_float(key, *v);
}

Result<double> ConfigView::optional_float(const std::string& key, double fallback) const {
  const json* v = find(key);
  if (!v) return fallback;
  return to_float(key, *v);
}

Result<std::string> ConfigView::require_string(const std::string& key) const {
  const json* v = find(key);
  if (!v) return missing(key);
  if (!v->is_string()) return wrong_type(key, "a string");
  return v->get<std::string>();
}

Result<std::string> ConfigView::optional_string(const std::string& key, const std::string& fallback) const {
  if (!has(key)) return fallback;
  return require_string(key);
}

Result<bool> ConfigView::require_bool(const std::string& key) const {
  const json* v = find(key);
  if (!v) return missing(key);
  if (!v->is_boolean()) return wrong_type(key, "a boolean");
  return v->get<bool>();
}

Result<bool> ConfigView::optional_bool(const std::string& key, bool fallback) const {
  if (!has(key)) return fallback;
  return require_bool(key);
}

Result<std::vector<int64_t>> ConfigView::require_int_array(const std::string& key) const {
  const json* v = find(key);
  if (!v) return missing(key);
  if (!v->is_array()) return wrong_type(key, "an array of integers");
  std::vector<int64_t> out;
  for (size_t i = 0; i < v->size(); ++i) {
    HLX_ASSIGN_OR_RETURN(int64_t x, to_int(str_cat(key, "[", i, "]"), (*v)[i]));
    out.push_back(x);
  }
  return out;
}

Result<std::vector<int64_t>> ConfigView::optional_int_array(const std::string& key) const {
  if (!has(key)) return std::vector<int64_t>{};
  return require_int_array(key);
}

Result<std::vector<int64_t>> ConfigView::optional_int_list(const std::string& key) const {
  const json* v = find(key);
  if (!v) return std::vector<int64_t>{};
  if (v->is_array()) return require_int_array(key);
  HLX_ASSIGN_OR_RETURN(int64_t x, to_int(key, *v));
  return std::vector<int64_t>{x};
}

Result<std::vector<double>> ConfigView::optional_float_array(const std::string& key) const {
  const json* v = find(key);
  if (!v) return std::vector<double>{};
  if (!v->is_array()) return wrong_type(key, "an array of numbers");
  std::vector<double> out;
  for (size_t i = 0; i < v->size(); ++i) {
    HLX_ASSIGN_OR_RETURN(double x, to_float(str_cat(key, "[", i, "]"), (*v)[i]));
    out.push_back(x);
  }
  return out;
}

Result<std::vector<std::string>> ConfigView::require_string_array(const std::string& key) const {
  const json* v = find(key);
  if (!v) return missing(key);
  if (!v->is_array()) return wrong_type(key, "an array of strings");
  std::vector<std::string> out;
  for (size_t i = 0; i < v->size(); ++i) {
    if (!(*v)[i].is_string())
      return make_error(ErrorKind::kParse, file_, ": key '", key_path(key), "[", i, "]' should be a string but is a ",
                        json_type_name((*v)[i]));
    out.push_back((*v)[i].get<std::string>());
  }
  return out;
}

Result<std::vector<std::string>> ConfigView::optional_string_array(const std::string& key) const {
  if (!has(key)) return std::vector<std::string>{};
  return require_string_array(key);
}

Result<ConfigView> ConfigView::sub(const std::string& key) const {
  const json* v = find(key);
  if (!v) return missing(key);
  if (!v->is_object()) return wrong_type(key, "an object");
  return ConfigView(doc_, v, file_, key_path(key));
}

Result<ConfigView> ConfigView::optional_sub(const std::string& key) const {
  if (!has(key)) return ConfigView(doc_, nullptr, file_, key_path(key));
  return sub(key);
}

Result<HfConfig> HfConfig::parse(const std::string& config_text, const std::string& source,
                                 const std::optional<std::string>& generation_text) {
  HLX_ASSIGN_OR_RETURN(auto doc, parse_object(config_text, source));
  HfConfig c;
  c.root_ = ConfigView(doc, doc.get(), source, "");
  HLX_ASSIGN_OR_RETURN(ConfigView text, c.root_.optional_sub("text_config"));
  c.text_ = c.root_.has("text_config") ? text : c.root_;
  HLX_ASSIGN_OR_RETURN(c.vision_, c.root_.optional_sub("vision_config"));
  if (generation_text) {
    std::string gen_source = (fs::path(source).parent_path() / "generation_config.json").string();
    HLX_ASSIGN_OR_RETURN(auto gen, parse_object(*generation_text, gen_source));
    c.generation_ = ConfigView(gen, gen.get(), gen_source, "");
    c.has_generation_ = true;
  }
  return c;
}

Result<HfConfig> HfConfig::load(const std::string& path) {
  std::error_code ec;
  std::string file = fs::is_directory(path, ec) ? (fs::path(path) / "config.json").string() : path;
  HLX_ASSIGN_OR_RETURN(std::string text, read_file(file, size_t(64) << 20));
  std::string gen_file = (fs::path(file).parent_path() / "generation_config.json").string();
  std::optional<std::string> gen_text;
  if (fs::exists(gen_file, ec)) {
    HLX_ASSIGN_OR_RETURN(std::string g, read_file(gen_file, size_t(64) << 20));
    gen_text = std::move(g);
  }
  return parse(text, file, gen_text);
}

}  // namespace hlx
