// PNG (libpng) and JPEG (libjpeg-turbo) decoding to RGB with PIL's conversions; see image.h.
//
// Both libraries report fatal errors through a callback that must not return. We longjmp back to
// a C-style function whose only locals are plain pointers set before setjmp; every C++ object
// lives in a context struct owned by the caller, so no destructor is skipped and nothing modified
// after setjmp lives in a register.
#include "multimodal/image.h"

#include <csetjmp>
#include <cstdio>
#include <cstring>

#include <jpeglib.h>
#include <jerror.h>
#include <png.h>

#include "io/file.h"

namespace hlx::mm {

ImageFormat sniff_image_format(std::string_view b) {
  static const unsigned char kPng[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (b.size() >= 8 && std::memcmp(b.data(), kPng, 8) == 0) return ImageFormat::kPng;
  if (b.size() >= 3 && uint8_t(b[0]) == 0xFF && uint8_t(b[1]) == 0xD8 && uint8_t(b[2]) == 0xFF)
    return ImageFormat::kJpeg;
  return ImageFormat::kUnknown;
}

namespace {

Status check_dims(int64_t w, int64_t h, const DecodeOptions& opt, const std::string& source) {
  if (w <= 0 || h <= 0)
    return make_error(ErrorKind::kInvalidArgument, source, ": image has empty dimensions ", w, "x", h);
  if (opt.max_pixels > 0 && (w > opt.max_pixels / h || w * h > opt.max_pixels))
    return make_error(ErrorKind::kInvalidArgument, source, ": image is ", w, "x", h, " = ", w * h,
                      " pixels, above the limit of ", opt.max_pixels, " pixels");
  return ok_status();
}

int exif_orientation(const std::vector<uint8_t>& tiff);

// ---------------------------------------------------------------------------------------------
// PNG

struct PngCtx {
  std::string_view bytes;
  size_t pos = 0;
  const DecodeOptions* opt = nullptr;
  std::string source;
  char error[256] = {0};
  Status status;                // a non-libpng error (dimension limit) set before longjmp
  std::vector<uint8_t> raw;     // rows after libpng transforms: one row, or all when interlaced
  std::vector<uint8_t> pixels;  // the RGB result, width * height * 3
  std::vector<uint8_t> exif;    // eXIf payload (TIFF structure), when present
  int64_t width = 0, height = 0;
  int channels = 0;   // 1..4 after transforms
  int bit_depth = 8;  // 8 or 16 (16 only for plain grayscale)
  bool truncated = false;
};

void png_error_fn(png_structp png, png_const_charp msg) {
  auto* ctx = static_cast<PngCtx*>(png_get_error_ptr(png));
  std::snprintf(ctx->error, sizeof(ctx->error), "%s", msg ? msg : "unknown libpng error");
  png_longjmp(png, 1);
}
void png_warning_fn(png_structp, png_const_charp) {}

void png_read_fn(png_structp png, png_bytep out, png_size_t n) {
  auto* ctx = static_cast<PngCtx*>(png_get_io_ptr(png));
  if (ctx->pos + n > ctx->bytes.size()) {
    ctx->truncated = true;
    png_error(png, "unexpected end of data");
  }
  std::memcpy(out, ctx->bytes.data() + ctx->pos, n);
  ctx->pos += n;
}

// One row after libpng's transforms -> RGB.
void png_convert_row(PngCtx* ctx, int64_t y, const uint8_t* in) {
  uint8_t* out = ctx->pixels.data() + size_t(y * ctx->width * 3);
  const int c = ctx->channels;
  for (int64_t x = 0; x < ctx->width; ++x, out += 3) {
    if (ctx->bit_depth == 16) {  // grayscale, PIL mode "I" -> RGB clips to [0, 255]
      uint16_t v;
      std::memcpy(&v, in + x * 2, 2);
      out[0] = out[1] = out[2] = uint8_t(v > 255 ? 255 : v);
    } else if (c <= 2) {  // L, LA: alpha dropped
      out[0] = out[1] = out[2] = in[x * c];
    } else {  // RGB, RGBA: alpha dropped
      out[0] = in[x * c];
      out[1] = in[x * c + 1];
      out[2] = in[x * c + 2];
    }
  }
}

// Only POD locals; all state in *ctx. Returns false on error (message in ctx).
bool png_decode_c(PngCtx* ctx) {
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, ctx, png_error_fn, png_warning_fn);
  if (!png) {
    std::snprintf(ctx->error, sizeof(ctx->error), "png_create_read_struct failed");
    return false;
  }
  png_infop info = png_create_info_struct(png);
  if (!info) {
    png_destroy_read_struct(&png, nullptr, nullptr);
    std::snprintf(ctx->error, sizeof(ctx->error), "png_create_info_struct failed");
    return false;
  }
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, nullptr);
    return false;
  }
  png_set_read_fn(png, ctx, png_read_fn);
  // We enforce our own pixel limit; lift libpng's 1,000,000-per-side default so that our
  // message (with the configured limit) is the one a caller sees.
  png_set_user_limits(png, 0x7fffffff, 0x7fffffff);
  png_read_info(png, info);
  png_uint_32 w = png_get_image_width(png, info), h = png_get_image_height(png, info);
  ctx->status = check_dims(int64_t(w), int64_t(h), *ctx->opt, ctx->source);
  if (!ctx->status.ok()) png_error(png, "dimension limit");
  int color = png_get_color_type(png, info);
  int depth = png_get_bit_depth(png, info);
  // PIL keeps palette colours and ignores tRNS / alpha in convert("RGB"): never add alpha.
  if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (color == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  bool gray16 = (color == PNG_COLOR_TYPE_GRAY && depth == 16);
  if (depth == 16 && !gray16) png_set_strip_16(png);  // PIL's ";16B" unpackers keep the high byte
  if (gray16) png_set_swap(png);                      // native little-endian u16
  const int passes = png_set_interlace_handling(png);
  png_read_update_info(png, info);
  ctx->width = w;
  ctx->height = h;
  ctx->channels = png_get_channels(png, info);
  ctx->bit_depth = png_get_bit_depth(png, info);
  const size_t rowbytes = png_get_rowbytes(png, info);
  // Row by row into the RGB result: no row-pointer array (8 bytes a row: 134 MB for a 1 x 16.7 M
  // image) and, without interlacing, no full-size buffer of libpng rows either.
  ctx->pixels.resize(size_t(w) * size_t(h) * 3);
  if (passes == 1) {
    ctx->raw.resize(rowbytes);
    for (png_uint_32 y = 0; y < h; ++y) {
      png_read_row(png, ctx->raw.data(), nullptr);
      png_convert_row(ctx, y, ctx->raw.data());
    }
  } else {  // Adam7: every pass revisits the rows, so they are all kept until the last pass
    ctx->raw.resize(rowbytes * size_t(h));
    for (int pass = 0; pass < passes; ++pass)
      for (png_uint_32 y = 0; y < h; ++y) png_read_row(png, ctx->raw.data() + size_t(y) * rowbytes, nullptr);
    for (png_uint_32 y = 0; y < h; ++y) png_convert_row(ctx, y, ctx->raw.data() + size_t(y) * rowbytes);
  }
  std::vector<uint8_t>().swap(ctx->raw);
  png_read_end(png, info);  // collects an eXIf chunk placed after IDAT too
#ifdef PNG_eXIf_SUPPORTED
  {
    png_uint_32 exif_len = 0;
    png_bytep exif = nullptr;
    if (png_get_eXIf_1(png, info, &exif_len, &exif) != 0 && exif && exif_len > 0)
      ctx->exif.assign(exif, exif + exif_len);
  }
#endif
  png_destroy_read_struct(&png, &info, nullptr);
  return true;
}

Result<Image> decode_png(std::string_view bytes, const DecodeOptions& opt, const std::string& source) {
  PngCtx ctx;
  ctx.bytes = bytes;
  ctx.opt = &opt;
  ctx.source = source;
  if (!png_decode_c(&ctx)) {
    if (!ctx.status.ok()) return ctx.status;
    return make_error(ErrorKind::kIo, source, ": corrupt or truncated PNG (", bytes.size(), " bytes): ", ctx.error);
  }
  Image img;
  img.width = ctx.width;
  img.height = ctx.height;
  img.pixels = std::move(ctx.pixels);
  // PIL's exif_transpose reads a PNG's eXIf chunk as well.
  if (opt.apply_exif_orientation && !ctx.exif.empty()) {
    int o = exif_orientation(ctx.exif);
    if (o != 1) return apply_orientation(img, o);
  }
  return img;
}

// ---------------------------------------------------------------------------------------------
// JPEG

struct JpegErr {
  jpeg_error_mgr mgr;
  jmp_buf jmp;
  char message[JMSG_LENGTH_MAX];
};

struct JpegCtx {
  std::string_view bytes;
  const DecodeOptions* opt = nullptr;
  std::string source;
  Status status;
  std::vector<uint8_t> raw;   // output_components per pixel
  std::vector<uint8_t> exif;  // APP1 payload, when present
  int64_t width = 0, height = 0;
  int components = 0;
  bool cmyk = false;
  bool truncated = false;
  char error[JMSG_LENGTH_MAX] = {0};
};

void jpeg_error_exit_fn(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<JpegErr*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jmp, 1);
}
void jpeg_emit_message_fn(j_common_ptr cinfo, int level) {
  // Warnings (level -1) include "premature end of data segment": libjpeg pads with gray and keeps
  // going. PIL raises "image file is truncated" for those, so we treat them as errors too.
  if (level < 0 && cinfo->err->msg_code == JWRN_JPEG_EOF) cinfo->err->error_exit(cinfo);
}

