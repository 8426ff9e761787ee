#include "multimodal/preprocess.h"

#include <cmath>
#include <cstdio>

#include "io/file.h"
#include "multimodal/qwen3_vl_processor.h"

namespace hlx::mm {

namespace {

// `size` / `crop_size`: an object, or (older configs) a bare int meaning a square.
Status read_size(const ConfigView& view, const std::string& key, int64_t* shortest, int64_t* h, int64_t* w) {
  if (!view.has(key)) return ok_status();
  auto sub = view.optional_sub(key);
  if (!sub.ok()) {
    HLX_ASSIGN_OR_RETURN(int64_t s, view.require_int(key));
    if (shortest) {
      *shortest = s;
    } else {
      *h = s;
      *w = s;
    }
    return ok_status();
  }
  const ConfigView& v = *sub;
  if (v.has("shortest_edge") && shortest) {
    HLX_ASSIGN_OR_RETURN(*shortest, v.require_int("shortest_edge"));
    *h = *w = 0;
    return ok_status();
  }
  if (v.has("height") || v.has("width")) {
    HLX_ASSIGN_OR_RETURN(*h, v.require_int("height"));
    HLX_ASSIGN_OR_RETURN(*w, v.require_int("width"));
    if (shortest) *shortest = 0;
    return ok_status();
  }
  return make_error(
      ErrorKind::kUnsupported, view.where(), ": ", key, " must have shortest_edge or height and width (keys: ",
      [&] {
        std::string s;
        for (auto& k : v.keys()) s += (s.empty() ? "" : ", ") + k;
        return s;
      }(),
      ")");
}

}  // namespace

Result<PreprocessConfig> PreprocessConfig::from_config(const ConfigView& view) {
  // A Qwen2-VL config's `size` holds pixel counts (shortest_edge = min h*w), not an edge.
  HLX_ASSIGN_OR_RETURN(ImageProcessorKind kind, image_processor_kind(view));
  if (kind != ImageProcessorKind::kFixed)
    return make_error(ErrorKind::kUnsupported, view.where(),
                      ": a Qwen2VLImageProcessor config (dynamic resolution) is read by Qwen2VLImageConfig");
  PreprocessConfig c;
  HLX_ASSIGN_OR_RETURN(c.do_resize, view.optional_bool("do_resize", true));
  HLX_RETURN_IF_ERROR(read_size(view, "size", &c.shortest_edge, &c.height, &c.width));
  if (!view.has("size")) c.shortest_edge = 224;
  HLX_ASSIGN_OR_RETURN(int64_t resample, view.optional_int("resample", 3));
  HLX_ASSIGN_OR_RETURN(c.resample, resample_from_pil(resample));
  HLX_ASSIGN_OR_RETURN(c.do_center_crop, view.optional_bool("do_center_crop", false));
  HLX_RETURN_IF_ERROR(read_size(view, "crop_size", nullptr, &c.crop_height, &c.crop_width));
  HLX_ASSIGN_OR_RETURN(c.do_rescale, view.optional_bool("do_rescale", true));
  HLX_ASSIGN_OR_RETURN(c.rescale_factor, view.optional_float("rescale_factor", 1.0 / 255.0));
  HLX_ASSIGN_OR_RETURN(c.do_normalize, view.optional_bool("do_normalize", true));
  // Gemma3ImageProcessor: pan-and-scan crops an image into several, each its own image block.
  HLX_ASSIGN_OR_RETURN(bool pan_and_scan, view.optional_bool("do_pan_and_scan", false));
  if (pan_and_scan)
    return make_error(
        ErrorKind::kUnsupported, view.where(),
        ": do_pan_and_scan true (Gemma3 pan-and-scan crops are not implemented; set it to false or null)");
  HLX_ASSIGN_OR_RETURN(auto mean, view.optional_float_array("image_mean"));
  HLX_ASSIGN_OR_RETURN(auto stdv, view.optional_float_array("image_std"));
  if (!mean.empty()) c.image_mean = mean;
  if (!stdv.empty()) c.image_std = stdv;
  if (c.image_mean.size() != 3 || c.image_std.size() != 3)
    return make_error(ErrorKind::kInvalidArgument, view.where(), ": image_mean and image_std need 3 values, got ",
                      c.image_mean.size(), " and ", c.image_std.size());
  for (double s : c.image_std)
    if (!(s != 0.0)) return make_error(ErrorKind::kInvalidArgument, view.where(), ": image_std has a zero");
  if (c.do_resize && c.shortest_edge <= 0 && (c.height <= 0 || c.width <= 0))
    return make_error(ErrorKind::kInvalidArgument, view.where(), ": size must be positive (shortest_edge ",
                      c.shortest_edge, ", height ", c.height, ", width ", c.width, ")");
  if (c.do_center_crop && (c.crop_height <= 0 || c.crop_width <= 0))
    return make_error(ErrorKind::kInvalidArgument, view.where(), ": do_center_crop needs a positive crop_size, got ",
                      c.crop_height, "x", c.crop_width);
  return c;
}

Result<PreprocessConfig> PreprocessConfig::load(const std::string& path) {
  std::string file = path;
  if (auto dir = read_file(path + "/preprocessor_config.json", size_t(1) << 24); dir.ok()) {
    file = path + "/preprocessor_config.json";
  }
  HLX_ASSIGN_OR_RETURN(std::string text, read_file(file, size_t(1) << 24));
  HLX_ASSIGN_OR_RETURN(HfConfig cfg, HfConfig::parse(text, file));
  return from_config(cfg.root());
}

Result<std::pair<int64_t, int64_t>> resize_output_size(const PreprocessConfig& cfg, int64_t height, int64_t width) {
  if (height <= 0 || width <= 0) return make_error(ErrorKind::kInvalidArgument, "image is empty: ", width, "x", height);
  if (cfg.shortest_edge > 0) {
    const int64_t s = cfg.shortest_edge;
    const int64_t short_side = std::min(height, width), long_side = std::max(height, width);
    // Python: int(size * long / short) (true division, truncation).
    const int64_t new_long = int64_t(double(s * long_side) / double(short_side));
    if (new_long <= 0 || new_long > (int64_t(1) << 24))
      return make_error(ErrorKind::kInvalidArgument, "image ", width, "x", height, " resized to shortest edge ", s,
                        " gives a long side of ", new_long, " pixels");
    return height <= width ? std::make_pair(s, new_long) : std::make_pair(new_long, s);
  }
  return std::make_pair(cfg.height, cfg.width);
}

namespace {

// The rectangle (in image coordinates, possibly reaching outside it) that center_crop copies
// from an image of height x width; outside parts are zero padding.
ResizeWindow center_crop_rect(int64_t height, int64_t width, int64_t crop_height, int64_t crop_width) {
  auto floordiv2 = [](int64_t v) { return v >= 0 ? v / 2 : -((-v + 1) / 2); };
  const int64_t top = floordiv2(height - crop_height);
  const int64_t left = floordiv2(width - crop_width);
  if (top >= 0 && left >= 0 && top + crop_height <= height && left + crop_width <= width)
    return {top, left, crop_height, crop_width};
  // HF pads to max(crop, orig) with the image at ceil((new - orig) / 2), then crops the window
  // shifted by that pad, clamped to the padded canvas.
  const int64_t new_h = std::max(crop_height, height), new_w = std::max(crop_width, width);
  const int64_t top_pad = (new_h - height + 1) / 2, left_pad = (new_w - width + 1) / 2;
  int64_t t = top + top_pad, b = top + crop_height + top_pad;
  int64_t l = left + left_pad, r = left + crop_width + left_pad;
  t = std::max<int64_t>(0, t);
  b = std::min(new_h, b);
  l = std::max<int64_t>(0, l);
  r = std::min(new_w, r);
  // Canvas coordinates -> image coordinates.
  return {t - top_pad, l - left_pad, b - t, r - l};
}

// What preprocess_u8 resizes: the full result, or only the part of the crop rectangle inside it.
struct ResizePlan {
  int64_t height = 0, width = 0;  // the resize result
  ResizeWindow rect;              // what the crop copies (the whole result without a crop)
  ResizeWindow inside;            // rect clipped to the result; empty when they do not meet
  bool padded = false;            // rect reaches outside the result
};

Result<ResizePlan> plan_resize(const PreprocessConfig& cfg, int64_t height, int64_t width) {
  ResizePlan p;
  p.height = height;
  p.width = width;
  if (cfg.do_resize) {
    HLX_ASSIGN_OR_RETURN(auto hw, resize_output_size(cfg, height, width));
    p.height = hw.first;
    p.width = hw.second;
  }
  p.rect = cfg.do_center_crop ? center_crop_rect(p.height, p.width, cfg.crop_height, cfg.crop_width)
                              : ResizeWindow{0, 0, p.height, p.width};
  const int64_t t = std::max<int64_t>(0, p.rect.top), l = std::max<int64_t>(0, p.rect.left);
  const int64_t b = std::min(p.height, p.rect.top + p.rect.height), r = std::min(p.width, p.rect.left + p.rect.width);
  if (b > t && r > l) p.inside = {t, l, b - t, r - l};
  p.padded = p.inside.top != p.rect.top || p.inside.left != p.rect.left || p.inside.height != p.rect.height ||
             p.inside.width != p.rect.width;
  return p;
}

}  // namespace

Image center_crop(const Image& image, int64_t crop_height, int64_t crop_width) {
  const ResizeWindow r = center_crop_rect(image.height, image.width, crop_height, crop_width);
  return crop_or_pad(image, r.top, r.left, r.height, r.width);
}

Result<PreprocessMemory> preprocess_memory(const PreprocessConfig& cfg, int64_t height, int64_t width) {
  if (height <= 0 || width <= 0) return make_error(ErrorKind::kInvalidArgument, "image is empty: ", width, "x", height);
  const int64_t lo = std::min(height, width), hi = std::max(height, width);
  if (hi > kMaxAspectRatio * lo) {
    char ratio[32];
    std::snprintf(ratio, sizeof(ratio), "%.1f", double(hi) / double(lo));
    return make_error(ErrorKind::kInvalidArgument, "image ", width, "x", height, " has an aspect ratio of ", ratio,
                      ", above the limit of ", kMaxAspectRatio, " (long side / short side)");
  }
  PreprocessMemory m;
  m.decoded = height * width * 3;
  HLX_ASSIGN_OR_RETURN(ResizePlan p, plan_resize(cfg, height, width));
  if (cfg.do_resize && p.inside.height > 0) {
    HLX_ASSIGN_OR_RETURN(ResizeCost c, resize_window_cost(width, height, p.width, p.height, cfg.resample, p.inside));
    m.coefficients = c.coefficients;
    m.intermediate = c.intermediate;
    m.resized = c.output;
  }
  if (!cfg.do_resize || p.padded) m.resized += p.rect.height * p.rect.width * 3;
  m.output = p.rect.height * p.rect.width * 3 * int64_t(sizeof(float));
  return m;
}

Result<Image> preprocess_u8(const Image& image, const PreprocessConfig& cfg) {
  HLX_ASSIGN_OR_RETURN(PreprocessMemory m, preprocess_memory(cfg, image.height, image.width));
  if (m.total() > cfg.max_bytes)
    return make_error(ErrorKind::kInvalidArgument, "image ", image.width, "x", image.height, " needs ", m.total(),
                      " bytes to preprocess (decoded ", m.decoded, ", resampling ", m.coefficients + m.intermediate,
                      ", resized ", m.resized, ", f32 ", m.output, "), above the budget of ", cfg.max_bytes, " bytes");
  if (image.pixels.size() != size_t(image.width * image.height * 3))
    return make_error(ErrorKind::kInvalidArgument, "preprocess: image ", image.width, "x", image.height, " has ",
                      image.pixels.size(), " bytes, expected width*height*3");
  HLX_ASSIGN_OR_RETURN(ResizePlan p, plan_resize(cfg, image.height, image.width));
  if (!cfg.do_resize) return crop_or_pad(image, p.rect.top, p.rect.left, p.rect.height, p.rect.width);
  if (p.inside.height == 0) return crop_or_pad(Image{}, 0, 0, p.rect.height, p.rect.width);  // all padding
  HLX_ASSIGN_OR_RETURN(Image win, resize_window(image, p.width, p.height, cfg.resample, p.inside));
  if (!p.padded) return win;
  // The crop reaches outside the resized image: place the window on a zero canvas.
  return crop_or_pad(win, p.rect.top - p.inside.top, p.rect.left - p.inside.left, p.rect.height, p.rect.width);
}

Result<Tensor> to_normalized_chw(const Image& image, const PreprocessConfig& cfg) {
  const int64_t H = image.height, W = image.width;
  if (H <= 0 || W <= 0 || image.pixels.size() != size_t(H * W * 3))
    return make_error(ErrorKind::kInvalidArgument, "normalise: image ", W, "x", H, " has ", image.pixels.size(),
                      " bytes");
  Tensor out = Tensor::empty(DType::kF32, {3, H, W});
  float* o = out.data<float>();
  for (int c = 0; c < 3; ++c) {
    const float mean = float(cfg.image_mean[size_t(c)]);
    const float stdv = float(cfg.image_std[size_t(c)]);
    float lut[256];
    for (int v = 0; v < 256; ++v) {
      // HF rescale: image.astype(float64) * scale, then astype(float32).
      volatile float x = cfg.do_rescale ? float(double(v) * cfg.rescale_factor) : float(v);
      float y = x;
      if (cfg.do_normalize) {
        volatile float d = y - mean;
        y = d / stdv;
      }
      lut[v] = y;
    }
    float* plane = o + c * H * W;
    for (int64_t i = 0; i < H * W; ++i) plane[i] = lut[image.pixels[size_t(i * 3 + c)]];
  }
  return out;
}

Result<Tensor> preprocess(const Image& image, const PreprocessConfig& cfg) {
  HLX_ASSIGN_OR_RETURN(Image u8, preprocess_u8(image, cfg));
  return to_normalized_chw(u8, cfg);
}

}  // namespace hlx::mm
