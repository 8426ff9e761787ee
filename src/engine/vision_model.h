// A loaded vision tower + projector (LLaVA): the checkpoint's preprocessor_config.json, and the
// `vision_encode` entry emitted from config.json (models/vision_spec.h), compiled by the CPU runtime
// with the tower and projector weights bound (memory-mapped, stored dtype).
//
// Threads: preprocess() is pure and may run on any thread (BatchEngine::submit calls it on the
// submitting thread); encode() runs on one thread at a time (the engine's owner thread).
// Tensors it returns are owned by the caller.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"
#include "core/tensor.h"
#include "io/checkpoint.h"
#include "models/vision_spec.h"
#include "multimodal/image.h"
#include "multimodal/preprocess.h"

namespace hlx::rt {
class Program;
}
namespace hlx::tok {
class Tokenizer;
}

namespace hlx::engine {

struct VisionModelOptions {
  int threads = 0;  // runtime threads, 0 = all cores
  // Gives image_token_text(); null: DIR/tokenizer.json is read when present.
  std::shared_ptr<const tok::Tokenizer> tokenizer;
};

struct VisionModelStats {
  double config_ms = 0, emit_ms = 0, compile_ms = 0, bind_ms = 0;
  size_t weight_bytes = 0;  // tower + projector tensors as stored
};

class VisionModel {
 public:
  // Reads config.json (must be vision-language: kInvalidArgument otherwise), the checkpoint's
  // tower and projector tensors (names and shapes of vision_checkpoint_layout) and
  // preprocessor_config.json (kNotFound naming the file when missing), emits and compiles
  // vision_encode. On failure nothing is returned.
  static Result<std::unique_ptr<VisionModel>> load(const std::string& model_dir, VisionModelOptions options = {});
  ~VisionModel();

  const models::VlmSpec& spec() const { return spec_; }
  const mm::PreprocessConfig& preprocess_config() const { return preprocess_; }
  const VisionModelStats& stats() const { return stats_; }
  int64_t image_token_id() const { return spec_.image_token_id; }
  int64_t tokens_per_image() const { return spec_.vision.tokens_per_image(); }
  int64_t hidden_size() const { return spec_.text.hidden_size; }  // feature width = text hidden
  // The image token as text (e.g. "<image>", "<|image_pad|>"), what a prompt or chat template
  // writes for each image; empty when the checkpoint has no tokenizer.
  const std::string& image_token_text() const { return image_token_text_; }

  // The checkpoint's processor pipeline: f32 [1, 3, image_size, image_size]. Thread-safe.
  Result<Tensor> preprocess(const mm::Image& image) const;
  // Runs vision_encode on f32 [1, 3, image_size, image_size]: features f32 [tokens_per_image, hidden].
  Result<Tensor> encode(const Tensor& pixels);

 private:
  VisionModel() = default;

  models::VlmSpec spec_;
  mm::PreprocessConfig preprocess_;
  std::string image_token_text_;
  std::unique_ptr<Checkpoint> checkpoint_;  // keeps the bound weights mapped
  std::shared_ptr<rt::Program> program_;
  VisionModelStats stats_;
};

}  // namespace hlx::engine
