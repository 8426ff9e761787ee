// Int8 weights (WeightFormat::kInt8) against a scalar implementation of the arithmetic contract of
// src/runtime/kernels/matmul_int8.h written here from its text: weights per output column
// (s_w = max|w| / 127, q = round half to even, our own tie rule rather than the C library's),
// activations per row to int16 (s_a = max|a| / 32767, |a| < FLT_MIN read as 0, NaN/Inf rows NaN),
// exact integer sums over chunks of 128 k-pairs, each chunk's sum rounded to f32 and added in k
// order, C = (sum * s_a) * s_w. The kernels must give these bits exactly, for every M (streaming
// and tiled kernels), thread count and operand type; a second test checks the quantized product
// against the unquantized one in double precision, so the contract itself stays a product.
// The suite name starts with PackedWeight so cpu_test.cc also runs it under HLX_CPU=baseline
// (the portable kernel).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "matmul_test_util.h"
#include "runtime/kernels/matmul.h"
#include "runtime/kernels/parallel.h"
#include "runtime/program.h"
#include "structured_test_util.h"

namespace hlx {
namespace {

using kernels::PackedWeight;
using kernels::WeightFormat;
using matmul_test::rand_vec;
using matmul_test::store;

constexpr float kFltMin = std::numeric_limits<float>::min();

// Round half to even without rint/nearbyint: floor, then look at the fraction.
double round_half_even(double x) {
  double f = std::floor(x), frac = x - f;
  if (frac > 0.5) return f + 1;
  if (frac < 0.5) return f;
  return std::fmod(f, 2.0) == 0 ? f : f + 1;
}

struct QuantW {
  std::vector<int32_t> q;    // [K, N]
  std::vector<float> scale;  // [N]
};

// `w` holds the weight values as f32 (already rounded to the stored type), [K, N] or [N, K].
QuantW quantize_w(const std::vector<float>& w, int64_t k, int64_t n, bool transposed) {
  QuantW r;
  r.q.assign(size_t(k * n), 0);
  r.scale.assign(size_t(n), 0);
  auto at = [&](int64_t kk, int64_t j) { return w[size_t(transposed ? j * k + kk : kk * n + j)]; };
  for (int64_t j = 0; j < n; ++j) {
    float maxabs = 0;
    for (int64_t kk = 0; kk < k; ++kk) maxabs = std::max(maxabs, std::fabs(at(kk, j)));
    const float s = maxabs / 127.f;  // the format's scale is an f32
    r.scale[size_t(j)] = s;
    for (int64_t kk = 0; kk < k; ++kk) {
      double v = s > 0 ? round_half_even(double(at(kk, j) / s)) : 0;
      r.q[size_t(kk * n + j)] = int32_t(std::min(127.0, std::max(-127.0, v)));
    }
  }
  return r;
}

struct QuantRow {
  std::vector<int32_t> q;  // [K]
  float scale = 0;
};

QuantRow quantize_a(const float* a, int64_t k) {
  QuantRow r;
  r.q.assign(size_t(k), 0);
  float maxabs = 0;
  bool finite = true;
  for (int64_t kk = 0; kk < k; ++kk) {
    if (!std::isfinite(a[kk])) finite = false;
    const float v = std::fabs(a[kk]) < kFltMin ? 0.f : std::fabs(a[kk]);  // read with DAZ
    maxabs = std::max(maxabs, v);
  }
  if (!finite) {
    r.scale = std::numeric_limits<float>::quiet_NaN();
    return r;
  }
  float s = maxabs / 32767.f;
  if (s < kFltMin) s = 0;  // flushed (FTZ)
  r.scale = s;
  if (s == 0) return r;
  for (int64_t kk = 0; kk < k; ++kk) {
    const float x = std::fabs(a[kk]) < kFltMin ? 0.f : a[kk];
    r.q[size_t(kk)] = int32_t(std::min(32767.0, std::max(-32767.0, round_half_even(double(x / s)))));
  }
  return r;
}

// One output of the contract: chunks of 256 k values (128 pairs), exact integer sums, f32 running sum.
float contract_dot(const QuantRow& a, const QuantW& w, int64_t k, int64_t n, int64_t j) {
  float sum = 0.f;
  for (int64_t k0 = 0; k0 < k; k0 += 256) {
    int64_t acc = 0;
    for (int64_t kk = k0; kk < std::min(k, k0 + 256); ++kk) acc += int64_t(a.q[size_t(kk)]) * w.q[size_t(kk * n + j)];
    EXPECT_LT(std::llabs(acc), int64_t(1) << 31);
    sum = sum + float(acc);
  }
  // The kernels run with flush-to-zero: a product below FLT_MIN is a zero of its sign.
  auto ftz = [](float x) { return std::fabs(x) < kFltMin ? std::copysign(0.f, x) : x; };
  return ftz(ftz(sum * a.scale) * w.scale[size_t(j)]);
}

uint16_t bf16_bits_rne(float f) {  // finite f
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t lsb = (u >> 16) & 1u;
  return uint16_t((u + 0x7fffu + lsb) >> 16);
}

// Weights with a different magnitude per column (per-channel scales matter) and a zero column.
std::vector<float> weights(int64_t k, int64_t n, bool transposed, uint32_t seed) {
  std::vector<float> w = rand_vec(k * n, seed);
  for (int64_t j = 0; j < n; ++j)
    for (int64_t kk = 0; kk < k; ++kk) {
      float& x = w[size_t(transposed ? j * k + kk : kk * n + j)];
      x *= j == 1 ? 0.f : std::ldexp(1.f, int(j % 7) - 3);
    }
  return w;
}

// Activation rows with per-row magnitudes and the special rows of the contract: row 3 zero, row 5
// a NaN, row 11 an Inf, row 7 only values below FLT_MIN (a zero row), row 2 one such value among
// normal ones, row 13 values near 5e-34 (s_a just above FLT_MIN, where reading a value below FLT_MIN
// as 0 or not changes its q_a) with one below FLT_MIN. The caller stores them as its type (f16
// cannot hold the tiny values: they become 0).
std::vector<float> activations(int64_t m, int64_t k, uint32_t seed) {
  std::vector<float> a = rand_vec(m * k, seed);
  for (int64_t r = 0; r < m; ++r)
    for (int64_t kk = 0; kk < k; ++kk) a[size_t(r * k + kk)] *= std::ldexp(1.f, int(r % 5) * 3 - 6);
  auto row = [&](int64_t r) { return a.data() + r * k; };
  if (m > 3) std::fill(row(3), row(3) + k, 0.f);
  if (m > 5) row(5)[k / 2] = std::numeric_limits<float>::quiet_NaN();
  if (m > 11) row(11)[k - 1] = -std::numeric_limits<float>::infinity();
  if (m > 7)
    for (int64_t kk = 0; kk < k; ++kk) row(7)[kk] = kFltMin * 0.25f * float(kk % 3 + 1);
  if (m > 2) row(2)[0] = kFltMin * 0.75f;
  if (m > 13) {
    for (int64_t kk = 0; kk < k; ++kk) row(13)[kk] *= 5e-34f / 8;
    row(13)[0] = 5e-34f;
    if (k > 1) row(13)[1] = kFltMin * 0.9375f;
  }
  return a;
}

// Checks C rows [0, rows) (row r = reference row r0 + r) bit for bit.
void expect_rows(const std::vector<uint8_t>& c, DType ct, const std::vector<float>& want, int64_t r0, int64_t rows,
                 int64_t n, const std::string& what) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < n; ++j) {
      const float w = want[size_t((r0 + r) * n + j)];
      if (ct == DType::kF32) {
        float got;
        std::memcpy(&got, &c[size_t(r * n + j) * 4], 4);
        if (std::isnan(w)) {
          ASSERT_TRUE(std::isnan(got)) << what << " at (" << r0 + r << "," << j << ")";
        } else {
          ASSERT_EQ(f32_bits(got), f32_bits(w)) << what << " at (" << r0 + r << "," << j << "): " << got << " vs " << w;
        }
      } else {
        uint16_t got;
        std::memcpy(&got, &c[size_t(r * n + j) * 2], 2);
        if (std::isnan(w)) {
          ASSERT_TRUE((got & 0x7fff) > 0x7f80) << what << " at (" << r0 + r << "," << j << ")";
        } else {
          ASSERT_EQ(got, bf16_bits_rne(w)) << what << " at (" << r0 + r << "," << j << ")";
        }
      }
    }
}

