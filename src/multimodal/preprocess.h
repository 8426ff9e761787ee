// The Hugging Face image processors' pipeline (CLIPImageProcessor, SiglipImageProcessor,
// Gemma3ImageProcessor without pan-and-scan), driven by
// a checkpoint's preprocessor_config.json: convert to RGB (done by decode), resize with PIL
// resampling on u8, center crop, rescale, normalise -> f32 [3, H, W] (CHW).
//
// Exactness: rescale is computed as HF does (f64 multiply, then f32), normalise in f32 as
// (x - mean) / std with mean/std rounded to f32, so outputs equal numpy's bit for bit.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "io/hf_config.h"
#include "multimodal/image.h"

namespace hlx::mm {

// Images longer than this many times their width (or the reverse) are refused, as Qwen's image
// processors do: resizing the short side to the model's size would make the long side enormous.
inline constexpr int64_t kMaxAspectRatio = 200;
inline constexpr int64_t kDefaultPreprocessBudget = int64_t(256) << 20;

struct PreprocessConfig {
  bool do_resize = true;
  // Exactly one of: shortest_edge > 0 (CLIP: scale so the short side equals it, aspect kept,
  // long side truncated as int(size * long / short)), or height/width > 0 (SigLIP: fixed size).
  int64_t shortest_edge = 0;
  int64_t height = 0, width = 0;
  Resample resample = Resample::kBicubic;
  bool do_center_crop = false;
  int64_t crop_height = 0, crop_width = 0;
  bool do_rescale = true;
  double rescale_factor = 1.0 / 255.0;
  bool do_normalize = true;
  std::vector<double> image_mean{0.48145466, 0.4578275, 0.40821073};
  std::vector<double> image_std{0.26862954, 0.26130258, 0.27577711};
  // Memory budget of one image through preprocess(): PreprocessMemory::total() above this is
  // refused before anything is allocated (docs/SERVER.md, "Per-request memory budget").
  int64_t max_bytes = kDefaultPreprocessBudget;

  // Reads the HF keys (do_resize, size {shortest_edge | height,width} or an int, resample,
  // do_center_crop, crop_size {height,width} or an int, do_rescale, rescale_factor, do_normalize,
  // image_mean, image_std). Missing keys keep CLIPImageProcessor's defaults. Gemma3's
  // do_pan_and_scan: true is kUnsupported (false or null: a plain resize to size {height, width}).
  static Result<PreprocessConfig> from_config(const ConfigView& view);
  // Loads preprocessor_config.json (a file path or a directory containing one).
  static Result<PreprocessConfig> load(const std::string& path);
};

// HF `get_resize_output_image_size` for the config: (height, width) after the resize step.
Result<std::pair<int64_t, int64_t>> resize_output_size(const PreprocessConfig& cfg, int64_t height, int64_t width);

// Bytes one image of height x width holds through preprocess(), from the sizes alone: the decoded
// input (already held by the caller), the resampling weights, the horizontal pass's rows, the
// resized (cropped) u8 image and the f32 output. Resize + center crop only computes the cropped
// window of the resize (resize_window), so a long side does not grow the buffers.
// kInvalidArgument for an empty image or an aspect ratio above kMaxAspectRatio (naming both).
struct PreprocessMemory {
  int64_t decoded = 0, coefficients = 0, intermediate = 0, resized = 0, output = 0;
  int64_t total() const { return decoded + coefficients + intermediate + resized + output; }
};
Result<PreprocessMemory> preprocess_memory(const PreprocessConfig& cfg, int64_t height, int64_t width);

// transformers.image_transforms.center_crop on u8 (zero padding when the image is smaller).
Image center_crop(const Image& image, int64_t crop_height, int64_t crop_width);

// Resize + crop, still u8 (what the processor hands to rescale/normalise). Checks
// preprocess_memory() against cfg.max_bytes first (kInvalidArgument naming the size and bytes).
Result<Image> preprocess_u8(const Image& image, const PreprocessConfig& cfg);
// Rescale + normalise an u8 image into f32 [3, H, W].
Result<Tensor> to_normalized_chw(const Image& image, const PreprocessConfig& cfg);
// The whole pipeline.
Result<Tensor> preprocess(const Image& image, const PreprocessConfig& cfg);

}  // namespace hlx::mm
