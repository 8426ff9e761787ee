// How a prompt is split into prefill calls over the compiled buckets. Pure arithmetic, so the
// near-capacity cases are tested without a model.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"

namespace hlx::engine {

// One call of a prefill entry. Rows [start, start + length) of the slot are written; the entry is
// the one compiled for `bucket` rows, so start + bucket <= capacity always holds (padding rows
// never point past the cache even though the module would drop them).
struct PrefillChunk {
  int64_t start = 0;
  int64_t bucket = 0;
  int64_t length = 0;  // real rows, 1..bucket
  // Leading rows of this chunk that were already written by an earlier call and are recomputed
  // (their tokens come from the slot's history). Non-zero only near the capacity, where no bucket
  // fits between the next free row and the end of the cache; recomputing a row writes the same
  // K/V it already holds (same token, same position, same prefix).
  int64_t replay = 0;
  bool operator==(const PrefillChunk& o) const {
    return start == o.start && bucket == o.bucket && length == o.length && replay == o.replay;
  }
};

// kInvalidArgument unless buckets are non-empty, strictly ascending, positive and <= capacity.
Status validate_buckets(const std::vector<int64_t>& buckets, int64_t capacity);

// Rows [begin, end) of a prompt that one prefill call must hold whole (an image block whose rows
// attend to each other both ways).
struct RowSpan {
  int64_t begin = 0, end = 0;
};
// The runs of `id` in `ids` (Gemma3: the image soft-token rows of each image), in order.
std::vector<RowSpan> runs_of(std::span<const int64_t> ids, int64_t id);

// Chunks for writing `count` new rows at [start, start + count):
//  - the smallest bucket that holds the rest and fits below the capacity (one final chunk), unless
//    a full chunk of the largest bucket below the rest plus the smallest bucket holding what is
//    left computes fewer rows (then that full chunk, and plan the rest again);
//  - otherwise the largest bucket that fits, filled completely;
//  - when even the smallest bucket does not fit (capacity - next row < smallest bucket), one chunk of
//    the smallest bucket that ends at the capacity and replays the rows before the next free row.
// With `atomic` spans (sorted, disjoint), no chunk boundary falls strictly inside one: a chunk that
// would end inside a span ends at its start instead (in the smallest bucket that holds it), and a
// replaying chunk that would start inside one starts at its start (in a bucket that large). The
// same function plans TextModel's calls and the engine's chunk steps, so they always agree.
// kOutOfRange when start < 0, count < 1 or start + count > capacity; kInvalidArgument when start or
// start + count splits a span; kUnsupported when a span is longer than every bucket that fits.
Result<std::vector<PrefillChunk>> plan_prefill_chunks(const std::vector<int64_t>& buckets, int64_t capacity,
                                                      int64_t start, int64_t count,
                                                      std::span<const RowSpan> atomic = {});

}  // namespace hlx::engine