TEST(PackedWeightInt8, BitEqualToContract) {
  const int64_t kRows = 97;
  std::vector<int64_t> ms;
  for (int64_t m = 1; m <= 40; ++m) ms.push_back(m);
  ms.push_back(97);
  struct Shape {
    int64_t k, n;
  };
  // Odd K; K = 256/257/520/1030: one and several int32 chunks; N past a 64-column block.
  const Shape shapes[] = {{1, 65}, {7, 200}, {64, 64}, {255, 63}, {256, 1}, {257, 130}, {520, 65}, {1030, 200}};
  int compared = 0;
  for (const Shape& sh : shapes)
    for (DType wt : {DType::kF32, DType::kBF16, DType::kF16})
      for (bool transposed : {true, false}) {
        if ((wt == DType::kF16) == transposed && sh.k > 300) continue;  // a subset of the big ones
        const int64_t k = sh.k, n = sh.n;
        std::vector<float> w = weights(k, n, transposed, uint32_t(k * 131 + n));
        std::vector<uint8_t> wb = store(wt, w);
        const QuantW qw = quantize_w(w, k, n, transposed);
        auto packed = PackedWeight::pack(wt, k, n, transposed, wb.data(), WeightFormat::kInt8);
        ASSERT_TRUE(packed.ok()) << packed.status().to_string();
        const int64_t nb = (n + 63) / 64;
        EXPECT_EQ((*packed)->packed_bytes(), size_t(nb * 64 * 2 * ((k + 1) / 2) + nb * 64 * 4));
        for (DType at : {DType::kF32, DType::kBF16, DType::kF16}) {
          std::vector<float> a = activations(kRows, k, uint32_t(k + n + int(at)));
          std::vector<uint8_t> ab = store(at, a);
          std::vector<float> want(size_t(kRows * n));
          for (int64_t r = 0; r < kRows; ++r) {
            const QuantRow qa = quantize_a(a.data() + r * k, k);
            for (int64_t j = 0; j < n; ++j) want[size_t(r * n + j)] = contract_dot(qa, qw, k, n, j);
          }
          for (DType ct : {DType::kF32, DType::kBF16}) {
            if (at == DType::kF16 && ct == DType::kBF16) continue;
            for (int threads : {1, 2}) {
              kernels::ThreadLimit limit(threads);
              for (int64_t m : ms) {
                if (threads == 1 && m > 8 && m % 7 != 0) continue;  // the tiled kernel on 1 thread: a few M
                // Rows from different offsets; two for the streaming kernel's M (row 5 is the NaN row).
                std::vector<int64_t> offsets = {(m * 5) % (kRows - m + 1)};
                if (m <= 8) offsets.push_back((m * 13 + 1) % (kRows - m + 1));
                for (int64_t r0 : offsets) {
                  std::vector<uint8_t> cb(size_t(m * n) * dtype_size(ct), 0xcd);
                  const void* ar = ab.data() + size_t(r0 * k) * dtype_size(at);
                  ASSERT_TRUE((*packed)->multiply(m, at, ar, ct, cb.data()).ok());
                  const std::string what = "w " + std::string(dtype_name(wt)) + (transposed ? "^T" : "") + " a " +
                                           std::string(dtype_name(at)) + " c " + std::string(dtype_name(ct)) +
                                           " k=" + std::to_string(k) + " n=" + std::to_string(n) +
                                           " m=" + std::to_string(m) + " threads=" + std::to_string(threads);
                  expect_rows(cb, ct, want, r0, m, n, what);
                  if (::testing::Test::HasFatalFailure()) return;
                  ++compared;
                }
              }
            }
          }
        }
      }
  EXPECT_GT(compared, 2000);
}

