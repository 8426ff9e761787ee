// A loaded Qwen3-VL vision tower at run time: the checkpoint's model.visual.* tensors (mapped,
// stored dtype), its Qwen2VLImageProcessor config, and one compiled `vision_encode_padded` module
// per patch-count bucket (models/qwen3_vl.h), so any image within the processor's pixel limits
// runs without compiling for its size. Buckets compile on first use.
//
// Threads: preprocess() is pure and may run on any thread; encode() runs on one thread at a time.
// Tensors it returns are owned by the caller.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "io/checkpoint.h"
#include "models/qwen3_vl.h"
#include "multimodal/image.h"
#include "multimodal/qwen3_vl_processor.h"

namespace hlx::rt {
class Program;
}

namespace hlx::engine {

struct Qwen3VLVisionModelOptions {
  int threads = 0;                     // runtime threads, 0 = all cores
  std::vector<int64_t> patch_buckets;  // ascending multiples of merge_unit; empty: default buckets
  bool eager_compile = false;          // compile every bucket in load()
};

struct Qwen3VLVisionStats {
  double config_ms = 0, emit_ms = 0, compile_ms = 0, bind_ms = 0;
  int compiled = 0;
  size_t weight_bytes = 0;  // tower + merger tensors as stored
};

// One image's tower outputs: rows in the merged-grid order of its image tokens.
struct Qwen3VLImageFeatures {
  mm::ImageGrid grid;
  Tensor features;     // f32 [tokens, hidden]: the rows that replace the image's expanded pad tokens
  Tensor deepstack;    // f32 [K, tokens, hidden]: DeepStack feature k, added after decoder layer k
  int64_t bucket = 0;  // patch rows of the module that ran
};

class Qwen3VLVisionModel {
 public:
  // Reads config.json (model_type qwen3_vl, else kInvalidArgument), preprocessor_config.json (a
  // Qwen2-VL processor whose patch/merge/temporal sizes match the tower, kNotFound when absent),
  // the tower tensors (names and shapes of qwen3_vl_vision_layout) and emits every bucket. On
  // failure nothing is returned.
  static Result<std::unique_ptr<Qwen3VLVisionModel>> load(const std::string& model_dir,
                                                          Qwen3VLVisionModelOptions options = {});
  ~Qwen3VLVisionModel();

  const models::Qwen3VLSpec& spec() const { return spec_; }
  const mm::Qwen2VLImageConfig& image_config() const { return image_config_; }
  const std::vector<int64_t>& patch_buckets() const { return buckets_; }
  const Qwen3VLVisionStats& stats() const { return stats_; }
  // The most patches one image can have (max_pixels / patch_size^2, rounded up to the merge unit).
  int64_t max_patches() const { return max_patches_; }

  // The checkpoint's processor pipeline (smart_resize, normalise, patchify). Thread-safe.
  Result<mm::Qwen2VLImage> preprocess(const mm::Image& image) const;
  // Runs the smallest bucket holding the image's patches. Errors: kInvalidArgument for patches
  // that are not f32 [t*h*w, patch_dim] of a valid grid, kOutOfRange naming the patch count and
  // the largest bucket when none holds it, kUnsupported for video (t != 1).
  Result<Qwen3VLImageFeatures> encode(const mm::Qwen2VLImage& image);

 private:
  Qwen3VLVisionModel() = default;
  Result<rt::Program*> program_for(int64_t bucket);

  models::Qwen3VLSpec spec_;
  mm::Qwen2VLImageConfig image_config_;
  std::vector<int64_t> buckets_;
  int64_t max_patches_ = 0;
  int threads_ = 0;
  std::unique_ptr<Checkpoint> checkpoint_;
  std::vector<std::pair<std::string, Tensor>> weights_;
  std::map<int64_t, std::shared_ptr<const shlo::Module>> modules_;
  std::map<int64_t, std::shared_ptr<rt::Program>> programs_;
  Qwen3VLVisionStats stats_;
};

}  // namespace hlx::engine
