// One request at a time over a TextModel: a thin wrapper around a BatchEngine.
//
// Threads: generate() runs on the calling thread, which must be the thread that created the
// Session; cancel() may be called from any thread (e.g. a SIGINT handler's helper thread) and stops
// the running generation at the next step with Finish::kCancelled.
#pragma once

#include <memory>

#include "engine/batch_engine.h"
#include "engine/request.h"

namespace hlx::engine {

class Session {
 public:
  // `model` is not owned and must outlive the Session.
  explicit Session(TextModel& model, BatchEngineOptions options = {});

  // Runs `request` to its end. Streams through request.on_event when set. Rejections (admission,
  // sampling, stop strings) are returned as errors; a failing model call returns a Completion with
  // Finish::kError and its error.
  Result<Completion> generate(GenerationRequest request);

  // Thread-safe; no-op when nothing runs.
  void cancel();

  BatchEngine& engine() { return engine_; }

 private:
  BatchEngine engine_;
  std::mutex mu_;
  RequestId current_ = 0;
  bool cancel_requested_ = false;
};

}  // namespace hlx::engine
