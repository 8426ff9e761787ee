// Admission is the one capacity check every request passes; these pin its boundary exactly.
#include "engine/admission.h"

#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

namespace hlx::engine {
namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

std::vector<int64_t> ids(int64_t n) { return std::vector<int64_t>(size_t(n), 7); }

TEST(Admission, ExactFitPasses) {
  auto p = ids(10);
  Admission a = check_text_admission({16, 100}, p, 6);
  EXPECT_TRUE(a.ok()) << a.status.to_string();
  EXPECT_EQ(a.effective_prompt_len, 10);
  EXPECT_EQ(a.max_new_tokens, 6);
  EXPECT_EQ(a.context_capacity, 16);
}

TEST(Admission, PromptFillingCapacityWithZeroNewTokensPasses) {
  auto p = ids(16);
  EXPECT_TRUE(check_text_admission({16, 100}, p, 0).ok());
}

TEST(Admission, OneTokenOverflowFromMaxNewTokens) {
  auto p = ids(10);
  Admission a = check_text_admission({16, 100}, p, 7);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status.kind(), ErrorKind::kCapacityExceeded);
  EXPECT_TRUE(a.capacity_exceeded());
  EXPECT_EQ(a.effective_prompt_len, 10);
  EXPECT_EQ(a.max_new_tokens, 7);
  EXPECT_EQ(a.context_capacity, 16);
  const std::string& m = a.status.message();
  EXPECT_TRUE(contains(m, "prompt 10")) << m;
  EXPECT_TRUE(contains(m, "max_new_tokens 7")) << m;
  EXPECT_TRUE(contains(m, "= 17")) << m;
  EXPECT_TRUE(contains(m, "context_capacity 16")) << m;
}

TEST(Admission, OneTokenPromptOverflow) {
  // The prompt alone is one token longer than the capacity.
  auto p = ids(17);
  Admission a = check_text_admission({16, 100}, p, 0);
  ASSERT_EQ(a.status.kind(), ErrorKind::kCapacityExceeded);
  EXPECT_EQ(a.effective_prompt_len, 17);
  EXPECT_EQ(a.max_new_tokens, 0);
  EXPECT_EQ(a.context_capacity, 16);
  EXPECT_TRUE(contains(a.status.message(), "prompt 17")) << a.status.message();
  EXPECT_TRUE(contains(a.status.message(), "context_capacity 16")) << a.status.message();
}

TEST(Admission, HugeMaxNewTokensDoesNotOverflow) {
  auto p = ids(3);
  Admission a = check_text_admission({16, 100}, p, std::numeric_limits<int64_t>::max());
  ASSERT_EQ(a.status.kind(), ErrorKind::kCapacityExceeded);
  EXPECT_EQ(a.max_new_tokens, std::numeric_limits<int64_t>::max());
  EXPECT_TRUE(contains(a.status.message(), "overflows")) << a.status.message();
}

TEST(Admission, EffectiveLengthNotTokenCountIsWhatCounts) {
  // Multimodal prompts: the post-expansion length is what occupies the cache.
  std::vector<int64_t> p = {1, 2, 3};
  Admission a = check_admission({16, 100}, AdmissionRequest{15, 2, p});
  ASSERT_EQ(a.status.kind(), ErrorKind::kCapacityExceeded);
  EXPECT_EQ(a.effective_prompt_len, 15);
  EXPECT_TRUE(check_admission({16, 100}, AdmissionRequest{15, 1, p}).ok());
}

TEST(Admission, InvalidArguments) {
  std::vector<int64_t> empty;
  Admission a = check_text_admission({16, 100}, empty, 1);
  EXPECT_EQ(a.status.kind(), ErrorKind::kInvalidArgument);
  EXPECT_TRUE(contains(a.status.message(), "empty")) << a.status.message();

  auto p = ids(2);
  a = check_text_admission({16, 100}, p, -1);
  EXPECT_EQ(a.status.kind(), ErrorKind::kInvalidArgument);
  EXPECT_TRUE(contains(a.status.message(), "-1")) << a.status.message();

  std::vector<int64_t> bad = {1, 100};
  a = check_text_admission({16, 100}, bad, 1);
  EXPECT_EQ(a.status.kind(), ErrorKind::kInvalidArgument);
  EXPECT_TRUE(contains(a.status.message(), "token id 100")) << a.status.message();
  EXPECT_TRUE(contains(a.status.message(), "position 1")) << a.status.message();

  std::vector<int64_t> neg = {-3};
  EXPECT_EQ(check_text_admission({16, 100}, neg, 1).status.kind(), ErrorKind::kInvalidArgument);
  EXPECT_EQ(check_text_admission({0, 100}, p, 0).status.kind(), ErrorKind::kInvalidArgument);
}

TEST(SlotPool, AcquireReleaseAndExhaustion) {
  SlotPool pool(3);
  EXPECT_EQ(pool.free_count(), 3);
  EXPECT_EQ(*pool.acquire(), 0);
  EXPECT_EQ(*pool.acquire(), 1);
  EXPECT_EQ(*pool.acquire(), 2);
  auto none = pool.acquire();
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().kind(), ErrorKind::kOutOfRange);
  EXPECT_TRUE(contains(none.status().message(), "3 slots")) << none.status().message();
  EXPECT_TRUE(pool.release(1).ok());
  EXPECT_FALSE(pool.in_use(1));
  EXPECT_EQ(*pool.acquire(), 1);  // lowest free slot is reused
  EXPECT_EQ(pool.release(5).kind(), ErrorKind::kOutOfRange);
  EXPECT_EQ(pool.release(-1).kind(), ErrorKind::kOutOfRange);
  EXPECT_TRUE(pool.release(0).ok());
  EXPECT_EQ(pool.release(0).kind(), ErrorKind::kOutOfRange);  // double release
}

}  // namespace
}  // namespace hlx::engine
