// Group-wise 4-bit weights (matmul_int4.h) against references written here from the format's
// definition: w(k, n) = s(g, n) * q(k, n) + m(g, n), activations quantized to int16 per row and
// group, the contract's f32 operations reproduced bit for bit, and double-precision bounds (the
// activations' s_a / 2, at load the weights' (max - min) / 30 per group).
// The suite name starts with PackedWeight so cpu_test.cc also runs it under HLX_CPU=baseline
// (the portable kernel).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "matmul_test_util.h"
#include "runtime/kernels/matmul.h"
#include "runtime/kernels/matmul_int4.h"
#include "runtime/kernels/parallel.h"
#include "runtime/program.h"
#include "structured_test_util.h"

namespace hlx {
namespace {

using kernels::PackedWeight;
using kernels::WeightFormat;
using matmul_test::load;
using matmul_test::rand_vec;
using matmul_test::store;

// A 4-bit weight as codes, scales and mins, [K, N] codes and [groups, N] scales / mins.
struct Q4 {
  int64_t k = 0, n = 0, group = 0;
  std::vector<uint8_t> q;
  std::vector<float> s, m;
  std::vector<int32_t> perm;
  double w(int64_t kk, int64_t j) const {  // packed k order
    const size_t g = size_t((kk / group) * n + j);
    return double(s[g]) * q[size_t(kk * n + j)] + double(m[g]);
  }
  kernels::Int4Source source() const {
    kernels::Int4Source src;
    src.k = k;
    src.n = n;
    src.group = group;
    src.perm = perm;
    src.column = [this](int64_t j, uint8_t* qc, float* sc, float* mc) -> Status {
      for (int64_t kk = 0; kk < k; ++kk) qc[kk] = q[size_t(kk * n + j)];
      for (int64_t g = 0; g < (k + group - 1) / group; ++g) {
        sc[g] = s[size_t(g * n + j)];
        mc[g] = m[size_t(g * n + j)];
      }
      return ok_status();
    };
    return src;
  }
};

Q4 random_q4(int64_t k, int64_t n, int64_t group, uint32_t seed, bool shuffle = false) {
  Q4 w;
  w.k = k;
  w.n = n;
  w.group = group;
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> code(0, 15);
  std::uniform_real_distribution<float> sd(0.001f, 0.05f), md(-0.4f, 0.1f);
  w.q.resize(size_t(k * n));
  for (auto& v : w.q) v = uint8_t(code(rng));
  const int64_t groups = (k + group - 1) / group;
  w.s.resize(size_t(groups * n));
  w.m.resize(size_t(groups * n));
  for (auto& v : w.s) v = sd(rng);
  for (auto& v : w.m) v = md(rng);
  if (shuffle) {
    w.perm.resize(size_t(k));
    std::iota(w.perm.begin(), w.perm.end(), 0);
    std::shuffle(w.perm.begin(), w.perm.end(), rng);
  }
  return w;
}

// FTZ/DAZ as the kernels run: an |x| below FLT_MIN reads as 0.
float daz(float x) { return std::fabs(x) < std::numeric_limits<float>::min() ? 0.f : x; }

// The activations of one row as matmul_int4.h quantizes them: per group of packed k, s_a = max |a|
// / 32767 (0 when not a normal f32, NaN when the group holds a NaN/Inf), q_a = round-half-even(a /
// s_a) clamped to +-32767, sq = s_a * float(sum of q_a). `row` is in activation order.
struct QRow {
  std::vector<int32_t> q;  // Kp, packed order
  std::vector<float> sa, sq;
};
QRow quantize_row(const Q4& w, const float* row) {
  const int64_t groups = (w.k + w.group - 1) / w.group;
  QRow out;
  out.q.assign(size_t(groups * w.group), 0);
  out.sa.assign(size_t(groups), 0.f);
  out.sq.assign(size_t(groups), 0.f);
  auto at = [&](int64_t kk) { return daz(row[w.perm.empty() ? kk : w.perm[size_t(kk)]]); };
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t k0 = g * w.group, k1 = std::min(w.k, k0 + w.group);
    float mx = 0.f;
    bool finite = true;
    for (int64_t kk = k0; kk < k1; ++kk) {
      finite = finite && std::isfinite(at(kk));
      mx = std::max(mx, std::fabs(at(kk)));
    }
    float s = mx / 32767.f;
    if (!finite) s = std::numeric_limits<float>::quiet_NaN();
    if (s < std::numeric_limits<float>::min()) s = 0.f;
    int64_t qsum = 0;
    if (s > 0.f)
      for (int64_t kk = k0; kk < k1; ++kk) {
        const int32_t q = int32_t(std::clamp(std::nearbyint(at(kk) / s), -32767.f, 32767.f));
        out.q[size_t(kk)] = q;
        qsum += q;
      }
    out.sa[size_t(g)] = s;
    out.sq[size_t(g)] = s * float(qsum);
  }
  return out;
}

// The contract's product C = A · W, every rounding as written there (f32 C), and in double the
// same product from the exact activations with the bound of their quantization: per k,
// s_a / 2 * |w(k, n)|, plus 1e-5 of |a| (15 s + |m|) for the f32 arithmetic.
void reference(const Q4& w, const std::vector<float>& a, int64_t m, std::vector<float>& c, std::vector<double>& exact,
               std::vector<double>& bound) {
  c.assign(size_t(m * w.n), 0.f);
  exact.assign(size_t(m * w.n), 0);
  bound.assign(size_t(m * w.n), 0);
  const int64_t groups = (w.k + w.group - 1) / w.group;
  for (int64_t r = 0; r < m; ++r) {
    const float* row = a.data() + r * w.k;
    const QRow qa = quantize_row(w, row);
    for (int64_t j = 0; j < w.n; ++j) {
      float sum = 0.f;
      double ex = 0, bd = 0;
      for (int64_t g = 0; g < groups; ++g) {
        int64_t isum = 0;
        for (int64_t kk = g * w.group; kk < std::min(w.k, (g + 1) * w.group); ++kk) {
          isum += int64_t(qa.q[size_t(kk)]) * w.q[size_t(kk * w.n + j)];
          const double x = row[w.perm.empty() ? kk : w.perm[size_t(kk)]];
          ex += x * w.w(kk, j);
          const size_t gs = size_t(g * w.n + j);
          bd +=
              qa.sa[size_t(g)] / 2 * std::fabs(w.w(kk, j)) + 1e-5 * std::fabs(x) * (15 * w.s[gs] + std::fabs(w.m[gs]));
        }
        const size_t gs = size_t(g * w.n + j);
        sum = std::fma(w.s[gs], float(isum) * qa.sa[size_t(g)], sum);
        sum = std::fma(w.m[gs], qa.sq[size_t(g)], sum);
      }
      c[size_t(r * w.n + j)] = sum;
      exact[size_t(r * w.n + j)] = ex;
      bound[size_t(r * w.n + j)] = bd;
    }
  }
}

std::vector<uint8_t> run(const PackedWeight& p, int64_t m, DType at, const std::vector<uint8_t>& a, DType ct) {
  std::vector<uint8_t> c(size_t(m * p.n()) * dtype_size(ct), 0xcd);
  Status s = p.multiply(m, at, a.data(), ct, c.data());
  EXPECT_TRUE(s.ok()) << s.to_string();
  return c;
}

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

using kernels::int4::TileKernel;

// Runs the tiled products of its scope on one kernel (kAmx: AMX-INT8 tiles, where the CPU has them).
struct TileKernelScope {
  explicit TileKernelScope(TileKernel k) { kernels::int4::set_tile_kernel(k); }
  ~TileKernelScope() { kernels::int4::set_tile_kernel(TileKernel::kAuto); }
};

// The tiled kernels this CPU runs: AVX-512, and AMX-INT8 where available.
std::vector<TileKernel> tile_kernels() {
  if (kernels::int4::amx_available()) return {TileKernel::kAvx512, TileKernel::kAmx};
  return {TileKernel::kAvx512};
}

// Every kernel (streaming M <= 8, tiled, portable under HLX_CPU=baseline) gives the contract's bits
// for f32/bf16/f16 A and f32/bf16 C; activations with outliers, so a group's scale differs from its
// row's; K not a multiple of the group, N not of 64, with and without a permutation.
TEST(PackedWeightInt4, ProductIsTheContractsBitsEveryShapeAndType) {
  struct Case {
    int64_t k, n, group;
    bool shuffle;
  };
  for (const Case cs : {Case{256, 192, 128, false}, Case{200, 100, 64, false}, Case{96, 130, 32, true},
                        Case{1024, 64, 128, true}, Case{160, 70, 32, false}, Case{384, 200, 64, true}}) {
    const Q4 wp = random_q4(cs.k, cs.n, cs.group, uint32_t(cs.k + cs.n), cs.shuffle);
    auto packed = kernels::pack_int4(wp.source());
    ASSERT_TRUE(packed.ok()) << packed.status().to_string();
    EXPECT_EQ((*packed)->packed_bytes(), kernels::int4_packed_bytes(cs.k, cs.n, cs.group));
    for (int64_t m : {1, 2, 3, 4, 5, 6, 7, 8, 9, 20, 100, 203}) {
      std::vector<float> a = rand_vec(m * cs.k, uint32_t(m * 7 + 1), -2.f, 2.f);
      for (size_t i = 0; i < a.size(); i += 37) a[i] *= 40.f;  // outliers
      for (DType at : {DType::kF32, DType::kBF16, DType::kF16}) {
        std::vector<float> ar = a;
        const std::vector<uint8_t> ab = store(at, ar);
        std::vector<float> ref;
        std::vector<double> exact, bound;
        reference(wp, ar, m, ref, exact, bound);
        for (DType ct : {DType::kF32, DType::kBF16})
          for (int threads : {1, 2}) {
            kernels::ThreadLimit limit(threads);
            const std::vector<uint8_t> c = run(**packed, m, at, ab, ct);
            for (int64_t i = 0; i < m * cs.n; ++i) {
              const float want = ct == DType::kF32 ? ref[size_t(i)] : bf16_to_f32(f32_to_bf16(ref[size_t(i)]));
              ASSERT_EQ(bits(load(ct, c, size_t(i))), bits(want))
                  << load(ct, c, size_t(i)) << " vs " << want << ": k=" << cs.k << " n=" << cs.n << " G=" << cs.group
                  << " m=" << m << " a=" << dtype_name(at) << " c=" << dtype_name(ct) << " t=" << threads << " i=" << i;
            }
          }
        for (int64_t i = 0; i < m * cs.n; ++i)
          ASSERT_NEAR(ref[size_t(i)], exact[size_t(i)], bound[size_t(i)]) << "k=" << cs.k << " m=" << m << " i=" << i;
      }
    }
  }
}

// The AMX-INT8 tiles (int16 activations as signed high and unsigned low bytes, two tile products per
// 16 x 16 block, recombined as 256 * hi + lo) give the contract's bits, and the AVX-512 tiles' bits:
// several groups, G = 128 / 64 / 32 and G whose k chunk needs zero padding (100: 2 x 52, 34: 36),
// K not a multiple of the group, GPTQ permutation, N not a multiple of 64, M around the 16-row tile
// and the 96-row work item, f32 and bf16 A and C, one and two threads.
TEST(PackedWeightInt4, AmxTilesGiveTheContractsBits) {
  if (!kernels::int4::amx_available())
    GTEST_SKIP() << "CPU without AMX-INT8 (or HLX_CPU=baseline/noamx): the AVX-512 tiles run, checked above";
  struct Case {
    int64_t k, n, group;
    bool shuffle;
  };
  for (const Case cs : {Case{1024, 200, 128, true}, Case{384, 130, 64, false}, Case{200, 70, 32, true},
                        Case{300, 96, 100, true}, Case{170, 64, 34, false}}) {
    const Q4 wp = random_q4(cs.k, cs.n, cs.group, uint32_t(cs.k * 3 + cs.n), cs.shuffle);
    auto packed = kernels::pack_int4(wp.source());
    ASSERT_TRUE(packed.ok()) << packed.status().to_string();
    for (int64_t m : {9, 16, 17, 40, 97, 203}) {
      std::vector<float> a = rand_vec(m * cs.k, uint32_t(m * 5 + 3), -2.f, 2.f);
      for (size_t i = 0; i < a.size(); i += 29) a[i] *= 60.f;      // outliers: large and small int16 codes
      std::fill(a.begin() + 2 * cs.k, a.begin() + 3 * cs.k, 0.f);  // row 2: zero
      for (int64_t kk = 0; kk < cs.group; ++kk)                    // row 5: packed group 1 zero
        a[size_t(5 * cs.k + (wp.perm.empty() ? cs.group + kk : wp.perm[size_t(cs.group + kk)]))] = 0.f;
      a[size_t(7 * cs.k + cs.k / 2)] = std::numeric_limits<float>::quiet_NaN();  // row 7: NaN
      for (DType at : {DType::kF32, DType::kBF16}) {
        std::vector<float> ar = a;
        const std::vector<uint8_t> ab = store(at, ar);
        std::vector<float> ref;
        std::vector<double> exact, bound;
        reference(wp, ar, m, ref, exact, bound);
        for (DType ct : {DType::kF32, DType::kBF16})
          for (int threads : {1, 2}) {
            kernels::ThreadLimit limit(threads);
            std::vector<uint8_t> c, c512;
            {
              TileKernelScope amx(TileKernel::kAmx);
              c = run(**packed, m, at, ab, ct);
            }
            {
              TileKernelScope avx(TileKernel::kAvx512);
              c512 = run(**packed, m, at, ab, ct);
            }
            EXPECT_EQ(c, c512) << "AMX vs AVX-512 tiles: k=" << cs.k << " n=" << cs.n << " G=" << cs.group
                               << " m=" << m;
            for (int64_t i = 0; i < m * cs.n; ++i) {
              const float want = ct == DType::kF32 ? ref[size_t(i)] : bf16_to_f32(f32_to_bf16(ref[size_t(i)]));
              const float got = load(ct, c, size_t(i));
              if (i / cs.n == 7) {  // the NaN row (any NaN)
                ASSERT_TRUE(std::isnan(got) && std::isnan(want)) << got << " vs " << want << " i=" << i;
                continue;
              }
              ASSERT_EQ(bits(got), bits(want))
                  << got << " vs " << want << ": k=" << cs.k << " n=" << cs.n << " G=" << cs.group << " m=" << m
                  << " a=" << dtype_name(at) << " c=" << dtype_name(ct) << " t=" << threads << " i=" << i;
            }
          }
      }
    }
  }
}

// Zero, tiny and non-finite activations: a subnormal reads as zero, a group read as zero (all
// zero, subnormal, or s_a below FLT_MIN) contributes nothing; a NaN or Inf anywhere makes the whole
// row NaN and leaves the other rows alone. Streaming (M = 6) and tiled (M = 14, 40) kernels, the
// AVX-512 and (where the CPU has them) the AMX tiles.
TEST(PackedWeightInt4, ZeroTinyAndNonFiniteGroups) {
  const int64_t k = 256, n = 96, group = 64;
  const Q4 w = random_q4(k, n, group, 31, true);
  auto p = kernels::pack_int4(w.source());
  ASSERT_TRUE(p.ok());
  for (const TileKernel tk : tile_kernels())
    for (int64_t m : {6, 14, 40}) {
      TileKernelScope scope(tk);
      std::vector<float> a = rand_vec(m * k, 32);
      std::vector<float> zeroed = a;
      auto group_of = [&](int64_t r, int64_t g, float v, bool zero_too) {
        for (int64_t kk = g * group; kk < (g + 1) * group; ++kk) {
          a[size_t(r * k + w.perm[size_t(kk)])] = v * (kk % 3 == 0 ? -1.f : 1.f);
          if (zero_too) zeroed[size_t(r * k + w.perm[size_t(kk)])] = 0.f;
        }
      };
      // Row 0: tiny normal values (s_a ~ 1.2e-38) and one subnormal 1.1e-38, which DAZ reads as 0
      // (without it, q_a = 1).
      for (int64_t kk = 0; kk < k; ++kk) a[size_t(kk)] = zeroed[size_t(kk)] = a[size_t(kk)] * 4e-34f;
      a[size_t(w.perm[5])] = 1.1e-38f;
      zeroed[size_t(w.perm[5])] = 0.f;
      std::fill(a.begin() + 1 * k, a.begin() + 2 * k, 0.f);  // row 1: all zero
      std::fill(zeroed.begin() + 1 * k, zeroed.begin() + 2 * k, 0.f);
      group_of(2, 1, 0.f, true);     // row 2: group 1 zero
      group_of(3, 2, 1e-39f, true);  // row 3: group 2 subnormal
      group_of(4, 0, 1e-35f, true);  // row 4: group 0 normal but s_a = 1e-35 / 32767 < FLT_MIN
      a[size_t(5 * k + 17)] = std::numeric_limits<float>::quiet_NaN();              // row 5: NaN
      if (m > 6) a[size_t(9 * k + 200)] = -std::numeric_limits<float>::infinity();  // row 9: -Inf
      std::vector<float> c(size_t(m * n)), cz(size_t(m * n));
      ASSERT_TRUE((*p)->multiply(m, DType::kF32, a.data(), DType::kF32, c.data()).ok());
      ASSERT_TRUE((*p)->multiply(m, DType::kF32, zeroed.data(), DType::kF32, cz.data()).ok());
      for (int64_t r = 0; r < m; ++r)
        for (int64_t j = 0; j < n; ++j) {
          const float v = c[size_t(r * n + j)];
          if (r == 5 || r == 9) {
            EXPECT_TRUE(std::isnan(v)) << m << ": row " << r << " col " << j << " = " << v;
          } else if (r == 1) {
            EXPECT_EQ(bits(v), 0u) << m << ": zero row, col " << j << " = " << v;
          } else {
            ASSERT_TRUE(std::isfinite(v)) << m << ": row " << r << " col " << j;
            EXPECT_EQ(bits(v), bits(cz[size_t(r * n + j)])) << m << ": row " << r << " col " << j;
          }
        }
    }
}

// A row's bits do not depend on M (streaming vs tiled kernel, its place in a register tile or a
// work item's rows), on the thread count, or on whether the product runs grouped with siblings.
TEST(PackedWeightInt4, RowBitsIndependentOfBatchThreadsAndGrouping) {
  const int64_t k = 384, n = 320, m = 203;  // 203 rows: three work items of rows, a partial last tile
  for (int64_t group : {32, 64, 128}) {
    const Q4 w = random_q4(k, n, group, 5), w2 = random_q4(k, 70, group, 6);
    auto p = kernels::pack_int4(w.source());
    auto p2 = kernels::pack_int4(w2.source());
    ASSERT_TRUE(p.ok() && p2.ok());
    std::vector<float> a = rand_vec(m * k, 9);
    std::vector<float> c_all(size_t(m * n));
    ASSERT_TRUE((*p)->multiply(m, DType::kF32, a.data(), DType::kF32, c_all.data()).ok());
    for (int64_t r : {0, 7, 71, 72, 150, 202}) {
      for (int threads : {1, 2}) {
        kernels::ThreadLimit limit(threads);
        std::vector<float> c1(static_cast<size_t>(n));
        ASSERT_TRUE((*p)->multiply(1, DType::kF32, a.data() + r * k, DType::kF32, c1.data()).ok());
        for (int64_t j = 0; j < n; ++j)
          ASSERT_EQ(c1[size_t(j)], c_all[size_t(r * n + j)]) << group << ":" << r << "," << j;
      }
    }
    for (int64_t mm : {1, 4, 8, 30, 203}) {
      for (int threads : {1, 2}) {
        kernels::ThreadLimit limit(threads);
        std::vector<float> ca(size_t(mm * n)), cb(size_t(mm * 70)), sa(size_t(mm * n)), sb(size_t(mm * 70));
        ASSERT_TRUE(kernels::multiply_grouped(mm, DType::kF32, a.data(), DType::kF32,
                                              {{p->get(), ca.data()}, {p2->get(), cb.data()}})
                        .ok());
        ASSERT_TRUE((*p)->multiply(mm, DType::kF32, a.data(), DType::kF32, sa.data()).ok());
        ASSERT_TRUE((*p2)->multiply(mm, DType::kF32, a.data(), DType::kF32, sb.data()).ok());
        EXPECT_EQ(ca, sa) << group << " " << mm << " " << threads;
        EXPECT_EQ(cb, sb) << group << " " << mm << " " << threads;
        EXPECT_TRUE(std::equal(sa.begin(), sa.end(), c_all.begin())) << group << " " << mm << " " << threads;
      }
    }
  }
}

// WeightFormat::kInt4 (quantization at load): the product stays within the documented bound of
// the unquantized one, sum_k |a_k| * (max - min of k's group) / 30 for the weights plus, for the
// activations' int16 step, max |a| of k's group / 65534 * |decoded w|, and uses that error budget.
TEST(PackedWeightInt4, LoadQuantizationWithinDocumentedBound) {
  for (bool transposed : {true, false}) {
    const int64_t k = 300, n = 96, m = 4;
    std::vector<float> w = rand_vec(k * n, 21, -0.5f, 0.5f);
    for (int64_t j = 0; j < n; ++j) w[size_t(j)] = 0.25f;  // a constant group somewhere (k = 0..)
    const std::vector<uint8_t> wb = store(DType::kBF16, w);
    auto p = PackedWeight::pack(DType::kBF16, k, n, transposed, wb.data(), WeightFormat::kInt4);
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    EXPECT_EQ((*p)->packed_bytes(), kernels::int4_packed_bytes(k, n));
    std::vector<float> a = rand_vec(m * k, 22);
    std::vector<float> c(size_t(m * n));
    ASSERT_TRUE((*p)->multiply(m, DType::kF32, a.data(), DType::kF32, c.data()).ok());
    auto at = [&](int64_t kk, int64_t j) { return double(w[size_t(transposed ? j * k + kk : kk * n + j)]); };
    double worst = 0;
    for (int64_t r = 0; r < m; ++r)
      for (int64_t j = 0; j < n; ++j) {
        double exact = 0, bound = 0;
        for (int64_t g0 = 0; g0 < k; g0 += kernels::kInt4LoadGroup) {
          double lo = 1e30, hi = -1e30;
          for (int64_t kk = g0; kk < std::min(k, g0 + kernels::kInt4LoadGroup); ++kk) {
            lo = std::min(lo, at(kk, j));
            hi = std::max(hi, at(kk, j));
          }
          double amax = 0;
          for (int64_t kk = g0; kk < std::min(k, g0 + kernels::kInt4LoadGroup); ++kk)
            amax = std::max(amax, std::fabs(double(a[size_t(r * k + kk)])));
          for (int64_t kk = g0; kk < std::min(k, g0 + kernels::kInt4LoadGroup); ++kk) {
            exact += a[size_t(r * k + kk)] * at(kk, j);
            bound += std::fabs(a[size_t(r * k + kk)]) * (hi - lo) / 30 * (1 + 1e-5) +
                     amax / 65534 * (std::fabs(at(kk, j)) + (hi - lo) / 30) * (1 + 1e-5) +
                     1e-6 * std::fabs(a[size_t(r * k + kk)]);
          }
        }
        const double err = std::fabs(c[size_t(r * n + j)] - exact);
        EXPECT_LE(err, bound) << "(" << r << "," << j << ")";
        worst = std::max(worst, err / bound);
      }
    EXPECT_GT(worst, 0.01);  // quantization is visible: the test can tell int4 from as-stored
  }
}

TEST(PackedWeightInt4, BadInputsAreTypedErrors) {
  Q4 w = random_q4(64, 64, 32, 1);
  for (int64_t g : {16, 130, 33, 256}) {
    Q4 bad = w;
    bad.group = g;
    auto p = kernels::pack_int4(bad.source());
    ASSERT_FALSE(p.ok());
    EXPECT_EQ(p.status().kind(), ErrorKind::kUnsupported) << g;
    EXPECT_NE(p.status().to_string().find(std::to_string(g)), std::string::npos) << p.status().to_string();
  }
  Q4 perm = w;
  perm.perm.assign(64, 0);
  EXPECT_EQ(kernels::pack_int4(perm.source()).status().kind(), ErrorKind::kInvalidArgument);
  Q4 nan = w;
  nan.s[5] = std::numeric_limits<float>::quiet_NaN();
  auto pn = kernels::pack_int4(nan.source());
  ASSERT_FALSE(pn.ok());
  EXPECT_NE(pn.status().to_string().find("column 5"), std::string::npos) << pn.status().to_string();
  std::vector<float> f(64 * 64, 0.5f);
  f[100] = std::numeric_limits<float>::infinity();
  auto pf = PackedWeight::pack(DType::kF32, 64, 64, true, f.data(), WeightFormat::kInt4);
  ASSERT_FALSE(pf.ok());
  EXPECT_EQ(pf.status().kind(), ErrorKind::kInvalidArgument);
  EXPECT_NE(pf.status().to_string().find("column 1"), std::string::npos) << pf.status().to_string();
  auto ok = kernels::pack_int4(w.source());
  ASSERT_TRUE(ok.ok());
  std::vector<float> a(64), c(64);
  EXPECT_EQ((*ok)->multiply(1, DType::kI32, a.data(), DType::kF32, c.data()).kind(), ErrorKind::kUnsupported);
  EXPECT_EQ((*ok)->multiply(-1, DType::kF32, a.data(), DType::kF32, c.data()).kind(), ErrorKind::kInvalidArgument);
}

// ProgramOptions::weight_format = kInt4 reaches the dot_general of a bound weight.
TEST(PackedWeightInt4, ProgramOptionQuantizesBoundWeights) {
  using namespace hlx::testing;
  const int64_t m = 3, k = 128, n = 24;
  IrBuilder b;
  b.fn.name = "main";
  auto x = b.arg(tt(DType::kF32, {m, k}));
  auto wv = b.arg(tt(DType::kF32, {n, k}));
  b.fn.arg_attrs[1].push_back({shlo::kWeightAttr, shlo::Attr::string("proj.weight")});
  auto& d = b.op("stablehlo.dot_general", {x, wv}, {tt(DType::kF32, {m, n})});
  d.attrs.push_back(
      {"dot_dimension_numbers", shlo::Attr::structure("dot", {{"lhs_contracting_dimensions", ints({1})},
                                                              {"rhs_contracting_dimensions", ints({1})}})});
  b.fn.result_types.push_back(b.fn.type_of(d.results[0]));
  b.fn.result_attrs.resize(1);
  b.op("func.return", {d.results[0]}, {});
  auto module = std::make_shared<shlo::Module>();
  module->functions = {b.fn};
  std::vector<float> w = rand_vec(n * k, 3);
  Tensor wt = Tensor::zeros(DType::kF32, {n, k});
  std::memcpy(wt.raw(), w.data(), w.size() * 4);
  std::vector<float> a = rand_vec(m * k, 4);
  Tensor xt = Tensor::zeros(DType::kF32, {m, k});
  std::memcpy(xt.raw(), a.data(), a.size() * 4);
  auto direct = PackedWeight::pack(DType::kF32, k, n, true, w.data(), WeightFormat::kInt4);
  ASSERT_TRUE(direct.ok());
  std::vector<float> want(size_t(m * n));
  ASSERT_TRUE((*direct)->multiply(m, DType::kF32, a.data(), DType::kF32, want.data()).ok());
  rt::ProgramOptions o;
  o.weight_format = WeightFormat::kInt4;
  auto p = rt::Program::compile(module, o);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  ASSERT_TRUE((*p)->bind_weight("proj.weight", wt).ok());
  auto out = (*p)->run("main", {xt});
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  double max_diff_from_exact = 0;
  for (int64_t i = 0; i < m * n; ++i) {
    EXPECT_EQ((*out)[0].data<float>()[i], want[size_t(i)]) << i;
    double exact = 0;
    for (int64_t kk = 0; kk < k; ++kk) exact += double(a[size_t((i / n) * k + kk)]) * w[size_t((i % n) * k + kk)];
    max_diff_from_exact = std::max(max_diff_from_exact, std::fabs(exact - want[size_t(i)]));
  }
  EXPECT_GT(max_diff_from_exact, 1e-3);  // int4, not the as-stored product
}

// A weight the loader packed itself (a checkpoint stored 4-bit): its placeholder, bound under the
// weight's name, makes the dot use the packed weight; any other use of it is refused (its bytes
// are never backed), and so is binding it after the registration is gone.
TEST(PackedWeightInt4, PackedPlaceholderBindsToMatmulsOnly) {
  using namespace hlx::testing;
  const int64_t m = 2, k = 64, n = 16;
  auto module_with = [&](bool extra_use) {
    IrBuilder b;
    b.fn.name = "main";
    auto x = b.arg(tt(DType::kF32, {m, k}));
    auto wv = b.arg(tt(DType::kF32, {n, k}));
    b.fn.arg_attrs[1].push_back({shlo::kWeightAttr, shlo::Attr::string("proj.weight")});
    auto& d = b.op("stablehlo.dot_general", {x, wv}, {tt(DType::kF32, {m, n})});
    d.attrs.push_back(
        {"dot_dimension_numbers", shlo::Attr::structure("dot", {{"lhs_contracting_dimensions", ints({1})},
                                                                {"rhs_contracting_dimensions", ints({1})}})});
    std::vector<shlo::ValueId> results{d.results[0]};
    if (extra_use) results.push_back(b.op("stablehlo.negate", {wv}, {tt(DType::kF32, {n, k})}).results[0]);
    for (auto v : results) b.fn.result_types.push_back(b.fn.type_of(v));
    b.fn.result_attrs.resize(results.size());
    b.op("func.return", results, {});
    auto module = std::make_shared<shlo::Module>();
    module->functions = {b.fn};
    return module;
  };
  const Q4 w = random_q4(k, n, 32, 77);
  auto packed = kernels::pack_int4(w.source());
  ASSERT_TRUE(packed.ok());
  std::vector<float> a = rand_vec(m * k, 78);
  std::vector<float> want(size_t(m * n));
  ASSERT_TRUE((*packed)->multiply(m, DType::kF32, a.data(), DType::kF32, want.data()).ok());
  auto placeholder = rt::packed_placeholder(DType::kF32, {n, k});
  ASSERT_TRUE(placeholder.ok()) << placeholder.status().to_string();
  auto handle = rt::register_packed_weight(*placeholder, std::move(*packed));
  EXPECT_TRUE(rt::is_packed_placeholder(*placeholder));
  Tensor xt = Tensor::zeros(DType::kF32, {m, k});
  std::memcpy(xt.raw(), a.data(), a.size() * 4);
  {
    auto p = rt::Program::compile(module_with(false));
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    ASSERT_TRUE((*p)->bind_weight("proj.weight", *placeholder).ok());
    auto out = (*p)->run("main", {xt});
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    for (int64_t i = 0; i < m * n; ++i) EXPECT_EQ((*out)[0].data<float>()[i], want[size_t(i)]) << i;
  }
  {
    auto p = rt::Program::compile(module_with(true));
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    Status st = (*p)->bind_weight("proj.weight", *placeholder);
    EXPECT_EQ(st.kind(), ErrorKind::kUnsupported) << st.to_string();
    EXPECT_NE(st.to_string().find("proj.weight"), std::string::npos) << st.to_string();
  }
  handle.reset();
  EXPECT_FALSE(rt::is_packed_placeholder(*placeholder));
}

}  // namespace
}  // namespace hlx
