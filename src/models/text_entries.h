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
//   M-RoPE specs (Qwen3-VL, spec.mrope_section) add variants; the plain entries stay as above:
//   prefill_embeddings_mrope (embeddings, rope_positions: tensor<3 x Lp x i32>, length, start, slot,
//                            caches...) -> as prefill_embeddings. Rotary of row i uses
//                            rope_positions[:, i] (axes T, H, W); the cache row and causality still
//                            follow start + i.
//   prefill_embeddings_deepstack (embeddings, rope_positions (M-RoPE specs only),
//                            visual_positions: tensor<Nv x i32>, layer_features: tensor<K x Nv x hidden x f32>,
//                            visual_count: tensor<i32>, length, start, slot, caches...) -> as prefill.
//                            After decoder layer spec.deepstack_layers[k], row visual_positions[v]
//                            (a row of this chunk) gets layer_features[k, v] added, for v < visual_count.
//                            Entries v >= visual_count are ignored. Rows are matched by comparison and
//                            gathered, so the caller must pass sorted unique in-range rows (checked at
//                            the TextModel boundary, not here). Nv = EntryRequest::visual_rows.
//   decode_mrope            (tokens, positions, rope_positions: tensor<B x i32>, slots, caches...):
//                            as decode with rotary at rope_positions (= cache length + the slot's
//                            rope delta; the three axes are equal for generated tokens).
//
//   Caches are tensor<N x S x Hkv x Dh x kv_dtype> (N = slots, S = capacity), donated: the cache
//   argument i carries `tf.aliasing_output = 1 + i`. kv_dtype i8 (int8 KV) adds per layer
//   k_scale.l, v_scale.l: tensor<N x S x Hkv x f32> after v_cache.l (element = code * scale;
//   quantization in docs/COMPOSITES.md), donated the same way. Prefill rows i < length get position start + i
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
  int64_t context_capacity = 0;  // S: max tokens a slot holds (prompt + generated)
  int64_t slots = 1;             // N: KV slots
  DType kv_dtype = DType::kBF16;
};

// Name prefixes of one layer's cache arguments/results, in order (the layer index follows):
// k_cache., v_cache. (and k_scale., v_scale. for an i8 cache).
std::vector<std::string> text_cache_names(const EngineShape& shape);

// The default prefill buckets for a capacity: powers of 4 from 32 below the capacity, then the
// capacity itself (e.g. 1000 -> 32, 128, 512, 1000).
std::vector<int64_t> default_prefill_buckets(int64_t context_capacity);

enum class TextEntry {
  kPrefill,
  kPrefillEmbeddings,
  kPrefillAllLogits,
  kDecode,
  kPrefillEmbeddingsMrope,
  kPrefillEmbeddingsDeepstack,
  kDecodeMrope,
  kPrefillEmbeddingsMasked,
  kPrefillEmbeddingsMaskedAllLogits,
};
const char* entry_name(TextEntry e);

struct EntryRequest {
  TextEntry entry = TextEntry::kPrefill;
  int64_t rows = 0;         // Lp for prefill entries (a bucket), B for decode
  int64_t visual_rows = 0;  // prefill_embeddings_deepstack: static max Nv (0 = rows)
  // What the caller means by the entry's inputs (e.g. VlmSpec::prefill_variant(): mask mode, image
  // token ids, image-row scaling), hashed into the identity; empty for the plain entries, whose
  // descriptions then read as before variants existed.
  std::string variant;

  EntryRequest() = default;
  EntryRequest(TextEntry e, int64_t r, std::string v = {}) : entry(e), rows(r), variant(std::move(v)) {}
  EntryRequest(TextEntry e, int64_t r, int64_t visual) : entry(e), rows(r), visual_rows(visual) {}
};

// Entries that take embeddings instead of token ids / an additive mask / return every row's logits.
bool entry_takes_embeddings(TextEntry e);
bool entry_takes_mask(TextEntry e);
bool entry_all_logits(TextEntry e);

// Emits the module for one entry. The module attribute `hlx.identity` is the SHA-256 of the
// canonical description (schema version, spec, shape, entry, rows); the public function is
// named after the entry.
Result<shlo::Module> emit_text_entry(const TextModelSpec& spec, const EngineShape& shape, const EntryRequest& request);

// Checks one prefill_embeddings_deepstack payload before any runtime call (for the TextModel
// boundary): visual_positions i32 [Nv] and layer_features f32 [K, Nv, hidden] with Nv =
// visual_rows of `req` and K = spec.deepstack_layers.size(); 0 <= count <= Nv; the first `count`
// positions strictly increasing (sorted, unique) and inside the chunk's real rows [0, length).
// Entries past `count` are padding and not read. Errors: kInvalidArgument naming the values.
Status check_deepstack_payload(const TextModelSpec& spec, const EntryRequest& req, int64_t length,
                               const Tensor& visual_positions, const Tensor& layer_features, int64_t count);

// The canonical description hashed into the identity (readable, for error messages and tests).
std::string text_entry_description(const TextModelSpec& spec, const EngineShape& shape, const EntryRequest& request);

}  // namespace hlx::models
