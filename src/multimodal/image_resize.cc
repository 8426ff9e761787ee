// PIL's Image.resize for RGB u8, written from the algorithm of Pillow's libImaging/Resample.c:
// per output pixel a window of source pixels around center = (i + 0.5) * scale, a filter whose
// support is multiplied by the scale when downscaling (antialiasing), weights normalised to sum 1,
// converted to 22-bit fixed point (rounded away from zero), a horizontal pass then a vertical pass,
// each accumulating from 1 << 21 and clipping (acc >> 22) to [0, 255].
#include <cmath>
#include <cstring>

#include "multimodal/image.h"

namespace hlx::mm {

namespace {

constexpr int kPrecisionBits = 32 - 8 - 2;

double bilinear_filter(double x) {
  if (x < 0.0) x = -x;
  if (x < 1.0) return 1.0 - x;
  return 0.0;
}

double bicubic_filter(double x) {
  constexpr double a = -0.5;
  if (x < 0.0) x = -x;
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}

double sinc_filter(double x) {
  if (x == 0.0) return 1.0;
  x = x * M_PI;
  return std::sin(x) / x;
}

double lanczos_filter(double x) {
  if (-3.0 <= x && x < 3.0) return sinc_filter(x) * sinc_filter(x / 3);
  return 0.0;
}

struct Filter {
  double (*fn)(double);
  double support;
};

struct Coeffs {
  int ksize = 0;
  std::vector<int> bounds;  // (xmin, count) per output of the window
  std::vector<int32_t> k;   // fixed-point weights, ksize per output of the window
};

struct Support {
  double scale, filterscale, support;
  int ksize;
};

Support support_of(int64_t in_size, int64_t out_size, const Filter& f) {
  const double in0 = 0.0, in1 = double(float(in_size));
  Support s;
  s.scale = (in1 - in0) / double(out_size);
  s.filterscale = s.scale < 1.0 ? 1.0 : s.scale;
  s.support = f.support * s.filterscale;
  s.ksize = int(std::ceil(s.support)) * 2 + 1;
  return s;
}

// Source range [xmin, xmin + count) read by output xx.
std::pair<int, int> bounds_of(int64_t in_size, const Support& s, int64_t xx) {
  double center = (double(xx) + 0.5) * s.scale;
  int xmin = int(center - s.support + 0.5);
  if (xmin < 0) xmin = 0;
  int xmax = int(center + s.support + 0.5);
  if (xmax > in_size) xmax = int(in_size);
  return {xmin, xmax - xmin};
}

// Pillow's precompute_coeffs for outputs [first, first + count) of an in_size -> out_size pass;
// each output's weights depend only on its own index, so a window equals the full table's rows.
Coeffs precompute(int64_t in_size, int64_t out_size, const Filter& f, int64_t first, int64_t count) {
  const Support s = support_of(in_size, out_size, f);
  Coeffs c;
  c.ksize = s.ksize;
  c.bounds.resize(size_t(count) * 2);
  c.k.assign(size_t(count) * size_t(c.ksize), 0);
  std::vector<double> w(size_t(c.ksize));
  for (int64_t j = 0; j < count; ++j) {
    const int64_t xx = first + j;
    double center = (double(xx) + 0.5) * s.scale;
    double ww = 0.0;
    double ss = 1.0 / s.filterscale;
    auto [xmin, xmax] = bounds_of(in_size, s, xx);
    for (int x = 0; x < xmax; ++x) {
      double v = f.fn((x + xmin - center + 0.5) * ss);
      w[size_t(x)] = v;
      ww += v;
    }
    int32_t* k = &c.k[size_t(j) * size_t(c.ksize)];
    for (int x = 0; x < xmax; ++x) {
      double v = ww != 0.0 ? w[size_t(x)] / ww : w[size_t(x)];
      k[x] = v < 0 ? int32_t(-0.5 + v * (1 << kPrecisionBits)) : int32_t(0.5 + v * (1 << kPrecisionBits));
    }
    c.bounds[size_t(j) * 2] = xmin;
    c.bounds[size_t(j) * 2 + 1] = xmax;
  }
  return c;
}

int64_t coeff_bytes(const Support& s, int64_t count) {
  return count * (int64_t(s.ksize) * 4 + 8) + int64_t(s.ksize) * 8;
}

inline uint8_t clip8(int32_t acc) {
  int32_t v = acc >> kPrecisionBits;
  return uint8_t(v < 0 ? 0 : v > 255 ? 255 : v);
}

// Horizontal pass over input rows [y0, y1) for the window columns `c` was computed for.
Image horizontal(const Image& in, int64_t y0, int64_t y1, int64_t out_w, const Coeffs& c) {
  Image out;
  out.width = out_w;
  out.height = y1 - y0;
  out.pixels.resize(size_t(out_w * out.height * 3));
  for (int64_t y = y0; y < y1; ++y) {
    const uint8_t* src = in.row(y);
    uint8_t* dst = out.row(y - y0);
    for (int64_t xx = 0; xx < out_w; ++xx) {
      int xmin = c.bounds[size_t(xx) * 2], xmax = c.bounds[size_t(xx) * 2 + 1];
      const int32_t* k = &c.k[size_t(xx) * size_t(c.ksize)];
      int32_t s0 = 1 << (kPrecisionBits - 1), s1 = s0, s2 = s0;
      for (int x = 0; x < xmax; ++x) {
        const uint8_t* p = src + (x + xmin) * 3;
        s0 += int32_t(p[0]) * k[x];
        s1 += int32_t(p[1]) * k[x];
        s2 += int32_t(p[2]) * k[x];
      }
      dst[xx * 3] = clip8(s0);
      dst[xx * 3 + 1] = clip8(s1);
      dst[xx * 3 + 2] = clip8(s2);
    }
  }
  return out;
}

// Vertical pass for the window rows `c` was computed for; `in` holds source rows from y0 on.
Image vertical(const Image& in, int64_t y0, int64_t out_h, const Coeffs& c) {
  Image out;
  out.width = in.width;
  out.height = out_h;
  out.pixels.resize(size_t(in.width * out_h * 3));
  const int64_t rowlen = in.width * 3;
  std::vector<int32_t> acc(static_cast<size_t>(rowlen));
  for (int64_t yy = 0; yy < out_h; ++yy) {
    int ymin = c.bounds[size_t(yy) * 2], ymax = c.bounds[size_t(yy) * 2 + 1];
    const int32_t* k = &c.k[size_t(yy) * size_t(c.ksize)];
    std::fill(acc.begin(), acc.end(), 1 << (kPrecisionBits - 1));
    for (int y = 0; y < ymax; ++y) {
      const uint8_t* src = in.row(y + ymin - y0);
      const int32_t w = k[y];
      for (int64_t i = 0; i < rowlen; ++i) acc[size_t(i)] += int32_t(src[i]) * w;
    }
    uint8_t* dst = out.row(yy);
    for (int64_t i = 0; i < rowlen; ++i) dst[i] = clip8(acc[size_t(i)]);
  }
  return out;
}

// PIL's NEAREST resize is an affine transform (Geometry.c, ImagingScaleAffine): the source
// coordinate starts at scale / 2 and is advanced by repeated addition of scale, truncated.
// Repeated addition (not (x + 0.5) * scale) decides ties the same way PIL does.
std::vector<int64_t> nearest_table(int64_t in_size, int64_t out_size, int64_t first, int64_t count) {
  const double scale = double(in_size) / double(out_size);
  std::vector<int64_t> t(static_cast<size_t>(count));
  double pos = scale * 0.5;
  for (int64_t i = 0; i < first + count; ++i, pos += scale) {
    if (i < first) continue;  // the additions before the window still run: they decide the ties
    int64_t v = pos < 0.0 ? 0 : int64_t(pos);
    t[size_t(i - first)] = v >= in_size ? in_size - 1 : v;
  }
  return t;
}

Filter filter_of(Resample r) {
  if (r == Resample::kBilinear) return {bilinear_filter, 1.0};
  if (r == Resample::kLanczos) return {lanczos_filter, 3.0};
  return {bicubic_filter, 2.0};
}

Status check_window(const Image* image, int64_t in_w, int64_t in_h, int64_t width, int64_t height,
                    const ResizeWindow& win) {
  if (width <= 0 || height <= 0 || width > (int64_t(1) << 24) || height > (int64_t(1) << 24))
    return make_error(ErrorKind::kInvalidArgument, "resize: target size ", width, "x", height,
                      " must be positive and at most 16777216 per side");
  if (in_w <= 0 || in_h <= 0 || (image && image->pixels.size() != size_t(in_w * in_h * 3)))
    return make_error(ErrorKind::kInvalidArgument, "resize: input image ", in_w, "x", in_h, " has ",
                      image ? image->pixels.size() : 0, " bytes, expected width*height*3");
  if (win.top < 0 || win.left < 0 || win.height <= 0 || win.width <= 0 || win.top + win.height > height ||
      win.left + win.width > width)
    return make_error(ErrorKind::kInvalidArgument, "resize: window ", win.width, "x", win.height, " at (", win.left,
                      ", ", win.top, ") is not inside the ", width, "x", height, " result");
  return ok_status();
}

// Source rows [r0, r1) the vertical pass reads for the window (all window rows when the height
// does not change).
std::pair<int64_t, int64_t> source_rows(int64_t in_h, int64_t height, const Filter& f, const ResizeWindow& win) {
  if (height == in_h) return {win.top, win.top + win.height};
  const Support s = support_of(in_h, height, f);
  auto first = bounds_of(in_h, s, win.top), last = bounds_of(in_h, s, win.top + win.height - 1);
  return {first.first, int64_t(last.first) + last.second};
}

}  // namespace

Result<Resample> resample_from_pil(int64_t value) {
  switch (value) {
    case 0:
      return Resample::kNearest;
    case 1:
      return Resample::kLanczos;
    case 2:
      return Resample::kBilinear;
    case 3:
      return Resample::kBicubic;
    default:
      break;
  }
  return make_error(ErrorKind::kUnsupported, "resample ", value,
                    " is not supported (0 nearest, 1 lanczos, 2 bilinear, 3 bicubic)");
}

Result<Image> resize_window(const Image& image, int64_t width, int64_t height, Resample filter,
                            const ResizeWindow& win) {
  HLX_RETURN_IF_ERROR(check_window(&image, image.width, image.height, width, height, win));
  if (width == image.width && height == image.height)
    return crop_or_pad(image, win.top, win.left, win.height, win.width);
  if (filter == Resample::kNearest) {
    const auto xs = nearest_table(image.width, width, win.left, win.width);
    const auto ys = nearest_table(image.height, height, win.top, win.height);
    Image out;
    out.width = win.width;
    out.height = win.height;
    out.pixels.resize(size_t(win.width * win.height * 3));
    for (int64_t y = 0; y < win.height; ++y)
      for (int64_t x = 0; x < win.width; ++x)
        std::memcpy(out.row(y) + x * 3, image.row(ys[size_t(y)]) + xs[size_t(x)] * 3, 3);
    return out;
  }
  const Filter f = filter_of(filter);
  // Pillow: a pass runs only when its dimension changes; horizontal first, over the source rows
  // the vertical pass reads (as Pillow's ImagingResampleInner does with its ybox).
  const auto [r0, r1] = source_rows(image.height, height, f, win);
  Image cur = width != image.width
                  ? horizontal(image, r0, r1, win.width, precompute(image.width, width, f, win.left, win.width))
                  : crop_or_pad(image, r0, win.left, r1 - r0, win.width);
  if (height != image.height)
    cur = vertical(cur, r0, win.height, precompute(image.height, height, f, win.top, win.height));
  return cur;
}

Result<Image> resize(const Image& image, int64_t width, int64_t height, Resample filter) {
  return resize_window(image, width, height, filter, ResizeWindow{0, 0, height, width});
}

Result<ResizeCost> resize_window_cost(int64_t in_width, int64_t in_height, int64_t width, int64_t height,
                                      Resample filter, const ResizeWindow& win) {
  HLX_RETURN_IF_ERROR(check_window(nullptr, in_width, in_height, width, height, win));
  ResizeCost c;
  c.output = win.width * win.height * 3;
  if (width == in_width && height == in_height) return c;
  if (filter == Resample::kNearest) {
    c.coefficients = (win.width + win.height) * 8;
    return c;
  }
  const Filter f = filter_of(filter);
  const auto [r0, r1] = source_rows(in_height, height, f, win);
  c.intermediate = win.width * (r1 - r0) * 3;
  if (width != in_width) c.coefficients += coeff_bytes(support_of(in_width, width, f), win.width);
  if (height != in_height)
    c.coefficients += coeff_bytes(support_of(in_height, height, f), win.height) + win.width * 3 * 4;  // + accumulators
  return c;
}

}  // namespace hlx::mm
