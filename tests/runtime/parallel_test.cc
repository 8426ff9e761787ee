// The runtime thread pool (kernels/parallel.h) and the products that run on it: every item is
// run exactly once whatever the thread limit, nested and concurrent calls are safe, and packed
// products that span several pool tiles (rows > 128, columns > 256, ragged tails) match a
// double-precision loop written here.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <random>
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
    for (int64_t i = b; i < e; ++i)
      parallel_for(100, 7, [&](int64_t b2, int64_t e2) { total.fetch_add(e2 - b2); });
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

// Products large enough to be cut into several 128 x 256 pool tiles, with ragged last tiles.
TEST(PackedWeightTiles, MultiTileProductsMatchReference) {
  const int64_t shapes[][3] = {{300, 130, 40}, {513, 257, 96}, {256, 129, 33}, {1000, 9, 64}};
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (int threads : {1, 2}) {
    ThreadLimit limit(threads);
    for (auto [n, m, k] : shapes) {
      std::vector<bf16> w(size_t(n * k)), a(size_t(m * k));  // w is [N, K] (transposed)
      for (auto& x : w) x = f32_to_bf16(u(rng));
      for (auto& x : a) x = f32_to_bf16(u(rng));
      auto packed = kernels::PackedWeight::pack(DType::kBF16, k, n, /*transposed=*/true, w.data());
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
              << "threads " << threads << " n " << n << " m " << m << " k " << k << " at " << i << "," << j;
        }
    }
  }
}

}  // namespace
}  // namespace hlx
