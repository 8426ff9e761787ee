// Images in requests: OpenAI `image_url` parts turned into decoded RGB images, with every check
// done before anything large is allocated.
//
// Accepted URLs:
//   data:[image/<subtype>][;params];base64,<RFC 4648 base64>   (the bytes must be PNG or JPEG)
//   file:///abs/path, file://localhost/abs/path (percent-decoded), /abs/path
//     only when the operator set an allowed directory: the path is resolved with realpath()
//     (symlinks and "..") and must lie inside the resolved allowed directory.
// http(s) URLs are refused (the server never fetches from the network).
//
// Status codes: 400 for malformed URIs, bad base64, bytes that are not PNG/JPEG, corrupt images
// and paths outside the allowed directory (or missing: the two are reported alike so the answer
// does not reveal which files exist); 413 for encoded bytes above max_bytes or width*height above
// max_pixels (read from the PNG IHDR / JPEG SOF header before decoding).
//
// Thread-safety: pure functions; safe concurrently.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "multimodal/image.h"
#include "server/api_error.h"

namespace hlx::server {

struct ImageLimits {
  size_t max_bytes = 16u << 20;                // encoded image bytes
  int64_t max_pixels = 4096LL * 4096;          // width * height
  int64_t max_request_pixels = 4096LL * 4096;  // summed over one request's images (server.cc)
  std::string allowed_dir;                     // realpath of the allowed directory; empty: no local files
};

// Strict RFC 4648 base64 (standard alphabet). Padding is optional but, when present, must be
// correct; no whitespace or other characters. nullopt for invalid input.
std::optional<std::string> base64_decode(std::string_view in);

// Width and height from a PNG IHDR or a JPEG SOFn header; nullopt when not found.
std::optional<std::pair<int64_t, int64_t>> image_dimensions(std::string_view bytes);

// The encoded bytes an image URL names (data: or local file), checked against the limits above.
// `param` names the request field in errors.
ApiError read_image_url(std::string_view url, const ImageLimits& limits, const std::string& param, std::string& bytes);

// read_image_url + sniffing + dimension check + mm::decode_image.
ApiError load_image_url(std::string_view url, const ImageLimits& limits, const std::string& param, mm::Image& image);

}  // namespace hlx::server
