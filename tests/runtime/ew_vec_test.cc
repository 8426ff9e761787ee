// The AVX-512 array forms of kernels/ew_vec.h against the scalar definitions in core/dtype.h, bit
// for bit: f32 -> bf16 over a sweep of f32 bit patterns (every 16-bit top half with the rounding
// edge cases below it, every subnormal and NaN top half, and a strided sample of all 2^32), bf16
// -> f32 over all 2^16 patterns, and add/sub/mul/div over special and random operands. Every
// length 0..70 is also run at odd offsets so the masked tails are covered.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "runtime/kernels/cpu.h"
#include "runtime/kernels/ew_vec.h"

namespace hlx {
namespace {

using kernels::VecBinOp;

bool have_avx512() { return kernels::cpu_features().avx512f && kernels::cpu_features().avx512bw; }

// The bit patterns of the sweep.
std::vector<uint32_t> sweep_patterns() {
  std::vector<uint32_t> v;
  const uint32_t lows[] = {0x0000, 0x0001, 0x3fff, 0x7ffe, 0x7fff, 0x8000, 0x8001, 0xbfff, 0xc000, 0xfffe, 0xffff};
  for (uint32_t hi = 0; hi < 0x10000; ++hi)
    for (uint32_t lo : lows) v.push_back(hi << 16 | lo);
  for (uint32_t m = 0; m < (1u << 23); m += 7) v.push_back(m), v.push_back(0x80000000u | m);  // subnormals
  for (uint64_t u = 0; u <= 0xffffffffull; u += 997) v.push_back(uint32_t(u));                // everything
  return v;
}

std::vector<float> as_floats(const std::vector<uint32_t>& u) {
  std::vector<float> f(u.size());
  std::memcpy(f.data(), u.data(), u.size() * 4);
  return f;
}

TEST(EwVec, F32ToBf16MatchesScalarOnBitSweep) {
  if (!have_avx512()) GTEST_SKIP() << "no AVX-512";
  auto x = as_floats(sweep_patterns());
  std::vector<bf16> got(x.size());
  std::vector<float> rounded(x.size());
  kernels::internal::f32_to_bf16_exact_avx512(x.data(), got.data(), int64_t(x.size()));
  kernels::internal::round_to_bf16_avx512(x.data(), rounded.data(), int64_t(x.size()));
  int bad = 0;
  for (size_t i = 0; i < x.size() && bad < 10; ++i) {
    const uint16_t want = f32_to_bf16(x[i]).bits;
    if (got[i].bits != want)
      ++bad, ADD_FAILURE() << std::hex << "f32 0x" << f32_bits(x[i]) << ": got 0x" << got[i].bits << " want 0x" << want;
    if (f32_bits(rounded[i]) != uint32_t(want) << 16)
      ++bad, ADD_FAILURE() << std::hex << "round f32 0x" << f32_bits(x[i]) << ": got 0x" << f32_bits(rounded[i]);
  }
}

TEST(EwVec, Bf16ToF32MatchesScalarOnAllPatterns) {
  if (!have_avx512()) GTEST_SKIP() << "no AVX-512";
  std::vector<bf16> x(0x10000);
  for (uint32_t i = 0; i < 0x10000; ++i) x[i].bits = uint16_t(i);
  std::vector<float> y(x.size());
  kernels::internal::bf16_to_f32_avx512(x.data(), y.data(), int64_t(x.size()));
  for (uint32_t i = 0; i < 0x10000; ++i) ASSERT_EQ(f32_bits(y[i]), f32_bits(bf16_to_f32(x[i]))) << i;
}

float scalar_op(VecBinOp op, float a, float b) {
  switch (op) {
    case VecBinOp::kAdd:
      return a + b;
    case VecBinOp::kSub:
      return a - b;
    case VecBinOp::kMul:
      return a * b;
    case VecBinOp::kDiv:
      return a / b;
  }
  return 0.0f;
}

TEST(EwVec, BinaryMatchesScalarOperators) {
  if (!have_avx512()) GTEST_SKIP() << "no AVX-512";
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-4.0f, 4.0f);
  const float edges[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1e-40f, -3e-39f, 3.0e38f, 1.17549435e-38f, 1.0f};
  const size_t n = 4096;
  std::vector<float> a(n), b(n);
  for (size_t i = 0; i < n; ++i) {
    a[i] = i % 5 == 0 ? edges[(i / 5) % 10] : u(rng);
    b[i] = i % 7 == 0 ? edges[(i / 7) % 10] : u(rng) * (i % 3 ? 1.0f : 1e-38f);
  }
  for (VecBinOp op : {VecBinOp::kAdd, VecBinOp::kSub, VecBinOp::kMul, VecBinOp::kDiv}) {
    std::vector<float> y(n);
    kernels::internal::binary_f32_avx512(op, a.data(), b.data(), y.data(), int64_t(n));
    for (size_t i = 0; i < n; ++i) {
      const float want = scalar_op(op, a[i], b[i]);
      if (std::isnan(want))
        ASSERT_TRUE(std::isnan(y[i])) << "op " << int(op) << " element " << i;
      else
        ASSERT_EQ(f32_bits(y[i]), f32_bits(want)) << "op " << int(op) << ": " << a[i] << ", " << b[i];
    }
  }
}

// Every length and offset through the dispatching entry points (AVX-512 or scalar, whichever
// this CPU takes), against the scalar definitions; elements outside [0, n) stay untouched.
TEST(EwVec, TailsAndOffsets) {
  std::mt19937 rng(3);
  std::uniform_int_distribution<uint32_t> bits;
  for (int64_t n = 0; n <= 70; ++n) {
    for (int64_t off : {0, 1, 3}) {
      std::vector<uint32_t> ub(size_t(n + off + 4));
      for (auto& v : ub) v = bits(rng);
      auto x = as_floats(ub);
      std::vector<bf16> h(x.size(), bf16{0x1234});
      kernels::f32_to_bf16_exact(x.data() + off, h.data() + off, n);
      std::vector<float> back(x.size(), 5.0f), r(x.size(), 5.0f), s(x.size(), 5.0f);
      kernels::bf16_to_f32_n(h.data() + off, back.data() + off, n);
      kernels::round_to_bf16(x.data() + off, r.data() + off, n);
      kernels::binary_f32(VecBinOp::kMul, x.data() + off, x.data() + off + 1, s.data() + off, n);
      for (int64_t i = 0; i < int64_t(x.size()); ++i) {
        const bool in = i >= off && i < off + n;
        const size_t k = size_t(i);
        ASSERT_EQ(h[k].bits, in ? f32_to_bf16(x[k]).bits : 0x1234) << n << " " << off << " " << i;
        ASSERT_EQ(f32_bits(back[k]), in ? f32_bits(bf16_to_f32(h[k])) : f32_bits(5.0f));
        ASSERT_EQ(f32_bits(r[k]), in ? f32_bits(bf16_to_f32(f32_to_bf16(x[k]))) : f32_bits(5.0f));
        if (!in) {
          ASSERT_EQ(s[k], 5.0f);
        } else if (!std::isnan(s[k])) {
          ASSERT_EQ(f32_bits(s[k]), f32_bits(x[k] * x[k + 1]));
        }
      }
    }
  }
}

}  // namespace
}  // namespace hlx