// Large sums: every weight and activation at full scale, so a chunk's int32 sum is near its bound
// (128 * 2 * 127 * 32767 = 1.07e9, not exact in f32) and the f32 roundings of the contract show.
TEST(PackedWeightInt8, FullScaleChunksRoundAsSpecified) {
  const int64_t k = 1023, n = 70;
  std::vector<float> w(size_t(k * n));
  for (int64_t i = 0; i < k * n; ++i) w[size_t(i)] = (i % 3 == 0 ? -1.f : 1.f) * (i % 11 == 0 ? 0.5f : 1.f);
  const QuantW qw = quantize_w(w, k, n, true);
  auto packed = PackedWeight::pack(DType::kF32, k, n, true, w.data(), WeightFormat::kInt8);
  ASSERT_TRUE(packed.ok());
  for (int64_t m : {1, 8, 13}) {
    std::vector<float> a(size_t(m * k));
    for (int64_t i = 0; i < m * k; ++i) a[size_t(i)] = (i % 5 == 0 ? -3.f : 3.f) + float(i % 4) * 0.001f;
    std::vector<float> want(size_t(m * n));
    for (int64_t r = 0; r < m; ++r) {
      const QuantRow qa = quantize_a(a.data() + r * k, k);
      for (int64_t j = 0; j < n; ++j) want[size_t(r * n + j)] = contract_dot(qa, qw, k, n, j);
    }
    std::vector<uint8_t> cb(size_t(m * n) * 4);
    ASSERT_TRUE((*packed)->multiply(m, DType::kF32, a.data(), DType::kF32, cb.data()).ok());
    expect_rows(cb, DType::kF32, want, 0, m, n, "full scale m=" + std::to_string(m));
  }
}

