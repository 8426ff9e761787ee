// Matmul kernels against a plain double-precision loop written here, plus the native
// stablehlo.dot_general factory. bf16 cases compare against the reference computed from the same
// bf16-rounded inputs, so the only error is the kernel's f32 accumulation (and the final bf16
// rounding for bf16 results). Bound used: |err| <= 1e-5 * sum_k |a_k b_k| (f32 accumulation of
// K <= ~2000 terms has a worst case of K * 2^-24 * sum|ab|, typical error far smaller).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
#include <random>
#include <vector>

#include "matmul_test_util.h"
#include "runtime/kernels/cpu.h"
#include "runtime/kernels/matmul.h"
#include "runtime/kernels/parallel.h"
#include "runtime/op_kernel.h"

namespace hlx {
namespace {

using kernels::MatmulDesc;
using kernels::PackedWeight;
using matmul_test::load;
using matmul_test::rand_vec;
using matmul_test::store;

// Reference: C[b,m,n] = sum_k A[b,m,k] * B[b,k,n] (B given as [N,K] when bt), in double.
// Returns (value, sum |a b|) pairs.
void reference(int64_t batch, int64_t m, int64_t n, int64_t k, bool bt, const std::vector<float>& a,
               const std::vector<float>& b, std::vector<double>& c, std::vector<double>& mag) {
  c.assign(size_t(batch * m * n), 0.0);
  mag.assign(c.size(), 0.0);
  for (int64_t bb = 0; bb < batch; ++bb)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0, g = 0;
        for (int64_t kk = 0; kk < k; ++kk) {
          double x = a[size_t((bb * m + i) * k + kk)];
          double y = bt ? b[size_t((bb * n + j) * k + kk)] : b[size_t((bb * k + kk) * n + j)];
          s += x * y;
          g += std::fabs(x * y);
        }
        c[size_t((bb * m + i) * n + j)] = s;
        mag[size_t((bb * m + i) * n + j)] = g;
      }
}

void expect_close(DType c_type, const std::vector<uint8_t>& got, const std::vector<double>& want,
                  const std::vector<double>& mag, const std::string& what) {
  int bad = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    double tol = 1e-5 * mag[i] + 1e-6 + (c_type == DType::kBF16 ? std::ldexp(std::fabs(want[i]), -8) : 0.0);
    double g = load(c_type, got, i);
    if (!(std::fabs(g - want[i]) <= tol) && bad++ < 5)
      ADD_FAILURE() << what << " element " << i << ": got " << g << " want " << want[i] << " tol " << tol;
  }
}

struct Case {
  int64_t batch, m, n, k;
  bool bt;
};

TEST(Matmul, GeneralAllTypesAndOddShapes) {
  const Case cases[] = {{1, 1, 5, 7, false},  {1, 3, 33, 40, true}, {2, 17, 19, 67, false},
                        {3, 4, 64, 32, true}, {1, 17, 1, 1, true},  {2, 1, 130, 257, true}};
  const DType in_types[] = {DType::kF32, DType::kBF16, DType::kF16};
  uint32_t seed = 1;
  for (const Case& cs : cases)
    for (DType at : in_types)
      for (DType bt : in_types)
        for (DType ct : {DType::kF32, DType::kBF16}) {
          auto a = rand_vec(cs.batch * cs.m * cs.k, seed++);
          auto b = rand_vec(cs.batch * cs.k * cs.n, seed++);
          auto ab = store(at, a);
          auto bb = store(bt, b);
          // f16 operands meet a bf16 one as bf16 (both 16-bit -> bf16 compute): round like the kernel.
          bool bf16_compute = at != DType::kF32 && bt != DType::kF32 && kernels::bf16_matmul_available();
          if (bf16_compute) {
            for (auto& x : a) x = bf16_to_f32(f32_to_bf16(x));
            for (auto& x : b) x = bf16_to_f32(f32_to_bf16(x));
          }
          std::vector<uint8_t> c(static_cast<size_t>(cs.batch * cs.m * cs.n) * dtype_size(ct));
          MatmulDesc d{cs.batch, cs.m, cs.n, cs.k, at, bt, ct, cs.bt};
          Status s = kernels::matmul(d, ab.data(), bb.data(), c.data());
          ASSERT_TRUE(s.ok()) << s.to_string();
          std::vector<double> want, mag;
          reference(cs.batch, cs.m, cs.n, cs.k, cs.bt, a, b, want, mag);
          expect_close(ct, c, want, mag,
                       str_cat("b", cs.batch, " m", cs.m, " n", cs.n, " k", cs.k, " bt", cs.bt, " ", dtype_name(at),
                               "x", dtype_name(bt), "->", dtype_name(ct)));
        }
}

