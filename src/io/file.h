// Small file helpers for the io layer: a read-only memory map, whole-file reads and writes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "core/status.h"

namespace hlx {

// A read-only, private memory map of a whole file. Thread-safe to read from concurrently.
// Pages are mapped PROT_READ: writing through a pointer into the map faults.
class MappedFile {
 public:
  // kNotFound when the file is missing, kIo for any other open/stat/mmap failure.
  // An empty file maps to data() == nullptr, size() == 0.
  static Result<std::shared_ptr<const MappedFile>> open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // Drops the whole pages inside [p, p + bytes) (which must lie in this mapping) from the
  // process's resident set: a private read-only file mapping re-reads them from the page cache if
  // touched again. For bytes a loader has copied into packed weights.
  void release_pages(const void* p, size_t bytes) const;

 private:
  MappedFile() = default;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

// Whole file into memory. kNotFound when missing, kIo otherwise; refuses files above max_bytes.
Result<std::string> read_file(const std::string& path, size_t max_bytes = size_t(1) << 34);

// Writes `bytes` to `path` through a temporary file in the same directory and a rename, so a
// reader never sees a half-written file.
Status write_file(const std::string& path, std::string_view bytes);

// Writes several pieces in order (header + tensor payloads) without concatenating them first.
Status write_file_pieces(const std::string& path, const std::string_view* pieces, size_t count);

}  // namespace hlx
