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
  std::vector<int> bounds;  // (xmin, count) per output
  std::vector<int32_t> k;   // fixed-point weights, ksize per output
};

Coeffs precompute(int64_t in_size, int64_t out_size, const Filter& f) {
  const double in0 = 0.0, in1 = double(float(in_size));
  double scale = (in1 - in0) / double(out_size);
  double filterscale = scale < 1.0 ? 1.0 : scale;
  double support = f.support * filterscale;
  Coeffs c;
  c.ksize = int(std::ceil(support)) * 2 + 1;
  c.bounds.resize(size_t(out_size) * 2);
  c.k.assign(size_t(out_size) * size_t(c.ksize), 0);
  std::vector<double> w(size_t(c.ksize));
  for (int64_t xx = 0; xx < out_size; ++xx) {
    double center = in0 + (double(xx) + 0.5) * scale;
    double ww = 0.0;
    double ss = 1.0 / filterscale;
    int xmin = int(center - support + 0.5);
    if (xmin < 0) xmin = 0;
    int xmax = int(center + support + 0.5);
    if (xmax > in_size) xmax = int(in_size);
    xmax -= xmin;
    for (int x = 0; x < xmax; ++x) {
      double v = f.fn((x + xmin - center + 0.5) * ss);
      w[size_t(x)] = v;
      ww += v;
    }
    int32_t* k = &c.k[size_t(xx) * size_t(c.ksize)];
    for (int x = 0; x < xmax; ++x) {
      double v = ww != 0.0 ? w[size_t(x)] / ww : w[size_t(x)];
      k[x] = v < 0 ? int32_t(-0.5 + v * (1 << kPrecisionBits)) : int32_t(0.5 + v * (1 << kPrecisionBits));
    }
    c.bounds[size_t(xx) * 2] = xmin;
    c.bounds[size_t(xx) * 2 + 1] = xmax;
  }
  return c;
}

inline uint8_t clip8(int32_t acc) {
  int32_t v = acc >> kPrecisionBits;
  return uint8_t(v < 0 ? 0 : v > 255 ? 255 : v);
}

Image horizontal(const Image& in, int64_t out_w, const Coeffs& c) {
  Image out;
  out.width = out_w;
  out.height = in.height;
  out.pixels.resize(size_t(out_w * in.height * 3));
  for (int64_t y = 0; y < in.height; ++y) {
    const uint8_t* src = in.row(y);
    uint8_t* dst = out.row(y);
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

Image vertical(const Image& in, int64_t out_h, const Coeffs& c) {
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
      const uint8_t* src = in.row(y + ymin);
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
std::vector<int64_t> nearest_table(int64_t in_size, int64_t out_size) {
  const double scale = double(in_size) / double(out_size);
  std::vector<int64_t> t(static_cast<size_t>(out_size));
  double pos = scale * 0.5;
  for (int64_t i = 0; i < out_size; ++i, pos += scale) {
    int64_t v = pos < 0.0 ? 0 : int64_t(pos);
    t[size_t(i)] = v >= in_size ? in_size - 1 : v;
  }
  return t;
}

Image nearest(const Image& in, int64_t out_w, int64_t out_h) {
  Image out;
  out.width = out_w;
  out.height = out_h;
  out.pixels.resize(size_t(out_w * out_h * 3));
  const std::vector<int64_t> xs = nearest_table(in.width, out_w), ys = nearest_table(in.height, out_h);
  for (int64_t y = 0; y < out_h; ++y)
    for (int64_t x = 0; x < out_w; ++x) std::memcpy(out.row(y) + x * 3, in.row(ys[size_t(y)]) + xs[size_t(x)] * 3, 3);
  return out;
}

}  // namespace

Result<Resample> resample_from_pil(int64_t value) {
  switch (value) {
    case 0: return Resample::kNearest;
    case 1: return Resample::kLanczos;
    case 2: return Resample::kBilinear;
    case 3: return Resample::kBicubic;
    default: break;
  }
  return make_error(ErrorKind::kUnsupported, "resample ", value,
                    " is not supported (0 nearest, 1 lanczos, 2 bilinear, 3 bicubic)");
}

Result<Image> resize(const Image& image, int64_t width, int64_t height, Resample filter) {
  if (width <= 0 || height <= 0 || width > (int64_t(1) << 24) || height > (int64_t(1) << 24))
    return make_error(ErrorKind::kInvalidArgument, "resize: target size ", width, "x", height,
                      " must be positive and at most 16777216 per side");
  if (image.width <= 0 || image.height <= 0 ||
      image.pixels.size() != size_t(image.width * image.height * 3))
    return make_error(ErrorKind::kInvalidArgument, "resize: input image ", image.width, "x", image.height,
                      " has ", image.pixels.size(), " bytes, expected width*height*3");
  if (width == image.width && height == image.height) return image;
  if (filter == Resample::kNearest) return nearest(image, width, height);
  Filter f{bicubic_filter, 2.0};
  if (filter == Resample::kBilinear) f = {bilinear_filter, 1.0};
  if (filter == Resample::kLanczos) f = {lanczos_filter, 3.0};
  // Pillow: a pass runs only when its dimension changes; horizontal first.
  Image cur = image;
  if (width != image.width) cur = horizontal(cur, width, precompute(image.width, width, f));
  if (height != image.height) cur = vertical(cur, height, precompute(image.height, height, f));
  return cur;
}

}  // namespace hlx::mm
