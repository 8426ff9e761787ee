// Continuous batching over a TextModel's KV slots.
//
// One step():
//   1. take what other threads put into the inbox (submitted requests, cancellations);
//   2. admit queued requests (FIFO) into free slots;
//   3. run at most ONE prefill chunk (one bucket-sized call, the same chunks TextModel::prefill
//      would use for the whole prompt) of the oldest request still prefilling, so running decodes
//      never wait longer than one chunk; when a prompt's last chunk is done its first token is
//      sampled from the prefill logits;
//   4. run ONE batched decode over the rows that have a token to feed (B = their count, 1..slots),
//      sample each row with its own Sampler, stream the tokens;
//   5. finish rows that hit EOS, a stop string or max_new_tokens and release their slots.
//
// Admission (engine/admission.h, the single capacity check) runs inside submit(): a request that
// can never fit is rejected at once with the typed error (kCapacityExceeded naming prompt length,
// max_new_tokens and capacity; kInvalidArgument for bad ids, sampling or stop settings) and is
// never queued. Admitted requests wait only for a free slot.
//
// Images (engine/vision_model.h, engine/multimodal_prompt.h): the prompt arrives expanded
// (VisionModel::expand_prompt on the text, then tokenized). submit() checks its image-token rows
// against each image's token count (images on a text-only engine, more than
// max_images_per_request, a count mismatch: kInvalidArgument), runs admission on the whole prompt
// and preprocesses the images on the caller's thread (Qwen3-VL: also the M-RoPE positions). On the
// engine thread a request with images first encodes them, one image per step (in place of a
// prefill chunk), then merges token embeddings and features (Qwen3-VL: and the DeepStack rows)
// and prefills the merged rows chunk by chunk with the model's image entry
// (TextModel::prefill_image_prompt; Gemma3's image blocks are never split across chunks). Pixels
// are released once encoded, features once merged, the merged rows after the last chunk; all of
// them on cancel and on error.
//
// Threads: one thread owns the engine, its TextModel and the slots, and calls step() /
// run_until_idle() / take_completion(). submit(), cancel(), events() and the counters may be
// called from any thread (a mutex-protected inbox and outbox); work they queue is applied by the
// owning thread at the start of the next step(), or at once when cancel() is called on the owning
// thread outside step(); cancels arriving during a step are applied at its end. on_event callbacks
// run on the owning thread.
//
// Cancellation frees the slot immediately (when applied) and touches no other row: the other
// requests' tokens and logits are the same bits as if the cancelled request had never run.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include "core/status.h"
#include "engine/request.h"
#include "engine/sampling.h"
#include "engine/text_model.h"

namespace hlx::tok {
class Tokenizer;
class StreamDecoder;
}  // namespace hlx::tok

namespace hlx::engine {

class TokenTrie;
class JsonGrammar;
class JsonMaskCache;

class VisionModel;
class ImageFeatureCache;

inline constexpr int64_t kDefaultMaxImagesPerRequest = 8;

struct BatchEngineOptions {
  // Needed for stop strings and for text in events/completions; may be null.
  std::shared_ptr<const tok::Tokenizer> tokenizer;
  bool skip_special_tokens = true;  // decoding of the generated text
  // Keep Completions of finished requests for take_completion() (false: only events report them).
  bool keep_completions = true;
  // Vision-language models: the vision tower + projector for requests with images (not owned; must
  // outlive the engine; while the engine lives only it calls encode()). Null: requests with
  // images are refused. The TextModel must be loaded with options.embeddings.
  VisionModel* vision = nullptr;
  int64_t max_images_per_request = kDefaultMaxImagesPerRequest;
  // Prefix reuse (docs/PERFORMANCE.md): a finished request's prompt rows stay in its slot's cache
  // until the slot is needed; a request goes to the free slot holding the longest prefix of its
  // prompt (then the least recently used one), or gets that prefix copied from a slot in use when
  // one holds a longer one, and prefills only the rest. Image prompts match by ids plus each
  // image's content key, never ending inside an image; an image inside the reused rows is not
  // encoded. Logits are the same bits either way.
  bool prefix_cache = true;
  // Image-feature cache (engine/image_cache.h): encoded features of recent images, keyed by a
  // hash of the preprocessed pixels, at most this many bytes; 0 disables it.
  size_t image_cache_bytes = size_t(256) << 20;
};

class BatchEngine {
 public:
  // `model` is not owned and must outlive the engine; the engine is its only user while it lives.
  // The thread calling the constructor owns the engine.
  explicit BatchEngine(TextModel& model, BatchEngineOptions options = {});
  ~BatchEngine();
  BatchEngine(const BatchEngine&) = delete;
  BatchEngine& operator=(const BatchEngine&) = delete;

