// Hugging Face `config.json` (and optional `generation_config.json`) with typed getters whose
// errors name the file and the full key path ("config.json: text_config.hidden_size: ...").
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"

namespace hlx {

// A read-only view of one JSON object inside a loaded config. Cheap to copy; keeps the document
// alive. A key whose value is JSON null counts as absent (HF writes "sliding_window": null).
// Numbers: an int getter accepts an integral float (4096.0); a float getter accepts ints.
class ConfigView {
 public:
  ConfigView();  // an empty view: has() is false everywhere, optional getters return fallbacks

  // Present and not null.
  bool has(const std::string& key) const;
  // True when this view has no keys (e.g. optional_sub of a missing key).
  bool empty() const;
  std::vector<std::string> keys() const;
  // "config.json" or "config.json: text_config", for messages.
  std::string where() const;

  Result<int64_t> require_int(const std::string& key) const;
  Result<int64_t> optional_int(const std::string& key, int64_t fallback) const;
  Result<double> require_float(const std::string& key) const;
  Result<double> optional_float(const std::string& key, double fallback) const;
  Result<std::string> require_string(const std::string& key) const;
  Result<std::string> optional_string(const std::string& key, const std::string& fallback) const;
  Result<bool> require_bool(const std::string& key) const;
  Result<bool> optional_bool(const std::string& key, bool fallback) const;
  Result<std::vector<int64_t>> require_int_array(const std::string& key) const;
  // Empty when absent.
  Result<std::vector<int64_t>> optional_int_array(const std::string& key) const;
  // An int or an array of ints (e.g. eos_token_id); empty when absent.
  Result<std::vector<int64_t>> optional_int_list(const std::string& key) const;
  Result<std::vector<double>> optional_float_array(const std::string& key) const;
  Result<std::vector<std::string>> require_string_array(const std::string& key) const;
  Result<std::vector<std::string>> optional_string_array(const std::string& key) const;

  // Nested object: kNotFound when absent, kParse when not an object.
  Result<ConfigView> sub(const std::string& key) const;
  // Nested object, or an empty view when absent; kParse when present but not an object.
  Result<ConfigView> optional_sub(const std::string& key) const;

 private:
  friend class HfConfig;
  ConfigView(std::shared_ptr<const nlohmann::json> doc, const nlohmann::json* node, std::string file, std::string path);
  // Null when absent or JSON null.
  const nlohmann::json* find(const std::string& key) const;
  std::string key_path(const std::string& key) const;
  Status missing(const std::string& key) const;
  Status wrong_type(const std::string& key, const char* expected) const;
  Result<int64_t> to_int(const std::string& key, const nlohmann::json& v) const;
  Result<double> to_float(const std::string& key, const nlohmann::json& v) const;

  std::shared_ptr<const nlohmann::json> doc_;
  const nlohmann::json* node_ = nullptr;
  std::string file_;
  std::string path_;  // dotted path of this object inside the file, "" for the root
};

class HfConfig {
 public:
  // `path` is a config.json file or a directory holding one. generation_config.json next to it
  // is loaded when present. kNotFound / kIo / kParse name the file.
  static Result<HfConfig> load(const std::string& path);
  // From text, for tests; `source` names it in messages.
  static Result<HfConfig> parse(const std::string& config_text, const std::string& source = "config.json",
                                const std::optional<std::string>& generation_text = std::nullopt);

  const ConfigView& root() const { return root_; }
  // The language model's config: `text_config` when present (multimodal checkpoints nest the text
  // model there), otherwise the root.
  const ConfigView& text() const { return text_; }
  // vision_config, or an empty view.
  const ConfigView& vision() const { return vision_; }
  bool has_generation() const { return has_generation_; }
  // generation_config.json, or an empty view when the file was absent.
  const ConfigView& generation() const { return generation_; }

  Result<std::string> model_type() const { return root_.require_string("model_type"); }
  Result<std::vector<std::string>> architectures() const { return root_.optional_string_array("architectures"); }

 private:
  ConfigView root_, text_, vision_, generation_;
  bool has_generation_ = false;
};

}  // namespace hlx
