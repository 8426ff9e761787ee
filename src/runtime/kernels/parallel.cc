// The runtime's thread pool: one job at a time, items claimed chunk by chunk by the caller and
// the workers.
//
// Protocol (the hand-off between a caller and the workers):
// - `state_` packs a job generation (high 40 bits) and the next unclaimed chunk (low 24 bits);
//   chunk kClosed means no chunk of that generation may be claimed.
// - A caller (one at a time, under mu_) opening job G: (1) stores state_ = G | kClosed, (2) stores
//   the job fields fn_, n_, grain_ with release order and resets done_, (3) publishes
//   state_ = G | 0 with release order (which also publishes the reset).
// - A worker claims chunk i of G by: load state_ (acquire) = G | i, load the fields (acquire),
//   then compare-exchange state_ from G | i to G | i+1.
// Invariants:
// - A successful claim ran on the fields of G. The state load synchronises with step (3) of G,
//   so the fields read are G's or newer; if any was newer, its store followed step (1) of a later
//   job, which then happens-before the compare-exchange, so state_ no longer holds G | i and the
//   claim fails. (An ABA would need 2^40 jobs between a worker's load and its compare-exchange.)
// - done_ counts only items of the current job: a claimed chunk adds its size after running, and
//   a caller returns when done_ reaches its n, i.e. when every chunk of its job has been claimed
//   and has finished. The next job resets done_ only after that, so no stale add can land in it.
// - fn_ points to the caller's function, which outlives every claim of its job (previous point).
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

thread_local int tl_limit = 0;        // 0 = the default
thread_local bool tl_in_job = false;  // inside a parallel_for chunk: nested calls run serially

using Clock = std::chrono::steady_clock;

std::atomic<int64_t> g_worker_delay_ns{0}, g_caller_delay_ns{0};  // set_pool_handoff_delays_for_testing
std::atomic<int64_t> g_backoffs{0};                               // serial periods started (pool_backoffs)

void pause_for(int64_t ns) {
  const Clock::time_point t0 = Clock::now();
  while (std::chrono::duration<double, std::nano>(Clock::now() - t0).count() < double(ns)) _mm_pause();
}

