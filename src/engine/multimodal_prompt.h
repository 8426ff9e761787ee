// Image rows in token prompts, family-neutral: a prompt arrives EXPANDED (VisionModel::expand_prompt
// on its text, then tokenized), holding for image i a contiguous run of tokens_per_image[i] image
// token ids, in image order. Here: locating those rows and checking them against the images, the
// id-level expansion for callers that hold ids, and merging token embeddings with per-image
// features into the rows the prefill entries take. Pure functions, no model.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"

namespace hlx::engine {

struct ImagePromptLimits {
  bool accepts_images = false;  // false: a text-only model (any image is an error)
  int64_t image_token_id = -1;
  int64_t max_images = 0;  // per request
};

int64_t count_image_tokens(std::span<const int64_t> prompt, int64_t image_token_id);

struct ExpandedPrompt {
  std::vector<int64_t> ids;           // the prompt as the slot holds it
  std::vector<int64_t> image_rows;    // first row of image i, ascending
  std::vector<int64_t> image_tokens;  // rows of image i

  int64_t size() const { return int64_t(ids.size()); }
  // The ids of the rows that are not image rows, in order (the rows embedded from the table).
  std::vector<int64_t> text_ids() const;
};

// kInvalidArgument, before anything is mutated, when: images are given to a text-only model; more
// than max_images images; the prompt's image-token rows are not exactly the images' counts in
// order (each image a contiguous run; adjacent images may share one run). Messages name the counts
// and the image token id. Without images (and none of their tokens) the prompt is returned as is.
Result<ExpandedPrompt> locate_image_rows(std::span<const int64_t> prompt, std::span<const int64_t> tokens_per_image,
                                         const ImagePromptLimits& limits);

// Id-level expansion for callers that hold ids, not text: the k-th image token becomes
// tokens_per_image[k] copies. Exact where the image token is a special token the tokenizer never
// merges (LLaVA's <image>, Qwen3-VL's <|image_pad|>); Gemma3 prompts must be expanded as text.
// kInvalidArgument when the prompt holds a different number of image tokens.
Result<std::vector<int64_t>> expand_image_tokens(std::span<const int64_t> prompt, int64_t image_token_id,
                                                 std::span<const int64_t> tokens_per_image);

// [n, hidden] f32 rows of the expanded prompt: text rows from `text_embeddings` (f32
// [text_ids().size(), hidden], in order), the rows of image i from features[i] (f32
// [image_tokens[i], hidden]). kInvalidArgument naming the tensor and both shapes on any mismatch.
Result<Tensor> merge_embeddings(const ExpandedPrompt& prompt, const Tensor& text_embeddings,
                                std::span<const Tensor> features);

}  // namespace hlx::engine
