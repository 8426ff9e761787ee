#include "io/safetensors.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <set>

#include <nlohmann/json.hpp>

#include "io/file.h"

namespace hlx {

using nlohmann::json;

namespace {

uint64_t load_le64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

void store_le64(uint64_t v, char* out) {
  for (int i = 0; i < 8; ++i) out[i] = char((v >> (8 * i)) & 0xff);
}

// A JSON integer that fits in int64 and is >= 0; floats, negatives and huge values are rejected.
bool as_non_negative_int(const json& v, uint64_t* out) {
  if (!v.is_number_integer()) return false;
  if (v.is_number_unsigned()) {
    uint64_t u = v.get<uint64_t>();
    if (u > uint64_t(INT64_MAX)) return false;
    *out = u;
    return true;
  }
  int64_t i = v.get<int64_t>();
  if (i < 0) return false;
  *out = uint64_t(i);
  return true;
}

std::string supported_dtype_list() {
  std::string s;
  for (DType t : kAllDTypes) {
    if (!s.empty()) s += ", ";
    s += dtype_safetensors_name(t);
  }
  return s;
}

Result<SafetensorsEntry> parse_entry(const std::string& source, const std::string& name, const json& v) {
  auto bad = [&](const auto&... what) {
    return make_error(ErrorKind::kParse, source, ": tensor '", name, "': ", what...);
  };
  if (!v.is_object()) return bad("header entry is not a JSON object");
  auto dt = v.find("dtype");
  auto sh = v.find("shape");
  auto off = v.find("data_offsets");
  if (dt == v.end() || !dt->is_string()) return bad("missing or non-string 'dtype'");
  if (sh == v.end() || !sh->is_array()) return bad("missing or non-array 'shape'");
  if (off == v.end() || !off->is_array() || off->size() != 2)
    return bad("'data_offsets' must be an array [begin, end]");

  SafetensorsEntry e;
  const std::string& dtype_str = dt->get_ref<const std::string&>();
  auto dtype = dtype_from_safetensors_name(dtype_str);
  if (dtype_str == "F8_E4M3") {
    dtype = DType::kU8;  // raw bytes, decoded by the FP8 loader
    e.f8_e4m3 = true;
  }
  if (!dtype)
    return make_error(ErrorKind::kUnsupported, source, ": tensor '", name, "' has dtype '", dtype_str,
                      "', which hlx does not support (supported: ", supported_dtype_list(), ", F8_E4M3)");
  e.dtype = *dtype;
  for (size_t i = 0; i < sh->size(); ++i) {
    uint64_t d;
    if (!as_non_negative_int((*sh)[i], &d)) return bad("shape[", i, "] is not a non-negative integer");
    e.shape.push_back(int64_t(d));
  }
  if (!as_non_negative_int((*off)[0], &e.begin) || !as_non_negative_int((*off)[1], &e.end))
    return bad("data_offsets are not non-negative integers");
  if (e.begin > e.end) return bad("data_offsets [", e.begin, ", ", e.end, "] have begin > end");
  auto count = checked_num_elements(e.shape);
  if (!count.ok()) return bad(count.status().message());
  uint64_t expected = uint64_t(*count) * dtype_size(e.dtype);  // count <= 2^48, no overflow
  if (e.end - e.begin != expected)
    return bad(dtype_str, "[", shape_to_string(e.shape), "] needs ", expected, " bytes but data_offsets [", e.begin,
               ", ", e.end, "] span ", e.end - e.begin);
  return e;
}

}  // namespace

Result<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  HLX_ASSIGN_OR_RETURN(auto mapped, MappedFile::open(path));
  const uint8_t* data = mapped->data();
  size_t size = mapped->size();
  HLX_ASSIGN_OR_RETURN(SafetensorsFile file, parse(mapped, data, size, path));
  file.mapping_ = std::move(mapped);
  return file;
}

void SafetensorsFile::release_pages(const std::string& name) const {
  auto it = entries_.find(name);
  if (!mapping_ || it == entries_.end()) return;
  mapping_->release_pages(data_section_ + it->second.begin, it->second.end - it->second.begin);
}

Result<SafetensorsFile> SafetensorsFile::from_bytes(std::string bytes, const std::string& source) {
  auto owned = std::make_shared<const std::string>(std::move(bytes));
  auto data = reinterpret_cast<const uint8_t*>(owned->data());
  size_t size = owned->size();
  return parse(std::move(owned), data, size, source);
}

