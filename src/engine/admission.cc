#include "engine/admission.h"

#include <limits>

namespace hlx::engine {

Admission check_admission(const AdmissionLimits& limits, const AdmissionRequest& request) {
  Admission a;
  a.effective_prompt_len = request.effective_prompt_len;
  a.max_new_tokens = request.max_new_tokens;
  a.context_capacity = limits.context_capacity;
  if (limits.context_capacity <= 0) {
    a.status =
        make_error(ErrorKind::kInvalidArgument, "context capacity must be positive, got ", limits.context_capacity);
    return a;
  }
  if (request.effective_prompt_len <= 0) {
    a.status = make_error(ErrorKind::kInvalidArgument, "the prompt is empty (", request.effective_prompt_len,
                          " tokens); a request needs at least one prompt token");
    return a;
  }
  if (request.max_new_tokens < 0) {
    a.status = make_error(ErrorKind::kInvalidArgument, "max_new_tokens must be >= 0, got ", request.max_new_tokens);
    return a;
  }
  for (size_t i = 0; i < request.token_ids.size(); ++i) {
    int64_t id = request.token_ids[i];
    if (id < 0 || id >= limits.vocab_size) {
      a.status = make_error(ErrorKind::kInvalidArgument, "token id ", id, " at prompt position ", i,
                            " is outside the vocabulary [0, ", limits.vocab_size, ")");
      return a;
    }
  }
  // Both terms are non-negative here; compare without forming a sum that could overflow.
  if (request.effective_prompt_len > limits.context_capacity ||
      request.max_new_tokens > limits.context_capacity - request.effective_prompt_len) {
    bool fits_int = request.max_new_tokens <= std::numeric_limits<int64_t>::max() - request.effective_prompt_len;
    a.status = make_error(ErrorKind::kCapacityExceeded, "request does not fit the context capacity: prompt ",
                          request.effective_prompt_len, " tokens + max_new_tokens ", request.max_new_tokens,
                          fits_int ? str_cat(" = ", request.effective_prompt_len + request.max_new_tokens)
                                   : std::string(" (overflows int64)"),
                          " > context_capacity ", limits.context_capacity);
    return a;
  }
  return a;
}

Admission check_text_admission(const AdmissionLimits& limits, std::span<const int64_t> token_ids,
                               int64_t max_new_tokens) {
  return check_admission(limits, AdmissionRequest{int64_t(token_ids.size()), max_new_tokens, token_ids});
}

SlotPool::SlotPool(int64_t slots) : in_use_(size_t(slots > 0 ? slots : 0), false) {}

Result<int64_t> SlotPool::acquire() {
  for (size_t i = 0; i < in_use_.size(); ++i)
    if (!in_use_[i]) {
      in_use_[i] = true;
      return int64_t(i);
    }
  return make_error(ErrorKind::kOutOfRange, "all ", in_use_.size(), " slots are in use");
}

Status SlotPool::acquire(int64_t slot) {
  if (slot < 0 || slot >= slots())
    return make_error(ErrorKind::kOutOfRange, "slot ", slot, " is outside [0, ", slots(), ")");
  if (in_use_[size_t(slot)]) return make_error(ErrorKind::kOutOfRange, "slot ", slot, " is in use");
  in_use_[size_t(slot)] = true;
  return ok_status();
}

Status SlotPool::release(int64_t slot) {
  if (slot < 0 || slot >= slots())
    return make_error(ErrorKind::kOutOfRange, "slot ", slot, " is outside [0, ", slots(), ")");
  if (!in_use_[size_t(slot)]) return make_error(ErrorKind::kOutOfRange, "slot ", slot, " is not in use");
  in_use_[size_t(slot)] = false;
  return ok_status();
}

bool SlotPool::in_use(int64_t slot) const { return slot >= 0 && slot < slots() && in_use_[size_t(slot)]; }

int64_t SlotPool::free_count() const {
  int64_t n = 0;
  for (bool b : in_use_) n += b ? 0 : 1;
  return n;
}

}  // namespace hlx::engine
