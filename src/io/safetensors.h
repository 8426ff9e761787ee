// Reading and writing the safetensors format (https://github.com/huggingface/safetensors):
//   8-byte little-endian header length N | N bytes of JSON header | data section.
// The header maps tensor name -> {dtype, shape, data_offsets: [begin, end)} relative to the data
// section, plus an optional "__metadata__" string->string map.
#pragma once

#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"

namespace hlx {

class MappedFile;

// Headers above this size are rejected before parsing (real checkpoints use well under 1 MiB).
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = uint64_t(100) << 20;

struct SafetensorsEntry {
  DType dtype;
  Shape shape;
  uint64_t begin = 0;  // byte offsets within the data section, [begin, end)
  uint64_t end = 0;
  // 8-bit float tensors ("F8_E4M3", the FP8 checkpoints' float8_e4m3fn) have no hlx DType: they
  // are read as raw u8 bytes and this flag says what the bytes are (io/quantized.h decodes them).
  bool f8_e4m3 = false;
};

// One parsed safetensors file. Immutable after open(); safe to share between threads.
//
// Validation on open (all failures are errors, never crashes):
//   header length within the file and below kMaxSafetensorsHeaderBytes (kIo / kParse),
//   header is a JSON object (kParse), every dtype is one hlx supports or F8_E4M3 (kUnsupported),
//   shapes are non-negative integers, offsets are [begin <= end] inside the data section and
//   end - begin == num_elements * dtype size (kParse / kIo), tensors do not overlap and cover the
//   data section without holes, exactly as the reference implementation requires (kParse).
class SafetensorsFile {
 public:
  // Memory-maps `path` (read-only, private) and validates the header.
  static Result<SafetensorsFile> open(const std::string& path);
  // Parses bytes held in memory (copied); `source` names them in error messages. For fuzzing/tests.
  static Result<SafetensorsFile> from_bytes(std::string bytes, const std::string& source = "<memory>");

  const std::string& source() const { return source_; }
  // Tensor names in sorted order.
  std::vector<std::string> names() const;
  bool has(const std::string& name) const { return entries_.count(name) != 0; }
  size_t size() const { return entries_.size(); }
  // kNotFound when absent.
  Result<SafetensorsEntry> entry(const std::string& name) const;
  // A tensor that BORROWS the file's bytes (no copy); it keeps the mapping alive. The bytes are
  // read-only: writing through raw() faults. Safetensors offsets need not be aligned to the dtype
  // size, so data() may be unaligned: fine for x86 loads and memcpy, but kernels that need
  // alignment must copy or pack first.
  Result<Tensor> tensor(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // After a loader copied a tensor into packed weights: drops its pages from the resident set
  // when the file is memory-mapped (a later tensor() re-reads them); a no-op for from_bytes.
  void release_pages(const std::string& name) const;

 private:
  static Result<SafetensorsFile> parse(std::shared_ptr<const void> keepalive, const uint8_t* data, size_t size,
                                       const std::string& source);

  std::string source_;
  std::shared_ptr<const void> keepalive_;      // the mapping or the in-memory buffer
  std::shared_ptr<const MappedFile> mapping_;  // set by open()
  const uint8_t* data_section_ = nullptr;
  std::map<std::string, SafetensorsEntry> entries_;
  std::map<std::string, std::string> metadata_;
};

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// The complete file contents: header padded with spaces to a multiple of 8 bytes, then the
// tensors' bytes back to back in the given order. kInvalidArgument for empty, duplicate or
// reserved ("__metadata__") names and undefined tensors.
Result<std::string> serialize_safetensors(const NamedTensors& tensors,
                                          const std::map<std::string, std::string>& metadata = {});
// Same layout, streamed to `path` (written to a temporary file, then renamed). The u8 tensors
// named in `f8_e4m3` are written with dtype "F8_E4M3" (raw float8_e4m3fn bytes).
Status write_safetensors(const std::string& path, const NamedTensors& tensors,
                         const std::map<std::string, std::string>& metadata = {},
                         const std::set<std::string>& f8_e4m3 = {});

// Splits `tensors` (in order) into shards of at most `max_shard_bytes` payload each (a tensor
// larger than that gets a shard of its own), writes `model-0000i-of-0000n.safetensors` into `dir`
// and the Hugging Face index `model.safetensors.index.json` with metadata.total_size and
// weight_map. Returns the shard file names in order.
Result<std::vector<std::string>> write_safetensors_sharded(const std::string& dir, const NamedTensors& tensors,
                                                           uint64_t max_shard_bytes,
                                                           const std::map<std::string, std::string>& metadata = {});

}  // namespace hlx
