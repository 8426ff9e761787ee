// A Hugging Face checkpoint's weights: one `model.safetensors`, or shards listed by
// `model.safetensors.index.json` (weight_map: tensor name -> shard file in the same directory).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "io/safetensors.h"

namespace hlx {

// Immutable after open(); safe to share between threads. Tensors borrow the mapped shards.
class Checkpoint {
 public:
  // `path` may be a directory (index preferred over a single file), a `.safetensors` file, or a
  // `.index.json` file. Validates that every shard exists and parses, that every weight_map entry
  // is in the shard it names, that no tensor appears in two shards, and that every tensor in a
  // shard is listed in weight_map.
  static Result<Checkpoint> open(const std::string& path);

  // Sorted tensor names across all shards.
  std::vector<std::string> names() const;
  bool has(const std::string& name) const { return shard_of_.count(name) != 0; }
  size_t size() const { return shard_of_.size(); }
  // kNotFound naming the tensor and the checkpoint when absent.
  Result<SafetensorsEntry> entry(const std::string& name) const;
  Result<Tensor> tensor(const std::string& name) const;
  // SafetensorsFile::release_pages of the shard holding `name` (no-op when absent).
  void release_pages(const std::string& name) const;
  // A model weight: `name` must exist with exactly `shape` and a float dtype (bf16, f16 or f32;
  // kept as stored). Errors (kNotFound / kInvalidArgument) name the checkpoint, the tensor and
  // both the expected and the found value.
  Result<Tensor> weight(const std::string& name, const Shape& shape) const;
  // File (path as opened) holding `name`, kNotFound when absent.
  Result<std::string> file_of(const std::string& name) const;
  const std::vector<SafetensorsFile>& shards() const { return shards_; }
  const std::string& source() const { return source_; }

 private:
  static Result<Checkpoint> open_single(const std::string& path);
  Result<const SafetensorsFile*> shard(const std::string& name) const;

  std::string source_;
  std::vector<SafetensorsFile> shards_;
  std::map<std::string, size_t> shard_of_;  // tensor name -> index into shards_
};

}  // namespace hlx
