// How a prompt is split into prefill calls over the compiled buckets. Pure arithmetic, so the
// near-capacity cases are tested without a model.
#pragma once

#include <cstdint>
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

// Chunks for writing `count` new rows at [start, start + count):
//  - the smallest bucket that holds the rest and fits below the capacity (one final chunk);
//  - otherwise the largest bucket that fits, filled completely;
//  - when even the smallest bucket does not fit (capacity - next row < smallest bucket), one chunk of
//    the smallest bucket that ends at the capacity and replays the rows before the next free row.
// kOutOfRange when start < 0, count < 1 or start + count > capacity.
Result<std::vector<PrefillChunk>> plan_prefill_chunks(const std::vector<int64_t>& buckets, int64_t capacity,
                                                      int64_t start, int64_t count);

}  // namespace hlx::engine
