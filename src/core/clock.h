// Elapsed-time helper for progress lines, metrics and benchmarks (the steady clock never jumps).
#pragma once

#include <chrono>

namespace hlx {

inline double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace hlx