Result<SafetensorsFile> SafetensorsFile::parse(std::shared_ptr<const void> keepalive, const uint8_t* data, size_t size,
                                               const std::string& source) {
  if (size < 8)
    return make_error(ErrorKind::kIo, source, ": file has ", size, " bytes, too short for the 8-byte header length");
  uint64_t header_len = load_le64(data);
  if (header_len > kMaxSafetensorsHeaderBytes)
    return make_error(ErrorKind::kParse, source, ": header length ", header_len, " exceeds the limit of ",
                      kMaxSafetensorsHeaderBytes, " bytes");
  if (header_len > size - 8)
    return make_error(ErrorKind::kIo, source, ": header length ", header_len, " exceeds the ", size - 8,
                      " bytes after the length field (truncated file?)");
  const char* header = reinterpret_cast<const char*>(data + 8);
  if (header_len == 0 || header[0] != '{')
    return make_error(ErrorKind::kParse, source, ": header does not start with '{'");

  json doc = json::parse(header, header + header_len, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return make_error(ErrorKind::kParse, source, ": header is not valid JSON");
  if (!doc.is_object()) return make_error(ErrorKind::kParse, source, ": header is not a JSON object");

  SafetensorsFile file;
  file.source_ = source;
  file.data_section_ = data + 8 + header_len;
  const uint64_t data_len = size - 8 - header_len;

  for (const auto& [name, value] : doc.items()) {
    if (name == "__metadata__") {
      if (!value.is_object()) return make_error(ErrorKind::kParse, source, ": __metadata__ is not a JSON object");
      for (const auto& [k, v] : value.items()) {
        if (!v.is_string())
          return make_error(ErrorKind::kParse, source, ": __metadata__ value for '", k, "' is not a string");
        file.metadata_[k] = v.get<std::string>();
      }
      continue;
    }
    HLX_ASSIGN_OR_RETURN(SafetensorsEntry e, parse_entry(source, name, value));
    if (e.end > data_len)
      return make_error(ErrorKind::kIo, source, ": tensor '", name, "' data_offsets [", e.begin, ", ", e.end,
                        "] extend past the data section of ", data_len, " bytes (truncated file?)");
    file.entries_.emplace(name, std::move(e));
  }

  // Like the reference implementation: tensors tile the data section exactly, in offset order.
  // This rules out overlapping tensors and hidden bytes (polyglot files) alike.
  std::vector<std::pair<const std::string*, const SafetensorsEntry*>> order;
  for (const auto& [name, e] : file.entries_) order.emplace_back(&name, &e);
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return std::tie(a.second->begin, a.second->end) < std::tie(b.second->begin, b.second->end);
  });
  uint64_t covered = 0;
  const std::string* prev = nullptr;
  for (const auto& [name, e] : order) {
    if (e->begin < covered)
      return make_error(ErrorKind::kParse, source, ": tensor '", *name, "' at [", e->begin, ", ", e->end,
                        ") overlaps tensor '", *prev, "' which ends at ", covered);
    if (e->begin > covered)
      return make_error(ErrorKind::kParse, source, ": bytes [", covered, ", ", e->begin,
                        ") of the data section belong to no tensor (before '", *name, "')");
    covered = e->end;
    prev = name;
  }
  if (covered != data_len)
    return make_error(ErrorKind::kParse, source, ": tensors cover ", covered, " bytes but the data section has ",
                      data_len, " bytes");
  file.keepalive_ = std::move(keepalive);
  return file;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const auto& kv : entries_) out.push_back(kv.first);
  return out;
}

Result<SafetensorsEntry> SafetensorsFile::entry(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) return make_error(ErrorKind::kNotFound, source_, ": no tensor named '", name, "'");
  return it->second;
}

Result<Tensor> SafetensorsFile::tensor(const std::string& name) const {
  HLX_ASSIGN_OR_RETURN(SafetensorsEntry e, entry(name));
  // The Tensor API is mutable; the mapping is PROT_READ so a stray write faults instead of
  // silently changing weights.
  void* p = const_cast<uint8_t*>(data_section_ + e.begin);
  return Tensor::borrow(e.dtype, e.shape, p, std::const_pointer_cast<void>(keepalive_));
}

// ---------------------------------------------------------------------------------------------
// Writing

