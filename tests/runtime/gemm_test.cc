// Prefill-sized packed bf16 products (M > 8, gemm_avx512.cc where the CPU has AVX512-BF16):
// every row must carry exactly the bits the streaming kernel (M <= 8) gives the same row, on 1
// and on all threads, alone and in a group of sibling products (multiply_grouped), and the values
// must match a double-precision loop written here.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "matmul_test_util.h"
#include "runtime/kernels/matmul.h"
#include "runtime/kernels/parallel.h"

namespace hlx {
namespace {

using kernels::PackedWeight;
using matmul_test::load;
using matmul_test::rand_vec;
using matmul_test::store;

// (N, K): N not a multiple of 64, odd K (the last k paired with a zero), K over several of the
// kernel's K chunks, and a K shorter than one k-pair.
const int64_t kShapes[][2] = {{130, 301}, {200, 1024}, {64, 2}, {70, 1}};
const int64_t kMs[] = {9, 37, 128, 300};

struct Operands {
  int64_t n, k;
  std::vector<float> w, a;  // bf16-rounded values
  std::vector<uint8_t> wb, ab;
  std::unique_ptr<PackedWeight> packed;
};

Operands make(int64_t n, int64_t k, int64_t rows, uint32_t seed) {
  Operands o{n, k, rand_vec(k * n, seed), rand_vec(rows * k, seed + 1), {}, {}, nullptr};
  o.wb = store(DType::kBF16, o.w);
  o.ab = store(DType::kBF16, o.a);
  auto p = PackedWeight::pack(DType::kBF16, k, n, /*transposed=*/true, o.wb.data());
  EXPECT_TRUE(p.ok()) << p.status().to_string();
  if (p.ok()) o.packed = std::move(p).value();
  return o;
}

TEST(Gemm, RowBitsEqualStreamingRows) {
  if (!kernels::matmul_paths().stream_gemv) GTEST_SKIP() << "no AVX512-BF16 streaming kernel here";
  const int64_t max_m = 300;
  uint32_t seed = 700;
  for (auto nk : kShapes) {
    Operands o = make(nk[0], nk[1], max_m, seed += 2);
    ASSERT_TRUE(o.packed);
    const int64_t n = o.n, k = o.k;
    for (DType ct : {DType::kF32, DType::kBF16}) {
      const size_t row_bytes = size_t(n) * dtype_size(ct);
      // Every row through the streaming kernel, in products of 1..8 rows, on one thread.
      std::vector<uint8_t> stream(row_bytes * max_m);
      {
        kernels::ThreadLimit one(1);
        for (int64_t r = 0, step = 1; r < max_m; r += step, step = step % 8 + 1) {
          const int64_t rows = std::min(step, max_m - r);
          ASSERT_TRUE(
              o.packed->multiply(rows, DType::kBF16, o.ab.data() + r * k * 2, ct, stream.data() + size_t(r) * row_bytes)
                  .ok());
        }
      }
      for (int threads : {1, 0})
        for (int64_t m : kMs) {
          kernels::ThreadLimit limit(threads);
          const int64_t first = (max_m - m) / 2;  // rows from the middle: no alignment to help
          std::vector<uint8_t> c(row_bytes * size_t(m));
          ASSERT_TRUE(o.packed->multiply(m, DType::kBF16, o.ab.data() + first * k * 2, ct, c.data()).ok());
          int bad = 0;
          for (int64_t i = 0; i < m; ++i)
            if (std::memcmp(c.data() + size_t(i) * row_bytes, stream.data() + size_t(first + i) * row_bytes,
                            row_bytes) != 0 &&
                bad++ < 3)
              ADD_FAILURE() << "n" << n << " k" << k << " c " << dtype_name(ct) << " threads " << threads << " m" << m
                            << ": row " << i << " differs from the same row in an M <= 8 product";
        }
    }
  }
}

// Values against a double-precision reference computed from the same bf16 inputs: the only
// error is the f32 accumulation (bound as in matmul_test.cc) and the final bf16 rounding.
TEST(Gemm, MatchesDoubleReference) {
  uint32_t seed = 800;
  for (auto nk : kShapes)
    for (int64_t m : kMs) {
      Operands o = make(nk[0], nk[1], m, seed += 2);
      ASSERT_TRUE(o.packed);
      const int64_t n = o.n, k = o.k;
      std::vector<double> want(size_t(m * n)), mag(size_t(m * n));
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double s = 0, g = 0;
          for (int64_t kk = 0; kk < k; ++kk) {
            const double x = o.a[size_t(i * k + kk)], y = o.w[size_t(j * k + kk)];
            s += x * y;
            g += std::fabs(x * y);
          }
          want[size_t(i * n + j)] = s;
          mag[size_t(i * n + j)] = g;
        }
      for (DType ct : {DType::kF32, DType::kBF16}) {
        std::vector<uint8_t> c(size_t(m * n) * dtype_size(ct));
        ASSERT_TRUE(o.packed->multiply(m, DType::kBF16, o.ab.data(), ct, c.data()).ok());
        int bad = 0;
        for (size_t i = 0; i < want.size(); ++i) {
          const double tol = 1e-5 * mag[i] + 1e-6 + (ct == DType::kBF16 ? std::ldexp(std::fabs(want[i]), -8) : 0.0);
          const double got = load(ct, c, i);
          if (!(std::fabs(got - want[i]) <= tol) && bad++ < 5)
            ADD_FAILURE() << "n" << n << " k" << k << " m" << m << " c " << dtype_name(ct) << " element " << i
                          << ": got " << got << " want " << want[i] << " tol " << tol;
        }
      }
    }
}

// f32 activations meeting a bf16 weight are rounded to bf16 first: the product equals the one
// on the rounded activations bit for bit.
TEST(Gemm, F32ActivationsRoundToBf16) {
  Operands o = make(130, 301, 37, 900);
  ASSERT_TRUE(o.packed);
  std::vector<float> a_f32 = rand_vec(37 * 301, 901);
  std::vector<float> rounded = a_f32;
  auto rounded_bf16 = store(DType::kBF16, rounded);
  std::vector<float> c1(size_t(37 * 130)), c2(c1.size());
  ASSERT_TRUE(o.packed->multiply(37, DType::kF32, a_f32.data(), DType::kF32, c1.data()).ok());
  ASSERT_TRUE(o.packed->multiply(37, DType::kBF16, rounded_bf16.data(), DType::kF32, c2.data()).ok());
  EXPECT_EQ(0, std::memcmp(c1.data(), c2.data(), c1.size() * 4));
}

// Sibling products sharing A at prefill M (one packing of A, one item list over all their column
// blocks): each output row equals that row computed alone by the streaming kernel. Widths with
// partial last blocks, odd K, and M over several row groups of the kernel (96 rows each).
TEST(Gemm, GroupedRowsEqualStreamingRows) {
  if (!kernels::matmul_paths().stream_gemv) GTEST_SKIP() << "no AVX512-BF16 streaming kernel here";
  const int64_t k = 301, max_m = 250;
  const int64_t ns[] = {130, 64, 200};
  std::vector<Operands> ops;
  for (int i = 0; i < 3; ++i) {
    ops.push_back(make(ns[i], k, max_m, 950 + 2 * uint32_t(i)));
    ASSERT_TRUE(ops.back().packed);
  }
  const std::vector<uint8_t>& ab = ops[0].ab;  // A of the group: the first operand's rows
  for (DType ct : {DType::kF32, DType::kBF16}) {
    std::vector<std::vector<uint8_t>> stream(3);
    {
      kernels::ThreadLimit one(1);
      for (int i = 0; i < 3; ++i) {
        const size_t row_bytes = size_t(ns[i]) * dtype_size(ct);
        stream[i].resize(row_bytes * max_m);
        for (int64_t r = 0; r < max_m; r += 8)
          ASSERT_TRUE(ops[i]
                          .packed
                          ->multiply(std::min<int64_t>(8, max_m - r), DType::kBF16, ab.data() + r * k * 2, ct,
                                     stream[i].data() + size_t(r) * row_bytes)
                          .ok());
      }
    }
    for (int threads : {1, 0})
      for (int64_t m : {9, 97, 250}) {
        kernels::ThreadLimit limit(threads);
        std::vector<std::vector<uint8_t>> c(3);
        std::vector<kernels::GroupedProduct> products;
        for (int i = 0; i < 3; ++i) {
          c[i].assign(size_t(m * ns[i]) * dtype_size(ct), uint8_t(0xEE));
          products.push_back({ops[i].packed.get(), c[i].data()});
        }
        ASSERT_TRUE(kernels::multiply_grouped(m, DType::kBF16, ab.data(), ct, products).ok());
        for (int i = 0; i < 3; ++i) {
          const size_t row_bytes = size_t(ns[i]) * dtype_size(ct);
          int bad = 0;
          for (int64_t r = 0; r < m; ++r)
            if (std::memcmp(c[i].data() + size_t(r) * row_bytes, stream[i].data() + size_t(r) * row_bytes, row_bytes) !=
                    0 &&
                bad++ < 3)
              ADD_FAILURE() << "product " << i << " n" << ns[i] << " c " << dtype_name(ct) << " threads " << threads
                            << " m" << m << ": row " << r << " differs from the streaming kernel's row";
        }
      }
  }
}

}  // namespace
}  // namespace hlx
