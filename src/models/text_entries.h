// The text-decoder entries (see DESIGN.md "Module contracts"). One module per entry and shape;
// every shape derives from EngineShape. Argument order, names and result order are the contract
// with the engine:
//
//   weights:  one argument per checkpoint tensor, `hlx.weight = "<checkpoint name>"`, in
//             text_checkpoint_layout() order, stored dtype.
//   prefill                 (tokens: tensor<Lp x i32>, length: tensor<i32>, start: tensor<i32>,
//                            slot: tensor<i32>, k_cache.0, v_cache.0, ..., k_cache.{L-1}, v_cache.{L-1})
//                           -> (logits: tensor<vocab x f32> of row length-1, caches...)
//   prefill_embeddings      same with embeddings: tensor<Lp x hidden x f32> (already scaled) for tokens
//   prefill_all_logits      same as prefill but logits: tensor<Lp x vocab x f32> (every row)
//   prefill_embeddings_masked
//                           (embeddings: tensor<Lp x hidden x f32>, mask: tensor<1x1xLpxLp x f32>, length,
//                            start, slot, caches...) -> as prefill_embeddings. mask[0,0,i,j] is added to
//                            row i's attention score of chunk row j (key position start + j) in every
//                            layer: 0 allowed, -3.4028235e38 (the most negative f32) or -inf blocked. A
//                            blocked cell contributes exactly 0 (it is turned into -inf before the
//                            attention composite, which drops -inf keys); any other value is added as
//                            is. The mask alone decides which chunk rows a row sees (no causal rule
//                            inside the chunk); cache rows before `start` are seen as in prefill
//                            (all of them on full layers, the last sliding_window - 1 positions and
//                            the row itself on sliding layers), and sliding layers also apply their
//                            window to the chunk rows.
//   prefill_embeddings_masked_all_logits
//                           the same, logits of every row (tensor<Lp x vocab x f32>)
//   decode                  (tokens: tensor<B x i32>, positions: tensor<B x i32>, slots: tensor<B x i32>,
//                            caches...) -> (logits: tensor<B x vocab x f32>, caches...)
//
//   Caches are tensor<N x S x Hkv x Dh x kv_dtype> (N = slots, S = capacity), donated: the cache
//   argument i carries `tf.aliasing_output = 1 + i`. Prefill rows i < length get position start + i
//   and are written at (slot, start + i); rows >= length are padding and are never read. Cache
//   writes use scatter, whose out-of-bounds updates are dropped, so no position can cross the
//   capacity even if a caller skips admission; attention rejects kv lengths above S.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "models/text_spec.h"
#include "stablehlo/ir.h"

namespace hlx::models {

struct EngineShape {
  int64_t context_capacity = 0;   // S: max tokens a slot holds (prompt + generated)
  int64_t slots = 1;              // N: KV slots
  DType kv_dtype = DType::kBF16;
};

// The default prefill buckets for a capacity: powers of 4 from 32 below the capacity, then the
// capacity itself (e.g. 1000 -> 32, 128, 512, 1000).
std::vector<int64_t> default_prefill_buckets(int64_t context_capacity);

enum class TextEntry {
  kPrefill,
  kPrefillEmbeddings,
  kPrefillAllLogits,
  kDecode,
  kPrefillEmbeddingsMasked,
  kPrefillEmbeddingsMaskedAllLogits,
};
const char* entry_name(TextEntry e);

struct EntryRequest {
  TextEntry entry = TextEntry::kPrefill;
  int64_t rows = 0;  // Lp for prefill entries (a bucket), B for decode
  // What the caller means by the entry's inputs (e.g. VlmSpec::prefill_variant(): mask mode, image
  // token ids, image-row scaling), hashed into the identity; empty for the plain entries, whose
  // descriptions then read as before variants existed.
  std::string variant;

  EntryRequest() = default;
  EntryRequest(TextEntry e, int64_t r, std::string v = {}) : entry(e), rows(r), variant(std::move(v)) {}
};

// Entries that take embeddings instead of token ids / an additive mask / return every row's logits.
bool entry_takes_embeddings(TextEntry e);
bool entry_takes_mask(TextEntry e);
bool entry_all_logits(TextEntry e);

// Emits the module for one entry. The module attribute `hlx.identity` is the SHA-256 of the
// canonical description (schema version, spec, shape, entry, rows); the public function is
// named after the entry.
Result<shlo::Module> emit_text_entry(const TextModelSpec& spec, const EngineShape& shape, const EntryRequest& request);

// The canonical description hashed into the identity (readable, for error messages and tests).
std::string text_entry_description(const TextModelSpec& spec, const EngineShape& shape, const EntryRequest& request);

}  // namespace hlx::models
