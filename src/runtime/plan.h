// Static memory planning for one entry's intermediates.
//
// Every buffer that lives in the arena has a lifetime [first step that writes it, last step that
// reads it] (inclusive on both ends, so a step's outputs never overlap its inputs unless the
// kernel runs in place, which the planner expresses by giving both values one buffer). Offsets
// are assigned greedily: buffers in decreasing size order (ties: earlier start first) each take
// the lowest 64-byte-aligned offset that does not overlap, in address, any already placed buffer
// whose lifetime intersects its own (first fit). The arena's size is the highest end offset.
// Entry arguments, bound weights, constants and outputs live outside the arena.
#pragma once

#include <cstddef>
#include <vector>

namespace hlx::rt {

struct BufferLifetime {
  size_t bytes = 0;
  int first = 0;  // step index that defines the buffer
  int last = 0;   // last step index that reads it (>= first)
};

struct ArenaLayout {
  std::vector<size_t> offsets;  // per buffer, multiples of `alignment`
  size_t total_bytes = 0;
};

ArenaLayout plan_arena(const std::vector<BufferLifetime>& buffers, size_t alignment = 64);

}  // namespace hlx::rt
