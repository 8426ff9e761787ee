// Qwen3-VL as data (config.json `model_type: "qwen3_vl"`): the Qwen3 text decoder with
// interleaved M-RoPE and DeepStack (TextModelSpec fields, see text_spec.h / text_entries.h) plus
// the vision tower, and its `vision_encode` entry (code: qwen3_vl_vision.cc):
//
//   vision_encode(patches: tensor<N x D x f32>,            # Qwen2VLImageProcessor output, one image,
//                                                          # N = grid_h * grid_w, D = 3 * T * P * P
//                 weights... (hlx.weight names, qwen3_vl_vision_layout() order, stored dtype))
//     -> (features: tensor<N/m^2 x out_hidden x f32>,      # main merger
//         deepstack: tensor<K x N/m^2 x out_hidden x f32>) # one per deepstack_visual_indexes entry
//
// The grid (grid_h, grid_w in patches) is compiled in and part of the identity: positions
// (learned table interpolated bilinearly, 2D rotary) are constants of the module.
//
// The run-time variant, one module per patch-count bucket Nb (any grid with N <= Nb runs in it):
//
//   vision_encode_padded(patches: tensor<Nb x D x f32>,      # rows >= valid are padding (any values)
//                        embed_index: tensor<4 x Nb x i32>,  # qwen3_vl_vision_positions()
//                        embed_weight: tensor<4 x Nb x f32>,
//                        rotary_positions: tensor<2 x Nb x i32>,  # patch row, patch col
//                        valid: tensor<i32>,                 # N, a multiple of merge_unit
//                        weights...)
//     -> (features: tensor<Nb/m^2 x out_hidden x f32>, deepstack: tensor<K x Nb/m^2 x out_hidden x f32>)
//   Padding rows are masked out of every attention (keys >= valid are invisible) and every other
//   op is row-wise, so rows < valid / m^2 equal the exact-grid entry's; the rest are dropped by
//   the caller.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "core/tensor.h"
#include "io/hf_config.h"
#include "models/text_spec.h"
#include "models/vision_spec.h"
#include "stablehlo/ir.h"

namespace hlx::models {

struct Qwen3VLVisionSpec {  // Qwen3VLVisionConfig
  int64_t depth = 27, hidden_size = 1152, intermediate_size = 4304, num_heads = 16, in_channels = 3, patch_size = 16,
          spatial_merge_size = 2, temporal_patch_size = 2, out_hidden_size = 3584, num_position_embeddings = 2304;
  std::vector<int64_t> deepstack_visual_indexes{8, 16, 24};
  VisionActivation activation = VisionActivation::kGeluTanh;  // hidden_act (block MLPs)
  double layer_norm_eps = 1e-6;                               // nn.LayerNorm(eps=1e-6), fixed upstream
  std::string weight_prefix = "model.visual.";
  DType weight_dtype = DType::kBF16;

  int64_t head_dim() const { return num_heads > 0 ? hidden_size / num_heads : 0; }
  int64_t patch_dim() const { return in_channels * temporal_patch_size * patch_size * patch_size; }
  int64_t merge_unit() const { return spatial_merge_size * spatial_merge_size; }
  // side of the square learned position table (int(sqrt(num_position_embeddings)))
  int64_t position_side() const;
};

struct Qwen3VLSpec {
  TextModelSpec text;  // mrope_section, deepstack_layers = 0..K-1
  Qwen3VLVisionSpec vision;
  int64_t image_token_id = 151655, video_token_id = 151656, vision_start_token_id = 151652,
          vision_end_token_id = 151653;
};

// Parses a qwen3_vl config.json (text_config via text_spec_from_config, vision_config with
// Qwen3VLVisionConfig defaults). Errors: kUnsupported for another model_type or activation,
// kInvalidArgument naming inconsistent numbers (heads not dividing hidden, odd head_dim / 2, a
// DeepStack tap outside the blocks, out_hidden_size != text hidden_size, ...).
Result<Qwen3VLSpec> qwen3_vl_spec_from_config(const HfConfig& config);

// Every tensor the vision entry reads, in its weight-argument order.
std::vector<TensorInfo> qwen3_vl_vision_layout(const Qwen3VLSpec& spec);

// One image's grid in patches (t = 1 for still images).
struct VisionGrid {
  int64_t t = 1, h = 0, w = 0;
};

// The module of the top of this file for one grid. Errors: kInvalidArgument when the grid is not
// positive multiples of the merge size (or t != 1: video is kUnsupported).
Result<shlo::Module> emit_qwen3_vl_vision_entry(const Qwen3VLSpec& spec, const VisionGrid& grid);
std::string qwen3_vl_vision_description(const Qwen3VLSpec& spec, const VisionGrid& grid);

// Run-time position inputs of one grid for vision_encode_padded, padded to `rows` entries
// (padding: index 0, weight 0, rotary 0). Errors as the grid entry's, and kInvalidArgument when
// the grid has more than `rows` patches.
struct Qwen3VLVisionPositions {
  Tensor embed_index;   // i32 [4, rows]: the four table rows each patch interpolates from
  Tensor embed_weight;  // f32 [4, rows]: their bilinear weights
  Tensor rotary;        // i32 [2, rows]: patch row, patch column (merge-block order)
};
Result<Qwen3VLVisionPositions> qwen3_vl_vision_positions(const Qwen3VLVisionSpec& vision, const VisionGrid& grid,
                                                         int64_t rows);
// vision_encode_padded for `rows` patch rows (a positive multiple of merge_unit).
Result<shlo::Module> emit_qwen3_vl_vision_padded_entry(const Qwen3VLSpec& spec, int64_t rows);
std::string qwen3_vl_vision_padded_description(const Qwen3VLSpec& spec, int64_t rows);
// Patch-count buckets up to `max_patches` (the largest image the processor emits): 64, then x4,
// then max_patches rounded up to the merge unit.
std::vector<int64_t> qwen3_vl_default_patch_buckets(const Qwen3VLVisionSpec& vision, int64_t max_patches);

}  // namespace hlx::models
