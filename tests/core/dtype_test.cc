#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/dtype.h"
#include "core/tensor.h"

namespace hlx {
namespace {

// Independent reference: round an f32 to the nearest representable value of a format with
// `mant_bits` explicit mantissa bits and the given exponent range, ties to even, using long double.
double round_to_format(double x, int mant_bits, int min_exp, int max_exp) {
  if (std::isnan(x) || x == 0) return x;
  int e;
  std::frexp(std::fabs(x), &e);  // |x| = m * 2^e, m in [0.5, 1)
  int exp = std::max(e - 1, min_exp);
  double ulp = std::ldexp(1.0, exp - mant_bits);
  double q = std::nearbyint(x / ulp) * ulp;  // default rounding mode: ties to even
  double max_finite = std::ldexp(2.0 - std::ldexp(1.0, -mant_bits), max_exp);
  if (std::fabs(q) > max_finite) return std::copysign(INFINITY, x);
  return q;
}

TEST(DType, Bf16RoundTripAndRounding) {
  uint32_t seed = 1;
  for (int k = 0; k < 200000; ++k) {
    seed = seed * 1664525u + 1013904223u;
    float f = f32_from_bits(seed);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(f))));
      continue;
    }
    double want = round_to_format(f, 7, -126, 127);
    EXPECT_EQ(double(bf16_to_f32(f32_to_bf16(f))), want) << "bits " << seed;
  }
  for (uint32_t b = 0; b < 65536; ++b) {
    float f = bf16_to_f32(bf16{uint16_t(b)});
    if (!std::isnan(f)) {
      EXPECT_EQ(f32_to_bf16(f).bits, b);
    }
  }
}

TEST(DType, F16RoundTripAndRounding) {
  uint32_t seed = 7;
  for (int k = 0; k < 200000; ++k) {
    seed = seed * 1664525u + 1013904223u;
    // Concentrate on the f16 range, including subnormals and overflow.
    float f = f32_from_bits((seed & 0x807fffffu) | (((seed >> 23) % 40 + 100) << 23));
    double want = round_to_format(f, 10, -14, 15);
    EXPECT_EQ(double(f16_to_f32(f32_to_f16(f))), want) << "value " << f;
  }
  for (uint32_t b = 0; b < 65536; ++b) {
    float f = f16_to_f32(f16{uint16_t(b)});
    if (!std::isnan(f)) {
      EXPECT_EQ(f32_to_f16(f).bits, b);
    }
  }
  EXPECT_EQ(f32_to_f16(65520.f).bits, 0x7c00);  // halfway to 2^16 rounds to infinity
  EXPECT_EQ(f32_to_f16(65519.f).bits, 0x7bff);
}

TEST(DType, Names) {
  for (DType t : kAllDTypes) {
    EXPECT_EQ(dtype_from_name(dtype_name(t)), t);
    EXPECT_EQ(dtype_from_safetensors_name(dtype_safetensors_name(t)), t);
  }
  EXPECT_FALSE(dtype_from_name("f64").has_value());
}

TEST(Tensor, CheckedNumElements) {
  EXPECT_EQ(*checked_num_elements({2, 3, 4}), 24);
  EXPECT_EQ(*checked_num_elements({}), 1);
  EXPECT_EQ(checked_num_elements({-1, 2}).status().kind(), ErrorKind::kInvalidArgument);
  EXPECT_FALSE(checked_num_elements({int64_t(1) << 40, int64_t(1) << 40}).ok());
  Tensor t = Tensor::zeros(DType::kBF16, {3, 5});
  EXPECT_EQ(t.nbytes(), 30u);
  EXPECT_FALSE(t.reshaped({4, 4}).ok());
  EXPECT_EQ(t.reshaped({15})->num_elements(), 15);
}

}  // namespace
}  // namespace hlx
