// A loaded text decoder: checkpoint weights (memory-mapped, stored dtype), the StableHLO entries
// emitted for one EngineShape and compiled by the CPU runtime, and the KV caches of every slot.
//
// Ownership and threads: a TextModel is owned and driven by one thread (the engine's scheduler);
// none of its methods may be called concurrently. Tensors it returns are owned by the caller.
//
// Capacity (DESIGN.md "Module contracts"): one context_capacity S per model. KV caches are
// [slots, S, kv_heads, head_dim] per layer, allocated once at load and donated to every call, so
// the runtime updates them in place. Every request passes check_admission() before a slot is
// acquired; prefill() and decode() bounds-check slots, positions and cache lengths again (kOutOfRange
// before anything runs) so callers that bypass admission cannot cross the capacity.
//
// Pre-emitted modules (options.modules_dir): one file per entry and shape named
//   prefill_<Lp>.mlir, prefill_all_logits_<Lp>.mlir, decode_<B>.mlir
// Each is parsed, verified, and must carry hlx.identity == SHA-256(text_entry_description(...)) of
// what this model expects and argument types that match the capacity, slots and buckets; any
// mismatch fails load() naming the file, the expected and the found value.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "engine/admission.h"
#include "engine/prefill_plan.h"
#include "io/checkpoint.h"
#include "models/text_entries.h"
#include "models/text_spec.h"
#include "multimodal/image_prompt.h"
#include "runtime/kernels/matmul.h"
#include "stablehlo/ir.h"

namespace hlx::rt {
class Program;
}

namespace hlx::engine {

// Default context capacity when the operator gives none: 4096 tokens, or the model's
// max_position_embeddings when that is smaller (docs/CAPACITY.md explains the cost).
inline constexpr int64_t kDefaultContextCapacity = 4096;
int64_t default_context_capacity(const models::TextModelSpec& spec);

struct TextModelOptions {
  int64_t context_capacity = 0;  // 0: default_context_capacity(spec)
  int64_t slots = 1;             // KV slots = largest decode batch
  // bf16 or f32; unset: follow the checkpoint (f32 weights -> f32, bf16/f16 -> bf16), so an f32
  // checkpoint's logits are not rounded through a bf16 cache.
  std::optional<DType> kv_dtype;
  std::vector<int64_t> prefill_buckets;    // empty: models::default_prefill_buckets(capacity)
  int threads = 0;                         // runtime threads, 0 = all cores
  std::optional<std::string> modules_dir;  // load pre-emitted .mlir files instead of emitting
  bool all_logits = false;                 // also prepare prefill_all_logits (hlx logits --all)
  // Also prepare prefill_embeddings (image prompts: merged token + image rows). Always on for a
  // vision-language checkpoint.
  bool embeddings = false;
  // Compile every entry during load() instead of on first use. Emitting/loading and every
  // identity and shape check always happen in load(); only Program::compile is deferred.
  bool eager_compile = false;
  // Matmul weights as stored, or quantized to int8 per output channel when bound (`--weights int8`,
  // kernels/matmul.h). Embedding gathers always read the stored tensor.
  kernels::WeightFormat weight_format = kernels::WeightFormat::kAsStored;
  // With kAsStored: when set, load() fails unless the checkpoint stores its weights in this type
  // (`--weights bf16` on an f32 checkpoint is an error, not a silent f32 run).
  std::optional<DType> stored_weight_dtype;
  // kRowInvariant (default): a row's bits do not depend on the batch or the chunking it was computed
  // in. kAnyOrder (`--batch-invariant off`): prefill products may take faster kernels that break
  // this, today oneDNN's AMX tiles on CPUs with AMX-BF16 (kernels/matmul.h ProductOrder).
  kernels::ProductOrder product_order = kernels::ProductOrder::kRowInvariant;
  // M-RoPE (Qwen3-VL) models: the static max Nv of visual rows one prefill_embeddings_deepstack
  // chunk takes (0: the bucket's rows, so any chunk fits). A chunk with more visual rows is refused.
  int64_t deepstack_visual_rows = 0;
};

// Timings and sizes of load() and of lazily compiled entries, for the CLI and docs/CAPACITY.md.
struct TextModelStats {
  double config_ms = 0, checkpoint_ms = 0, emit_ms = 0, compile_ms = 0, bind_ms = 0;
  int modules = 0, compiled = 0;
  size_t kv_bytes = 0;      // all caches, all layers
  size_t weight_bytes = 0;  // checkpoint tensors as stored (mapped, not copied)
  // Weight bytes one decode step streams: matmul weights as the kernels hold them (packed at load
  // from an AWQ/GPTQ/FP8 checkpoint, or at bind under --weights int8/int4), other tensors as stored,
  // and one row of an untied embedding table (only that row is gathered). The roofline's numerator.
  size_t decode_weight_bytes = 0;
  // Weight bytes the model holds once bound: matmul weights as the kernels hold them, other tensors
  // (an untied embedding table included) as stored. The memory budget's weight term.
  size_t held_weight_bytes = 0;
  size_t arena_bytes = 0;  // sum over compiled entries of their intermediate arenas
};

struct DecodeRow {
  int64_t slot = 0;
  int64_t token = 0;
  int64_t position = 0;  // cache row the token is written at; attends over rows [0, position]
};

// The DeepStack side tensors of one M-RoPE prefill (DESIGN.md `prefill_embeddings_deepstack`),
// indexed by slot row over the whole prompt (not by chunk): TextModel slices them per chunk.
struct DeepstackPayload {
  Tensor visual_positions;  // i32 [Nv]: slot rows of image tokens, strictly increasing, in [0, prompt rows)
  Tensor layer_features;    // f32 [K, Nv, hidden]: feature k is added after decoder layer deepstack_layers[k]
  int64_t count = 0;        // entries [0, count) are real, the rest padding (never read)
};

// Prefix reuse of image prompts: the rows [begin, end) of one image and its content key (the
// image-feature cache key: a hash of the preprocessed pixels and of the tower).
struct ImageSpanKey {
  int64_t begin = 0, end = 0;
  std::string key;
  bool operator==(const ImageSpanKey&) const = default;
};
// What a reusable prefix is matched against: the prompt's ids (expanded) and, for an image prompt,
// every image's span and key in row order (empty: a token prompt).
struct PromptKey {
  std::span<const int64_t> ids;
  std::span<const ImageSpanKey> images;
};

enum class FinishReason { kLength, kStop };
const char* finish_reason_name(FinishReason r);

struct GenerateResult {
  std::vector<int64_t> tokens;  // generated ids, including a final EOS when one stopped it
  FinishReason finish = FinishReason::kLength;
  int64_t prompt_tokens = 0;
  double prefill_ms = 0, decode_ms = 0;
  int64_t decode_steps = 0;
};

class TextModel {
 public:
  // Loads config.json + safetensors from `model_dir`, checks every tensor of
  // text_checkpoint_layout (name, shape; dtype stays as stored), prepares the entries for the
  // options' EngineShape and allocates the caches. On failure nothing is returned.
  static Result<std::unique_ptr<TextModel>> load(const std::string& model_dir, TextModelOptions options = {});
  ~TextModel();

