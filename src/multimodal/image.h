// Image input for vision-language models: PNG/JPEG decoding to RGB u8 (HWC) with the same mode
// conversions as PIL's `Image.convert("RGB")`, and resampling bit-identical to PIL's
// `Image.resize` (Pillow's separable, antialiased 8-bit fixed-point resampler).
//
// PIL conventions reproduced here (checked by tests/multimodal/test_image_pil.py):
// - Alpha is DROPPED, not composited: RGBA/LA -> RGB keeps the colour channels as stored.
// - Palette images (also with tRNS) -> palette colours, transparency ignored.
// - 16-bit RGB(A) and gray+alpha keep the high byte; 16-bit grayscale opens in PIL as mode "I"
//   (the integer value) and "I" -> RGB clips to [0, 255], so 16-bit gray values >= 255 are white.
// - 1/2/4-bit gray scale to 0..255 (x255, x85, x17).
// - CMYK JPEGs are read as Adobe-inverted CMYK (PIL's "CMYK;I") and converted with
//   r = nk * (255 - c) / 255 (rounded as Pillow's MULDIV255), nk = 255 - k.
// - EXIF orientation: transformers' `load_image` applies `PIL.ImageOps.exif_transpose` before
//   `convert("RGB")`; `DecodeOptions::apply_exif_orientation` (default true) does the same for
//   JPEG APP1 Exif. A caller that hands already-oriented pixels to a processor turns it off.
//
// Thread-safety: all functions are pure; safe to call concurrently.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace hlx::mm {

// Interleaved 8-bit RGB, row-major, height x width x 3.
struct Image {
  int64_t width = 0;
  int64_t height = 0;
  std::vector<uint8_t> pixels;  // size width * height * 3

  uint8_t* row(int64_t y) { return pixels.data() + y * width * 3; }
  const uint8_t* row(int64_t y) const { return pixels.data() + y * width * 3; }
};

struct DecodeOptions {
  // Decompression-bomb guard: images with more pixels than this are refused (kInvalidArgument)
  // before any pixel buffer is allocated. Default: 2x PIL's MAX_IMAGE_PIXELS warning threshold,
  // where PIL itself raises DecompressionBombError.
  int64_t max_pixels = 2 * 89478485LL;
  // Apply EXIF orientation (tag 0x0112) as transformers' load_image does.
  bool apply_exif_orientation = true;
};

enum class ImageFormat { kUnknown, kPng, kJpeg };
ImageFormat sniff_image_format(std::string_view bytes);

// Decodes a PNG or JPEG held in memory. `source` names the image in messages.
// Errors: kUnsupported (not PNG/JPEG, unsupported colour space), kIo (truncated/corrupt data),
// kInvalidArgument (dimensions zero or above the pixel limit).
Result<Image> decode_image(std::string_view bytes, const DecodeOptions& options = {},
                           const std::string& source = "<memory>");
// Reads a file and decodes it.
Result<Image> load_image(const std::string& path, const DecodeOptions& options = {});

// EXIF orientation 1..8 as in the TIFF spec; 1 (or anything unknown) returns the image unchanged.
Image apply_orientation(const Image& image, int orientation);

// PIL's resampling filters (values are PIL's Image.Resampling numbers, as in HF `resample`).
enum class Resample { kNearest = 0, kLanczos = 1, kBilinear = 2, kBicubic = 3 };
Result<Resample> resample_from_pil(int64_t value);

// PIL `Image.resize((width, height), resample)` on an RGB image, bit-identical for bilinear,
// bicubic and lanczos (antialiased on downscale: the filter support grows by the scale factor).
// Errors: kInvalidArgument for non-positive sizes or an empty input.
Result<Image> resize(const Image& image, int64_t width, int64_t height, Resample filter);

// A window of a resize result: rows [top, top + height), columns [left, left + width).
struct ResizeWindow {
  int64_t top = 0, left = 0, height = 0, width = 0;
};

// The window `win` of resize(image, width, height, filter), computed without the rest of the
// result: bit-identical to cropping the full resize (each output pixel has its own filter window),
// with buffers proportional to the window. A CLIP-style resize then center crop of a 1x599186 image
// needs ~1 MB this way instead of ~1.9 GB. kInvalidArgument when the window is not inside.
Result<Image> resize_window(const Image& image, int64_t width, int64_t height, Resample filter,
                            const ResizeWindow& win);

// Bytes resize_window allocates, from the sizes alone (nothing is allocated).
struct ResizeCost {
  int64_t coefficients = 0;  // filter weights and bounds (and the vertical accumulators)
  int64_t intermediate = 0;  // the horizontal pass's rows that the vertical pass reads
  int64_t output = 0;        // the window itself
};
Result<ResizeCost> resize_window_cost(int64_t in_width, int64_t in_height, int64_t width, int64_t height,
                                      Resample filter, const ResizeWindow& win);

// Crops [top, top+height) x [left, left+width); parts outside the image are zero (HF center_crop
// padding semantics are built on top of this).
Image crop_or_pad(const Image& image, int64_t top, int64_t left, int64_t height, int64_t width);

}  // namespace hlx::mm
