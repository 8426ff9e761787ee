#include "engine/image_cache.h"

#include "core/sha256.h"

namespace hlx::engine {

std::string ImageFeatureCache::key(const PreparedImage& image, std::string_view tower) {
  Sha256 h;
  // Fixed-width fields, each length-prefixed by its position, so distinct inputs never collide by
  // concatenation.
  auto i64 = [&](int64_t v) { h.update(&v, sizeof v); };
  i64(int64_t(tower.size()));
  h.update(tower);
  i64(int64_t(image.pixels.dtype()));
  i64(image.pixels.rank());
  for (int64_t d : image.pixels.shape()) i64(d);
  i64(image.grid.t);
  i64(image.grid.h);
  i64(image.grid.w);
  i64(image.tokens);
  if (image.pixels.raw()) h.update(image.pixels.raw(), image.pixels.nbytes());
  return h.hex_digest();
}

size_t ImageFeatureCache::size_of(const EncodedImage& f) {
  auto bytes = [](const Tensor& t) { return t.raw() ? t.nbytes() : size_t(0); };
  return bytes(f.features) + bytes(f.deepstack);
}

std::optional<EncodedImage> ImageFeatureCache::find(const std::string& key) {
  auto it = index_.find(key);
  if (it == index_.end()) return std::nullopt;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->second;
}

void ImageFeatureCache::put(const std::string& key, const EncodedImage& features) {
  const size_t size = size_of(features);
  if (size > max_bytes_ || index_.count(key)) return;
  while (bytes_ + size > max_bytes_ && !lru_.empty()) {
    bytes_ -= size_of(lru_.back().second);
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
  lru_.emplace_front(key, features);
  index_[key] = lru_.begin();
  bytes_ += size;
}

}  // namespace hlx::engine