// The contract is still the product: within the quantization errors of both operands of the
// double-precision product of the unquantized values (the contract's reference above could share
// a mistake with the kernels; this one cannot).
TEST(PackedWeightInt8, CloseToUnquantizedProduct) {
  const int64_t k = 300, n = 90;
  for (int64_t m : {1, 5, 20}) {
    std::vector<float> w = weights(k, n, true, 9);
    auto packed = PackedWeight::pack(DType::kF32, k, n, true, w.data(), WeightFormat::kInt8);
    ASSERT_TRUE(packed.ok());
    std::vector<float> a = rand_vec(m * k, 10), c(size_t(m * n));
    ASSERT_TRUE((*packed)->multiply(m, DType::kF32, a.data(), DType::kF32, c.data()).ok());
    for (int64_t r = 0; r < m; ++r) {
      double amax = 0;
      for (int64_t kk = 0; kk < k; ++kk) amax = std::max(amax, double(std::fabs(a[size_t(r * k + kk)])));
      for (int64_t j = 0; j < n; ++j) {
        double exact = 0, wabs = 0, aw = 0, wmax = 0;
        for (int64_t kk = 0; kk < k; ++kk) {
          const double wv = w[size_t(j * k + kk)], av = a[size_t(r * k + kk)];
          exact += av * wv;
          wabs += std::fabs(wv);
          aw += std::fabs(av);
          wmax = std::max(wmax, std::fabs(wv));
        }
        // |a| error <= amax / 65534 per element, |w| error <= wmax / 254 per element.
        const double tol = amax / 65534 * wabs * 1.01 + wmax / 254 * aw * 1.01 + 1e-6 * std::fabs(exact);
        ASSERT_NEAR(c[size_t(r * n + j)], exact, tol) << "m=" << m << " at (" << r << "," << j << ")";
      }
    }
  }
}

// Ties round to even and the scale is applied per column: with max |w| = 127 the scale is exactly 1;
// a one-hot activation (q_a = 32767) reads back q through the contract's final products.
TEST(PackedWeightInt8, RoundsHalfToEvenPerColumn) {
  const int64_t k = 6, n = 2;
  // [K, N]: column 0 has max 127 (scale 1); column 1 is column 0 times 2^-3 (scale 2^-3).
  const float col0[k] = {127.f, 2.5f, 3.5f, -2.5f, -0.5f, 126.5f};
  std::vector<float> w(size_t(k * n));
  for (int64_t kk = 0; kk < k; ++kk) {
    w[size_t(kk * n)] = col0[kk];
    w[size_t(kk * n + 1)] = col0[kk] * 0.125f;
  }
  auto packed = PackedWeight::pack(DType::kF32, k, n, false, w.data(), WeightFormat::kInt8);
  ASSERT_TRUE(packed.ok()) << packed.status().to_string();
  const float want0[k] = {127.f, 2.f, 4.f, -2.f, -0.f, 126.f};
  const float sa = 1.f / 32767.f;
  for (int64_t kk = 0; kk < k; ++kk) {
    std::vector<float> a(size_t(k), 0.f), c(size_t(n), -1.f);
    a[size_t(kk)] = 1.f;
    ASSERT_TRUE((*packed)->multiply(1, DType::kF32, a.data(), DType::kF32, c.data()).ok());
    const float sum = float(want0[kk] * 32767.f);
    EXPECT_EQ(c[0], (sum * sa) * 1.f) << "k=" << kk;
    EXPECT_EQ(c[1], (sum * sa) * 0.125f) << "k=" << kk;
    EXPECT_NEAR(c[0], want0[kk], 1e-4) << "k=" << kk;
  }
}

