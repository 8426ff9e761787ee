// The runtime's own thread pool for bandwidth-bound kernels (decode matmuls, attention, KV writes).
//
// Why not OpenMP: a `#pragma omp for schedule(static)` region ends in a barrier that waits for
// every thread's fixed share, so on an oversubscribed machine one descheduled thread stalls the
// whole step (measured: decode 0.8 tok/s with 2 threads vs 9.1 with 1 at load 9). Here items are
// claimed one chunk at a time from a shared counter and the calling thread works too: a worker
// that has not been scheduled yet simply claims nothing, and the caller only ever waits for
// chunks that are already running. Idle workers spin briefly, then sleep on a futex.
//
// Thread count: ThreadLimit (set by Program::run from ProgramOptions::threads) bounds the threads
// used by calls made on the current thread; 0 = OpenMP's default (OMP_NUM_THREADS, else all cores). oneDNN's OpenMP
// regions are bounded the same way through omp_set_num_threads.
#pragma once

#include <cstdint>
#include <functional>

namespace hlx::kernels {

// Threads a parallel_for on this thread may use (>= 1).
int max_threads();
// Cores of the machine (std::thread::hardware_concurrency, at least 1).
int hardware_threads();

// Sets the calling thread's limit for its lifetime (0 = the default above); restores the
// previous limit (and OpenMP's) after.
class ThreadLimit {
 public:
  explicit ThreadLimit(int threads);
  ~ThreadLimit();
  ThreadLimit(const ThreadLimit&) = delete;
  ThreadLimit& operator=(const ThreadLimit&) = delete;

 private:
  int saved_ = 0, saved_omp_ = 0;
};

// Calls fn(begin, end) over [0, n) in chunks of `grain` items, on up to max_threads() threads
// (the caller included). The floating-point mode is the threads' own: kernels that want FTZ/DAZ
// set it in fn (internal::FtzDazScope). Returns when every item is done. Concurrent callers
// from different threads are served one at a time by the pool; a caller that finds it busy runs
// its items itself.
void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

// Serial periods the pool's oversubscription back-off has started in this process (waiting for
// descheduled workers cost more than they saved): a benchmark reports it next to the load.
int64_t pool_backoffs();

// For the pool's stress test only: widens the two windows of the job hand-off that a preempted
// thread would open. A worker pauses up to `worker_ns` (pseudo-random per claim) between reading
// the job state and reading the job fields; a caller pauses `caller_ns` between writing the job
// fields and publishing the job. 0, 0 (the default) turns both off. While worker delays are on,
// the oversubscription back-off (which would run jobs serially) is off.
void set_pool_handoff_delays_for_testing(int64_t worker_ns, int64_t caller_ns);

}  // namespace hlx::kernels