TEST(Matmul, RejectsBadTypesAndDims) {
  float x = 0;
  MatmulDesc d{1, 1, 1, 1, DType::kI32, DType::kF32, DType::kF32, false};
  EXPECT_EQ(kernels::matmul(d, &x, &x, &x).kind(), ErrorKind::kUnsupported);
  d = {1, 1, 1, 1, DType::kF32, DType::kF32, DType::kF16, false};
  EXPECT_EQ(kernels::matmul(d, &x, &x, &x).kind(), ErrorKind::kUnsupported);
  d = {1, -1, 1, 1, DType::kF32, DType::kF32, DType::kF32, false};
  EXPECT_EQ(kernels::matmul(d, &x, &x, &x).kind(), ErrorKind::kInvalidArgument);
  EXPECT_EQ(PackedWeight::pack(DType::kI8, 1, 1, false, &x).status().kind(), ErrorKind::kUnsupported);
  EXPECT_EQ(PackedWeight::pack(DType::kF32, 0, 4, false, &x).status().kind(), ErrorKind::kInvalidArgument);
}

TEST(Matmul, ZeroK) {
  std::vector<float> c(6, 5.f);
  MatmulDesc d{1, 2, 3, 0, DType::kF32, DType::kF32, DType::kF32, false};
  ASSERT_TRUE(kernels::matmul(d, nullptr, nullptr, c.data()).ok());
  for (float v : c) EXPECT_EQ(v, 0.f);
}

// Packed weights: M <= 4 takes the AVX-512 streaming kernel where available, larger M oneDNN.
TEST(PackedWeight, AllPathsMatchReference) {
  const int64_t ms[] = {1, 2, 3, 4, 5, 17, 128};
  const int64_t nks[][2] = {{33, 7}, {100, 40}, {129, 67}, {64, 32}, {200, 1}};
  uint32_t seed = 100;
  for (DType wt : {DType::kBF16, DType::kF32, DType::kF16})
    for (bool bt : {true, false})
      for (auto nk : nks) {
        const int64_t n = nk[0], k = nk[1];
        auto w = rand_vec(k * n, seed++);
        auto wb = store(wt, w);
        auto packed = PackedWeight::pack(wt, k, n, bt, wb.data());
        ASSERT_TRUE(packed.ok()) << packed.status().to_string();
        EXPECT_EQ((*packed)->k(), k);
        EXPECT_EQ((*packed)->n(), n);
        // f16 weights are packed as bf16 (documented in matmul.cc).
        const bool bf16_compute = wt != DType::kF32 && kernels::bf16_matmul_available();
        if (bf16_compute)
          for (auto& x : w) x = bf16_to_f32(f32_to_bf16(x));
        for (int64_t m : ms)
          for (DType at : {DType::kF32, DType::kBF16})
            for (DType ct : {DType::kF32, DType::kBF16}) {
              auto a = rand_vec(m * k, seed++);
              auto ab = store(at, a);
              if (bf16_compute)
                for (auto& x : a) x = bf16_to_f32(f32_to_bf16(x));
              std::vector<uint8_t> c(static_cast<size_t>(m * n) * dtype_size(ct));
              Status s = (*packed)->multiply(m, at, ab.data(), ct, c.data());
              ASSERT_TRUE(s.ok()) << s.to_string();
              std::vector<double> want, mag;
              reference(1, m, n, k, bt, a, w, want, mag);
              expect_close(ct, c, want, mag,
                           str_cat("packed ", dtype_name(wt), " bt", bt, " m", m, " n", n, " k", k, " a ",
                                   dtype_name(at), " c ", dtype_name(ct)));
            }
      }
}

