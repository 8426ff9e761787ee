// The runtime thread pool (kernels/parallel.h) and the products that run on it: every item is
// run exactly once whatever the thread limit, nested and concurrent calls are safe, and packed
// products that span several pool tiles (rows > 128, columns > 256, ragged tails) match a
// double-precision loop written here.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "runtime/kernels/matmul.h"
#include "runtime/kernels/parallel.h"

namespace hlx {
namespace {

using kernels::parallel_for;
using kernels::ThreadLimit;

void expect_each_item_once(int64_t n, int64_t grain) {
  std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
  for (auto& h : hits) h = 0;
  parallel_for(n, grain, [&](int64_t b, int64_t e) {
    ASSERT_LE(0, b);
    ASSERT_LT(b, e);
    ASSERT_LE(e, n);
    for (int64_t i = b; i < e; ++i) hits[size_t(i)].fetch_add(1);
  });
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[size_t(i)].load(), 1) << "item " << i << " of " << n;
}

TEST(ParallelFor, EveryItemExactlyOnceForAnyLimitAndGrain) {
  for (int threads : {0, 1, 2, 3, 8}) {
    ThreadLimit limit(threads);
    EXPECT_EQ(kernels::max_threads(), threads > 0 ? threads : kernels::max_threads());
    for (int64_t n : {1, 2, 7, 64, 1000})
      for (int64_t grain : {1, 3, 64, 5000}) expect_each_item_once(n, grain);
  }
  parallel_for(0, 1, [](int64_t, int64_t) { FAIL() << "no items, no call"; });
}

TEST(ParallelFor, LimitIsRestoredAndPerThread) {
  const int outer = kernels::max_threads();
  {
    ThreadLimit one(1);
    EXPECT_EQ(kernels::max_threads(), 1);
    int seen_in_other_thread = 0;
    std::thread t([&] { seen_in_other_thread = kernels::max_threads(); });
    t.join();
    EXPECT_EQ(seen_in_other_thread, outer);  // the limit belongs to the thread that set it
  }
  EXPECT_EQ(kernels::max_threads(), outer);
}

TEST(ParallelFor, NestedCallsRunInline) {
  ThreadLimit limit(2);
  std::atomic<int64_t> total{0};
  parallel_for(8, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) parallel_for(100, 7, [&](int64_t b2, int64_t e2) { total.fetch_add(e2 - b2); });
  });
  EXPECT_EQ(total.load(), 800);
}

TEST(ParallelFor, ConcurrentCallersFromSeveralThreads) {
  std::vector<std::thread> callers;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t)
    callers.emplace_back([&, t] {
      ThreadLimit limit(2);
      for (int rep = 0; rep < 200; ++rep) {
        const int64_t n = 17 + t * 13 + rep % 5;
        std::vector<int> hits(static_cast<size_t>(n), 0);
        parallel_for(n, 2, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) ++hits[size_t(i)];
        });
        for (int h : hits)
          if (h != 1) failures.fetch_add(1);
      }
    });
  for (auto& c : callers) c.join();
  EXPECT_EQ(failures.load(), 0);
}

// The pool's hand-off under stress (issue 16): thousands of jobs of random sizes and grains back
// to back from one caller. Every item records the job it belongs to; each item of each job must
// run exactly once, and no item may run after its parallel_for returned. Besides natural timing,
// the pool's test delays widen the windows a preempted worker or caller would open (a worker
// between reading the job state and the job fields, a caller between writing the fields and
// publishing the job): the pool before issue 16 ran items twice in every such round. All per-job
// records outlive the loop, so a late or duplicated item is counted, not a use-after-free.
TEST(ParallelFor, StressEveryItemOfEveryJobOnceAndNoneAfterReturn) {
  ThreadLimit limit(std::max(2, kernels::hardware_threads()));
  struct Job {
    std::vector<std::atomic<int>> hits;
    std::atomic<bool> returned{false};
    std::atomic<int> wrong_job{0}, late{0};
  };
  const int64_t delays[][2] = {{0, 0}, {2000, 1000}, {0, 2000}, {300, 300}};  // worker, caller ns
  for (auto [worker_ns, caller_ns] : delays) {
    kernels::set_pool_handoff_delays_for_testing(worker_ns, caller_ns);
    constexpr int kJobs = 8000;
    std::mt19937 rng(16);
    std::vector<std::unique_ptr<Job>> jobs;
    jobs.reserve(kJobs);
    std::atomic<int> running_job{-1};
    for (int j = 0; j < kJobs; ++j) {
      const int64_t n = 1 + int64_t(rng() % 200);
      const int64_t grain = 1 + int64_t(rng() % 8);
      const int spin = int(rng() % 64);
      auto& job = *jobs.emplace_back(std::make_unique<Job>());
      job.hits = std::vector<std::atomic<int>>(size_t(n));
      running_job.store(j);
      parallel_for(n, grain, [&job, j, n, spin, &running_job](int64_t b, int64_t e) {
        if (running_job.load() != j) job.wrong_job.fetch_add(1);
        for (int64_t i = b; i < e; ++i) {
          if (i < 0 || i >= n) {
            job.wrong_job.fetch_add(1);
            continue;
          }
          for (std::atomic<int> s{0}; s.load(std::memory_order_relaxed) < spin;)
            s.fetch_add(1, std::memory_order_relaxed);
          job.hits[size_t(i)].fetch_add(1);
          if (job.returned.load()) job.late.fetch_add(1);
        }
      });
      job.returned.store(true);
    }
    int64_t bad_counts = 0, late = 0, wrong = 0;
    for (auto& job : jobs) {
      for (auto& h : job->hits) bad_counts += h.load() != 1;
      late += job->late.load();
      wrong += job->wrong_job.load();
    }
    EXPECT_EQ(bad_counts, 0) << "items not run exactly once; delays " << worker_ns << "/" << caller_ns << " ns";
    EXPECT_EQ(late, 0) << "items run after their parallel_for returned; delays " << worker_ns << "/" << caller_ns;
    EXPECT_EQ(wrong, 0) << "chunks of a job that was not current, or out of range; delays " << worker_ns << "/"
                        << caller_ns;
  }
  kernels::set_pool_handoff_delays_for_testing(0, 0);
}

