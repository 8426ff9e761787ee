#include "server/image_input.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <memory>

namespace hlx::server {
namespace {

int b64_value(unsigned char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

uint32_t be16(std::string_view b, size_t i) { return (uint32_t(uint8_t(b[i])) << 8) | uint8_t(b[i + 1]); }
uint32_t be32(std::string_view b, size_t i) { return (be16(b, i) << 16) | be16(b, i + 2); }

int hex(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::optional<std::string> percent_decode(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out += s[i];
      continue;
    }
    if (i + 2 >= s.size() || hex(s[i + 1]) < 0 || hex(s[i + 2]) < 0) return std::nullopt;
    out += char(hex(s[i + 1]) * 16 + hex(s[i + 2]));
    i += 2;
  }
  return out;
}

std::string shorten(std::string_view s) {
  return s.size() <= 64 ? std::string(s) : std::string(s.substr(0, 61)) + "...";
}

ApiError too_large(std::string message, const std::string& param) {
  return ApiError{413, std::move(message), "invalid_request_error", param, "image_too_large"};
}

ApiError read_data_uri(std::string_view url, const ImageLimits& limits, const std::string& param, std::string& bytes) {
  size_t comma = url.find(',');
  if (comma == std::string_view::npos)
    return bad_request("data: URI without ',' separating the media type from the data", param, "invalid_image_url");
  std::string_view meta = url.substr(5, comma - 5), data = url.substr(comma + 1);
  constexpr std::string_view kB64 = ";base64";
  if (meta.size() < kB64.size() || meta.substr(meta.size() - kB64.size()) != kB64)
    return bad_request("data: URI must be base64-encoded ('data:image/png;base64,...')", param, "invalid_image_url");
  std::string_view type = meta.substr(0, meta.find(';'));
  if (!type.empty() && type.substr(0, 6) != "image/")
    return bad_request("data: URI media type '" + shorten(type) + "' is not an image type", param, "invalid_image_url");
  // Reject by size before decoding anything: 4 base64 characters carry 3 bytes.
  const size_t decoded_max = data.size() / 4 * 3 + (data.size() % 4 ? 3 : 0);
  if (decoded_max > limits.max_bytes + 2)
    return too_large("image of about " + std::to_string(data.size() / 4 * 3) + " bytes exceeds the limit of " +
                         std::to_string(limits.max_bytes) + " bytes",
                     param);
  auto decoded = base64_decode(data);
  if (!decoded) return bad_request("invalid base64 data in the data: URI", param, "invalid_base64");
  if (decoded->size() > limits.max_bytes)
    return too_large("image of " + std::to_string(decoded->size()) + " bytes exceeds the limit of " +
                         std::to_string(limits.max_bytes) + " bytes",
                     param);
  bytes = std::move(*decoded);
  return {};
}

ApiError read_local_file(const std::string& path, const ImageLimits& limits, const std::string& param,
                         std::string& bytes) {
  if (limits.allowed_dir.empty())
    return bad_request("local image files are disabled on this server (start it with --allowed-image-dir DIR)", param,
                       "image_path_not_allowed");
  const ApiError not_allowed =
      bad_request("image path '" + shorten(path) + "' is not a readable file under the allowed image directory", param,
                  "image_path_not_allowed");
  if (path.empty() || path[0] != '/' || path.find('\0') != std::string::npos) return not_allowed;
  std::unique_ptr<char, decltype(&std::free)> real(realpath(path.c_str(), nullptr), &std::free);
  if (!real) return not_allowed;
  const std::string resolved(real.get());
  const std::string& root = limits.allowed_dir;
  const bool inside =
      resolved == root || (resolved.size() > root.size() && resolved.compare(0, root.size(), root) == 0 &&
                           (root.back() == '/' || resolved[root.size()] == '/'));
  if (!inside) return not_allowed;
  int fd = open(resolved.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return not_allowed;
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return not_allowed;
  }
  if (size_t(st.st_size) > limits.max_bytes) {
    close(fd);
    return too_large("image file of " + std::to_string(st.st_size) + " bytes exceeds the limit of " +
                         std::to_string(limits.max_bytes) + " bytes",
                     param);
  }
  bytes.resize(size_t(st.st_size));
  size_t got = 0;
  while (got < bytes.size()) {
    ssize_t n = read(fd, bytes.data() + got, bytes.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += size_t(n);
  }
  close(fd);
  bytes.resize(got);
  return {};
}

}  // namespace

std::optional<std::string> base64_decode(std::string_view in) {
  size_t pad = 0;
  while (pad < 2 && pad < in.size() && in[in.size() - 1 - pad] == '=') ++pad;
  if (pad > 0 && in.size() % 4 != 0) return std::nullopt;  // padding only on complete quads
  std::string_view body = in.substr(0, in.size() - pad);
  if (body.size() % 4 == 1) return std::nullopt;
  std::string out;
  out.reserve(body.size() / 4 * 3 + 2);
  uint32_t acc = 0;
  int bits = 0;
  for (unsigned char c : body) {
    int v = b64_value(c);
    if (v < 0) return std::nullopt;
    acc = (acc << 6) | uint32_t(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += char((acc >> bits) & 0xff);
    }
  }
  // Leftover bits of a partial quad must be zero (canonical encoding).
  if (bits > 0 && (acc & ((1u << bits) - 1)) != 0) return std::nullopt;
  return out;
}

std::optional<std::pair<int64_t, int64_t>> image_dimensions(std::string_view b) {
  if (b.size() >= 24 && b.substr(0, 8) == std::string_view("\x89PNG\r\n\x1a\n", 8) && b.substr(12, 4) == "IHDR")
    return std::make_pair(int64_t(be32(b, 16)), int64_t(be32(b, 20)));
  if (b.size() < 4 || uint8_t(b[0]) != 0xFF || uint8_t(b[1]) != 0xD8) return std::nullopt;
  size_t i = 2;
  while (i + 4 <= b.size()) {
    if (uint8_t(b[i]) != 0xFF) return std::nullopt;
    uint8_t marker = uint8_t(b[i + 1]);
    if (marker == 0xFF) {  // fill byte
      ++i;
      continue;
    }
    if ((marker >= 0xD0 && marker <= 0xD7) || marker == 0x01) {  // no length field
      i += 2;
      continue;
    }
    if (marker == 0xD9 || marker == 0xDA) return std::nullopt;  // end / scan before any frame header
    uint32_t len = be16(b, i + 2);
    const bool sof = marker >= 0xC0 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 && marker != 0xCC;
    if (sof) {
      if (i + 9 > b.size() || len < 7) return std::nullopt;
      return std::make_pair(int64_t(be16(b, i + 7)), int64_t(be16(b, i + 5)));  // (width, height)
    }
    if (len < 2) return std::nullopt;
    i += 2 + len;
  }
  return std::nullopt;
}

ApiError read_image_url(std::string_view url, const ImageLimits& limits, const std::string& param, std::string& bytes) {
  if (url.substr(0, 5) == "data:") return read_data_uri(url, limits, param, bytes);
  if (url.substr(0, 7) == "file://") {
    std::string_view rest = url.substr(7);
    if (rest.substr(0, 9) == "localhost") rest.remove_prefix(9);
    if (rest.empty() || rest[0] != '/')
      return bad_request("file:// URL must name an absolute local path ('file:///dir/image.png')", param,
                         "invalid_image_url");
    auto path = percent_decode(rest);
    if (!path) return bad_request("malformed percent-encoding in the file:// URL", param, "invalid_image_url");
    return read_local_file(*path, limits, param, bytes);
  }
  if (!url.empty() && url[0] == '/') return read_local_file(std::string(url), limits, param, bytes);
  if (url.substr(0, 7) == "http://" || url.substr(0, 8) == "https://")
    return bad_request("remote image URLs are not fetched by this server; send the image as a data: URI", param,
                       "invalid_image_url");
  return bad_request("image_url must be a data: URI, a file:// URL or an absolute path; got '" + shorten(url) + "'",
                     param, "invalid_image_url");
}

ApiError load_image_url(std::string_view url, const ImageLimits& limits, const std::string& param, mm::Image& image) {
  std::string bytes;
  ApiError e = read_image_url(url, limits, param, bytes);
  if (!e.ok()) return e;
  if (mm::sniff_image_format(bytes) == mm::ImageFormat::kUnknown)
    return bad_request("the image data is not a PNG or JPEG image", param, "invalid_image");
  if (auto dims = image_dimensions(bytes)) {
    auto [w, h] = *dims;
    if (w > 0 && h > 0 && (w > limits.max_pixels / h || w * h > limits.max_pixels))
      return too_large("image of " + std::to_string(w) + "x" + std::to_string(h) + " pixels exceeds the limit of " +
                           std::to_string(limits.max_pixels) + " pixels",
                       param);
  }
  mm::DecodeOptions opts;
  opts.max_pixels = limits.max_pixels;  // backstop for headers the scan above did not find
  auto decoded = mm::decode_image(bytes, opts, param);
  if (!decoded.ok()) {
    ApiError err = bad_request("the image could not be decoded: " + decoded.status().message(), param, "invalid_image");
    return err;
  }
  image = std::move(*decoded);
  return {};
}

}  // namespace hlx::server
