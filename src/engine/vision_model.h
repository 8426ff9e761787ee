// The image side of a vision-language model, family-neutral: what the batch engine, CLI, server
// and C API call. One interface over three families:
//
//   family   | placeholder a prompt writes      | expanded to (before tokenization)       | prefill
//   LLaVA    | <image>                          | <image> x N (N fixed)                   | prefill_embeddings
//   Gemma3   | <start_of_image>                 | \n\n<boi><image_soft_token> x 256<eoi>\n\n | _masked (image blocks)
//   Qwen3-VL | <|vision_start|><|image_pad|><|vision_end|> | <|image_pad|> x N(image size)   | _mrope + DeepStack
//
// A prompt is expanded on its TEXT (expand_prompt), then tokenized: Gemma3's "\n\n" merges with
// neighbouring newlines as the real processor's tokenization does, which id-level expansion
// cannot reproduce. The engine then takes the expanded ids with the images and checks that the
// image-token rows match image_tokens() of each image, in order.
//
// Threads: image_tokens(), expand_prompt() and preprocess() are pure and may run on any thread
// (BatchEngine::submit calls them on the submitting thread); encode() runs on one thread at a time
// (the engine's owner thread). Tensors it returns are owned by the caller.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "models/vision_spec.h"
#include "multimodal/image.h"
#include "multimodal/qwen3_vl_processor.h"

namespace hlx::rt {
struct ProgramOptions;
}

namespace hlx::tok {
class Tokenizer;
}

namespace hlx::engine {

struct VisionModelOptions {
  int threads = 0;  // runtime threads, 0 = all cores
  // Gives the placeholder texts; null: DIR/tokenizer.json is read when present.
  std::shared_ptr<const tok::Tokenizer> tokenizer;
};

struct VisionModelStats {
  double config_ms = 0, emit_ms = 0, compile_ms = 0, bind_ms = 0;
  size_t weight_bytes = 0;  // tower + projector tensors as stored
};

// One image after the checkpoint's processor, ready for encode().
struct PreparedImage {
  Tensor pixels;       // fixed-size towers: f32 [1, 3, S, S]; Qwen3-VL: patches f32 [t*h*w, patch_dim]
  mm::ImageGrid grid;  // Qwen3-VL: the patch grid (t, h, w); unused otherwise
  int64_t tokens = 0;  // image-token rows it becomes in the prompt
};

// encode()'s output for one image.
struct EncodedImage {
  Tensor features;   // f32 [tokens, hidden]: the rows that replace the image's tokens
  Tensor deepstack;  // Qwen3-VL: f32 [K, tokens, hidden], added after decoder layer k; else undefined
};

class VisionModel {
 public:
  // Reads config.json and loads the family's tower: llava, gemma3 with tower weights, qwen3_vl.
  // kInvalidArgument for a text-only checkpoint, kNotFound naming a missing
  // preprocessor_config.json, kInvalidArgument when the processor does not produce what the
  // tower takes. On failure nothing is returned.
  static Result<std::unique_ptr<VisionModel>> load(const std::string& model_dir, VisionModelOptions options = {});
  virtual ~VisionModel();

  models::VlmFamily family() const { return family_; }
  int64_t image_token_id() const { return image_token_id_; }
  int64_t hidden_size() const { return hidden_size_; }  // feature width = text hidden
  const VisionModelStats& stats() const { return stats_; }
  // One line for logs: family, input size, tokens per image.
  virtual std::string describe() const = 0;
  // What a prompt writes for one image (the table above); empty when the checkpoint has no
  // tokenizer. A plain prompt without it gets one per image in front (with_image_placeholders).
  const std::string& placeholder() const { return placeholder_; }

  // Rows an image becomes in the prompt, from its size alone (Qwen3-VL: smart_resize). Errors as
  // preprocess() for images it refuses by size (aspect ratio, empty).
  virtual Result<int64_t> image_tokens(const mm::Image& image) const = 0;
  // `text` with the k-th placeholder expanded for an image of tokens_per_image[k] rows.
  // kInvalidArgument naming both counts when the text holds a different number of placeholders.
  Result<std::string> expand_prompt(std::string_view text, std::span<const int64_t> tokens_per_image) const;
  // A prompt without any placeholder gets `images` of them in front, each followed by "\n" (as
  // `hlx generate --image -p` and the C API do); one that has some is returned unchanged.
  std::string with_placeholders(std::string_view text, size_t images) const;

  virtual Result<PreparedImage> preprocess(const mm::Image& image) const = 0;
  virtual Result<EncodedImage> encode(const PreparedImage& image) = 0;
  // Qwen3-VL: the [3, n] M-RoPE positions of an expanded prompt and its rope delta
  // (get_rope_index). kInvalidArgument for families without M-RoPE.
  virtual Result<mm::MropePositions> mrope_positions(std::span<const int64_t> ids,
                                                     std::span<const PreparedImage> images) const;

 protected:
  VisionModel() = default;
  // Sets the placeholder texts from the tokenizer (options.tokenizer, else DIR/tokenizer.json).
  Status set_placeholders(const std::string& model_dir, const VisionModelOptions& options, int64_t boi_id,
                          int64_t eoi_id, int64_t vision_start_id, int64_t vision_end_id);

  models::VlmFamily family_ = models::VlmFamily::kLlava;
  int64_t image_token_id_ = -1, hidden_size_ = 0;
  VisionModelStats stats_;

 private:
  std::string placeholder_;  // what a prompt writes per image
  std::string marker_;       // what expand_prompt looks for (the image token; Gemma3: boi)
  std::string image_text_, boi_text_, eoi_text_;
};

// The image token id of a vision-language checkpoint hlx runs (llava, gemma3 with tower weights,
// qwen3_vl); -1 for a text model. Reads config.json (and the tensor names for gemma3).
Result<int64_t> checkpoint_image_token_id(const std::string& model_dir);
// The kInvalidArgument every front (CLI, C API) returns for images given to a text-only
// checkpoint: "<context>: the model at '<dir>' is text-only (not a llava, ...)".
Status text_only_model_error(std::string_view context, std::string_view model_dir);

// Options of every vision-tower program (these towers, `hlx encode`, the tower benches). An image
// is encoded at one fixed shape, so products need not keep rows invariant across M: on AMX CPUs
// they take oneDNN's AMX tiles (kernels/matmul.h ProductOrder).
rt::ProgramOptions tower_program_options(int threads);

// The LLaVA / Gemma3 tower (one fixed square input size) loaded from `model_dir`.
Result<std::unique_ptr<VisionModel>> load_fixed_vision_model(const std::string& model_dir,
                                                             const VisionModelOptions& options);
// The Qwen3-VL tower (engine/qwen3_vl_vision_model.h) behind this interface.
Result<std::unique_ptr<VisionModel>> load_qwen3_vl_vision_model(const std::string& model_dir,
                                                                const VisionModelOptions& options);

}  // namespace hlx::engine