bool jpeg_decode_c(JpegCtx* ctx, JpegErr* err, jpeg_decompress_struct* cinfo) {
  cinfo->err = jpeg_std_error(&err->mgr);
  err->mgr.error_exit = jpeg_error_exit_fn;
  err->mgr.emit_message = jpeg_emit_message_fn;
  if (setjmp(err->jmp)) {
    std::snprintf(ctx->error, sizeof(ctx->error), "%s", err->message);
    jpeg_destroy_decompress(cinfo);
    return false;
  }
  jpeg_create_decompress(cinfo);
  jpeg_mem_src(cinfo, reinterpret_cast<const unsigned char*>(ctx->bytes.data()),
               static_cast<unsigned long>(ctx->bytes.size()));
  jpeg_save_markers(cinfo, JPEG_APP0 + 1, 0xFFFF);
  jpeg_read_header(cinfo, TRUE);
  ctx->status = check_dims(cinfo->image_width, cinfo->image_height, *ctx->opt, ctx->source);
  if (!ctx->status.ok()) {
    std::snprintf(err->message, sizeof(err->message), "dimension limit");
    std::longjmp(err->jmp, 1);
  }
  for (jpeg_saved_marker_ptr m = cinfo->marker_list; m; m = m->next) {
    if (m->marker == JPEG_APP0 + 1 && m->data_length >= 6 && std::memcmp(m->data, "Exif\0\0", 6) == 0) {
      ctx->exif.assign(m->data + 6, m->data + m->data_length);
      break;
    }
  }
  switch (cinfo->jpeg_color_space) {
    case JCS_GRAYSCALE:
      cinfo->out_color_space = JCS_GRAYSCALE;
      break;
    case JCS_CMYK:
    case JCS_YCCK:
      cinfo->out_color_space = JCS_CMYK;
      ctx->cmyk = true;
      break;
    default:
      cinfo->out_color_space = JCS_RGB;
      break;
  }
  jpeg_start_decompress(cinfo);
  ctx->width = cinfo->output_width;
  ctx->height = cinfo->output_height;
  ctx->components = cinfo->output_components;
  size_t stride = size_t(ctx->width) * size_t(ctx->components);
  ctx->raw.resize(stride * size_t(ctx->height));
  while (cinfo->output_scanline < cinfo->output_height) {
    JSAMPROW row = ctx->raw.data() + size_t(cinfo->output_scanline) * stride;
    jpeg_read_scanlines(cinfo, &row, 1);
  }
  jpeg_finish_decompress(cinfo);
  jpeg_destroy_decompress(cinfo);
  return true;
}