// The spans a packer reports as read (so a mapped checkpoint's pages can go as packing proceeds)
// must be inside the source, never overlap, and with the block packer cover all of it.
std::mutex g_spans_mu;
std::vector<std::pair<uintptr_t, size_t>> g_spans;
void record_span(const void* p, size_t bytes) {
  std::lock_guard<std::mutex> lock(g_spans_mu);
  g_spans.push_back({uintptr_t(p), bytes});
}

TEST(PackedWeight, ReportsEachSourceSpanOnceRead) {
  const int64_t n = 1000, k = 256;  // 16 blocks of 64 rows, the last one partial
  auto w = rand_vec(k * n, 7);
  auto wb = store(DType::kBF16, w);
  auto a = rand_vec(3 * k, 8);
  for (auto format : {kernels::WeightFormat::kAsStored, kernels::WeightFormat::kInt8, kernels::WeightFormat::kInt4}) {
    const std::string what = str_cat("format ", int(format));
    g_spans.clear();
    auto packed = PackedWeight::pack(DType::kBF16, k, n, /*transposed=*/true, wb.data(), format,
                                     kernels::ProductOrder::kRowInvariant, record_span);
    ASSERT_TRUE(packed.ok()) << packed.status().to_string();
    if (g_spans.empty()) {  // as stored, only the block packer reports (the oneDNN reorder reads all at once)
      EXPECT_TRUE(format == kernels::WeightFormat::kAsStored && !kernels::cpu_features().avx512bf16) << what;
      continue;
    }
    std::sort(g_spans.begin(), g_spans.end());
    uintptr_t at = uintptr_t(wb.data());
    for (auto [p, bytes] : g_spans) {
      EXPECT_EQ(p, at) << what << ": gap or overlap";
      at = p + bytes;
    }
    EXPECT_EQ(at, uintptr_t(wb.data()) + wb.size()) << what;
    // Reporting a span does not change what was packed.
    auto plain = PackedWeight::pack(DType::kBF16, k, n, true, wb.data(), format);
    ASSERT_TRUE(plain.ok());
    std::vector<float> c1(size_t(3 * n)), c2(size_t(3 * n));
    ASSERT_TRUE((*packed)->multiply(3, DType::kF32, a.data(), DType::kF32, c1.data()).ok());
    ASSERT_TRUE((*plain)->multiply(3, DType::kF32, a.data(), DType::kF32, c2.data()).ok());
    EXPECT_EQ(std::memcmp(c1.data(), c2.data(), c1.size() * sizeof(float)), 0) << what;
  }
}

// A tied embedding is gathered from its lm_head's packed copy (rt::exact_packed_copy): the copy's
// rows must be the source's bits. Odd K and a partial last block of 64 rows.
TEST(PackedWeight, CopyRowGivesTheSourceBits) {
  const int64_t n = 1000, k = 97;
  auto w = rand_vec(k * n, 11);
  auto wb = store(DType::kBF16, w);
  auto packed = PackedWeight::pack(DType::kBF16, k, n, /*transposed=*/true, wb.data());
  ASSERT_TRUE(packed.ok()) << packed.status().to_string();
  if (!(*packed)->exact_rows()) {  // only the BA16a64b2a layout of a bf16 matmul keeps rows
    EXPECT_FALSE(kernels::cpu_features().avx512bf16 && kernels::bf16_matmul_available());
    return;
  }
  std::vector<uint16_t> row(static_cast<size_t>(k), 0);
  for (int64_t r : {int64_t(0), int64_t(1), int64_t(63), int64_t(64), int64_t(517), n - 1}) {
    (*packed)->copy_row(r, row.data());
    EXPECT_EQ(std::memcmp(row.data(), wb.data() + size_t(r * k) * 2, size_t(k) * 2), 0) << "row " << r;
  }
  // Not exact: int8, a non-transposed source, f32.
  EXPECT_FALSE((*PackedWeight::pack(DType::kBF16, k, n, true, wb.data(), kernels::WeightFormat::kInt8))->exact_rows());
  EXPECT_FALSE((*PackedWeight::pack(DType::kBF16, n, k, false, wb.data()))->exact_rows());
  auto wf = store(DType::kF32, w);
  EXPECT_FALSE((*PackedWeight::pack(DType::kF32, k, n, true, wf.data()))->exact_rows());
}

