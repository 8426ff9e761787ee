// The text side of image prompts, family-neutral: expanding image placeholders in the prompt
// *text* before tokenization (Gemma3Processor), the token types of the expanded ids, and the
// additive prefill mask of a chunk (Gemma3: causal, or both rows in the same image block).
// Written from transformers' processing_gemma3.py and modeling_gemma3.py
// (create_causal_mask_mapping, token_type_ids_mask_function).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"

namespace hlx::mm {

// How one image placeholder in the text becomes an image block (Gemma3: boi "<start_of_image>",
// image "<image_soft_token>", eoi "<end_of_image>", 256 image tokens, "\n\n" around the block).
struct ImageBlockText {
  std::string placeholder;  // the text the chat template renders per image (Gemma3: the boi token)
  std::string boi, image, eoi;
  std::string around = "\n\n";
  int64_t tokens_per_image = 0;
};

// Replaces the k-th placeholder in `text` by around + boi + n x image + eoi + around, n = counts[k]
// when k < counts.size(), else layout.tokens_per_image (Gemma3Processor: the expanded *string* is
// tokenized, so "\n\n" merges with neighbouring newlines as the real tokenizer does). LLaVA and
// Qwen3-VL use it with empty boi/eoi/around. `images` receives the placeholder count.
std::string expand_image_placeholders(std::string_view text, const ImageBlockText& layout, int64_t* images,
                                      std::span<const int64_t> counts = {});
// Occurrences of `placeholder` in `text` (0 for an empty placeholder).
int64_t count_placeholders(std::string_view text, std::string_view placeholder);

// 1 where ids[i] == image_token_id (an image soft-token row), else 0: Gemma3's token_type_ids.
std::vector<uint8_t> image_token_types(std::span<const int64_t> ids, int64_t image_token_id);

// True when the boundary before row `at` (0 < at < n) falls strictly inside a run of image tokens:
// a chunk boundary there would split an image block.
bool splits_image_block(std::span<const int64_t> ids, int64_t image_token_id, int64_t at);

enum class MaskRule {
  kImageBlocks,    // causal, or both rows image tokens of the same block (upstream Gemma3)
  kBidirectional,  // every pair of real rows (an explicitly configured variant)
};

// The additive mask f32 [1, 1, rows, rows] of the chunk holding rows [begin, end) of the prompt
// `ids`: cell (i, j) is 0 when row begin + i may see row begin + j, else -3.4028235e38 (the most
// negative f32); rows and columns >= end - begin (padding) are blocked. Rows before `begin` are
// not in it (the entry sees them through the cache, causally). kInvalidArgument when the range is
// empty, out of bounds, longer than `rows`, or splits an image block.
Result<Tensor> prefill_mask(std::span<const int64_t> ids, int64_t image_token_id, int64_t begin, int64_t end,
                            int64_t rows, MaskRule rule);

}  // namespace hlx::mm
