// The one thread that owns the BatchEngine. HTTP threads submit and cancel (thread-safe engine
// calls); this thread runs step() whenever something is queued or running and sleeps otherwise.
// Every request's events arrive through its on_event callback (on this thread) into that
// request's RequestChannel, which wakes the waiting HTTP thread through an eventfd, so that thread
// can poll() the eventfd and its client socket together (events and disconnects, no busy wait).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <memory>
#include <mutex>
#include <atomic>
#include <shared_mutex>
#include <thread>
#include <vector>

#include "core/status.h"
#include "engine/batch_engine.h"
#include "server/metrics.h"

namespace hlx::server {

class RequestChannel {
 public:
  RequestChannel();
  ~RequestChannel();
  RequestChannel(const RequestChannel&) = delete;
  RequestChannel& operator=(const RequestChannel&) = delete;

  bool valid() const { return fd_ >= 0; }
  int fd() const { return fd_; }      // readable while events are pending
  void push(engine::Event event);     // engine thread
  std::vector<engine::Event> take();  // HTTP thread: drains the events and the eventfd

 private:
  int fd_ = -1;
  std::mutex mu_;
  std::deque<engine::Event> events_;
};

class EngineWorker {
 public:
  // Starts the engine thread, which constructs the BatchEngine (and so owns it). `model` must
  // outlive the worker.
  EngineWorker(engine::TextModel& model, engine::BatchEngineOptions options, Metrics& metrics);
  ~EngineWorker();  // stop()

  struct Submitted {
    engine::RequestId id = 0;
    std::shared_ptr<RequestChannel> channel;
  };
  // Thread-safe. The request's on_event is replaced by the channel: `channel`, or a new one when
  // null (several requests may share one; their events carry their ids). Errors: the engine's
  // rejection (admission, sampling), kUnsupported after stop(), kIo when no eventfd is available.
  // Runs BatchEngine::submit (image preprocessing included) on the calling thread without
  // blocking the engine thread.
  Result<Submitted> submit(engine::GenerationRequest request, engine::Admission* admission,
                           std::shared_ptr<RequestChannel> channel = nullptr);
  void cancel(engine::RequestId id);  // thread-safe; no-op for finished ids

  // Refuses further submissions, lets queued and running requests finish, joins the thread.
  void stop();

  int64_t queued() const;
  int64_t running() const;
  int64_t slots() const { return slots_; }

 private:
  void run(engine::TextModel& model, engine::BatchEngineOptions options);
  void on_event(const std::shared_ptr<RequestChannel>& ch, std::chrono::steady_clock::time_point submitted,
                std::shared_ptr<bool> first_seen, const engine::Event& e);

  Metrics& metrics_;
  int64_t slots_ = 0;
  std::mutex mu_;  // with cv_: the engine thread sleeps while the engine is idle
  std::condition_variable cv_;
  bool ready_ = false;
  std::atomic<bool> stopping_{false};
  // Shared by callers of the engine's thread-safe methods; exclusive only when the engine thread
  // decides to exit, so the engine is never destroyed under a concurrent submit().
  mutable std::shared_mutex life_mu_;
  bool closed_ = false;  // guarded by life_mu_
  std::unique_ptr<engine::BatchEngine> engine_;
  std::vector<engine::RequestId> finished_;  // engine thread only: completions to collect
  // Requests submitted and not finished, with their channels: when a step throws, each gets a
  // kError finish at once and is cancelled (its later events are dropped).
  std::mutex live_mu_;
  std::map<engine::RequestId, std::shared_ptr<RequestChannel>> live_;
  std::set<engine::RequestId> failed_;       // failed by fail_all(), until their engine-side end
  std::set<engine::RequestId> ended_early_;  // finished before submit() registered them
  void fail_all(const std::string& why);     // engine thread
  std::thread thread_;
};

}  // namespace hlx::server
