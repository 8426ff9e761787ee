#include "engine/prefill_plan.h"

namespace hlx::engine {

Status validate_buckets(const std::vector<int64_t>& buckets, int64_t capacity) {
  if (buckets.empty()) return make_error(ErrorKind::kInvalidArgument, "no prefill buckets");
  for (size_t i = 0; i < buckets.size(); ++i) {
    if (buckets[i] < 1 || buckets[i] > capacity)
      return make_error(ErrorKind::kInvalidArgument, "prefill bucket ", buckets[i], " is outside [1, capacity ",
                        capacity, "]");
    if (i > 0 && buckets[i] <= buckets[i - 1])
      return make_error(ErrorKind::kInvalidArgument, "prefill buckets must be strictly ascending: ", buckets[i - 1],
                        " then ", buckets[i]);
  }
  return ok_status();
}

Result<std::vector<PrefillChunk>> plan_prefill_chunks(const std::vector<int64_t>& buckets, int64_t capacity,
                                                      int64_t start, int64_t count) {
  HLX_RETURN_IF_ERROR(validate_buckets(buckets, capacity));
  if (start < 0 || count < 1 || start > capacity || count > capacity - start)
    return make_error(ErrorKind::kOutOfRange, "prefill of ", count, " rows at start ", start,
                      " does not fit rows [0, capacity ", capacity, ")");
  std::vector<PrefillChunk> chunks;
  int64_t pos = start, rest = count;
  while (rest > 0) {
    int64_t room = capacity - pos;
    int64_t holds = 0, largest = 0;
    for (int64_t b : buckets) {
      if (b > room) break;
      largest = b;
      if (!holds && b >= rest) holds = b;
    }
    if (holds) {
      chunks.push_back({pos, holds, rest, 0});
      break;
    }
    if (largest) {
      chunks.push_back({pos, largest, largest, 0});
      pos += largest;
      rest -= largest;
      continue;
    }
    // room < smallest bucket, and rest <= room: end the chunk at the capacity.
    int64_t b = buckets.front();
    int64_t s = capacity - b;
    chunks.push_back({s, b, pos + rest - s, pos - s});
    break;
  }
  return chunks;
}

}  // namespace hlx::engine