// A row's bits do not depend on M (streaming vs tiled kernel), on the other rows or on threads.
TEST(PackedWeightInt8, RowsAreIndependentOfBatchAndThreads) {
  const int64_t k = 300, n = 200, m = 131;
  std::vector<float> w = weights(k, n, true, 5);
  std::vector<uint8_t> wb = store(DType::kBF16, w);
  auto packed = PackedWeight::pack(DType::kBF16, k, n, true, wb.data(), WeightFormat::kInt8);
  ASSERT_TRUE(packed.ok());
  std::vector<float> a = rand_vec(m * k, 11);
  std::vector<float> all(size_t(m * n));
  ASSERT_TRUE((*packed)->multiply(m, DType::kF32, a.data(), DType::kF32, all.data()).ok());
  for (int threads : {1, 2}) {
    kernels::ThreadLimit limit(threads);
    for (int64_t rows : {1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 100}) {
      for (int64_t r0 : {int64_t(0), int64_t(1), m - rows}) {
        std::vector<float> part(size_t(rows * n));
        ASSERT_TRUE((*packed)->multiply(rows, DType::kF32, a.data() + r0 * k, DType::kF32, part.data()).ok());
        EXPECT_EQ(std::memcmp(part.data(), all.data() + r0 * n, part.size() * 4), 0)
            << rows << " rows from row " << r0 << " on " << threads << " threads";
      }
    }
  }
}

// Sibling products (q/k/v, gate/up) in one grouped call: A quantized once, one pool job, and every
// output with the bits of its own multiply(); the streaming and the tiled kernels.
TEST(PackedWeightInt8, GroupedProductsEqualSeparateOnes) {
  const int64_t k = 257;
  const int64_t ns[] = {200, 64, 130};
  std::vector<std::unique_ptr<PackedWeight>> ws;
  for (int64_t n : ns) {
    std::vector<float> w = weights(k, n, true, uint32_t(n));
    auto p = PackedWeight::pack(DType::kF32, k, n, true, w.data(), WeightFormat::kInt8);
    ASSERT_TRUE(p.ok());
    ws.push_back(std::move(p).value());
  }
  for (int threads : {1, 2}) {
    kernels::ThreadLimit limit(threads);
    for (int64_t m : {1, 2, 3, 7, 8, 9, 40}) {
      std::vector<float> a = rand_vec(m * k, uint32_t(m));
      std::vector<std::vector<bf16>> grouped, alone;
      std::vector<kernels::GroupedProduct> products;
      for (size_t i = 0; i < ws.size(); ++i) {
        grouped.emplace_back(size_t(m * ns[i]), bf16{0x7fc0});
        alone.emplace_back(size_t(m * ns[i]));
        products.push_back({ws[i].get(), grouped.back().data()});
        ASSERT_TRUE(ws[i]->multiply(m, DType::kF32, a.data(), DType::kBF16, alone.back().data()).ok());
      }
      ASSERT_TRUE(kernels::multiply_grouped(m, DType::kF32, a.data(), DType::kBF16, products).ok());
      for (size_t i = 0; i < ws.size(); ++i)
        EXPECT_EQ(std::memcmp(grouped[i].data(), alone[i].data(), grouped[i].size() * 2), 0)
            << "product " << i << " m=" << m << " threads=" << threads;
    }
  }
}