// EXIF orientation from a TIFF-structured APP1 payload; 1 when absent or malformed.
int exif_orientation(const std::vector<uint8_t>& tiff) {
  std::vector<uint8_t> t = tiff;
  if (t.size() >= 6 && std::memcmp(t.data(), "Exif\0\0", 6) == 0) t.erase(t.begin(), t.begin() + 6);
  if (t.size() < 8) return 1;
  bool le;
  if (t[0] == 'I' && t[1] == 'I')
    le = true;
  else if (t[0] == 'M' && t[1] == 'M')
    le = false;
  else
    return 1;
  auto u16 = [&](size_t o) -> uint32_t {
    return le ? uint32_t(t[o]) | uint32_t(t[o + 1]) << 8 : uint32_t(t[o]) << 8 | uint32_t(t[o + 1]);
  };
  auto u32 = [&](size_t o) -> uint32_t { return le ? u16(o) | u16(o + 2) << 16 : u16(o) << 16 | u16(o + 2); };
  size_t ifd = u32(4);
  if (ifd + 2 > t.size()) return 1;
  uint32_t n = u16(ifd);
  for (uint32_t i = 0; i < n; ++i) {
    size_t e = ifd + 2 + size_t(i) * 12;
    if (e + 12 > t.size()) return 1;
    if (u16(e) == 0x0112) {
      uint32_t type = u16(e + 2);
      uint32_t v = type == 3 ? u16(e + 8) : type == 4 ? u32(e + 8) : 1;
      return (v >= 1 && v <= 8) ? int(v) : 1;
    }
  }
  return 1;
}

inline uint8_t muldiv255(int a, int b) {
  int tmp = a * b + 128;
  return uint8_t(((tmp >> 8) + tmp) >> 8);
}

