// Float and integer element spelling, compatible with MLIR's printer and parser:
// - format_float prints what MLIR prints: "%.6e"-style with 6 fraction digits when that round-trips,
//   else the shortest safe decimal ("3.14159203"), else the bit pattern in hex ("0x7FC00000") for
//   inf/NaN and numbers without a decimal point. Every spelling re-parses to the same bits.
// - parse_float_bits reads decimal, integer, or hex-bit-pattern spellings into a dtype's bits with
//   round-to-nearest-even.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/dtype.h"

namespace hlx::shlo::text {

// Bits of the f32/f16/bf16 value (low bits of the result) <-> double (exact).
double float_bits_to_double(uint64_t bits, DType t);
// Rounds `v` to the nearest representable value of `t` (ties to even, overflow to inf).
uint64_t double_to_float_bits(double v, DType t);

std::string format_float(uint64_t bits, DType t);

// Returns nullopt when `spelling` is not a number or a hex pattern does not fit `t`'s width.
std::optional<uint64_t> parse_float_bits(std::string_view spelling, DType t);

}  // namespace hlx::shlo::text
