#include "engine/session.h"

namespace hlx::engine {

namespace {
BatchEngineOptions with_completions(BatchEngineOptions o) {
  o.keep_completions = true;
  return o;
}
}  // namespace

Session::Session(TextModel& model, BatchEngineOptions options) : engine_(model, with_completions(std::move(options))) {}

Result<Completion> Session::generate(GenerationRequest request) {
  HLX_ASSIGN_OR_RETURN(RequestId id, engine_.submit(std::move(request)));
  {
    std::lock_guard<std::mutex> lock(mu_);
    current_ = id;
    if (cancel_requested_) (void)engine_.cancel(id);
    cancel_requested_ = false;
  }
  Status s = engine_.run_until_idle();
  {
    std::lock_guard<std::mutex> lock(mu_);
    current_ = 0;
  }
  if (!s.ok()) return s;
  std::optional<Completion> c = engine_.take_completion(id);
  if (!c) return make_error(ErrorKind::kInternal, "request ", id, " finished without a completion");
  return std::move(*c);
}

void Session::cancel() {
  std::lock_guard<std::mutex> lock(mu_);
  if (current_ != 0) (void)engine_.cancel(current_);
}

}  // namespace hlx::engine