// A worker's pause at a claim: uniform in [0, max) from a per-thread xorshift.
void worker_delay() {
  const int64_t max = g_worker_delay_ns.load(std::memory_order_relaxed);
  if (max <= 0) return;
  thread_local uint64_t x = 0x9e3779b97f4a7c15ull ^ uint64_t(reinterpret_cast<uintptr_t>(&x));
  x ^= x << 13, x ^= x >> 7, x ^= x << 17;
  pause_for(int64_t(x % uint64_t(max)));
}

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
    const Clock::time_point t0 = Clock::now();
    if (t0 < serial_until_) return serial(n, fn);  // backing off after stalls (below)
    tl_in_job = true;
    ensure_workers(threads - 1);
    const uint64_t gen = (generation(state_.load(std::memory_order_relaxed)) + 1) & kGenMask;
    state_.store(gen << kIndexBits | kClosed, std::memory_order_relaxed);  // (1) close claims
    fn_.store(&fn, std::memory_order_release);                             // (2) job fields
    n_.store(n, std::memory_order_release);
    grain_.store(grain, std::memory_order_release);
    done_.store(0, std::memory_order_relaxed);
    workers_wanted_.store(threads - 1, std::memory_order_relaxed);
    if (const int64_t d = g_caller_delay_ns.load(std::memory_order_relaxed)) pause_for(d);
    state_.store(gen << kIndexBits, std::memory_order_seq_cst);  // (3) open chunk 0
    epoch_.fetch_add(1, std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_seq_cst) > 0) epoch_.notify_all();
    work(gen, /*is_worker=*/false);
    // Only chunks already claimed (running on a worker) remain; wait for them.
    const Clock::time_point t_own = Clock::now();
    int spins = 0;
    while (done_.load(std::memory_order_acquire) < n) {
      if (++spins < 4096)
        _mm_pause();
      else
        std::this_thread::yield();
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

  static uint64_t generation(uint64_t state) { return state >> kIndexBits; }

  // Claims chunks of job `gen` until none are left. Returns when the job is exhausted, closed, or
  // a newer job has replaced it (see the protocol at the top of the file).
  void work(uint64_t gen, bool is_worker) {
    for (;;) {
      uint64_t s = state_.load(std::memory_order_acquire);
      const uint64_t chunk = s & kClosed;
      if (generation(s) != gen || chunk == kClosed) return;
      if (is_worker) worker_delay();
      const auto* fn = fn_.load(std::memory_order_acquire);
      const int64_t n = n_.load(std::memory_order_acquire), grain = grain_.load(std::memory_order_acquire);
      const int64_t begin = int64_t(chunk) * grain;
      if (begin >= n) return;
      if (!state_.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel)) continue;
      const int64_t end = std::min(n, begin + grain);
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
      work(generation(state_.load(std::memory_order_acquire)), /*is_worker=*/true);
    }
  }

  // Oversubscription back-off. A worker descheduled in the middle of a chunk makes the caller
  // wait for a scheduler time slice (milliseconds), far longer than a decode-step kernel. Over
  // windows of 64 jobs, parallel time is own + wait while running alone would take about
  // threads x own (the caller's share times the number of shares); when waiting cost more than
  // the other threads saved, jobs run on the calling thread alone for a period, then threads are
  // tried again. The period is wall time, not a job count (2048 jobs were 4.6 s of serial decode
  // at 32k context, set off by one stray stall on a quiet machine): 32 ms after a clean window,
  // doubling while stalls persist, up to 1 s. On a quiet machine waits are microseconds.
  void note_wait(int threads, Clock::time_point t0, Clock::time_point t_own, Clock::time_point t_end) {
    if (!backoff_enabled() || g_worker_delay_ns.load(std::memory_order_relaxed) > 0) return;
    own_us_ += std::chrono::duration<double, std::micro>(t_own - t0).count();
    wait_us_ += std::chrono::duration<double, std::micro>(t_end - t_own).count();
    if (++window_jobs_ < 64) return;
    if (wait_us_ > double(threads - 1) * own_us_) {
      serial_until_ = t_end + serial_period_;
      serial_period_ = std::min(serial_period_ * 2, kMaxSerialPeriod);
      g_backoffs.fetch_add(1, std::memory_order_relaxed);
    } else {
      serial_period_ = kMinSerialPeriod;
    }
    own_us_ = wait_us_ = 0;
    window_jobs_ = 0;
  }
  static constexpr Clock::duration kMinSerialPeriod = std::chrono::milliseconds(32);
  static constexpr Clock::duration kMaxSerialPeriod = std::chrono::seconds(1);
  double own_us_ = 0, wait_us_ = 0;  // these four guarded by mu_
  int window_jobs_ = 0;
  Clock::time_point serial_until_{};
  Clock::duration serial_period_ = kMinSerialPeriod;
  std::mutex mu_;  // one job at a time
  std::vector<std::thread> workers_;
  std::atomic<const std::function<void(int64_t, int64_t)>*> fn_{nullptr};
  std::atomic<int64_t> n_{0}, grain_{1}, done_{0};
  std::atomic<int> workers_wanted_{0};
  static constexpr int kIndexBits = 24;
  static constexpr uint64_t kClosed = (uint64_t(1) << kIndexBits) - 1;  // also the chunk mask
  static constexpr uint64_t kGenMask = (uint64_t(1) << (64 - kIndexBits)) - 1;
  std::atomic<uint64_t> state_{kClosed};  // job generation << kIndexBits | next unclaimed chunk
  std::atomic<uint32_t> epoch_{0};
  std::atomic<int> sleepers_{0};
};

}  // namespace

int64_t pool_backoffs() { return g_backoffs.load(std::memory_order_relaxed); }

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

void set_pool_handoff_delays_for_testing(int64_t worker_ns, int64_t caller_ns) {
  g_worker_delay_ns.store(std::max<int64_t>(0, worker_ns), std::memory_order_relaxed);
  g_caller_delay_ns.store(std::max<int64_t>(0, caller_ns), std::memory_order_relaxed);
}

constexpr int64_t kMaxChunks = (int64_t(1) << 24) - 2;  // below Pool::kClosed

void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  grain = std::max<int64_t>(grain, (n + kMaxChunks - 1) / kMaxChunks);  // chunk index fits the pool's state
  const int threads = int(std::min<int64_t>(max_threads(), (n + grain - 1) / grain));
  Pool::get().run(threads, n, grain, fn);
}

}  // namespace hlx::kernels
