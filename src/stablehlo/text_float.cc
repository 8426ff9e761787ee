#include "stablehlo/text_float.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <algorithm>
#include <vector>

namespace hlx::shlo::text {

double float_bits_to_double(uint64_t bits, DType t) {
  switch (t) {
    case DType::kF32:
      return f32_from_bits(uint32_t(bits));
    case DType::kBF16:
      return bf16_to_f32(bf16{uint16_t(bits)});
    case DType::kF16:
      return f16_to_f32(f16{uint16_t(bits)});
    default:
      return 0;
  }
}

namespace {

struct FloatFormat {
  int mantissa_bits;  // explicit fraction bits
  int min_exp;        // exponent of the smallest normal number
  int max_exp;        // exponent of the largest finite number
};

FloatFormat format_of(DType t) {
  switch (t) {
    case DType::kBF16:
      return {7, -126, 127};
    case DType::kF16:
      return {10, -14, 15};
    default:
      return {23, -126, 127};
  }
}

// Bits of a value already exactly representable in `t`.
uint64_t exact_bits(double r, DType t) {
  float f = float(r);
  if (t == DType::kF32) return f32_bits(f);
  if (t == DType::kBF16) return f32_bits(f) >> 16;
  return f32_to_f16(f).bits;
}

}  // namespace

uint64_t double_to_float_bits(double v, DType t) {
  if (t == DType::kF32) return f32_bits(float(v));  // the cast rounds to nearest even
  if (std::isnan(v)) return t == DType::kBF16 ? 0x7fc0 : 0x7e00;
  if (std::isinf(v)) return exact_bits(v, t);
  FloatFormat f = format_of(t);
  if (v == 0) return exact_bits(v, t);
  // Quantum (ulp) of `v` in the target format; scaling by a power of two is exact, and
  // nearbyint rounds ties to even, so this is a single correct rounding.
  int e = std::ilogb(v);
  if (e < f.min_exp) e = f.min_exp;
  int q = e - f.mantissa_bits;
  double r = std::ldexp(std::nearbyint(std::ldexp(v, -q)), q);
  double max_finite = std::ldexp(2.0 - std::ldexp(1.0, -f.mantissa_bits), f.max_exp);
  if (std::fabs(r) > max_finite) r = std::copysign(INFINITY, v);
  return exact_bits(r, t);
}

namespace {

// Minimal unsigned big integer (little-endian 32-bit limbs) for exact decimal conversion.
struct BigUInt {
  std::vector<uint32_t> limbs;
  explicit BigUInt(uint64_t v) {
    while (v) {
      limbs.push_back(uint32_t(v));
      v >>= 32;
    }
  }
  bool zero() const { return limbs.empty(); }
  void mul(uint32_t m) {
    uint64_t carry = 0;
    for (uint32_t& l : limbs) {
      uint64_t t = uint64_t(l) * m + carry;
      l = uint32_t(t);
      carry = t >> 32;
    }
    if (carry) limbs.push_back(uint32_t(carry));
  }
  void shl(int bits) {
    for (int i = 0; i < bits; ++i) mul(2);
  }
  uint32_t divmod(uint32_t d) {  // floor division in place, returns the remainder
    uint64_t rem = 0;
    for (size_t i = limbs.size(); i-- > 0;) {
      uint64_t cur = (rem << 32) | limbs[i];
      limbs[i] = uint32_t(cur / d);
      rem = cur % d;
    }
    while (!limbs.empty() && limbs.back() == 0) limbs.pop_back();
    return uint32_t(rem);
  }
  unsigned active_bits() const {
    if (limbs.empty()) return 0;
    unsigned b = unsigned(limbs.size() - 1) * 32;
    for (uint32_t top = limbs.back(); top; top >>= 1) ++b;
    return b;
  }
};

// Decimal digits (most significant first) and exponent (value = digits * 10^exp) of a finite
// nonzero value, computed the way LLVM's APFloat::toString does: the exact N * 2^e is turned into
// N' * 10^e, then low decimal digits beyond what `precision` needs are truncated (floor), and only
// then the remaining digits are rounded half-up. Matching this matters: stablehlo-opt's output
// differs from a correctly rounded "%.6e" in the last digit for some values.
void apfloat_digits(uint64_t bits, DType t, size_t precision, std::string& digits, int& exp) {
  FloatFormat f = format_of(t);
  int total_bits = int(dtype_size(t) * 8);
  int exp_bits = total_bits - 1 - f.mantissa_bits;
  uint64_t mant = bits & ((uint64_t(1) << f.mantissa_bits) - 1);
  int biased = int((bits >> f.mantissa_bits) & ((uint64_t(1) << exp_bits) - 1));
  int bias = (1 << (exp_bits - 1)) - 1;
  uint64_t n = biased ? (mant | (uint64_t(1) << f.mantissa_bits)) : mant;
  exp = (biased ? biased : 1) - bias - f.mantissa_bits;
  while (!(n & 1)) {
    n >>= 1;
    ++exp;
  }
  BigUInt big(n);
  if (exp > 0) {
    big.shl(exp);
    exp = 0;
  } else {
    for (int i = 0; i < -exp; ++i) big.mul(5);
  }
  unsigned active = big.active_bits();
  unsigned required = unsigned((precision * 196 + 58) / 59);
  if (active > required) {
    unsigned removable = (active - required) * 59 / 196;
    for (unsigned i = 0; i < removable; ++i) big.divmod(10);
    exp += int(removable);
  }
  digits.clear();  // least significant first while generating
  bool trailing = true;
  while (!big.zero()) {
    uint32_t d = big.divmod(10);
    if (trailing && d == 0) {
      ++exp;
      continue;
    }
    trailing = false;
    digits.push_back(char('0' + d));
  }
  if (digits.empty()) digits.push_back('0');
  // Round half up on the first dropped digit, then drop trailing zeros.
  size_t nd = digits.size();
  if (nd > precision) {
    size_t first = nd - precision;
    if (digits[first - 1] < '5') {
      while (first < nd && digits[first] == '0') ++first;
      exp += int(first);
      digits.erase(0, first);
    } else {
      size_t i = first;
      while (i < nd && digits[i] == '9') {
        ++first;
        ++i;
      }
      if (first == nd) {
        exp += int(first);
        digits = "1";
      } else {
        ++digits[i];
        exp += int(first);
        digits.erase(0, first);
      }
    }
  }
  std::reverse(digits.begin(), digits.end());
}

// The spelling of APFloat::toString(precision, max_padding, truncate_zero) for a finite value.
std::string apfloat_string(uint64_t bits, DType t, size_t precision, unsigned max_padding, bool truncate_zero) {
  double v = float_bits_to_double(bits, t);
  std::string out = std::signbit(v) ? "-" : "";
  if (v == 0) {
    if (max_padding != 0) return out + "0";
    if (truncate_zero) return out + "0.0E+0";
    out += "0.0";
    if (precision > 1) out.append(precision - 1, '0');
    return out + "e+00";
  }
  std::string digits;
  int exp = 0;
  apfloat_digits(bits, t, precision, digits, exp);
  int n = int(digits.size());
  int exp10 = exp + (n - 1);  // value = d1.d2d3... * 10^exp10
  bool scientific;
  if (max_padding == 0) {
    scientific = true;
  } else if (exp >= 0) {
    scientific = exp > int(max_padding) || n + exp > int(precision);
  } else {
    int msd = exp + n - 1;
    scientific = msd >= 0 ? false : -msd > int(max_padding);
  }
  if (scientific) {
    out += digits[0];
    out += '.';
    if (n == 1 && truncate_zero)
      out += '0';
    else
      out += digits.substr(1);
    if (!truncate_zero && int(precision) > n - 1) out.append(size_t(int(precision) - n + 1), '0');
    out += truncate_zero ? 'E' : 'e';
    out += exp10 >= 0 ? '+' : '-';
    std::string e = std::to_string(exp10 >= 0 ? exp10 : -exp10);
    if (!truncate_zero && e.size() < 2) e = "0" + e;
    return out + e;
  }
  if (exp >= 0) return out + digits + std::string(size_t(exp), '0');
  int whole = exp + n;
  if (whole > 0) return out + digits.substr(0, size_t(whole)) + "." + digits.substr(size_t(whole));
  return out + "0." + std::string(size_t(-whole), '0') + digits;
}

int semantic_precision(DType t) { return format_of(t).mantissa_bits + 1; }

std::string hex_bits(uint64_t bits) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%llX", static_cast<unsigned long long>(bits));
  return buf;
}

}  // namespace

