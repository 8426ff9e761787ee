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

std::vector<RowSpan> runs_of(std::span<const int64_t> ids, int64_t id) {
  std::vector<RowSpan> out;
  for (int64_t i = 0; i < int64_t(ids.size()); ++i) {
    if (ids[size_t(i)] != id) continue;
    if (!out.empty() && out.back().end == i)
      out.back().end = i + 1;
    else
      out.push_back({i, i + 1});
  }
  return out;
}

namespace {

// The span a boundary before row `at` would split, if any.
const RowSpan* split_by(std::span<const RowSpan> spans, int64_t at) {
  for (const RowSpan& s : spans)
    if (s.begin < at && at < s.end) return &s;
  return nullptr;
}

// The smallest bucket >= n, 0 when none.
int64_t smallest_holding(const std::vector<int64_t>& buckets, int64_t n) {
  for (int64_t b : buckets)
    if (b >= n) return b;
  return 0;
}

}  // namespace

Result<std::vector<PrefillChunk>> plan_prefill_chunks(const std::vector<int64_t>& buckets, int64_t capacity,
                                                      int64_t start, int64_t count, std::span<const RowSpan> atomic) {
  HLX_RETURN_IF_ERROR(validate_buckets(buckets, capacity));
  if (start < 0 || count < 1 || start > capacity || count > capacity - start)
    return make_error(ErrorKind::kOutOfRange, "prefill of ", count, " rows at start ", start,
                      " does not fit rows [0, capacity ", capacity, ")");
  for (int64_t at : {start, start + count})
    if (const RowSpan* s = split_by(atomic, at))
      return make_error(ErrorKind::kInvalidArgument, "prefill of rows [", start, ", ", start + count,
                        ") splits the image rows [", s->begin, ", ", s->end, ") at row ", at);
  std::vector<PrefillChunk> chunks;
  int64_t pos = start, rest = count;
  while (rest > 0) {
    int64_t room = capacity - pos;
    int64_t holds = 0, largest = 0, below = 0;
    for (int64_t b : buckets) {
      if (b > room) break;
      largest = b;
      if (b < rest) below = b;
      if (!holds && b >= rest) holds = b;
    }
    // Prefill is compute-bound, so padded rows are its cost: a full chunk of the largest bucket
    // below the rest, then the remainder, is taken when it computes fewer rows than one chunk of
    // `holds` (210 rows with buckets 32/128/512: 128 + 128 instead of 512) and splits no span.
    if (holds && below && !split_by(atomic, pos + below) && below + smallest_holding(buckets, rest - below) < holds) {
      chunks.push_back({pos, below, below, 0});
      pos += below;
      rest -= below;
      continue;
    }
    if (holds) {
      chunks.push_back({pos, holds, rest, 0});
      break;
    }
    if (largest) {
      int64_t length = largest;
      if (const RowSpan* s = split_by(atomic, pos + length)) {
        // End before the span; it goes whole into the next chunk.
        if (s->begin <= pos)
          return make_error(ErrorKind::kUnsupported, "image rows [", s->begin, ", ", s->end, ") (", s->end - s->begin,
                            " rows) do not fit the largest prefill bucket ", largest, " that fits at row ", pos);
        length = s->begin - pos;
      }
      chunks.push_back({pos, smallest_holding(buckets, length), length, 0});
      pos += length;
      rest -= length;
      continue;
    }
    // room < smallest bucket, and rest <= room: end the chunk at the capacity, starting it early
    // enough that it does not begin inside a span (its rows are replayed whole).
    int64_t b = buckets.front();
    int64_t s = capacity - b;
    while (const RowSpan* span = split_by(atomic, s)) {
      b = smallest_holding(buckets, capacity - span->begin);
      if (!b)
        return make_error(ErrorKind::kUnsupported, "replaying the image rows [", span->begin, ", ", span->end,
                          ") near context_capacity ", capacity, " needs a prefill bucket of ", capacity - span->begin,
                          " rows (largest: ", buckets.back(), ")");
      s = capacity - b;
    }
    chunks.push_back({s, b, pos + rest - s, pos - s});
    break;
  }
  return chunks;
}

}  // namespace hlx::engine