TEST(PackedWeightInt8, BadInputsAreTypedErrors) {
  std::vector<float> w(64, 0.5f);
  EXPECT_EQ(PackedWeight::pack(DType::kI8, 8, 8, false, w.data(), WeightFormat::kInt8).status().kind(),
            ErrorKind::kUnsupported);
  EXPECT_EQ(PackedWeight::pack(DType::kF32, 0, 8, false, w.data(), WeightFormat::kInt8).status().kind(),
            ErrorKind::kInvalidArgument);
  EXPECT_EQ(PackedWeight::pack(DType::kF32, 8, -1, false, w.data(), WeightFormat::kInt8).status().kind(),
            ErrorKind::kInvalidArgument);
  EXPECT_EQ(PackedWeight::pack(DType::kF32, 8, 8, false, w.data(), WeightFormat(7)).status().kind(),
            ErrorKind::kInvalidArgument);
  w[13] = std::numeric_limits<float>::quiet_NaN();
  auto nan = PackedWeight::pack(DType::kF32, 8, 8, false, w.data(), WeightFormat::kInt8);
  ASSERT_EQ(nan.status().kind(), ErrorKind::kInvalidArgument);
  EXPECT_NE(nan.status().message().find("column 5"), std::string::npos) << nan.status().message();
  w[13] = 0.5f;
  auto ok = PackedWeight::pack(DType::kF32, 8, 8, false, w.data(), WeightFormat::kInt8);
  ASSERT_TRUE(ok.ok());
  std::vector<float> a(16, 1.f), c(16, 0.f);
  EXPECT_EQ((*ok)->multiply(-1, DType::kF32, a.data(), DType::kF32, c.data()).kind(), ErrorKind::kInvalidArgument);
  EXPECT_EQ((*ok)->multiply(1, DType::kI32, a.data(), DType::kF32, c.data()).kind(), ErrorKind::kUnsupported);
  EXPECT_EQ((*ok)->multiply(1, DType::kF32, a.data(), DType::kF16, c.data()).kind(), ErrorKind::kUnsupported);
  EXPECT_TRUE((*ok)->multiply(0, DType::kF32, a.data(), DType::kF32, c.data()).ok());
}

// ProgramOptions::weight_format reaches the dot_general of a bound weight: the program's result is
// the contract's product, and the same weight bound as stored gives the unquantized one.
TEST(PackedWeightInt8, ProgramOptionQuantizesBoundWeights) {
  using namespace hlx::testing;
  const int64_t m = 3, k = 40, n = 24;
  IrBuilder b;
  b.fn.name = "main";
  auto x = b.arg(tt(DType::kF32, {m, k}));
  auto wv = b.arg(tt(DType::kF32, {n, k}));
  b.fn.arg_attrs[1].push_back({shlo::kWeightAttr, shlo::Attr::string("proj.weight")});
  auto& d = b.op("stablehlo.dot_general", {x, wv}, {tt(DType::kF32, {m, n})});
  d.attrs.push_back(
      {"dot_dimension_numbers", shlo::Attr::structure("dot", {{"lhs_contracting_dimensions", ints({1})},
                                                              {"rhs_contracting_dimensions", ints({1})}})});
  for (auto v : {d.results[0]}) b.fn.result_types.push_back(b.fn.type_of(v));
  b.fn.result_attrs.resize(1);
  b.op("func.return", {d.results[0]}, {});
  auto module = std::make_shared<shlo::Module>();
  module->functions = {b.fn};
  std::vector<float> w = weights(k, n, true, 3);
  Tensor wt = Tensor::zeros(DType::kF32, {n, k});
  std::memcpy(wt.raw(), w.data(), w.size() * 4);
  std::vector<float> a = rand_vec(m * k, 4);
  Tensor xt = Tensor::zeros(DType::kF32, {m, k});
  std::memcpy(xt.raw(), a.data(), a.size() * 4);
  const QuantW qw = quantize_w(w, k, n, true);
  double max_quant_effect = 0;
  for (WeightFormat f : {WeightFormat::kInt8, WeightFormat::kAsStored}) {
    rt::ProgramOptions o;
    o.weight_format = f;
    auto p = rt::Program::compile(module, o);
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    ASSERT_TRUE((*p)->bind_weight("proj.weight", wt).ok());
    auto out = (*p)->run("main", {xt});
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    for (int64_t i = 0; i < m; ++i) {
      const QuantRow qa = quantize_a(a.data() + i * k, k);
      for (int64_t j = 0; j < n; ++j) {
        double exact = 0, mag = 0;
        for (int64_t kk = 0; kk < k; ++kk) {
          exact += double(a[size_t(i * k + kk)]) * w[size_t(j * k + kk)];
          mag += std::fabs(a[size_t(i * k + kk)] * w[size_t(j * k + kk)]);
        }
        const float q = contract_dot(qa, qw, k, n, j);
        const float got = (*out)[0].data<float>()[i * n + j];
        if (f == WeightFormat::kInt8)
          EXPECT_EQ(got, q) << "(" << i << "," << j << ")";
        else
          EXPECT_NEAR(got, exact, 1e-5 * mag + 1e-30);
        max_quant_effect = std::max(max_quant_effect, std::fabs(q - exact));
      }
    }
  }
  EXPECT_GT(max_quant_effect, 1e-4);  // the two formats are told apart by the tolerance above
}

}  // namespace
}  // namespace hlx
