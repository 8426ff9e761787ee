#include "runtime/kernels/parallel.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>


namespace hlx::kernels {
namespace {

thread_local int tl_limit = 0;  // 0 = the default
thread_local bool tl_in_job = false;  // inside a parallel_for chunk: nested calls run serially

using Clock = std::chrono::steady_clock;

// How long an idle worker spins before sleeping. Decode runs a few hundred parallel_for calls per
// token a few microseconds apart, so a short spin avoids a futex wake per call; on a busy machine
// the spin is the only CPU an idle worker takes from others. HLX_SPIN_US overrides (A/B runs).
int64_t spin_ns() {
  static const int64_t ns = [] {
    const char* e = std::getenv("HLX_SPIN_US");
    return e ? std::max<int64_t>(0, std::atoll(e)) * 1000 : int64_t(100) * 1000;
  }();
  return ns;
}

// HLX_POOL_BACKOFF=0 disables the oversubscription back-off (Pool::note_wait), for A/B runs.
bool backoff_enabled() {
  static const bool on = [] {
    const char* e = std::getenv("HLX_POOL_BACKOFF");
    return !(e && std::string(e) == "0");
  }();
  return on;
}

class Pool {
 public:
  static Pool& get() {
    static Pool* pool = new Pool();  // never destroyed: workers may outlive static destructors
    return *pool;
  }

  void run(int threads, int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
    if (tl_in_job || threads <= 1) return serial(n, fn);
    std::unique_lock<std::mutex> busy(mu_, std::try_to_lock);
    if (!busy.owns_lock()) return serial(n, fn);
    if (serial_jobs_left_ > 0) {  // backing off after stalls (below)
      --serial_jobs_left_;
      return serial(n, fn);
    }
    tl_in_job = true;
    const Clock::time_point t0 = Clock::now();
    ensure_workers(threads - 1);
    fn_.store(&fn, std::memory_order_relaxed);
    n_.store(n, std::memory_order_relaxed);
    grain_.store(grain, std::memory_order_relaxed);
    workers_wanted_.store(threads - 1, std::memory_order_relaxed);
    done_.store(0, std::memory_order_relaxed);
    const uint64_t gen = (state_.load(std::memory_order_relaxed) >> 32) + 1;
    state_.store(gen << 32, std::memory_order_seq_cst);  // publishes the fields above
    epoch_.fetch_add(1, std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_seq_cst) > 0) epoch_.notify_all();
    work(gen);
    // Only chunks already claimed (running on a worker) remain; wait for them.
    const Clock::time_point t_own = Clock::now();
    int spins = 0;
    while (done_.load(std::memory_order_acquire) < n) {
      if (++spins < 4096) _mm_pause();
      else std::this_thread::yield();
    }
    tl_in_job = false;
    note_wait(threads, t0, t_own, Clock::now());
  }

  static void serial(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
    const bool outer = !tl_in_job;
    tl_in_job = true;
    fn(0, n);
    if (outer) tl_in_job = false;
  }

 private:
  Pool() = default;

  void ensure_workers(int count) {
    while (int(workers_.size()) < count) {
      int index = int(workers_.size());
      workers_.emplace_back([this, index] { worker_loop(index); });
      workers_.back().detach();
    }
  }

  // Claims chunks of job `gen` until none are left. Returns when the job is exhausted or a newer
  // job has replaced it.
  void work(uint64_t gen) {
    for (;;) {
      uint64_t s = state_.load(std::memory_order_acquire);
      if ((s >> 32) != gen) return;
      const int64_t n = n_.load(std::memory_order_relaxed), grain = grain_.load(std::memory_order_relaxed);
      const auto* fn = fn_.load(std::memory_order_relaxed);
      const int64_t begin = int64_t(s & 0xffffffffu);
      if (begin >= n) return;
      const int64_t end = std::min(n, begin + grain);
      // The claim succeeds only if job `gen` is still current and unclaimed at `begin`, so the
      // fields read above belong to it (they change only after all its items are done).
      if (!state_.compare_exchange_weak(s, (gen << 32) | uint64_t(end), std::memory_order_acq_rel)) continue;
      (*fn)(begin, end);
      done_.fetch_add(end - begin, std::memory_order_release);
    }
  }

