// Encoded image features kept across requests: an LRU keyed by a SHA-256 over the preprocessed
// image (pixel bytes, their dtype and shape, the patch grid, the token count) and the tower's
// identity, bounded in bytes (BatchEngineOptions::image_cache_bytes). A repeated image (the same
// pixels after preprocessing, whatever file bytes it came from) skips vision_encode; its
// features are the very tensors the first encode returned, so everything after is the same bits.
//
// Threads: key() is pure (BatchEngine::submit hashes on the submitting thread); the rest is used
// by the engine's owning thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "engine/vision_model.h"

namespace hlx::engine {

class ImageFeatureCache {
 public:
  explicit ImageFeatureCache(size_t max_bytes) : max_bytes_(max_bytes) {}

  // Hex SHA-256 of `image` after preprocessing and of `tower` (VisionModel::describe()). A cache
  // belongs to one engine and its one VisionModel, so another tower's features are never served.
  static std::string key(const PreparedImage& image, std::string_view tower);

  // A hit becomes the most recently used entry; the returned tensors share its storage (read them
  // only). nullopt on a miss.
  std::optional<EncodedImage> find(const std::string& key);
  // Keeps `features` under `key`, evicting least recently used entries to stay within the bound;
  // an entry larger than the whole bound is not kept.
  void put(const std::string& key, const EncodedImage& features);

  size_t bytes() const { return bytes_; }
  size_t entries() const { return lru_.size(); }
  size_t max_bytes() const { return max_bytes_; }

 private:
  using Entry = std::pair<std::string, EncodedImage>;
  static size_t size_of(const EncodedImage& f);
  size_t max_bytes_;
  size_t bytes_ = 0;
  std::list<Entry> lru_;  // most recently used first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
};

}  // namespace hlx::engine