  const models::TextModelSpec& spec() const { return spec_; }
  const models::EngineShape& shape() const { return shape_; }
  const std::vector<int64_t>& prefill_buckets() const { return buckets_; }
  const TextModelStats& stats() const { return stats_; }
  AdmissionLimits limits() const { return {shape_.context_capacity, spec_.vocab_size}; }

  // Admission, then a free slot whose cache length is reset to 0. The Admission is returned on
  // rejection so callers can report its fields; nothing is touched then.
  Result<int64_t> admit(std::span<const int64_t> prompt, int64_t max_new_tokens, Admission* admission = nullptr);
  // The same for a request whose effective length is not its id count (expanded image prompts);
  // `slot` >= 0 asks for that free slot instead of the lowest free one.
  Result<int64_t> admit(const AdmissionRequest& request, Admission* admission = nullptr, int64_t slot = -1);
  Status release(int64_t slot);
  const SlotPool& slot_pool() const { return pool_; }

  // Prefix reuse (BatchEngine's prefix cache). The leading rows of a slot written by one kind of
  // writer and by nothing else since are "prefilled": their K/V are the bits any later prefill of
  // the same prompt writes there, because a prefill row's bits depend neither on its chunk nor on
  // its slot (docs/PERFORMANCE.md, prefix reuse). Two writers: token prefill() calls, and for a
  // slot admitted by admit_reusing() with image spans, the image entry of prefill_image_prompt()
  // (its rows are keyed by their ids plus each image's content key). Rows written by decode, by
  // the other writer, or from embeddings into a slot that declared no image keys are not
  // (decode attention rounds differently; M-RoPE and masked entries are other programs).
  // release() keeps a slot's prefilled rows (and their image spans) as its retained prefix until
  // the slot is admitted again or reset() runs. This returns their ids: a free slot's retained
  // prefix, or the prefilled rows of a slot in use. Empty for a slot outside [0, slots).
  std::span<const int32_t> reusable_prefix(int64_t slot) const;
  // The rows of `prompt` that `slot` can give: the longest run of leading rows whose ids match
  // reusable_prefix(slot), written by the same writer (token vs image prompt), whose image spans
  // are the same spans with the same keys on both sides, cut back so that it never ends inside
  // an image span (nor inside a run of image_token_id() rows), and at most prompt size - 1 (the
  // last row is always prefilled for its logits). 0 for a slot outside [0, slots).
  int64_t reusable_rows(int64_t slot, const PromptKey& prompt) const;
  // admit(), but into the free `slot` with its rows [0, keep) kept: first copied there (per layer
  // K and V rows, a memcpy inside the caches) from `source` when source != slot. `keep` must lie
  // in [0, reusable_rows(source, prompt)]. With image spans the prompt is an image prompt: its
  // ids are not checked against the vocabulary here (image rows carry the image token), and the
  // rows prefill_image_prompt() then writes extend the slot's prefilled rows. Every check
  // (admission first) before anything changes; on error nothing is touched.
  Result<int64_t> admit_reusing(const PromptKey& prompt, int64_t max_new_tokens, int64_t slot, int64_t keep,
                                int64_t source, Admission* admission = nullptr);
  Result<int64_t> admit_reusing(std::span<const int64_t> prompt, int64_t max_new_tokens, int64_t slot, int64_t keep,
                                int64_t source, Admission* admission = nullptr) {
    return admit_reusing(PromptKey{prompt, {}}, max_new_tokens, slot, keep, source, admission);
  }
  // Rows [0, cache_length) of the slot hold K/V.
  Result<int64_t> cache_length(int64_t slot) const;