TEST(PackedWeight, ConcurrentMultiplyIsThreadSafe) {
  const int64_t n = 96, k = 80;
  auto w = rand_vec(k * n, 9);
  auto wb = store(DType::kBF16, w);
  auto packed = PackedWeight::pack(DType::kBF16, k, n, true, wb.data());
  ASSERT_TRUE(packed.ok());
  std::vector<int> failures(8, 0);
#pragma omp parallel for num_threads(4)
  for (int t = 0; t < 8; ++t) {
    const int64_t m = 1 + t * 3;
    auto a = rand_vec(m * k, 50 + t);
    auto ab = store(DType::kBF16, a);
    std::vector<uint8_t> c(size_t(m * n) * 4);
    if (!(*packed)->multiply(m, DType::kBF16, ab.data(), DType::kF32, c.data()).ok()) failures[t] = 1;
    std::vector<double> want, mag;
    reference(1, m, n, k, true, a, w, want, mag);
    for (size_t i = 0; i < want.size(); ++i)
      if (!(std::fabs(load(DType::kF32, c, i) - want[i]) <= 1e-5 * mag[i] + 1e-6)) failures[t] = 1;
  }
  for (int f : failures) EXPECT_EQ(f, 0);
}

// The streaming kernel (M <= 8) for every row count, with K long enough for several of its
// L1-sized K chunks (odd K: the last k paired with a zero), N not a multiple of 64.
TEST(PackedWeight, StreamRowsMatchReference) {
  const int64_t nks[][2] = {{130, 301}, {64, 300}, {70, 1024}};
  uint32_t seed = 300;
  for (auto nk : nks) {
    const int64_t n = nk[0], k = nk[1];
    auto w = rand_vec(k * n, seed++);
    auto wb = store(DType::kBF16, w);
    auto packed = PackedWeight::pack(DType::kBF16, k, n, /*transposed=*/true, wb.data());
    ASSERT_TRUE(packed.ok()) << packed.status().to_string();
    for (int64_t m = 1; m <= 8; ++m)
      for (DType ct : {DType::kF32, DType::kBF16}) {
        auto a = rand_vec(m * k, seed++);
        auto ab = store(DType::kBF16, a);
        std::vector<uint8_t> c(static_cast<size_t>(m * n) * dtype_size(ct));
        ASSERT_TRUE((*packed)->multiply(m, DType::kBF16, ab.data(), ct, c.data()).ok());
        std::vector<double> want, mag;
        reference(1, m, n, k, true, a, w, want, mag);
        expect_close(ct, c, want, mag, str_cat("stream m", m, " n", n, " k", k, " c ", dtype_name(ct)));
      }
  }
}

