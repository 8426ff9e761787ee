// Host side of Qwen3-VL (transformers' Qwen2VLImageProcessor, PIL path, and Qwen3VLProcessor):
// dynamic-resolution resize (smart_resize), rescale/normalise, patch flattening in merge-block
// order, image-token counts per image, and the [3, L] M-RoPE positions with the rope delta.
//
// Nothing here knows layer math: the vision tower consumes the flattened patches and the grid,
// the text entries consume the positions.
//
// Thread-safety: all functions are pure; safe to call concurrently.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "io/hf_config.h"
#include "multimodal/image.h"

namespace hlx::mm {

// Which pipeline a preprocessor_config.json describes, from `image_processor_type` (absent or any
// CLIP/SigLIP-style name: kFixed; "Qwen2VLImageProcessor" / "Qwen2VLImageProcessorFast": kQwen2VL).
// A Qwen config must never be read by PreprocessConfig: its `size` means pixel counts, not edges.
enum class ImageProcessorKind { kFixed, kQwen2VL };
Result<ImageProcessorKind> image_processor_kind(const ConfigView& view);
// Reads preprocessor_config.json (a file or a directory holding one) and classifies it.
Result<ImageProcessorKind> image_processor_kind_of_file(const std::string& path);

struct Qwen2VLImageConfig {
  int64_t patch_size = 14, temporal_patch_size = 2, merge_size = 2;
  // size.shortest_edge / size.longest_edge are pixel counts (min / max h*w); older configs spell
  // them min_pixels / max_pixels, which win when both are present (as upstream's __init__).
  int64_t min_pixels = 56 * 56, max_pixels = 28 * 28 * 1280;
  bool do_resize = true;
  Resample resample = Resample::kBicubic;
  bool do_rescale = true;
  double rescale_factor = 1.0 / 255.0;
  bool do_normalize = true;
  std::vector<double> image_mean{0.48145466, 0.4578275, 0.40821073};
  std::vector<double> image_std{0.26862954, 0.26130258, 0.27577711};

  int64_t factor() const { return patch_size * merge_size; }
  // Flattened patch width: 3 * temporal_patch_size * patch_size^2 (columns (c, t, y, x)).
  int64_t patch_dim() const { return 3 * temporal_patch_size * patch_size * patch_size; }

  // Errors: kInvalidArgument naming the values (non-positive sizes, min > max, bad mean/std),
  // kUnsupported for a config whose image_processor_type is not a Qwen2-VL one.
  static Result<Qwen2VLImageConfig> from_config(const ConfigView& view);
  static Result<Qwen2VLImageConfig> load(const std::string& path);
};

// Grid of one image in patches: t frames groups, h x w patches (h, w multiples of merge_size).
struct ImageGrid {
  int64_t t = 0, h = 0, w = 0;
};

// transformers' smart_resize: (height, width) multiples of `factor`, h*w within [min, max] as
// closely as the aspect ratio allows; Python round() (half to even) on height / factor.
// Errors (kInvalidArgument, naming the values): an empty image, aspect ratio above 200, a factor
// or pixel bound that is not positive.
Result<std::pair<int64_t, int64_t>> qwen_smart_resize(int64_t height, int64_t width, int64_t factor, int64_t min_pixels,
                                                      int64_t max_pixels);

struct Qwen2VLImage {
  Tensor patches;  // f32 [t*h*w, patch_dim], rows (t, block row, block col, row in block, col in block)
  ImageGrid grid;
};

// The resize step alone (u8 RGB at the smart_resize size; unchanged when do_resize is false).
Result<Image> qwen_resize_u8(const Image& image, const Qwen2VLImageConfig& cfg);
// A normalised f32 [3, H, W] image (H, W multiples of factor) -> patches; a still image is
// repeated to temporal_patch_size frames.
Result<Qwen2VLImage> qwen_patchify(const Tensor& chw, const Qwen2VLImageConfig& cfg);
// The whole pipeline: resize, rescale, normalise, patchify.
Result<Qwen2VLImage> qwen_preprocess(const Image& image, const Qwen2VLImageConfig& cfg);

// Image tokens one image becomes in the prompt: t * (h / merge) * (w / merge).
int64_t qwen_image_tokens(const ImageGrid& grid, int64_t merge_size);

// Qwen3VLProcessor's placeholder expansion on token ids: the k-th image token (one per image) is
// replaced by qwen_image_tokens(grids[k]) copies. Errors: more or fewer image tokens than grids.
Result<std::vector<int32_t>> qwen_expand_image_tokens(const std::vector<int32_t>& ids, int32_t image_token_id,
                                                      const std::vector<ImageGrid>& grids, int64_t merge_size);

struct MropePositions {
  int64_t length = 0;
  std::vector<int32_t> positions;  // [3, length] row-major: axis T, then H, then W
  int64_t rope_delta = 0;          // (max position + 1) - length; decode position = cache length + delta
};

// transformers' Qwen3VLModel.get_rope_index for one expanded prompt: text rows (s, s, s); the
// i-th image's rows (s + t, s + row, s + col) over its merged grid, s = 1 + the largest position
// used before it; text after an image continues at 1 + the largest position so far.
// Errors (kInvalidArgument): an image span shorter than its grid's token count, image tokens
// left over after the last grid, or fewer spans than grids.
Result<MropePositions> qwen_mrope_positions(const std::vector<int32_t>& ids, int32_t image_token_id,
                                            const std::vector<ImageGrid>& grids, int64_t merge_size);

}  // namespace hlx::mm