  // Appends `tokens` to the slot's cache (rows [cache_length, cache_length + n)), chunked over the
  // buckets. Returns f32[vocab], the logits of the last token.
  Result<Tensor> prefill(int64_t slot, std::span<const int64_t> tokens);
  // The same, returning f32[n, vocab] (one row per token). Needs options.all_logits.
  Result<Tensor> prefill_all_logits(int64_t slot, std::span<const int64_t> tokens);
  // Prompt rows given as embeddings (DESIGN.md `prefill_embeddings`). `embeddings` is f32
  // [n, hidden] for slot rows 0..n-1 at the post-embedding scale (embed_tokens() rows for text,
  // projected image features for image rows); `token_ids` [n] are what the rows stand for (image
  // rows carry the image token id) and become the slot's history. Writes rows
  // [cache_length, end_row), chunked over the buckets exactly as prefill(); a chunk that replays
  // rows near the capacity takes their embeddings from the same tensor, so the bits match a single
  // call. Rows before cache_length must carry the ids the slot already holds. Returns f32[vocab],
  // the logits of row end_row - 1. Needs options.embeddings.
  Result<Tensor> prefill_embeddings(int64_t slot, const Tensor& embeddings, std::span<const int64_t> token_ids,
                                    int64_t end_row);
  // f32 [n, hidden]: the embedding rows of `tokens` (stored dtype widened to f32) times
  // spec().embedding_scale rounded to f32, exactly what the prefill entry computes before its first
  // layer, so prefill_embeddings(embed_tokens(t)) equals prefill(t) bit for bit.
  Result<Tensor> embed_tokens(std::span<const int64_t> tokens) const;
  bool has_embeddings_entries() const { return options_.embeddings; }

