#include "runtime/plan.h"

#include <algorithm>
#include <numeric>

namespace hlx::rt {

ArenaLayout plan_arena(const std::vector<BufferLifetime>& buffers, size_t alignment) {
  ArenaLayout layout;
  layout.offsets.assign(buffers.size(), 0);
  std::vector<size_t> order(buffers.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (buffers[a].bytes != buffers[b].bytes) return buffers[a].bytes > buffers[b].bytes;
    return buffers[a].first < buffers[b].first;
  });
  auto round_up = [&](size_t v) { return (v + alignment - 1) / alignment * alignment; };
  std::vector<size_t> placed;
  for (size_t i : order) {
    const BufferLifetime& b = buffers[i];
    if (b.bytes == 0) continue;
    // Address ranges of live-overlapping buffers, sorted by offset; take the first gap that fits.
    std::vector<std::pair<size_t, size_t>> busy;
    for (size_t j : placed) {
      const BufferLifetime& o = buffers[j];
      if (o.first <= b.last && b.first <= o.last)
        busy.emplace_back(layout.offsets[j], layout.offsets[j] + round_up(o.bytes));
    }
    std::sort(busy.begin(), busy.end());
    size_t offset = 0;
    for (auto [lo, hi] : busy) {
      if (offset + b.bytes <= lo) break;
      offset = std::max(offset, hi);
    }
    layout.offsets[i] = offset;
    layout.total_bytes = std::max(layout.total_bytes, offset + round_up(b.bytes));
    placed.push_back(i);
  }
  return layout;
}

}  // namespace hlx::rt
