#include "io/checkpoint.h"

#include <filesystem>

#include <nlohmann/json.hpp>

#include "io/file.h"

namespace hlx {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool is_dir(const std::string& p) {
  std::error_code ec;
  return fs::is_directory(p, ec);
}

bool exists(const std::string& p) {
  std::error_code ec;
  return fs::exists(p, ec);
}

// Shard names must stay inside the checkpoint directory.
bool is_plain_file_name(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

}  // namespace

Result<Checkpoint> Checkpoint::open_single(const std::string& path) {
  HLX_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::open(path));
  Checkpoint c;
  c.source_ = path;
  for (const auto& name : f.names()) c.shard_of_[name] = 0;
  c.shards_.push_back(std::move(f));
  return c;
}

Result<Checkpoint> Checkpoint::open(const std::string& path) {
  std::string index_path;
  if (is_dir(path)) {
    std::string index = path + "/model.safetensors.index.json";
    std::string single = path + "/model.safetensors";
    if (exists(index)) {
      index_path = index;
    } else if (exists(single)) {
      return open_single(single);
    } else {
      return make_error(ErrorKind::kNotFound, "checkpoint directory '", path,
                        "' has neither model.safetensors.index.json nor model.safetensors");
    }
  } else if (ends_with(path, ".json")) {
    index_path = path;
  } else {
    return open_single(path);
  }

  HLX_ASSIGN_OR_RETURN(std::string text, read_file(index_path, size_t(64) << 20));
  json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) return make_error(ErrorKind::kParse, index_path, ": not a JSON object");
  auto wm = doc.find("weight_map");
  if (wm == doc.end() || !wm->is_object())
    return make_error(ErrorKind::kParse, index_path, ": missing or non-object 'weight_map'");

  std::string dir = fs::path(index_path).parent_path().string();
  if (dir.empty()) dir = ".";
  Checkpoint c;
  c.source_ = index_path;
  std::map<std::string, size_t> shard_index;  // shard file name -> index into shards_
  std::vector<std::string> shard_names;
  for (const auto& [tensor, file] : wm->items()) {
    if (!file.is_string())
      return make_error(ErrorKind::kParse, index_path, ": weight_map['", tensor, "'] is not a string");
    const std::string& shard_name = file.get_ref<const std::string&>();
    if (!is_plain_file_name(shard_name))
      return make_error(ErrorKind::kParse, index_path, ": weight_map['", tensor, "'] = '", shard_name,
                        "' is not a file name inside the checkpoint directory");
    auto [it, inserted] = shard_index.emplace(shard_name, shard_names.size());
    if (inserted) {
      HLX_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::open(dir + "/" + shard_name));
      c.shards_.push_back(std::move(f));
      shard_names.push_back(shard_name);
    }
    if (!c.shards_[it->second].has(tensor))
      return make_error(ErrorKind::kNotFound, index_path, ": weight_map puts tensor '", tensor, "' in '", shard_name,
                        "', which does not contain it");
    c.shard_of_[tensor] = it->second;
  }
  // Every tensor stored in a shard must be listed, and in exactly that shard.
  for (size_t i = 0; i < c.shards_.size(); ++i) {
    for (const auto& name : c.shards_[i].names()) {
      auto it = c.shard_of_.find(name);
      if (it == c.shard_of_.end())
        return make_error(ErrorKind::kParse, index_path, ": shard '", shard_names[i], "' holds tensor '", name,
                          "', which weight_map does not list");
      if (it->second != i)
        return make_error(ErrorKind::kParse, index_path, ": tensor '", name, "' appears in both '",
                          shard_names[it->second], "' and '", shard_names[i], "'");
    }
  }
  return c;
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  out.reserve(shard_of_.size());
  for (const auto& kv : shard_of_) out.push_back(kv.first);
  return out;
}

Result<const SafetensorsFile*> Checkpoint::shard(const std::string& name) const {
  auto it = shard_of_.find(name);
  if (it == shard_of_.end())
    return make_error(ErrorKind::kNotFound, "checkpoint '", source_, "' has no tensor named '", name, "'");
  return &shards_[it->second];
}

Result<SafetensorsEntry> Checkpoint::entry(const std::string& name) const {
  HLX_ASSIGN_OR_RETURN(const SafetensorsFile* f, shard(name));
  return f->entry(name);
}

Result<Tensor> Checkpoint::tensor(const std::string& name) const {
  HLX_ASSIGN_OR_RETURN(const SafetensorsFile* f, shard(name));
  return f->tensor(name);
}

void Checkpoint::release_pages(const std::string& name) const {
  if (auto f = shard(name); f.ok()) (*f)->release_pages(name);
}

Result<Tensor> Checkpoint::weight(const std::string& name, const Shape& shape) const {
  if (!has(name))
    return make_error(ErrorKind::kNotFound, source_, ": missing tensor '", name, "' (expected shape [",
                      shape_to_string(shape), "])");
  HLX_ASSIGN_OR_RETURN(Tensor t, tensor(name));
  if (auto e = entry(name); e.ok() && e->f8_e4m3)
    return make_error(ErrorKind::kInvalidArgument, source_, ": tensor '", name,
                      "' has dtype F8_E4M3, which only loads as a linear layer of a checkpoint whose "
                      "quantization_config has quant_method fp8 (with its weight_scale_inv)");
  if (t.shape() != shape)
    return make_error(ErrorKind::kInvalidArgument, source_, ": tensor '", name, "' has shape [",
                      shape_to_string(t.shape()), "], expected [", shape_to_string(shape), "]");
  if (!is_float(t.dtype()))
    return make_error(ErrorKind::kInvalidArgument, source_, ": tensor '", name, "' has dtype ", dtype_name(t.dtype()),
                      ", expected a float type (bf16, f16 or f32)");
  return t;
}

Result<std::string> Checkpoint::file_of(const std::string& name) const {
  HLX_ASSIGN_OR_RETURN(const SafetensorsFile* f, shard(name));
  return f->source();
}

}  // namespace hlx