  // Gemma3 vision-language checkpoints: the same as prefill_embeddings through
  // prefill_embeddings_masked. Rows whose id is the image soft token form image blocks; no chunk
  // splits one (plan_prefill_chunks with atomic spans; a block longer than every bucket that fits
  // is kUnsupported before anything runs), and each chunk gets its additive mask
  // (mm::prefill_mask with the model's rule: causal, or both rows in the same block), which lives
  // only for its call. kInvalidArgument on a model without masked entries.
  Result<Tensor> prefill_embeddings_masked(int64_t slot, const Tensor& embeddings, std::span<const int64_t> token_ids,
                                           int64_t end_row);
  bool has_masked_entries() const { return !masked_variant_.empty(); }
  // M-RoPE models (spec().mrope_section, Qwen3-VL): prefill_embeddings with rotary positions
  // `rope_positions` i32 [3, n] (axes T, H, W for slot rows 0..n-1, n = token_ids.size(); from
  // mm::qwen_mrope_positions) and, when `deepstack` is given, its features added after decoder
  // layers 0..K-1 at its visual rows (rows of the whole prompt [0, n); those at or past end_row
  // are left for a later call). Chunked over the buckets exactly as prefill_embeddings: each
  // chunk gets the payload entries of its rows (relative rows, the matching feature slice); a
  // chunk that replays rows near the capacity re-adds theirs, so rows before cache_length must be
  // covered by the same payload. `rope_delta` (MropePositions::rope_delta) becomes the slot's
  // decode offset once a chunk is written. Every check (the prefill_embeddings ones, rope_positions
  // shape and sign, then the payload: dtype, K/Nv/hidden, count, sorted unique rows in
  // [0, n) holding the image token, each chunk's visual rows within the static max Nv, and
  // check_deepstack_payload per chunk) happens before any runtime call: a refused request leaves
  // caches, history and delta untouched. Returns f32[vocab], the logits of row end_row - 1.
  Result<Tensor> prefill_embeddings_mrope(int64_t slot, const Tensor& embeddings, std::span<const int64_t> token_ids,
                                          const Tensor& rope_positions, int64_t rope_delta, int64_t end_row,
                                          const DeepstackPayload* deepstack = nullptr);
  // The slot's M-RoPE decode offset: decode writes the token at cache row `position` and rotates
  // it at position + rope_delta (decode_mrope). 0 after admit/release/reset and for text prompts.
  Result<int64_t> rope_delta(int64_t slot) const;
  bool has_mrope_entries() const { return !spec_.mrope_section.empty(); }
  // Image token id of a Gemma3 or Qwen3-VL checkpoint (Gemma3's image blocks and Qwen3-VL's visual
  // rows hold it), -1 otherwise.
  int64_t image_token_id() const { return image_token_id_; }

  // An image prompt, family-neutral: the entry this model takes image prompts with
  // (prefill_embeddings_masked for Gemma3, prefill_embeddings_mrope for Qwen3-VL with `mrope`,
  // else prefill_embeddings). `mrope` is required by, and only by, M-RoPE models.
  struct MropeInputs {
    Tensor positions;  // i32 [3, n]
    int64_t rope_delta = 0;
    std::optional<DeepstackPayload> deepstack;
  };
  Result<Tensor> prefill_image_prompt(int64_t slot, const Tensor& embeddings, std::span<const int64_t> token_ids,
                                      int64_t end_row, const MropeInputs* mrope);
  // The chunks that write rows [start, start + count) of the prompt `ids` with the entry that
  // prefill_image_prompt picks (image blocks atomic for the masked entries; `image_prompt` false:
  // the token entries). The one planner TextModel and BatchEngine share, so they always agree.
  Result<std::vector<PrefillChunk>> plan_chunks(std::span<const int64_t> ids, int64_t start, int64_t count,
                                                bool image_prompt) const;

  // One token for each row with the decode entry for B = rows.size() (1..slots). Rows name
  // distinct slots; position must be <= the slot's cache length and < capacity. Returns
  // f32[B, vocab]; each slot's cache length becomes position + 1. When a row's slot has a
  // non-zero rope_delta, the batch runs decode_mrope (rotary at position + the slot's delta; rows
  // of other slots get their plain position, the same bits as decode).
  Result<Tensor> decode(std::span<const DecodeRow> rows);

  // Greedy generation of up to max_new_tokens for one prompt in a freshly admitted slot, stopping
  // at any of spec().eos_token_ids. The slot is released before returning, also on error.
  Result<GenerateResult> generate(std::span<const int64_t> prompt, int64_t max_new_tokens);

  // Compiles (if not yet compiled) the entries a request of `prompt_len` tokens at the start of
  // an empty slot will use: its prefill buckets (all-logits ones when `all_logits`) and, when
  // `decode_batch` > 0, the decode entry for that batch. Lets front ends report compile time apart
  // from prefill time.
  // `embeddings`: the buckets of the entries prefill_image_prompt picks instead of the token ones
  // (Gemma3: masked; Qwen3-VL: as warm_up_mrope).
  Status warm_up(int64_t prompt_len, bool all_logits, int64_t decode_batch, bool embeddings = false);
  // The same for an image prompt of an M-RoPE model: prefill_embeddings_mrope's buckets (M-RoPE and
  // DeepStack entries) and decode_mrope for `decode_batch`. kInvalidArgument without mrope_section.
  Status warm_up_mrope(int64_t prompt_len, int64_t decode_batch);

