// Elapsed and remaining time for progress lines, metrics, deadlines and benchmarks (the steady
// clock never jumps).
#pragma once

#include <chrono>

namespace hlx {

inline double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Whole milliseconds until `deadline`, 0 once it has passed (a poll() timeout).
inline int ms_left(std::chrono::steady_clock::time_point deadline) {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
  return left <= 0 ? 0 : int(left);
}

}  // namespace hlx