Result<Image> decode_jpeg(std::string_view bytes, const DecodeOptions& opt, const std::string& source) {
  JpegCtx ctx;
  ctx.bytes = bytes;
  ctx.opt = &opt;
  ctx.source = source;
  JpegErr err;
  std::memset(&err, 0, sizeof(err));
  jpeg_decompress_struct cinfo;
  std::memset(&cinfo, 0, sizeof(cinfo));
  if (!jpeg_decode_c(&ctx, &err, &cinfo)) {
    if (!ctx.status.ok()) return ctx.status;
    return make_error(ErrorKind::kIo, source, ": corrupt or truncated JPEG (", bytes.size(), " bytes): ", ctx.error);
  }
  Image img;
  img.width = ctx.width;
  img.height = ctx.height;
  img.pixels.resize(size_t(img.width * img.height * 3));
  const int c = ctx.components;
  const uint8_t* in = ctx.raw.data();
  uint8_t* out = img.pixels.data();
  const int64_t n = img.width * img.height;
  if (ctx.cmyk && c != 4)
    return make_error(ErrorKind::kUnsupported, source, ": CMYK JPEG decoded to ", c, " components");
  for (int64_t i = 0; i < n; ++i, out += 3) {
    if (ctx.cmyk) {
      // PIL reads CMYK JPEGs as "CMYK;I" (Adobe inverted), then cmyk2rgb with MULDIV255.
      const uint8_t* p = in + i * 4;
      int nk = p[3];  // 255 - (255 - stored k)
      out[0] = muldiv255(nk, p[0]);
      out[1] = muldiv255(nk, p[1]);
      out[2] = muldiv255(nk, p[2]);
    } else if (c == 1) {
      out[0] = out[1] = out[2] = in[i];
    } else if (c == 3) {
      std::memcpy(out, in + i * 3, 3);
    } else {
      return make_error(ErrorKind::kUnsupported, source, ": JPEG with ", c, " output components");
    }
  }
  std::vector<uint8_t>().swap(ctx.raw);  // before a rotation allocates another image
  if (opt.apply_exif_orientation && !ctx.exif.empty()) {
    int o = exif_orientation(ctx.exif);
    if (o != 1) return apply_orientation(img, o);
  }
  return img;
}

}  // namespace

Result<Image> decode_image(std::string_view bytes, const DecodeOptions& options, const std::string& source) {
  switch (sniff_image_format(bytes)) {
    case ImageFormat::kPng:
      return decode_png(bytes, options, source);
    case ImageFormat::kJpeg:
      return decode_jpeg(bytes, options, source);
    default:
      break;
  }
  return make_error(ErrorKind::kUnsupported, source, ": not a PNG or JPEG image (", bytes.size(),
                    " bytes; supported: PNG, JPEG)");
}

Result<Image> load_image(const std::string& path, const DecodeOptions& options) {
  HLX_ASSIGN_OR_RETURN(std::string bytes, read_file(path, size_t(1) << 31));
  return decode_image(bytes, options, path);
}

Image apply_orientation(const Image& in, int o) {
  if (o < 2 || o > 8) return in;
  const int64_t W = in.width, H = in.height;
  const bool swap = o >= 5;
  Image out;
  out.width = swap ? H : W;
  out.height = swap ? W : H;
  out.pixels.resize(in.pixels.size());
  for (int64_t y = 0; y < out.height; ++y) {
    for (int64_t x = 0; x < out.width; ++x) {
      int64_t sx = 0, sy = 0;
      switch (o) {
        case 2:
          sx = W - 1 - x;
          sy = y;
          break;  // FLIP_LEFT_RIGHT
        case 3:
          sx = W - 1 - x;
          sy = H - 1 - y;
          break;  // ROTATE_180
        case 4:
          sx = x;
          sy = H - 1 - y;
          break;  // FLIP_TOP_BOTTOM
        case 5:
          sx = y;
          sy = x;
          break;  // TRANSPOSE
        case 6:
          sx = y;
          sy = H - 1 - x;
          break;  // ROTATE_270 (clockwise 90)
        case 7:
          sx = W - 1 - y;
          sy = H - 1 - x;
          break;  // TRANSVERSE
        case 8:
          sx = W - 1 - y;
          sy = x;
          break;  // ROTATE_90 (counter-clockwise 90)
      }
      std::memcpy(out.row(y) + x * 3, in.row(sy) + sx * 3, 3);
    }
  }
  return out;
}

Image crop_or_pad(const Image& in, int64_t top, int64_t left, int64_t height, int64_t width) {
  Image out;
  out.width = width;
  out.height = height;
  out.pixels.assign(size_t(width * height * 3), 0);
  for (int64_t y = 0; y < height; ++y) {
    int64_t sy = top + y;
    if (sy < 0 || sy >= in.height) continue;
    for (int64_t x = 0; x < width; ++x) {
      int64_t sx = left + x;
      if (sx < 0 || sx >= in.width) continue;
      std::memcpy(out.row(y) + x * 3, in.row(sy) + sx * 3, 3);
    }
  }
  return out;
}

}  // namespace hlx::mm
