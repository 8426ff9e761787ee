// Image placeholders in token prompts (LLaVA-style): counting and checking them against the
// images of a request, expanding each to the encoder's token count, and merging token embeddings
// with per-image features into the rows prefill_embeddings takes. Pure functions, no model.
//
// A prompt holds exactly one image token id per image (chat templates and the CLI put them there);
// expansion replaces each by tokens_per_image copies, so the expanded prompt's length is what
// admission checks and the row count of the merged embeddings.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"

namespace hlx::engine {

struct ImagePromptLimits {
  bool accepts_images = false;    // false: a text-only model (any image is an error)
  int64_t image_token_id = -1;
  int64_t tokens_per_image = 0;   // rows each image expands to (>= 1 when accepts_images)
  int64_t max_images = 0;         // per request
};

int64_t count_image_tokens(std::span<const int64_t> prompt, int64_t image_token_id);

// kInvalidArgument, before anything is mutated, when: images are given to a text-only model; more
// than max_images images; the prompt's image-token count differs from the number of images.
// Messages name the counts and the image token id.
Status check_image_placeholders(std::span<const int64_t> prompt, int64_t num_images, const ImagePromptLimits& limits);

struct ExpandedPrompt {
  std::vector<int64_t> ids;         // the prompt with each image token repeated tokens_per_image times
  std::vector<int64_t> image_rows;  // first row of image i's features, ascending
  int64_t tokens_per_image = 0;

  int64_t size() const { return int64_t(ids.size()); }
  // The ids of the rows that are not image rows, in order (the rows embedded from the table).
  std::vector<int64_t> text_ids() const;
};

// check_image_placeholders, then the expansion. Without images the prompt is returned unchanged.
Result<ExpandedPrompt> expand_image_placeholders(std::span<const int64_t> prompt, int64_t num_images,
                                                 const ImagePromptLimits& limits);

// [n, hidden] f32 rows of the expanded prompt: text rows from `text_embeddings` (f32
// [text_ids().size(), hidden], in order), the rows of image i from features[i] (f32
// [tokens_per_image, hidden]). kInvalidArgument naming the tensor and both shapes on any mismatch.
Result<Tensor> merge_embeddings(const ExpandedPrompt& prompt, const Tensor& text_embeddings,
                                std::span<const Tensor> features);

}  // namespace hlx::engine