  void worker_loop(int index) {
    tl_in_job = true;  // a worker never starts jobs of its own
    uint32_t seen = epoch_.load(std::memory_order_acquire);
    for (;;) {
      // Wait for a new epoch: spin for spin_ns(), then sleep.
      uint32_t e = epoch_.load(std::memory_order_acquire);
      if (e == seen) {
        const Clock::time_point t0 = Clock::now();
        const int64_t limit = spin_ns();
        for (int i = 0;; ++i) {
          e = epoch_.load(std::memory_order_acquire);
          if (e != seen) break;
          _mm_pause();
          if ((i & 63) == 63 && std::chrono::duration<double, std::nano>(Clock::now() - t0).count() > double(limit))
            break;
        }
        if (e == seen) {
          sleepers_.fetch_add(1, std::memory_order_seq_cst);
          e = epoch_.load(std::memory_order_seq_cst);
          if (e == seen) epoch_.wait(seen, std::memory_order_seq_cst);
          sleepers_.fetch_sub(1, std::memory_order_seq_cst);
          continue;
        }
      }
      seen = e;
      if (index >= workers_wanted_.load(std::memory_order_relaxed)) continue;
      work(state_.load(std::memory_order_acquire) >> 32);
    }
  }

  // Oversubscription back-off. A worker descheduled in the middle of a chunk makes the caller
  // wait for a scheduler time slice (milliseconds), far longer than a decode-step kernel. Over
  // windows of 64 jobs, parallel time is own + wait while running alone would take about
  // threads x own (the caller's share times the number of shares); when waiting cost more than
  // the other threads saved, the next kSerialJobs jobs (a few decode steps) run on the calling
  // thread alone, then threads are tried again. On a quiet machine waits are microseconds.
  void note_wait(int threads, Clock::time_point t0, Clock::time_point t_own, Clock::time_point t_end) {
    if (!backoff_enabled()) return;
    own_us_ += std::chrono::duration<double, std::micro>(t_own - t0).count();
    wait_us_ += std::chrono::duration<double, std::micro>(t_end - t_own).count();
    if (++window_jobs_ < 64) return;
    if (wait_us_ > double(threads - 1) * own_us_) {
      serial_jobs_left_ = kSerialJobs;
      ++backoffs_;
    }
    own_us_ = wait_us_ = 0;
    window_jobs_ = 0;
  }
  static constexpr int kSerialJobs = 2048;
  double own_us_ = 0, wait_us_ = 0;  // guarded by mu_
  int window_jobs_ = 0;
  int serial_jobs_left_ = 0;
  int64_t backoffs_ = 0;

  std::mutex mu_;  // one job at a time
  std::vector<std::thread> workers_;
  std::atomic<const std::function<void(int64_t, int64_t)>*> fn_{nullptr};
  std::atomic<int64_t> n_{0}, grain_{1}, done_{0};
  std::atomic<int> workers_wanted_{0};
  std::atomic<uint64_t> state_{0};  // job generation << 32 | next unclaimed item
  std::atomic<uint32_t> epoch_{0};
  std::atomic<int> sleepers_{0};
};

}  // namespace

int hardware_threads() {
  static const int n = std::max(1, int(std::thread::hardware_concurrency()));
  return n;
}

// The default when no limit is set: OpenMP's initial thread count (OMP_NUM_THREADS, else all
// cores), read once before any ThreadLimit changes it.
int default_threads() {
  static const int n = std::max(1, omp_get_max_threads());
  return n;
}

int max_threads() { return tl_limit > 0 ? tl_limit : default_threads(); }

ThreadLimit::ThreadLimit(int threads) : saved_(tl_limit), saved_omp_((default_threads(), omp_get_max_threads())) {
  tl_limit = threads > 0 ? threads : 0;
  omp_set_num_threads(max_threads());
}

ThreadLimit::~ThreadLimit() {
  tl_limit = saved_;
  omp_set_num_threads(saved_omp_);
}

void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  if (n >= (int64_t(1) << 31)) grain = std::max<int64_t>(grain, n >> 30);  // item index fits 32 bits
  const int threads = int(std::min<int64_t>(max_threads(), (n + grain - 1) / grain));
  Pool::get().run(threads, n, grain, fn);
}

}  // namespace hlx::kernels
