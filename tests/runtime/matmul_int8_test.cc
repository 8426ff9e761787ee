// Int8 weights (WeightFormat::kInt8) against a reference written here: the quantization spelled out
// from its definition (scale = max|w| / 127 per output column, q = round half to even of w / scale,
// with our own tie rule rather than the C library's), and the product in double precision. The only
// error left is the kernel's f32 accumulation, bounded by 1e-5 * scale * sum_k |a_k q_k|.
// The suite name starts with PackedWeight so cpu_test.cc also runs it under HLX_CPU=baseline.
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

using matmul_test::load;
using matmul_test::rand_vec;
using matmul_test::store;
using kernels::PackedWeight;
using kernels::WeightFormat;

// Round half to even without rint/nearbyint: floor, then look at the fraction.
double round_half_even(double x) {
  double f = std::floor(x), frac = x - f;
  if (frac > 0.5) return f + 1;
  if (frac < 0.5) return f;
  return std::fmod(f, 2.0) == 0 ? f : f + 1;
}

struct Quantized {
  std::vector<double> q;      // [K, N]
  std::vector<double> scale;  // [N]
};

// `w` holds the weight values as f32 (already rounded to the stored type), [K, N] or [N, K].
Quantized quantize_ref(const std::vector<float>& w, int64_t k, int64_t n, bool transposed) {
  Quantized r;
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
      r.q[size_t(kk * n + j)] = std::min(127.0, std::max(-127.0, v));
    }
  }
  return r;
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

TEST(PackedWeightInt8, MatchesQuantizedReference) {
  const int64_t ms[] = {1, 2, 3, 4, 5, 8, 9, 13, 100};
  const int64_t ks[] = {1, 7, 64, 130, 520};  // 520: several K chunks in the tiled kernel
  const int64_t ns[] = {1, 63, 64, 65, 200};
  int cases = 0;
  for (DType wt : {DType::kF32, DType::kBF16, DType::kF16})
    for (bool transposed : {true, false})
      for (int64_t k : ks)
        for (int64_t n : ns) {
          std::vector<float> w = weights(k, n, transposed, uint32_t(k * 131 + n));
          std::vector<uint8_t> wb = store(wt, w);
          const Quantized ref = quantize_ref(w, k, n, transposed);
          auto packed = PackedWeight::pack(wt, k, n, transposed, wb.data(), WeightFormat::kInt8);
          ASSERT_TRUE(packed.ok()) << packed.status().to_string();
          const int64_t nb = (n + 63) / 64;
          EXPECT_EQ((*packed)->packed_bytes(), size_t(nb * 64 * k + nb * 64 * 4));
          for (int64_t m : ms)
            for (DType at : {DType::kF32, DType::kBF16})
              for (DType ct : {DType::kF32, DType::kBF16}) {
                if ((m + k + n) % 3 != 0 && at != ct) continue;  // a subset of the mixed-type cases
                std::vector<float> a = rand_vec(m * k, uint32_t(m * 7 + k));
                std::vector<uint8_t> ab = store(at, a);
                std::vector<uint8_t> cb(size_t(m * n) * dtype_size(ct));
                ASSERT_TRUE((*packed)->multiply(m, at, ab.data(), ct, cb.data()).ok());
                ++cases;
                for (int64_t i = 0; i < m; ++i)
                  for (int64_t j = 0; j < n; ++j) {
                    double sum = 0, mag = 0;
                    for (int64_t kk = 0; kk < k; ++kk) {
                      const double p = double(a[size_t(i * k + kk)]) * ref.q[size_t(kk * n + j)];
                      sum += p;
                      mag += std::fabs(p);
                    }
                    const double s = ref.scale[size_t(j)];
                    const double want = sum * s;
                    double tol = 1e-5 * mag * s + 1e-30;
                    if (ct == DType::kBF16) tol += std::fabs(want) * (1.0 / 256);  // final bf16 rounding
                    const float got = load(ct, cb, size_t(i * n + j));
                    ASSERT_NEAR(got, want, tol) << "w " << dtype_name(wt) << " a " << dtype_name(at) << " c "
                                                << dtype_name(ct) << " m=" << m << " k=" << k << " n=" << n
                                                << " transposed=" << transposed << " at (" << i << "," << j << ")";
                  }
              }
        }
  EXPECT_GT(cases, 500);
}

