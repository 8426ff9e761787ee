// Scalar semantics of every elementwise op, shared by the one-op kernels and the fused kernel so
// both give bit-identical results. Floats compute in f32 (16-bit floats are loaded exactly and
// rounded once on store); integers compute in their own type with XLA's wrap-around rules.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "core/dtype.h"
#include "runtime/kernels/vexp.h"

namespace hlx::rt::ew {

enum class UnOp {
  kNegate,
  kAbs,
  kSign,
  kNot,
  kExp,
  kExpm1,
  kLog,
  kLog1p,
  kSqrt,
  kRsqrt,
  kTanh,
  kLogistic,
  kSin,
  kCos,
  kFloor,
  kCeil,
  kRoundAfz,
  kRoundEven,
  kErf,
};
enum class BinOp { kAdd, kSub, kMul, kDiv, kRem, kMax, kMin, kPow, kAnd, kOr, kXor };

// Which (op, element type) pairs the spec allows.
constexpr bool unary_supported(UnOp op, DType t) {
  switch (op) {
    case UnOp::kNegate:
      return t != DType::kI1;
    case UnOp::kAbs:
    case UnOp::kSign:
      return t != DType::kI1 && t != DType::kU8;
    case UnOp::kNot:
      return !is_float(t);
    default:
      return is_float(t);
  }
}
constexpr bool binary_supported(BinOp op, DType t) {
  switch (op) {
    case BinOp::kAnd:
    case BinOp::kOr:
    case BinOp::kXor:
      return !is_float(t);
    case BinOp::kAdd:
    case BinOp::kMul:
    case BinOp::kMax:
    case BinOp::kMin:
      return true;
    default:
      return t != DType::kI1;  // subtract, divide, remainder, power: numbers only
  }
}

// ---- f32 ----

// IEEE maximum/minimum: NaN propagates, -0 < +0.
inline float fmax_nan(float a, float b) {
  if (a != a) return a;
  if (b != b) return b;
  if (a > b) return a;
  if (b > a) return b;
  return std::signbit(a) ? b : a;
}
inline float fmin_nan(float a, float b) {
  if (a != a) return a;
  if (b != b) return b;
  if (a < b) return a;
  if (b < a) return b;
  return std::signbit(a) ? a : b;
}

template <UnOp O>
inline float unary_f(float x) {
  if constexpr (O == UnOp::kNegate)
    return -x;
  else if constexpr (O == UnOp::kAbs)
    return std::fabs(x);
  else if constexpr (O == UnOp::kSign)
    return (x != x || x == 0.0f) ? x : std::copysign(1.0f, x);
  else if constexpr (O == UnOp::kExp)
    return std::exp(x);
  else if constexpr (O == UnOp::kExpm1)
    return std::expm1(x);
  else if constexpr (O == UnOp::kLog)
    return std::log(x);
  else if constexpr (O == UnOp::kLog1p)
    return std::log1p(x);
  else if constexpr (O == UnOp::kSqrt)
    return std::sqrt(x);
  else if constexpr (O == UnOp::kRsqrt)
    return 1.0f / std::sqrt(x);
  else if constexpr (O == UnOp::kTanh)
    return std::tanh(x);
  else if constexpr (O == UnOp::kLogistic)
    return 1.0f / (1.0f + std::exp(-x));
  else if constexpr (O == UnOp::kSin)
    return std::sin(x);
  else if constexpr (O == UnOp::kCos)
    return std::cos(x);
  else if constexpr (O == UnOp::kFloor)
    return std::floor(x);
  else if constexpr (O == UnOp::kCeil)
    return std::ceil(x);
  else if constexpr (O == UnOp::kRoundAfz)
    return std::round(x);  // half away from zero
  else if constexpr (O == UnOp::kRoundEven)
    return std::nearbyint(x);  // default mode: half to even
  else if constexpr (O == UnOp::kErf)
    return std::erf(x);
  else
    static_assert(O == UnOp::kNegate, "not a float op");
}

// exp, logistic and tanh also have an array form (kernels/vexp.h, vectorised): the one-op and the
// fused kernels both call it for these ops, never unary_f, so they agree bit for bit.
constexpr bool vector_unary(UnOp o) { return o == UnOp::kExp || o == UnOp::kLogistic || o == UnOp::kTanh; }
template <UnOp O>
inline void unary_f32_n(const float* x, float* y, int64_t n) {
  static_assert(vector_unary(O));
  if constexpr (O == UnOp::kExp)
    kernels::exp_f32(x, y, n);
  else if constexpr (O == UnOp::kLogistic)
    kernels::logistic_f32(x, y, n);
  else
    kernels::tanh_f32(x, y, n);
}
inline constexpr int64_t kVecChunk = 512;  // f32 staging for 16-bit types (2 KiB of stack)

template <BinOp O>
inline float binary_f(float a, float b) {
  if constexpr (O == BinOp::kAdd)
    return a + b;
  else if constexpr (O == BinOp::kSub)
    return a - b;
  else if constexpr (O == BinOp::kMul)
    return a * b;
  else if constexpr (O == BinOp::kDiv)
    return a / b;
  else if constexpr (O == BinOp::kRem)
    return std::fmod(a, b);  // sign of the dividend
  else if constexpr (O == BinOp::kMax)
    return fmax_nan(a, b);
  else if constexpr (O == BinOp::kMin)
    return fmin_nan(a, b);
  else if constexpr (O == BinOp::kPow) {
    // IEEE pow(x, ±0) = pow(1, y) = 1 even for NaN; glibc returns NaN for signaling NaNs.
    if (b == 0.0f || a == 1.0f) return 1.0f;
    return std::pow(a, b);
  } else
    static_assert(O == BinOp::kAdd, "not a float op");
}

// ---- integers (not i1) ----

// Unsigned type at least as wide as int, so wrap-around arithmetic never hits UB via promotion.
template <class T>
using Wide = std::conditional_t<(sizeof(T) < 4), uint32_t, std::make_unsigned_t<T>>;

template <UnOp O, class T>
inline T unary_i(T x) {
  using W = Wide<T>;
  if constexpr (O == UnOp::kNegate)
    return T(W(0) - W(x));
  else if constexpr (O == UnOp::kAbs)
    return x < 0 ? T(W(0) - W(x)) : x;  // abs(INT_MIN) = INT_MIN
  else if constexpr (O == UnOp::kSign)
    return T((x > 0) - (x < 0));
  else if constexpr (O == UnOp::kNot)
    return T(~x);
  else
    static_assert(O == UnOp::kNegate, "not an integer op");
}

template <class T>
inline T ipow(T a, T b) {
  using W = Wide<T>;
  if constexpr (std::is_signed_v<T>) {
    // XLA: a negative exponent gives 0, except for bases 1 and -1.
    if (b < 0) return a == 1 ? T(1) : a == -1 ? T((b & 1) ? -1 : 1) : T(0);
  }
  W r = 1, base = W(a);
  auto e = std::make_unsigned_t<T>(b);
  while (e) {
    if (e & 1) r = W(r * base);
    base = W(base * base);
    e >>= 1;
  }
  return T(r);
}

template <BinOp O, class T>
inline T binary_i(T a, T b) {
  using W = Wide<T>;
  constexpr T kMin = std::numeric_limits<T>::min();
  if constexpr (O == BinOp::kAdd)
    return T(W(a) + W(b));
  else if constexpr (O == BinOp::kSub)
    return T(W(a) - W(b));
  else if constexpr (O == BinOp::kMul)
    return T(W(a) * W(b));
  else if constexpr (O == BinOp::kDiv) {
    if (b == 0) return T(-1);  // all bits set, as XLA
    if constexpr (std::is_signed_v<T>)
      if (a == kMin && b == -1) return kMin;
    return T(a / b);
  } else if constexpr (O == BinOp::kRem) {
    if (b == 0) return a;
    if constexpr (std::is_signed_v<T>)
      if (a == kMin && b == -1) return 0;
    return T(a % b);
  } else if constexpr (O == BinOp::kMax)
    return a > b ? a : b;
  else if constexpr (O == BinOp::kMin)
    return a < b ? a : b;
  else if constexpr (O == BinOp::kPow)
    return ipow(a, b);
  else if constexpr (O == BinOp::kAnd)
    return T(a & b);
  else if constexpr (O == BinOp::kOr)
    return T(a | b);
  else if constexpr (O == BinOp::kXor)
    return T(a ^ b);
}

// ---- i1 (bytes holding 0 or 1) ----

template <UnOp O>
inline uint8_t unary_b(uint8_t x) {
  static_assert(O == UnOp::kNot, "not a boolean op");
  return uint8_t(x ^ 1);
}
template <BinOp O>
inline uint8_t binary_b(uint8_t a, uint8_t b) {
  if constexpr (O == BinOp::kAnd || O == BinOp::kMul || O == BinOp::kMin)
    return uint8_t(a & b);
  else if constexpr (O == BinOp::kOr || O == BinOp::kAdd || O == BinOp::kMax)
    return uint8_t(a | b);
  else if constexpr (O == BinOp::kXor)
    return uint8_t(a ^ b);
  else
    static_assert(O == BinOp::kAnd, "not a boolean op");
}

// ---- conversions ----

// Rounds an integer to `bits` significant bits (ties to even); the result is exact in f32 when
// bits <= 24, so integer -> bf16/f16 rounds once instead of twice through f32.
inline float round_int_to_bits(int64_t v, int bits) {
  uint64_t m = v < 0 ? uint64_t(0) - uint64_t(v) : uint64_t(v);
  if (m >> bits) {
    int n = 64 - __builtin_clzll(m);
    int shift = n - bits;
    uint64_t q = m >> shift, r = m & ((uint64_t(1) << shift) - 1), half = uint64_t(1) << (shift - 1);
    if (r > half || (r == half && (q & 1))) ++q;
    m = q << shift;  // m <= 2^63 here, so no carry out of 64 bits
  }
  float f = float(m);  // exact: at most `bits` significant bits
  return v < 0 ? -f : f;
}

// Float -> integer: truncate toward zero, saturate, NaN -> 0 (XLA CPU semantics).
template <class T>
inline T float_to_int(float v) {
  if (v != v) return T(0);
  // 2^(value bits) and the minimum (0 or -2^bits) are exact in f32; beyond them we saturate.
  constexpr float upper = float(uint64_t(1) << std::numeric_limits<T>::digits);
  constexpr float lower = float(std::numeric_limits<T>::min());
  if (v >= upper) return std::numeric_limits<T>::max();
  if (v <= lower) return std::numeric_limits<T>::min();
  return T(v);
}

}  // namespace hlx::rt::ew