// A row's result must not depend on the rows batched with it nor on the thread count (the batch
// engine compares a request run alone with the same request batched, bit for bit): row i of an
// M-row product equals the same row computed alone, for M = 1..8, on 1 and on all threads.
TEST(PackedWeight, RowBitsIndependentOfBatchAndThreads) {
  if (!kernels::matmul_paths().stream_gemv) GTEST_SKIP() << "no AVX512-BF16 streaming kernel here";
  const int64_t nks[][2] = {{130, 301}, {200, 1024}, {64, 2}};
  uint32_t seed = 400;
  for (auto nk : nks) {
    const int64_t n = nk[0], k = nk[1];
    auto w = rand_vec(k * n, seed++);
    auto wb = store(DType::kBF16, w);
    auto packed = PackedWeight::pack(DType::kBF16, k, n, /*transposed=*/true, wb.data());
    ASSERT_TRUE(packed.ok()) << packed.status().to_string();
    auto a = rand_vec(8 * k, seed++);
    auto ab = store(DType::kBF16, a);
    for (DType ct : {DType::kF32, DType::kBF16}) {
      const size_t row_bytes = size_t(n) * dtype_size(ct);
      std::vector<std::vector<uint8_t>> alone(8, std::vector<uint8_t>(row_bytes));
      {
        kernels::ThreadLimit one(1);
        for (int64_t i = 0; i < 8; ++i)
          ASSERT_TRUE((*packed)->multiply(1, DType::kBF16, ab.data() + i * k * 2, ct, alone[size_t(i)].data()).ok());
      }
      for (int threads : {1, 0})
        for (int64_t m = 1; m <= 8; ++m)
          for (int64_t first = 0; first + m <= 8; first += std::max<int64_t>(1, 8 - m)) {
            kernels::ThreadLimit limit(threads);
            std::vector<uint8_t> c(row_bytes * size_t(m));
            ASSERT_TRUE((*packed)->multiply(m, DType::kBF16, ab.data() + first * k * 2, ct, c.data()).ok());
            for (int64_t i = 0; i < m; ++i)
              EXPECT_EQ(0, std::memcmp(c.data() + size_t(i) * row_bytes, alone[size_t(first + i)].data(), row_bytes))
                  << "n" << n << " k" << k << " c " << dtype_name(ct) << " threads " << threads << " m" << m << ": row "
                  << first + i << " differs from the row alone";
          }
    }
  }
}

// ---- native stablehlo.dot_general ----

shlo::Op dot_op(shlo::Function& fn, shlo::TensorType lhs, shlo::TensorType rhs, shlo::TensorType out,
                std::vector<int64_t> lb, std::vector<int64_t> rb, std::vector<int64_t> lc, std::vector<int64_t> rc) {
  shlo::Op op;
  op.name = "stablehlo.dot_general";
  op.operands = {fn.new_value(lhs), fn.new_value(rhs)};
  op.results = {fn.new_value(out)};
  shlo::AttrDict f;
  f.push_back({"lhs_batching_dimensions", shlo::Attr::i64_array(lb)});
  f.push_back({"rhs_batching_dimensions", shlo::Attr::i64_array(rb)});
  f.push_back({"lhs_contracting_dimensions", shlo::Attr::i64_array(lc)});
  f.push_back({"rhs_contracting_dimensions", shlo::Attr::i64_array(rc)});
  op.attrs.push_back({"dot_dimension_numbers", shlo::Attr::structure("dot", f)});
  return op;
}

Tensor tensor_from(DType t, Shape shape, std::vector<float>& v) {
  Tensor out = Tensor::empty(t, shape);
  auto bytes = store(t, v);
  std::memcpy(out.raw(), bytes.data(), bytes.size());
  return out;
}

