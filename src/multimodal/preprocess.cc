#include "multimodal/preprocess.h"

#include <cmath>

#include "io/file.h"

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
  return make_error(ErrorKind::kUnsupported, view.where(), ": ", key,
                    " must have shortest_edge or height and width (keys: ",
                    [&] {
                      std::string s;
                      for (auto& k : v.keys()) s += (s.empty() ? "" : ", ") + k;
                      return s;
                    }(),
                    ")");
}

}  // namespace

Result<PreprocessConfig> PreprocessConfig::from_config(const ConfigView& view) {
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
    return make_error(ErrorKind::kUnsupported, view.where(),
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

Result<std::pair<int64_t, int64_t>> resize_output_size(const PreprocessConfig& cfg, int64_t height,
                                                        int64_t width) {
  if (height <= 0 || width <= 0)
    return make_error(ErrorKind::kInvalidArgument, "image is empty: ", width, "x", height);
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

Image center_crop(const Image& image, int64_t crop_height, int64_t crop_width) {
  auto floordiv2 = [](int64_t v) { return v >= 0 ? v / 2 : -((-v + 1) / 2); };
  const int64_t top = floordiv2(image.height - crop_height);
  const int64_t left = floordiv2(image.width - crop_width);
  if (top >= 0 && left >= 0 && top + crop_height <= image.height && left + crop_width <= image.width)
    return crop_or_pad(image, top, left, crop_height, crop_width);
  // HF pads to max(crop, orig) with the image at ceil((new - orig) / 2), then crops the window
  // shifted by that pad, clamped to the padded canvas.
  const int64_t new_h = std::max(crop_height, image.height), new_w = std::max(crop_width, image.width);
  const int64_t top_pad = (new_h - image.height + 1) / 2, left_pad = (new_w - image.width + 1) / 2;
  int64_t t = top + top_pad, b = top + crop_height + top_pad;
  int64_t l = left + left_pad, r = left + crop_width + left_pad;
  t = std::max<int64_t>(0, t);
  b = std::min(new_h, b);
  l = std::max<int64_t>(0, l);
  r = std::min(new_w, r);
  // Canvas coordinates -> image coordinates.
  return crop_or_pad(image, t - top_pad, l - left_pad, b - t, r - l);
}

Result<Image> preprocess_u8(const Image& image, const PreprocessConfig& cfg) {
  Image cur = image;
  if (cfg.do_resize) {
    HLX_ASSIGN_OR_RETURN(auto hw, resize_output_size(cfg, image.height, image.width));
    HLX_ASSIGN_OR_RETURN(cur, resize(cur, hw.second, hw.first, cfg.resample));
  }
  if (cfg.do_center_crop) cur = center_crop(cur, cfg.crop_height, cfg.crop_width);
  return cur;
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
