#include "multimodal/qwen3_vl_processor.h"

#include <algorithm>
#include <cmath>

#include "io/file.h"
#include "multimodal/preprocess.h"

namespace hlx::mm {

namespace {

bool is_qwen_type(const std::string& type) {
  return type == "Qwen2VLImageProcessor" || type == "Qwen2VLImageProcessorFast";
}

Result<HfConfig> load_config(const std::string& path) {
  std::string file = path;
  if (auto dir = read_file(path + "/preprocessor_config.json", size_t(1) << 24); dir.ok())
    file = path + "/preprocessor_config.json";
  HLX_ASSIGN_OR_RETURN(std::string text, read_file(file, size_t(1) << 24));
  return HfConfig::parse(text, file);
}

}  // namespace

Result<ImageProcessorKind> image_processor_kind(const ConfigView& view) {
  HLX_ASSIGN_OR_RETURN(std::string type, view.optional_string("image_processor_type", ""));
  return is_qwen_type(type) ? ImageProcessorKind::kQwen2VL : ImageProcessorKind::kFixed;
}

Result<ImageProcessorKind> image_processor_kind_of_file(const std::string& path) {
  HLX_ASSIGN_OR_RETURN(HfConfig cfg, load_config(path));
  return image_processor_kind(cfg.root());
}

Result<Qwen2VLImageConfig> Qwen2VLImageConfig::from_config(const ConfigView& view) {
  HLX_ASSIGN_OR_RETURN(std::string type, view.optional_string("image_processor_type", ""));
  if (!is_qwen_type(type))
    return make_error(ErrorKind::kUnsupported, view.where(), ": image_processor_type '", type,
                      "' is not Qwen2VLImageProcessor(Fast)");
  Qwen2VLImageConfig c;
  HLX_ASSIGN_OR_RETURN(c.patch_size, view.optional_int("patch_size", 14));
  HLX_ASSIGN_OR_RETURN(c.temporal_patch_size, view.optional_int("temporal_patch_size", 2));
  HLX_ASSIGN_OR_RETURN(c.merge_size, view.optional_int("merge_size", 2));
  if (view.has("size")) {
    HLX_ASSIGN_OR_RETURN(ConfigView size, view.sub("size"));
    if (!size.has("shortest_edge") || !size.has("longest_edge"))
      return make_error(ErrorKind::kInvalidArgument, view.where(),
                        ": size must have shortest_edge and longest_edge (pixel counts)");
    HLX_ASSIGN_OR_RETURN(c.min_pixels, size.require_int("shortest_edge"));
    HLX_ASSIGN_OR_RETURN(c.max_pixels, size.require_int("longest_edge"));
  }
  HLX_ASSIGN_OR_RETURN(c.min_pixels, view.optional_int("min_pixels", c.min_pixels));
  HLX_ASSIGN_OR_RETURN(c.max_pixels, view.optional_int("max_pixels", c.max_pixels));
  HLX_ASSIGN_OR_RETURN(c.do_resize, view.optional_bool("do_resize", true));
  HLX_ASSIGN_OR_RETURN(int64_t resample, view.optional_int("resample", 3));
  HLX_ASSIGN_OR_RETURN(c.resample, resample_from_pil(resample));
  HLX_ASSIGN_OR_RETURN(c.do_rescale, view.optional_bool("do_rescale", true));
  HLX_ASSIGN_OR_RETURN(c.rescale_factor, view.optional_float("rescale_factor", 1.0 / 255.0));
  HLX_ASSIGN_OR_RETURN(c.do_normalize, view.optional_bool("do_normalize", true));
  HLX_ASSIGN_OR_RETURN(auto mean, view.optional_float_array("image_mean"));
  HLX_ASSIGN_OR_RETURN(auto stdv, view.optional_float_array("image_std"));
  if (!mean.empty()) c.image_mean = mean;
  if (!stdv.empty()) c.image_std = stdv;
  if (c.patch_size <= 0 || c.temporal_patch_size <= 0 || c.merge_size <= 0 || c.patch_size > 4096 ||
      c.merge_size > 64 || c.temporal_patch_size > 64)
    return make_error(ErrorKind::kInvalidArgument, view.where(), ": patch_size ", c.patch_size,
                      ", temporal_patch_size ", c.temporal_patch_size, ", merge_size ", c.merge_size,
                      " must be positive (and at most 4096, 64, 64)");
  if (c.min_pixels <= 0 || c.max_pixels < c.min_pixels)
    return make_error(ErrorKind::kInvalidArgument, view.where(), ": pixel bounds must satisfy 0 < min <= max, got min ",
                      c.min_pixels, ", max ", c.max_pixels);
  if (c.image_mean.size() != 3 || c.image_std.size() != 3)
    return make_error(ErrorKind::kInvalidArgument, view.where(), ": image_mean and image_std need 3 values, got ",
                      c.image_mean.size(), " and ", c.image_std.size());
  for (double s : c.image_std)
    if (!(s != 0.0)) return make_error(ErrorKind::kInvalidArgument, view.where(), ": image_std has a zero");
  return c;
}

Result<Qwen2VLImageConfig> Qwen2VLImageConfig::load(const std::string& path) {
  HLX_ASSIGN_OR_RETURN(HfConfig cfg, load_config(path));
  return from_config(cfg.root());
}

Result<std::pair<int64_t, int64_t>> qwen_smart_resize(int64_t height, int64_t width, int64_t factor, int64_t min_pixels,
                                                      int64_t max_pixels) {
  if (height <= 0 || width <= 0)
    return make_error(ErrorKind::kInvalidArgument, "smart_resize: image ", width, "x", height, " is empty");
  if (factor <= 0 || min_pixels <= 0 || max_pixels < min_pixels)
    return make_error(ErrorKind::kInvalidArgument, "smart_resize: factor ", factor, ", min_pixels ", min_pixels,
                      ", max_pixels ", max_pixels, " must be positive with min <= max");
  const double ratio = double(std::max(height, width)) / double(std::min(height, width));
  if (ratio > 200)
    return make_error(ErrorKind::kInvalidArgument, "smart_resize: image ", width, "x", height, " has aspect ratio ",
                      ratio, ", above the limit 200");
  // The same double operations as the Python (int / int is a correctly rounded true division;
  // round() is half-to-even, which nearbyint gives in the default rounding mode).
  const double f = double(factor);
  int64_t h_bar = int64_t(std::nearbyint(double(height) / f)) * factor;
  int64_t w_bar = int64_t(std::nearbyint(double(width) / f)) * factor;
  if (h_bar * w_bar > max_pixels) {
    const double beta = std::sqrt(double(height * width) / double(max_pixels));
    h_bar = std::max(factor, int64_t(std::floor(double(height) / beta / f)) * factor);
    w_bar = std::max(factor, int64_t(std::floor(double(width) / beta / f)) * factor);
  } else if (h_bar * w_bar < min_pixels) {
    const double beta = std::sqrt(double(min_pixels) / double(height * width));
    h_bar = int64_t(std::ceil(double(height) * beta / f)) * factor;
    w_bar = int64_t(std::ceil(double(width) * beta / f)) * factor;
  }
  if (h_bar <= 0 || w_bar <= 0 || h_bar > (int64_t(1) << 20) || w_bar > (int64_t(1) << 20))
    return make_error(ErrorKind::kInvalidArgument, "smart_resize: image ", width, "x", height, " resizes to ", w_bar,
                      "x", h_bar);
  return std::make_pair(h_bar, w_bar);
}

Result<Image> qwen_resize_u8(const Image& image, const Qwen2VLImageConfig& cfg) {
  if (!cfg.do_resize) return image;
  HLX_ASSIGN_OR_RETURN(auto hw,
                       qwen_smart_resize(image.height, image.width, cfg.factor(), cfg.min_pixels, cfg.max_pixels));
  if (hw.first == image.height && hw.second == image.width) return image;  // PIL: same size is a copy
  return resize(image, hw.second, hw.first, cfg.resample);
}

Result<Qwen2VLImage> qwen_patchify(const Tensor& chw, const Qwen2VLImageConfig& cfg) {
  if (chw.dtype() != DType::kF32 || chw.shape().size() != 3 || chw.shape()[0] != 3)
    return make_error(ErrorKind::kInvalidArgument, "patchify: expected f32 [3, H, W], got ", dtype_name(chw.dtype()),
                      " ", shape_to_string(chw.shape()));
  const int64_t H = chw.shape()[1], W = chw.shape()[2], P = cfg.patch_size, M = cfg.merge_size,
                T = cfg.temporal_patch_size, F = cfg.factor();
  if (H <= 0 || W <= 0 || H % F != 0 || W % F != 0)
    return make_error(ErrorKind::kInvalidArgument, "patchify: image ", W, "x", H, " is not a multiple of ", F,
                      " (patch_size ", P, " x merge_size ", M, ")");
  Qwen2VLImage out;
  out.grid = ImageGrid{1, H / P, W / P};  // one still image: T identical frames = one temporal group
  const int64_t gh = out.grid.h, gw = out.grid.w, D = cfg.patch_dim();
  out.patches = Tensor::empty(DType::kF32, {gh * gw, D});
  const float* src = chw.data<float>();
  float* dst = out.patches.data<float>();
  for (int64_t bh = 0; bh < gh / M; ++bh)
    for (int64_t bw = 0; bw < gw / M; ++bw)
      for (int64_t r = 0; r < M; ++r)
        for (int64_t cc = 0; cc < M; ++cc) {
          const int64_t y0 = (bh * M + r) * P, x0 = (bw * M + cc) * P;
          for (int64_t c = 0; c < 3; ++c)
            for (int64_t t = 0; t < T; ++t)  // every frame is the same image
              for (int64_t y = 0; y < P; ++y) {
                const float* row = src + (c * H + y0 + y) * W + x0;
                std::copy(row, row + P, dst);
                dst += P;
              }
        }
  return out;
}

Result<Qwen2VLImage> qwen_preprocess(const Image& image, const Qwen2VLImageConfig& cfg) {
  HLX_ASSIGN_OR_RETURN(Image u8, qwen_resize_u8(image, cfg));
  PreprocessConfig norm;  // rescale and normalise exactly as the fixed-size processors do
  norm.do_rescale = cfg.do_rescale;
  norm.rescale_factor = cfg.rescale_factor;
  norm.do_normalize = cfg.do_normalize;
  norm.image_mean = cfg.image_mean;
  norm.image_std = cfg.image_std;
  HLX_ASSIGN_OR_RETURN(Tensor chw, to_normalized_chw(u8, norm));
  return qwen_patchify(chw, cfg);
}

int64_t qwen_image_tokens(const ImageGrid& g, int64_t merge_size) {
  return merge_size > 0 ? g.t * (g.h / merge_size) * (g.w / merge_size) : 0;
}

Result<std::vector<int32_t>> qwen_expand_image_tokens(const std::vector<int32_t>& ids, int32_t image_token_id,
                                                      const std::vector<ImageGrid>& grids, int64_t merge_size) {
  const int64_t n = std::count(ids.begin(), ids.end(), image_token_id);
  if (n != int64_t(grids.size()))
    return make_error(ErrorKind::kInvalidArgument, "the prompt has ", n, " image token", n == 1 ? "" : "s", " (id ",
                      image_token_id, ") for ", grids.size(), " image", grids.size() == 1 ? "" : "s");
  std::vector<int32_t> out;
  out.reserve(ids.size());
  size_t k = 0;
  for (int32_t id : ids) {
    if (id != image_token_id) {
      out.push_back(id);
      continue;
    }
    out.insert(out.end(), size_t(qwen_image_tokens(grids[k++], merge_size)), image_token_id);
  }
  return out;
}

Result<MropePositions> qwen_mrope_positions(const std::vector<int32_t>& ids, int32_t image_token_id,
                                            const std::vector<ImageGrid>& grids, int64_t merge_size) {
  if (merge_size <= 0) return make_error(ErrorKind::kInvalidArgument, "mrope: merge_size ", merge_size);
  const int64_t L = int64_t(ids.size());
  MropePositions out;
  out.length = L;
  out.positions.assign(size_t(3 * L), 0);
  auto set = [&](int64_t i, int64_t t, int64_t h, int64_t w) {
    out.positions[size_t(i)] = int32_t(t);
    out.positions[size_t(L + i)] = int32_t(h);
    out.positions[size_t(2 * L + i)] = int32_t(w);
  };
  int64_t next = 0;  // 1 + the largest position used so far
  int64_t st = 0;    // first row not yet placed
  for (size_t k = 0; k < grids.size(); ++k) {
    const ImageGrid& g = grids[k];
    if (g.t <= 0 || g.h <= 0 || g.w <= 0 || g.h % merge_size || g.w % merge_size)
      return make_error(ErrorKind::kInvalidArgument, "mrope: image ", k, " grid ", g.t, "x", g.h, "x", g.w,
                        " is not positive with h, w multiples of merge_size ", merge_size);
    int64_t ed = st;
    while (ed < L && ids[size_t(ed)] != image_token_id) ++ed;
    const int64_t gt = g.t, gh = g.h / merge_size, gw = g.w / merge_size, n = gt * gh * gw;
    if (ed == L)
      return make_error(ErrorKind::kInvalidArgument, "mrope: no image tokens left for image ", k, " of ", grids.size());
    if (ed + n > L ||
        std::any_of(ids.begin() + ed, ids.begin() + ed + n, [&](int32_t v) { return v != image_token_id; }))
      return make_error(ErrorKind::kInvalidArgument, "mrope: image ", k, " needs ", n,
                        " consecutive image tokens from row ", ed, " (grid ", gt, "x", g.h, "x", g.w, ", merge ",
                        merge_size, ")");
    for (int64_t i = st; i < ed; ++i, ++next) set(i, next, next, next);
    const int64_t s = next;
    for (int64_t a = 0; a < gt; ++a)
      for (int64_t r = 0; r < gh; ++r)
        for (int64_t c = 0; c < gw; ++c) set(ed + (a * gh + r) * gw + c, s + a, s + r, s + c);
    next = s + std::max({gt, gh, gw});
    st = ed + n;
  }
  for (int64_t i = st; i < L; ++i) {
    if (ids[size_t(i)] == image_token_id)
      return make_error(ErrorKind::kInvalidArgument, "mrope: image token at row ", i, " after the last of ",
                        grids.size(), " image(s)");
    set(i, next, next, next);
    ++next;
  }
  if (next > (int64_t(1) << 31) - 1)
    return make_error(ErrorKind::kOutOfRange, "mrope: position ", next, " does not fit i32");
  out.rope_delta = next - L;
  return out;
}

}  // namespace hlx::mm