  // Thread-safe. Checks the request (admission, sampling parameters, stop strings) and queues it.
  // On error nothing is queued and no slot or cache is touched; `admission` (optional) receives
  // the three numbers of the capacity check either way.
  Result<RequestId> submit(GenerationRequest request, Admission* admission = nullptr);

  // Thread-safe. Cancels a queued or running request: it finishes with Finish::kCancelled (one
  // kFinished event) and its slot is released. kNotFound for an unknown or already finished id.
  Status cancel(RequestId id);

  // Owning thread. One scheduling step (see above). Errors of model calls finish the affected
  // requests with Finish::kError and are not returned; a non-ok Status means an engine bug.
  Status step();
  // Owning thread. step() until nothing is queued or running.
  Status run_until_idle();

  // Thread-safe. Drains queued events (of requests without an on_event callback), oldest first.
  std::vector<Event> events();

  // Owning thread. The Completion of a finished request, removed from the engine; nullopt while it
  // runs, for unknown ids, or when keep_completions is false.
  std::optional<Completion> take_completion(RequestId id);

  // Thread-safe counters.
  bool idle() const;
  int64_t queued() const;   // admitted, waiting for a slot (including the inbox)
  int64_t running() const;  // holding a slot (prefilling or decoding)
  // Owning thread. Bytes of image side tensors (pixels, features, merged rows) held right now.
  size_t side_tensor_bytes() const;
  // Owning thread. Bytes of encoded features held by the image-feature cache.
  size_t image_cache_bytes() const;

  TextModel& model() { return model_; }

 private:
  struct Active;
  using Clock = std::chrono::steady_clock;

  void drain_inbox();               // owning thread, takes the mutex
  void apply_cancel(RequestId id);  // owning thread
  void admit_waiting();
  bool prefilling(RequestId id) const;  // a running request that has not sampled its first token
  // Prefix reuse: the free slot a prompt goes to, how many leading rows it keeps, and the
  // slot they are copied from (== slot: already there).
  struct Placement {
    int64_t slot = -1, keep = 0, source = -1;
  };
  Placement place(const PromptKey& prompt) const;
  void prefill_one();
  // Image requests before their first chunk: encodes one image (returns true: that was this step's
  // work, or the request failed), or once all are encoded merges the rows (returns false).
  bool prepare_image_rows(Active& a);
  Status merge_image_rows(Active& a);  // merged rows (and the DeepStack payload) of a request
  void decode_all();
  // Samples the next token from a logits row (through the JSON mask when the request has one).
  Result<int64_t> sample(Active& a, std::span<const float> logits);
  // Appends a generated token: stop checks, text, event. Returns true when the request finished.
  bool push_token(Active& a, int64_t token);
  void finish(Active& a, Finish why, Status error = ok_status());
  void emit(Active& a, Event e);
  void reap();            // drops finished rows, stores completions
  void store(Active& a);  // keeps a finished request's Completion
  void publish_counts();

  TextModel& model_;
  BatchEngineOptions options_;
  std::thread::id owner_;
  bool in_step_ = false;

  mutable std::mutex mu_;  // guards the fields below up to the next blank line
  RequestId next_id_ = 1;
  std::deque<std::unique_ptr<Active>> inbox_;
  std::vector<RequestId> cancel_inbox_;
  std::deque<Event> outbox_;
  std::set<RequestId> live_;  // submitted, not yet finished
  int64_t queued_count_ = 0, running_count_ = 0;

  std::deque<std::unique_ptr<Active>> waiting_;  // admitted, no slot yet
  std::vector<std::unique_ptr<Active>> active_;  // holding a slot, in admission order
  std::map<RequestId, Completion> completions_;
  std::unique_ptr<ImageFeatureCache> image_cache_;  // null: disabled or no vision model
  std::string tower_id_;                            // VisionModel::describe(), part of the image key
  // Structured outputs: the tokenizer's trie (built at the first such request) and a mask cache
  // per live grammar, shared by its requests (masks are computed on the owning thread).
  std::mutex json_mu_;
  std::shared_ptr<const TokenTrie> json_trie_;
  std::map<const JsonGrammar*, std::pair<std::weak_ptr<const JsonGrammar>, std::shared_ptr<JsonMaskCache>>>
      json_caches_;
  std::vector<uint64_t> slot_released_;  // per slot: tick of its last release (LRU order)
  uint64_t tick_ = 0;
};

}  // namespace hlx::engine
