// Bucket choice for chunked prefill, including the rows right below the capacity.
#include "engine/prefill_plan.h"

#include <gtest/gtest.h>

namespace hlx::engine {
namespace {

using Chunks = std::vector<PrefillChunk>;

// Every chunk respects start + bucket <= capacity, covers rows exactly once beyond its replay,
// and the chunks together write [start, start + count).
void check_invariants(const Chunks& cs, int64_t capacity, int64_t start, int64_t count) {
  int64_t next = start;
  for (const auto& c : cs) {
    EXPECT_LE(c.start + c.bucket, capacity);
    EXPECT_GE(c.length, 1);
    EXPECT_LE(c.length, c.bucket);
    EXPECT_EQ(c.start + c.replay, next) << "chunk must resume at the next unwritten row";
    next = c.start + c.length;
  }
  EXPECT_EQ(next, start + count);
}

TEST(PrefillPlan, FewestPaddedRows) {
  std::vector<int64_t> b = {32, 128, 512, 1000};
  auto cs = plan_prefill_chunks(b, 1000, 0, 5);
  ASSERT_TRUE(cs.ok());
  EXPECT_EQ(*cs, (Chunks{{0, 32, 5, 0}}));
  // One 128-row chunk would compute 128 rows; 32 + 32 compute 64.
  cs = plan_prefill_chunks(b, 1000, 0, 33);
  EXPECT_EQ(*cs, (Chunks{{0, 32, 32, 0}, {32, 32, 1, 0}}));
  // 128 + 128 rows instead of 512 (a Qwen3-VL prompt with one 448x448 image).
  cs = plan_prefill_chunks(b, 1000, 0, 210);
  EXPECT_EQ(*cs, (Chunks{{0, 128, 128, 0}, {128, 128, 82, 0}}));
  cs = plan_prefill_chunks(b, 1000, 0, 600);
  EXPECT_EQ(*cs, (Chunks{{0, 512, 512, 0}, {512, 128, 88, 0}}));
  // 512 + 512 would compute more rows than the 1000 bucket.
  cs = plan_prefill_chunks(b, 1000, 0, 1000);
  EXPECT_EQ(*cs, (Chunks{{0, 1000, 1000, 0}}));
  // Equal rows (32 + 128 = 160 > 128): one chunk.
  cs = plan_prefill_chunks(b, 1000, 0, 100);
  EXPECT_EQ(*cs, (Chunks{{0, 128, 100, 0}}));
  // A split that would cut an image span is not taken: one chunk holds it.
  const std::vector<RowSpan> span = {{100, 150}};
  cs = plan_prefill_chunks(b, 1000, 0, 210, span);
  EXPECT_EQ(*cs, (Chunks{{0, 512, 210, 0}}));
}

TEST(PrefillPlan, LongPromptUsesLargestFittingBucketThenSmallest) {
  std::vector<int64_t> b = {4, 8};
  auto cs = plan_prefill_chunks(b, 64, 0, 19);
  ASSERT_TRUE(cs.ok());
  EXPECT_EQ(*cs, (Chunks{{0, 8, 8, 0}, {8, 8, 8, 0}, {16, 4, 3, 0}}));
  check_invariants(*cs, 64, 0, 19);
}

TEST(PrefillPlan, NearCapacityPicksASmallerBucketThatFits) {
  // 900 + 128 > 1000, so the 90 remaining rows go as 32 + 32 + 26 (the last in a 32 bucket).
  std::vector<int64_t> b = {32, 128, 512, 1000};
  auto cs = plan_prefill_chunks(b, 1000, 900, 90);
  ASSERT_TRUE(cs.ok());
  EXPECT_EQ(*cs, (Chunks{{900, 32, 32, 0}, {932, 32, 32, 0}, {964, 32, 26, 0}}));
  check_invariants(*cs, 1000, 900, 90);
}

TEST(PrefillPlan, NoBucketFitsBelowCapacityReplaysEarlierRows) {
  // Row 990 with 10 rows to go: even the 32 bucket would end at 1022 > 1000. The chunk ends at
  // the capacity instead (start 968) and recomputes the 22 rows 968..989.
  std::vector<int64_t> b = {32, 128, 512, 1000};
  auto cs = plan_prefill_chunks(b, 1000, 990, 10);
  ASSERT_TRUE(cs.ok());
  EXPECT_EQ(*cs, (Chunks{{968, 32, 32, 22}}));
  check_invariants(*cs, 1000, 990, 10);
  // Fewer rows than room: the chunk still ends within the capacity, padding the tail.
  cs = plan_prefill_chunks(b, 1000, 990, 3);
  EXPECT_EQ(*cs, (Chunks{{968, 32, 25, 22}}));
  check_invariants(*cs, 1000, 990, 3);
}

// Image blocks (Gemma3) are never split: a chunk that would end inside one ends at its start, in
// the smallest bucket that holds the shorter chunk; the block goes whole into the next chunk.
TEST(PrefillPlan, ImageSpansAreAtomic) {
  std::vector<int64_t> b = {6, 8};
  const std::vector<int64_t> ids = {2, 5, 17, 9, 11, 1, 7, 7, 7, 7, 1, 4, 1, 7, 7, 7, 7, 1, 4};
  const std::vector<RowSpan> spans = runs_of(ids, 7);
  ASSERT_EQ(spans.size(), 2u);
  EXPECT_EQ(spans[0].begin, 6);
  EXPECT_EQ(spans[0].end, 10);
  EXPECT_EQ(spans[1].begin, 13);
  EXPECT_EQ(spans[1].end, 17);
  auto cs = plan_prefill_chunks(b, 64, 0, 19, spans);
  ASSERT_TRUE(cs.ok()) << cs.status().to_string();
  EXPECT_EQ(*cs, (Chunks{{0, 6, 6, 0}, {6, 8, 7, 0}, {13, 6, 6, 0}}));
  check_invariants(*cs, 64, 0, 19);
  // Without spans the same prompt is cut at 8 and 16, inside both blocks.
  EXPECT_EQ(*plan_prefill_chunks(b, 64, 0, 19), (Chunks{{0, 8, 8, 0}, {8, 8, 8, 0}, {16, 6, 3, 0}}));
  // A block longer than every bucket that fits, and a prefill that starts or ends inside a block,
  // are typed errors.
  const std::vector<RowSpan> wide = {{2, 12}};
  auto r = plan_prefill_chunks(b, 64, 0, 19, wide);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().kind(), ErrorKind::kUnsupported);
  EXPECT_NE(r.status().to_string().find("[2, 12)"), std::string::npos);
  EXPECT_EQ(plan_prefill_chunks(b, 64, 7, 10, spans).status().kind(), ErrorKind::kInvalidArgument);
  EXPECT_EQ(plan_prefill_chunks(b, 64, 0, 8, spans).status().kind(), ErrorKind::kInvalidArgument);
}

// Near the capacity the replaying chunk starts at the block's first row, not inside it (its rows
// must see the whole block again), in a bucket large enough.
TEST(PrefillPlan, ReplayNearCapacityStartsAtAnImageBlock) {
  std::vector<int64_t> b = {4, 8, 40};
  const std::vector<RowSpan> spans = {{30, 34}};
  // Rows 38..39 to write at capacity 40: the 4 bucket would start at 36 (fine, after the block).
  auto cs = plan_prefill_chunks(b, 40, 38, 2, spans);
  ASSERT_TRUE(cs.ok());
  EXPECT_EQ(*cs, (Chunks{{36, 4, 4, 2}}));
  // Block [34, 38): the 4 bucket starts at 36, inside it; move to 34 -> the 8 bucket from 32.
  const std::vector<RowSpan> late = {{34, 38}};
  cs = plan_prefill_chunks(b, 40, 38, 2, late);
  ASSERT_TRUE(cs.ok()) << cs.status().to_string();
  EXPECT_EQ(*cs, (Chunks{{32, 8, 8, 6}}));
  check_invariants(*cs, 40, 38, 2);
}

TEST(PrefillPlan, EveryStartAndCountKeepsTheInvariants) {
  std::vector<int64_t> b = {4, 16, 37};
  const int64_t cap = 37;
  for (int64_t start = 0; start < cap; ++start)
    for (int64_t count = 1; start + count <= cap; ++count) {
      auto cs = plan_prefill_chunks(b, cap, start, count);
      ASSERT_TRUE(cs.ok()) << start << "+" << count << ": " << cs.status().to_string();
      check_invariants(*cs, cap, start, count);
    }
}

TEST(PrefillPlan, Errors) {
  std::vector<int64_t> b = {4, 8};
  EXPECT_EQ(plan_prefill_chunks(b, 16, 10, 7).status().kind(), ErrorKind::kOutOfRange);
  EXPECT_EQ(plan_prefill_chunks(b, 16, -1, 2).status().kind(), ErrorKind::kOutOfRange);
  EXPECT_EQ(plan_prefill_chunks(b, 16, 0, 0).status().kind(), ErrorKind::kOutOfRange);
  EXPECT_EQ(plan_prefill_chunks({}, 16, 0, 1).status().kind(), ErrorKind::kInvalidArgument);
  EXPECT_EQ(plan_prefill_chunks({8, 4}, 16, 0, 1).status().kind(), ErrorKind::kInvalidArgument);
  EXPECT_EQ(plan_prefill_chunks({4, 32}, 16, 0, 1).status().kind(), ErrorKind::kInvalidArgument);
  EXPECT_EQ(validate_buckets({0, 4}, 16).kind(), ErrorKind::kInvalidArgument);
}

}  // namespace
}  // namespace hlx::engine