  // The caches in argument order (k_cache.0, v_cache.0, ...), for tests that compare bytes.
  const std::vector<Tensor>& caches() const { return caches_; }
  // Reset every slot's cache length to 0 and free all slots (cache bytes are left as they are).
  void reset();

 private:
  struct Entry {
    models::EntryRequest request;
    std::string source;  // file name, or "emitted"
    std::shared_ptr<const shlo::Module> module;
    std::shared_ptr<rt::Program> program;  // null until compiled
  };
  TextModel() = default;
  Status prepare_entry(const models::EntryRequest& request);
  Result<Entry*> compiled(models::TextEntry entry, int64_t rows);
  Status compile(Entry& e);
  Result<std::vector<Tensor>> run(Entry& e, std::vector<Tensor> inputs);
  Status check_slot(int64_t slot) const;
  // A newly admitted slot's bookkeeping: its history (the reused rows' tokens), of which the first
  // `prefilled` rows count as prefilled (by the image entry when `images` is non-empty); nothing
  // embedded, no rope delta, nothing retained.
  void start_slot(int64_t slot, std::vector<int32_t> history, int64_t prefilled, std::vector<ImageSpanKey> images = {});
  Status check_plain_rope(int64_t slot, const char* what) const;
  int64_t deepstack_rows(int64_t bucket) const;  // EntryRequest::visual_rows of a deepstack bucket
  // prefill_embeddings, _masked and _mrope: checks, then chunk by chunk. `masked` and
  // `rope_positions` are exclusive (no family has both).
  Result<Tensor> run_prefill_embeddings(int64_t slot, const Tensor& embeddings, std::span<const int64_t> token_ids,
                                        int64_t end_row, bool masked, const Tensor* rope_positions, int64_t rope_delta,
                                        const DeepstackPayload* deepstack);
  // Shared by prefill and prefill_all_logits: runs every chunk; collects logits rows.
  Result<Tensor> run_prefill(int64_t slot, std::span<const int64_t> tokens, bool all_rows);

  models::TextModelSpec spec_;
  models::EngineShape shape_;
  std::vector<int64_t> buckets_;
  TextModelOptions options_;
  std::unique_ptr<Checkpoint> checkpoint_;
  std::vector<std::pair<std::string, Tensor>> weights_;  // layout order, mmap-borrowed
  std::vector<std::shared_ptr<void>> packed_weights_;    // registrations of weights stored 4-bit
  std::map<std::pair<int, int64_t>, Entry> entries_;     // (entry kind, rows)
  std::vector<Tensor> caches_;
  SlotPool pool_;
  std::vector<std::vector<int32_t>> history_;  // per slot: tokens of rows [0, cache_length)
  // Per slot: rows below this were written from embeddings; a token prefill must not replay them
  // (their ids would not reproduce their inputs).
  std::vector<int64_t> embedded_end_;
  // Per slot: rows below this were written by token prefill only (see reusable_prefix()); and
  // for a free slot, the ids of the prefilled rows it retained at release().
  std::vector<int64_t> prefilled_end_;
  std::vector<std::vector<int32_t>> retained_;
  // Per slot: the image spans (with keys) its prompt declared at admit_reusing(), kept with the
  // retained prefix at release(); and whether its prefilled rows come from the image entry.
  std::vector<std::vector<ImageSpanKey>> images_;
  std::vector<bool> image_writer_;
  // Gemma3 VLM: the masked entries' variant (empty: none), the image soft-token id, the mask rule.
  std::string masked_variant_;
  mm::MaskRule mask_rule_ = mm::MaskRule::kImageBlocks;
  std::vector<int64_t> rope_delta_;  // per slot: M-RoPE decode offset
  int64_t image_token_id_ = -1;
  TextModelStats stats_;
};

// Reads and checks one pre-emitted module against what `spec`/`shape`/`request` require: a public
// function named after the entry, hlx.identity equal to SHA-256 of text_entry_description, weight
// arguments in layout order with layout shapes, and the contract's input and result types.
// Errors name `source` and both the expected and the found value.
Status check_text_module(const shlo::Module& module, const models::TextModelSpec& spec,
                         const models::EngineShape& shape, const models::EntryRequest& request,
                         const std::string& source);

// File name of a pre-emitted module inside modules_dir: "prefill_128.mlir", "decode_4.mlir".
std::string text_module_file_name(const models::EntryRequest& request);

}  // namespace hlx::engine