std::string format_float(uint64_t bits, DType t) {
  double v = float_bits_to_double(bits, t);
  if (std::isfinite(v)) {
    std::string s = apfloat_string(bits, t, 6, 0, false);
    std::optional<uint64_t> back = parse_float_bits(s, t);
    if (back && *back == bits) return s;
    s = apfloat_string(bits, t, size_t(2 + semantic_precision(t) * 59 / 196), 3, true);
    back = parse_float_bits(s, t);
    if (s.find('.') != std::string::npos && back && *back == bits) return s;
  }
  return hex_bits(bits);
}

std::optional<uint64_t> parse_float_bits(std::string_view spelling, DType t) {
  std::string s(spelling);
  bool neg = !s.empty() && s[0] == '-';
  std::string body = neg ? s.substr(1) : s;
  if (body == "inf") return double_to_float_bits(neg ? -INFINITY : INFINITY, t);
  if (body == "nan") return double_to_float_bits(NAN, t);
  if (body.starts_with("0x")) {
    if (neg || body.size() < 3 || body.size() > 2 + 16) return std::nullopt;
    uint64_t bits = 0;
    for (char c : body.substr(2)) {
      int d = (c >= '0' && c <= '9')   ? c - '0'
              : (c >= 'a' && c <= 'f') ? c - 'a' + 10
              : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                                       : -1;
      if (d < 0) return std::nullopt;
      bits = bits * 16 + uint64_t(d);
    }
    if (bits >> (dtype_size(t) * 8)) return std::nullopt;
    return bits;
  }
  if (body.empty() || body[0] < '0' || body[0] > '9') return std::nullopt;
  for (char c : body)
    if (!((c >= '0' && c <= '9') || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-')) return std::nullopt;
  char* end = nullptr;
  if (t == DType::kF32) {
    float f = std::strtof(s.c_str(), &end);
    if (end != s.c_str() + s.size()) return std::nullopt;
    return f32_bits(f);
  }
  // Short decimals cannot sit close enough to a bf16/f16 rounding midpoint for the double
  // intermediate to round differently from a direct conversion.
  double d = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size()) return std::nullopt;
  return double_to_float_bits(d, t);
}

}  // namespace hlx::shlo::text
