// SHA-256 (FIPS 180-4), used for module identities. Incremental: update() any number of times,
// then hex_digest() / digest(). Not thread-safe per object; cheap to create.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace hlx {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t size);
  void update(std::string_view s) { update(s.data(), s.size()); }
  // Finishes the hash; the object must not be updated afterwards (a second call returns the
  // same digest).
  std::array<uint8_t, 32> digest();
  std::string hex_digest();

 private:
  void compress(const uint8_t block[64]);
  uint32_t h_[8];
  uint8_t buf_[64];
  size_t buf_len_ = 0;
  uint64_t total_bytes_ = 0;
  bool finished_ = false;
  std::array<uint8_t, 32> out_{};
};

// Lowercase hex SHA-256 of `data`.
std::string sha256_hex(std::string_view data);

}  // namespace hlx