TEST(NativeDotGeneral, WeightTimesActivationsPackedAndUnpacked) {
  rt::KernelRegistry reg;
  rt::register_native_kernels(reg);
  const int64_t k = 45, n = 70;
  for (bool bt : {true, false}) {
    shlo::Function fn;
    Shape wshape = bt ? Shape{n, k} : Shape{k, n};
    shlo::Op op = dot_op(fn, {DType::kBF16, {2, 3, k}}, {DType::kBF16, wshape}, {DType::kF32, {2, 3, n}}, {}, {}, {2},
                         {bt ? 1 : 0});
    auto kernel = reg.compile("stablehlo.dot_general", op, fn);
    ASSERT_TRUE(kernel.ok()) << kernel.status().to_string();
    auto a = rand_vec(6 * k, 3), w = rand_vec(k * n, 4);
    Tensor at = tensor_from(DType::kBF16, {2, 3, k}, a), wt = tensor_from(DType::kBF16, wshape, w);
    std::vector<double> want, mag;
    reference(1, 6, n, k, bt, a, w, want, mag);
    for (bool pack : {false, true}) {
      if (pack) {
        ASSERT_TRUE((*kernel)->set_constant_input(1, wt).ok());
      }
      Tensor out = Tensor::zeros(DType::kF32, {2, 3, n});
      ASSERT_TRUE((*kernel)->run({&at, &wt}, {&out}).ok());
      std::vector<uint8_t> c(out.nbytes());
      std::memcpy(c.data(), out.raw(), c.size());
      expect_close(DType::kF32, c, want, mag, str_cat("dot bt", bt, " packed", pack));
    }
  }
}

TEST(NativeDotGeneral, BatchedAttentionStyle) {
  rt::KernelRegistry reg;
  rt::register_native_kernels(reg);
  // [B, H, M, K] x [B, H, N, K] -> [B, H, M, N]
  shlo::Function fn;
  shlo::Op op = dot_op(fn, {DType::kF32, {2, 3, 5, 16}}, {DType::kF32, {2, 3, 7, 16}}, {DType::kF32, {2, 3, 5, 7}},
                       {0, 1}, {0, 1}, {3}, {3});
  auto kernel = reg.compile("stablehlo.dot_general", op, fn);
  ASSERT_TRUE(kernel.ok()) << kernel.status().to_string();
  auto a = rand_vec(2 * 3 * 5 * 16, 5), b = rand_vec(2 * 3 * 7 * 16, 6);
  Tensor at = tensor_from(DType::kF32, {2, 3, 5, 16}, a), bt = tensor_from(DType::kF32, {2, 3, 7, 16}, b);
  Tensor out = Tensor::zeros(DType::kF32, {2, 3, 5, 7});
  ASSERT_TRUE((*kernel)->run({&at, &bt}, {&out}).ok());
  std::vector<double> want, mag;
  reference(6, 5, 7, 16, true, a, b, want, mag);
  std::vector<uint8_t> c(out.nbytes());
  std::memcpy(c.data(), out.raw(), c.size());
  expect_close(DType::kF32, c, want, mag, "batched dot");
}

TEST(NativeDotGeneral, DeclinesWhatNeedsATranspose) {
  rt::KernelRegistry reg;
  rt::register_native_kernels(reg);
  shlo::Function fn;
  // lhs contracting dim 0 ([K, M] lhs) would need a transposing copy.
  shlo::Op op = dot_op(fn, {DType::kF32, {8, 4}}, {DType::kF32, {8, 6}}, {DType::kF32, {4, 6}}, {}, {}, {0}, {0});
  EXPECT_EQ(reg.compile("stablehlo.dot_general", op, fn).status().kind(), ErrorKind::kUnsupported);
  // Batch dims not leading.
  shlo::Function fn2;
  shlo::Op op2 =
      dot_op(fn2, {DType::kF32, {4, 2, 8}}, {DType::kF32, {2, 8, 6}}, {DType::kF32, {2, 4, 6}}, {1}, {0}, {2}, {1});
  EXPECT_EQ(reg.compile("stablehlo.dot_general", op2, fn2).status().kind(), ErrorKind::kUnsupported);
  // Integer operands.
  shlo::Function fn3;
  shlo::Op op3 = dot_op(fn3, {DType::kI32, {4, 8}}, {DType::kI32, {8, 6}}, {DType::kI32, {4, 6}}, {}, {}, {1}, {0});
  EXPECT_EQ(reg.compile("stablehlo.dot_general", op3, fn3).status().kind(), ErrorKind::kUnsupported);
}

}  // namespace
}  // namespace hlx