// Ties round to even and the scale is applied per column: with max |w| = 127 the scale is exactly 1,
// so a one-hot activation reads back q itself.
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
  for (int64_t kk = 0; kk < k; ++kk) {
    std::vector<float> a(size_t(k), 0.f), c(size_t(n), -1.f);
    a[size_t(kk)] = 1.f;
    ASSERT_TRUE((*packed)->multiply(1, DType::kF32, a.data(), DType::kF32, c.data()).ok());
    EXPECT_EQ(c[0], want0[kk]) << "k=" << kk;
    EXPECT_EQ(c[1], want0[kk] * 0.125f) << "k=" << kk;
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
    for (int64_t rows : {1, 2, 3, 4, 5, 8, 9, 100}) {
      for (int64_t r0 : {int64_t(0), m - rows}) {
        std::vector<float> part(size_t(rows * n));
        ASSERT_TRUE((*packed)->multiply(rows, DType::kF32, a.data() + r0 * k, DType::kF32, part.data()).ok());
        EXPECT_EQ(std::memcmp(part.data(), all.data() + r0 * n, part.size() * 4), 0)
            << rows << " rows from row " << r0 << " on " << threads << " threads";
      }
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
// the quantized product, and the same weight bound as stored gives the unquantized one.
TEST(PackedWeightInt8, ProgramOptionQuantizesBoundWeights) {
  using namespace hlx::testing;
  const int64_t m = 3, k = 40, n = 24;
  IrBuilder b;
  b.fn.name = "main";
  auto x = b.arg(tt(DType::kF32, {m, k}));
  auto wv = b.arg(tt(DType::kF32, {n, k}));
  b.fn.arg_attrs[1].push_back({shlo::kWeightAttr, shlo::Attr::string("proj.weight")});
  auto& d = b.op("stablehlo.dot_general", {x, wv}, {tt(DType::kF32, {m, n})});
  d.attrs.push_back({"dot_dimension_numbers", shlo::Attr::structure("dot", {{"lhs_contracting_dimensions", ints({1})},
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
  const Quantized ref = quantize_ref(w, k, n, true);
  double max_quant_effect = 0;
  for (WeightFormat f : {WeightFormat::kInt8, WeightFormat::kAsStored}) {
    rt::ProgramOptions o;
    o.weight_format = f;
    auto p = rt::Program::compile(module, o);
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    ASSERT_TRUE((*p)->bind_weight("proj.weight", wt).ok());
    auto out = (*p)->run("main", {xt});
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double q = 0, exact = 0, mag = 0;
        for (int64_t kk = 0; kk < k; ++kk) {
          q += double(a[size_t(i * k + kk)]) * ref.q[size_t(kk * n + j)] * ref.scale[size_t(j)];
          exact += double(a[size_t(i * k + kk)]) * w[size_t(j * k + kk)];
          mag += std::fabs(a[size_t(i * k + kk)] * w[size_t(j * k + kk)]);
        }
        const float got = (*out)[0].data<float>()[i * n + j];
        EXPECT_NEAR(got, f == WeightFormat::kInt8 ? q : exact, 1e-5 * mag + 1e-30) << kernels::weight_format_name(f);
        max_quant_effect = std::max(max_quant_effect, std::fabs(q - exact));
      }
  }
  EXPECT_GT(max_quant_effect, 1e-4);  // the two formats are told apart by the tolerance above
}

}  // namespace
}  // namespace hlx