// The oversubscription back-off (parallel.cc, Pool::note_wait) is a period of wall time, not a
// count of jobs: jobs whose worker chunk stalls (a sleep standing in for a descheduled worker)
// set it off; a job right after runs on the caller alone; once the longest period (1 s) has
// passed, a job is shared again. (The count of 2048 jobs it replaced failed the last step.)
TEST(ParallelFor, BackOffIsAPeriodOfWallTime) {
  if (const char* e = std::getenv("HLX_POOL_BACKOFF"); e && std::string(e) == "0") GTEST_SKIP() << "HLX_POOL_BACKOFF=0";
  ThreadLimit limit(2);
  using Clock = std::chrono::steady_clock;
  const std::thread::id caller = std::this_thread::get_id();
  // One job of n chunks; the caller's chunks wait (up to `patience`) for a worker to start one,
  // a worker's chunk then sleeps `stall`. Returns whether a worker ran a chunk.
  auto job = [&](int64_t n, std::chrono::milliseconds stall, std::chrono::milliseconds patience) {
    std::atomic<bool> worker_ran{false};
    parallel_for(n, 1, [&](int64_t, int64_t) {
      if (std::this_thread::get_id() != caller) {
        worker_ran.store(true);
        std::this_thread::sleep_for(stall);
        return;
      }
      for (const Clock::time_point t0 = Clock::now(); !worker_ran.load() && Clock::now() - t0 < patience;)
        std::this_thread::yield();
    });
    return worker_ran.load();
  };
  const int64_t before = kernels::pool_backoffs();
  for (int j = 0; j < 512 && kernels::pool_backoffs() == before; ++j)
    job(2, std::chrono::milliseconds(5), std::chrono::milliseconds(1000));
  ASSERT_GT(kernels::pool_backoffs(), before) << "workers stalled in 512 jobs and the pool never backed off";
  const Clock::time_point backed_off = Clock::now();
  const bool shared = job(4, std::chrono::milliseconds(0), std::chrono::milliseconds(5));
  if (Clock::now() - backed_off < std::chrono::milliseconds(30)) {  // still inside the shortest period
    EXPECT_FALSE(shared) << "a job right after the back-off ran on a worker";
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  EXPECT_TRUE(job(2, std::chrono::milliseconds(0), std::chrono::milliseconds(5000)))
      << "1.1 s after backing off, jobs still run on the caller alone";
}

// Products large enough to be cut into several 128 x 256 pool tiles, with ragged last tiles: the
// own GEMM's row blocks, and with ProductOrder::kAnyOrder on a CPU with AMX-BF16 oneDNN's AMX tiles
// (multiply_sliced; elsewhere the same own GEMM).
TEST(PackedWeightTiles, MultiTileProductsMatchReference) {
  const int64_t shapes[][3] = {{300, 130, 40}, {513, 257, 96}, {256, 129, 33}, {1000, 9, 64}};
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (auto order : {kernels::ProductOrder::kRowInvariant, kernels::ProductOrder::kAnyOrder})
    for (int threads : {1, 2}) {
      ThreadLimit limit(threads);
      for (auto [n, m, k] : shapes) {
        std::vector<bf16> w(size_t(n * k)), a(size_t(m * k));  // w is [N, K] (transposed)
        for (auto& x : w) x = f32_to_bf16(u(rng));
        for (auto& x : a) x = f32_to_bf16(u(rng));
        auto packed = kernels::PackedWeight::pack(DType::kBF16, k, n, /*transposed=*/true, w.data(),
                                                  kernels::WeightFormat::kAsStored, order);
        ASSERT_TRUE(packed.ok()) << packed.status().to_string();
        std::vector<float> c(size_t(m * n), -1.f);
        Status s = (*packed)->multiply(m, DType::kBF16, a.data(), DType::kF32, c.data());
        ASSERT_TRUE(s.ok()) << s.to_string();
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) {
            double want = 0, mag = 0;
            for (int64_t q = 0; q < k; ++q) {
              const double p = double(bf16_to_f32(a[size_t(i * k + q)])) * double(bf16_to_f32(w[size_t(j * k + q)]));
              want += p;
              mag += std::fabs(p);
            }
            ASSERT_NEAR(c[size_t(i * n + j)], want, 1e-5 * mag + 1e-30)
                << "order " << int(order) << " threads " << threads << " n " << n << " m " << m << " k " << k << " at "
                << i << "," << j;
          }
      }
    }
}

}  // namespace
}  // namespace hlx
