// hlx.rotary memoises cos/sin per thread (kernels/rotary.cc). The memo must change no bits: f32
// results equal, bit for bit, the formula computed here (cos/sin of float(pos) * inv_freq[i] in
// f32, a*c - b*s and b*c + a*s with each product rounded), for positions inside and outside the
// memo, repeated calls, three alternating inv_freq tables (more than the memo keeps) and several
// thread counts; bf16 rows likewise.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "runtime/kernels/parallel.h"
#include "runtime/kernels/rotary.h"

namespace hlx {
namespace {

std::vector<float> expected(const std::vector<float>& x, const std::vector<int32_t>& pos, const std::vector<float>& inv,
                            int64_t heads, int64_t hd) {
  const int64_t half = int64_t(inv.size()), rows = int64_t(pos.size());
  std::vector<float> y = x;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < half; ++i) {
      volatile float angle = float(pos[size_t(r)]) * inv[size_t(i)];
      const float c = std::cos(float(angle)), s = std::sin(float(angle));
      for (int64_t h = 0; h < heads; ++h) {
        const size_t base = size_t((r * heads + h) * hd);
        const float a = x[base + size_t(i)], b = x[base + size_t(i + half)];
        volatile float ac = a * c, bs = b * s, bc = b * c, as = a * s;  // rounded products
        y[base + size_t(i)] = ac - bs;
        y[base + size_t(i + half)] = bc + as;
      }
    }
  return y;
}

TEST(RotaryCache, BitsEqualDirectFormula) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-2.f, 2.f);
  const int64_t heads = 8, hd = 128, rows = 96;
  std::vector<std::vector<float>> tables;
  for (float base : {1e4f, 1e6f, 5e5f}) {
    std::vector<float> inv(64);
    for (int i = 0; i < 64; ++i) inv[size_t(i)] = std::pow(base, -float(i) / 64.f);
    tables.push_back(inv);
  }
  std::vector<int32_t> pos(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) pos[size_t(r)] = r % 3 == 0 ? int32_t(8000 + 7 * r) : int32_t((r * 37) % 5000);
  for (int threads : {1, 2})
    for (int call = 0; call < 7; ++call) {
      kernels::ThreadLimit limit(threads);
      const auto& inv = tables[size_t(call % 3)];
      std::vector<float> x(size_t(rows * heads * hd));
      for (auto& v : x) v = u(rng);
      std::vector<float> out(x.size());
      ASSERT_TRUE(kernels::rotary(rows, heads, hd, hd, DType::kF32, x.data(), pos.data(), inv.data(), out.data()).ok());
      auto want = expected(x, pos, inv, heads, hd);
      for (size_t i = 0; i < want.size(); ++i)
        ASSERT_EQ(f32_bits(out[i]), f32_bits(want[i])) << "threads " << threads << " call " << call << " element " << i;
    }
}

// bf16 rows: the same formula on the bf16 values, rounded once to bf16 (inputs in [-2, 2] keep
// every result normal, where the hardware and software roundings agree).
TEST(RotaryCache, Bf16BitsEqualDirectFormula) {
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> u(-2.f, 2.f);
  const int64_t heads = 4, hd = 64, rows = 40;
  std::vector<float> inv(32);
  for (int i = 0; i < 32; ++i) inv[size_t(i)] = std::pow(1e4f, -float(i) / 32.f);
  std::vector<int32_t> pos(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) pos[size_t(r)] = int32_t(r * 301 % 9000);
  for (int call = 0; call < 3; ++call) {
    std::vector<float> x(size_t(rows * heads * hd));
    std::vector<bf16> xb(x.size()), out(x.size());
    for (size_t i = 0; i < x.size(); ++i) xb[i] = f32_to_bf16(u(rng)), x[i] = bf16_to_f32(xb[i]);
    ASSERT_TRUE(kernels::rotary(rows, heads, hd, hd, DType::kBF16, xb.data(), pos.data(), inv.data(), out.data()).ok());
    auto want = expected(x, pos, inv, heads, hd);
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_EQ(out[i].bits, f32_to_bf16(want[i]).bits) << "call " << call << " element " << i;
  }
}

}  // namespace
}  // namespace hlx
