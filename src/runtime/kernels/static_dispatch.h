// Turning a small runtime count (rows of a register tile) into a template argument, so each
// kernel is written once for a compile-time row count instead of once per `case`.
#pragma once

#include <type_traits>

namespace hlx::kernels {

// Calls f(std::integral_constant<int, V>{}) for V = clamp(value, Lo, Hi).
template <int Lo, int Hi, class F>
inline void with_count(int value, F&& f) {
  if constexpr (Lo == Hi) {
    f(std::integral_constant<int, Hi>{});
  } else if (value <= Lo) {
    f(std::integral_constant<int, Lo>{});
  } else {
    with_count<Lo + 1, Hi>(value, f);
  }
}

}  // namespace hlx::kernels
