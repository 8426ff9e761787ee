#include "server/engine_worker.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

namespace hlx::server {

using Clock = std::chrono::steady_clock;

RequestChannel::RequestChannel() : fd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}

RequestChannel::~RequestChannel() {
  if (fd_ >= 0) close(fd_);
}

void RequestChannel::push(engine::Event event) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back(std::move(event));
  }
  uint64_t one = 1;
  while (write(fd_, &one, sizeof one) < 0 && errno == EINTR) {
  }
}

std::vector<engine::Event> RequestChannel::take() {
  uint64_t count;
  while (read(fd_, &count, sizeof count) < 0 && errno == EINTR) {
  }
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<engine::Event> out(std::make_move_iterator(events_.begin()), std::make_move_iterator(events_.end()));
  events_.clear();
  return out;
}

EngineWorker::EngineWorker(engine::TextModel& model, engine::BatchEngineOptions options, Metrics& metrics)
    : metrics_(metrics), slots_(model.shape().slots) {
  thread_ = std::thread([this, &model, options = std::move(options)]() mutable { run(model, std::move(options)); });
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return ready_; });
}

EngineWorker::~EngineWorker() { stop(); }

void EngineWorker::run(engine::TextModel& model, engine::BatchEngineOptions options) {
  options.keep_completions = true;  // for the per-request timings in the metrics
  engine_ = std::make_unique<engine::BatchEngine>(model, std::move(options));
  {
    std::lock_guard<std::mutex> lock(mu_);
    ready_ = true;
  }
  cv_.notify_all();
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !engine_->idle(); });
    }
    if (engine_->idle()) {  // stopping: exit once no submit() is half-way through
      std::unique_lock<std::shared_mutex> life(life_mu_);
      if (!engine_->idle()) continue;
      closed_ = true;
      break;
    }
    // No exception may end this thread (and with it the process): a step that throws fails the
    // requests in flight with a 500 and the worker goes on serving new ones.
    try {
      Status s = engine_->step();
      if (!s.ok()) std::fprintf(stderr, "hlx serve: engine step failed: %s\n", s.to_string().c_str());
    } catch (const std::exception& e) {
      fail_all(e.what());
    } catch (...) {
      fail_all("unknown exception");
    }
    for (engine::RequestId id : finished_) {
      std::optional<engine::Completion> c = engine_->take_completion(id);
      if (!c) continue;
      // Computed rows only: reused ones cost no prefill time.
      if (c->prefill_chunks > 0) {
        metrics_.add_prefill(c->prompt_tokens - c->cached_tokens, c->prefill_ms / 1000.0);
        metrics_.add_prompt_reuse(c->cached_tokens, c->prompt_tokens - c->cached_tokens);
        metrics_.add_images(c->cached_images, c->images - c->cached_images - c->reused_images);
      }
      if (c->tokens.size() > 1) metrics_.add_decode(int64_t(c->tokens.size()) - 1, c->decode_ms / 1000.0);
    }
    finished_.clear();
  }
  engine_.reset();  // destroyed on its owning thread
}

void EngineWorker::fail_all(const std::string& why) {
  std::fprintf(stderr, "hlx serve: engine step threw (%s): failing the requests in flight\n", why.c_str());
  std::map<engine::RequestId, std::shared_ptr<RequestChannel>> failed;
  {
    std::lock_guard<std::mutex> lock(live_mu_);
    failed.swap(live_);
    for (auto& kv : failed) failed_.insert(kv.first);
  }
  for (auto& [id, ch] : failed) {
    engine::Event e;
    e.id = id;
    e.kind = engine::Event::Kind::kFinished;
    e.finish = engine::Finish::kError;
    e.error = Status(ErrorKind::kInternal, "the engine step failed: " + why);
    ch->push(std::move(e));
    (void)engine_->cancel(id);
  }
}

void EngineWorker::on_event(const std::shared_ptr<RequestChannel>& ch, Clock::time_point submitted,
                            std::shared_ptr<bool> first_seen, const engine::Event& e) {
  {
    std::lock_guard<std::mutex> lock(live_mu_);
    const bool last = e.kind != engine::Event::Kind::kToken;
    if (failed_.count(e.id)) {  // failed by fail_all(): its channel already has its end
      if (last) failed_.erase(e.id);
      return;
    }
    if (last && live_.erase(e.id) == 0) ended_early_.insert(e.id);
  }
  if (e.kind == engine::Event::Kind::kToken) {
    if (!*first_seen) {
      *first_seen = true;
      metrics_.observe_ttft(std::chrono::duration<double>(Clock::now() - submitted).count());
    }
    metrics_.add_generated_tokens(1);
  } else {
    finished_.push_back(e.id);
    if (e.finish != engine::Finish::kCancelled && e.finish != engine::Finish::kError)
      metrics_.count_finish(engine::finish_name(e.finish));
  }
  ch->push(e);
}

Result<EngineWorker::Submitted> EngineWorker::submit(engine::GenerationRequest request, engine::Admission* admission,
                                                     std::shared_ptr<RequestChannel> channel) {
  auto ch = channel ? std::move(channel) : std::make_shared<RequestChannel>();
  if (!ch->valid()) return make_error(ErrorKind::kIo, "eventfd: out of file descriptors");
  auto first_seen = std::make_shared<bool>(false);
  // The engine thread is the only one touching first_seen (inside on_event).
  request.on_event = [this, ch, first_seen, t0 = Clock::now()](const engine::Event& e) {
    on_event(ch, t0, first_seen, e);
  };
  engine::RequestId id;
  {
    std::shared_lock<std::shared_mutex> life(life_mu_);
    if (closed_ || stopping_) return make_error(ErrorKind::kUnsupported, "the server is shutting down");
    HLX_ASSIGN_OR_RETURN(id, engine_->submit(std::move(request), admission));
  }
  {
    // Not held across submit() (image preprocessing runs there), so the request may have ended
    // already.
    std::lock_guard<std::mutex> lock(live_mu_);
    if (!ended_early_.erase(id)) live_.emplace(id, ch);
  }
  { std::lock_guard<std::mutex> lock(mu_); }  // the engine thread is waiting or will see the request
  cv_.notify_all();
  return Submitted{id, ch};
}

void EngineWorker::cancel(engine::RequestId id) {
  {
    std::shared_lock<std::shared_mutex> life(life_mu_);
    if (!closed_) (void)engine_->cancel(id);  // kNotFound for a request that just finished
  }
  { std::lock_guard<std::mutex> lock(mu_); }
  cv_.notify_all();
}

void EngineWorker::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

int64_t EngineWorker::queued() const {
  std::shared_lock<std::shared_mutex> life(life_mu_);
  return closed_ ? 0 : engine_->queued();
}

int64_t EngineWorker::running() const {
  std::shared_lock<std::shared_mutex> life(life_mu_);
  return closed_ ? 0 : engine_->running();
}

}  // namespace hlx::server
