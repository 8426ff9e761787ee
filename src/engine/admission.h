// Request admission: the single place where a request is checked against the engine's context
// capacity (DESIGN.md "Module contracts", Capacity). Every front end (CLI, server, C API, and later
// multimodal prompts with their post-expansion length) goes through check_admission() before any
// slot is allocated or any cache row is touched. Slot allocation (SlotPool) happens only after it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"

namespace hlx::engine {

struct AdmissionLimits {
  int64_t context_capacity = 0;  // S: tokens one slot holds (prompt + generated)
  int64_t vocab_size = 0;        // token ids must lie in [0, vocab_size)
};

struct AdmissionRequest {
  // Token count after any placeholder expansion (multimodal); for text prompts token_ids.size().
  int64_t effective_prompt_len = 0;
  int64_t max_new_tokens = 0;
  // The ids to range-check against the vocabulary (may be empty when the caller has already
  // checked them, e.g. expanded multimodal prompts whose image rows are not token ids).
  std::span<const int64_t> token_ids;
};

// The outcome of admission. `status` is ok, kInvalidArgument (empty prompt, negative
// max_new_tokens, a token id outside the vocabulary, a non-positive capacity) or
// kCapacityExceeded. The three numbers of the capacity invariant are always filled so callers
// (HTTP, C API) can report them as fields, not only inside the message.
struct Admission {
  Status status;
  int64_t effective_prompt_len = 0;
  int64_t max_new_tokens = 0;
  int64_t context_capacity = 0;
  bool ok() const { return status.ok(); }
  bool capacity_exceeded() const { return status.kind() == ErrorKind::kCapacityExceeded; }
};

// Checks effective_prompt_len + max_new_tokens <= context_capacity (overflow-safe) and the
// argument rules above. Pure: touches no engine state.
Admission check_admission(const AdmissionLimits& limits, const AdmissionRequest& request);

// Convenience for text prompts: effective length = token_ids.size().
Admission check_text_admission(const AdmissionLimits& limits, std::span<const int64_t> token_ids,
                               int64_t max_new_tokens);

// A free list over `slots` KV slots. Not thread-safe: owned by the one thread that owns the engine.
class SlotPool {
 public:
  explicit SlotPool(int64_t slots = 0);
  // The lowest free slot, or kOutOfRange "all N slots are in use".
  Result<int64_t> acquire();
  // That slot (prefix reuse picks it): kOutOfRange outside [0, slots) or when it is in use.
  Status acquire(int64_t slot);
  // kOutOfRange for an id outside [0, slots) or a slot that is not in use.
  Status release(int64_t slot);
  bool in_use(int64_t slot) const;
  int64_t slots() const { return int64_t(in_use_.size()); }
  int64_t free_count() const;

 private:
  std::vector<bool> in_use_;
};

}  // namespace hlx::engine