namespace {

// The 8-byte length plus the padded JSON header.
Result<std::string> build_header(const NamedTensors& tensors, const std::map<std::string, std::string>& metadata,
                                 const std::set<std::string>& f8_e4m3 = {}) {
  nlohmann::ordered_json doc = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) meta[k] = v;
    doc["__metadata__"] = std::move(meta);
  }
  std::set<std::string> seen;
  uint64_t offset = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& [name, t] = tensors[i];
    if (name.empty() || name == "__metadata__")
      return make_error(ErrorKind::kInvalidArgument, "safetensors writer: tensor #", i, " has reserved name '", name,
                        "'");
    if (!seen.insert(name).second)
      return make_error(ErrorKind::kInvalidArgument, "safetensors writer: duplicate tensor name '", name, "'");
    if (!t.defined())
      return make_error(ErrorKind::kInvalidArgument, "safetensors writer: tensor '", name, "' has no data");
    uint64_t bytes = t.nbytes();
    const bool f8 = f8_e4m3.count(name) != 0;
    if (f8 && t.dtype() != DType::kU8)
      return make_error(ErrorKind::kInvalidArgument, "safetensors writer: F8_E4M3 tensor '", name, "' is ",
                        dtype_name(t.dtype()), ", expected its raw bytes as u8");
    doc[name] = {{"dtype", f8 ? std::string("F8_E4M3") : std::string(dtype_safetensors_name(t.dtype()))},
                 {"shape", t.shape()},
                 {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text;
  try {
    text = doc.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::strict);
  } catch (const nlohmann::json::exception& e) {
    return make_error(ErrorKind::kInvalidArgument,
                      "safetensors writer: a tensor name or metadata string is not valid UTF-8: ", e.what());
  }
  // Pad with spaces so the data section starts 8-byte aligned, as the reference writer does.
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  store_le64(text.size(), out.data());
  out += text;
  return out;
}

std::string_view payload(const Tensor& t) { return std::string_view(static_cast<const char*>(t.raw()), t.nbytes()); }

}  // namespace

Result<std::string> serialize_safetensors(const NamedTensors& tensors,
                                          const std::map<std::string, std::string>& metadata) {
  HLX_ASSIGN_OR_RETURN(std::string out, build_header(tensors, metadata));
  for (const auto& [name, t] : tensors) out.append(payload(t));
  return out;
}

Status write_safetensors(const std::string& path, const NamedTensors& tensors,
                         const std::map<std::string, std::string>& metadata, const std::set<std::string>& f8_e4m3) {
  HLX_ASSIGN_OR_RETURN(std::string header, build_header(tensors, metadata, f8_e4m3));
  std::vector<std::string_view> pieces{header};
  for (const auto& [name, t] : tensors) pieces.push_back(payload(t));
  return write_file_pieces(path, pieces.data(), pieces.size());
}

Result<std::vector<std::string>> write_safetensors_sharded(const std::string& dir, const NamedTensors& tensors,
                                                           uint64_t max_shard_bytes,
                                                           const std::map<std::string, std::string>& metadata) {
  if (max_shard_bytes == 0)
    return make_error(ErrorKind::kInvalidArgument, "write_safetensors_sharded: max_shard_bytes is 0");
  // Greedy split in the given order.
  std::vector<NamedTensors> shards;
  uint64_t current = 0;
  uint64_t total = 0;
  for (const auto& nt : tensors) {
    uint64_t bytes = nt.second.nbytes();
    if (shards.empty() || (current > 0 && current + bytes > max_shard_bytes)) {
      shards.emplace_back();
      current = 0;
    }
    shards.back().push_back(nt);
    current += bytes;
    total += bytes;
  }
  if (shards.empty()) shards.emplace_back();

  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return make_error(ErrorKind::kIo, "cannot create directory '", dir, "': ", ec.message());

  std::vector<std::string> files;
  json weight_map = json::object();
  for (size_t i = 0; i < shards.size(); ++i) {
    char name[64];
    std::snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors", i + 1, shards.size());
    files.push_back(name);
    for (const auto& nt : shards[i]) weight_map[nt.first] = name;
  }
  // Validate names (duplicates across shards) before writing anything.
  HLX_RETURN_IF_ERROR(build_header(tensors, metadata).status());
  for (size_t i = 0; i < shards.size(); ++i)
    HLX_RETURN_IF_ERROR(write_safetensors(dir + "/" + files[i], shards[i], metadata));
  json index = {{"metadata", {{"total_size", total}}}, {"weight_map", std::move(weight_map)}};
  HLX_RETURN_IF_ERROR(write_file(dir + "/model.safetensors.index.json", index.dump(2) + "\n"));
  return files;
}

}  // namespace hlx
