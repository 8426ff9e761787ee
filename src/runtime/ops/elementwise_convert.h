// Scalar element-type conversion with XLA CPU semantics (used by convert and iota).
#pragma once

#include "runtime/ops/elementwise_common.h"
#include "runtime/ops/elementwise_functors.h"

namespace hlx::rt::ew {

template <DType S, DType D>
inline St<D> convert_scalar(St<S> v) {
  if constexpr (S == D) {
    return v;
  } else if constexpr (is_float(S)) {
    float f = load_f<S>(v);
    if constexpr (is_float(D))
      return store_f<D>(f);
    else if constexpr (D == DType::kI1)
      return uint8_t(f != 0.0f);  // NaN != 0: true
    else
      return float_to_int<St<D>>(f);
  } else {
    // Integer or i1 source; i1 bytes hold 0/1 so they read as integers.
    if constexpr (D == DType::kI1) {
      return uint8_t(v != 0);
    } else if constexpr (is_float(D)) {
      // Sources of at most 16 bits are exact in f32, so one rounding happens in store_f. Wider
      // ones round directly to the destination's significand width (f32 hardware conversion
      // is already correctly rounded).
      if constexpr (dtype_size(S) <= 2 || D == DType::kF32)
        return store_f<D>(float(v));
      else
        return store_f<D>(round_int_to_bits(int64_t(v), D == DType::kBF16 ? 8 : 11));
    } else {
      using U = std::make_unsigned_t<St<D>>;
      return St<D>(U(uint64_t(int64_t(v))));  // two's complement truncation
    }
  }
}

}  // namespace hlx::rt::ew
