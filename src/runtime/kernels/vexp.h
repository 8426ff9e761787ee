// Vectorised exp, logistic and tanh over f32 arrays, for stablehlo.exponential / logistic / tanh in
// both the one-op and the fused elementwise kernels (the same function on every element, so fused
// == unfused bits). With AVX-512 (vexp_avx512.cc): Cody-Waite reduction x = n ln2 + r, a degree-6
// polynomial for e^r and VSCALEFPS for the 2^n scaling, which gives IEEE overflow to +inf, gradual
// underflow through the subnormals and NaN in -> NaN out, like std::exp; max error 1 ulp on the
// normal range (tests/runtime/elementwise_test.cc sweeps a strided sample of all f32 bit
// patterns). tanh: evaluated in double (expm1 by Cody-Waite reduction and a Taylor series,
// relative error < 1e-14) and rounded once to f32, so the result is the correctly rounded tanh
// except for inputs whose exact tanh lies within ~1e-14 relative of a rounding midpoint: max error
// 1 ulp, measured 0.5 ulp (correctly rounded) on every 61st f32 bit pattern; NaN -> NaN, ±0 -> ±0,
// ±inf -> ±1. Without AVX-512 all three fall back to the <cmath> function element by element.
#pragma once

#include <cstdint>

namespace hlx::kernels {

// y[i] = e^x[i]; y may alias x.
void exp_f32(const float* x, float* y, int64_t n);
// y[i] = 1 / (1 + e^-x[i]), computed as e / (1 + e) with e = e^-|x| for x < 0 so that results
// below 1e-38 are not lost to e^-x overflowing; y may alias x.
void logistic_f32(const float* x, float* y, int64_t n);
// y[i] = tanh(x[i]); y may alias x.
void tanh_f32(const float* x, float* y, int64_t n);

namespace internal {
void exp_f32_avx512(const float* x, float* y, int64_t n);
void logistic_f32_avx512(const float* x, float* y, int64_t n);
void tanh_f32_avx512(const float* x, float* y, int64_t n);
}  // namespace internal

}  // namespace hlx::kernels
