#include "engine/token_ids.h"

#include <gtest/gtest.h>

namespace hlx::engine {
namespace {

TEST(TokenIds, Parses) {
  auto ids = parse_token_ids("1,2, 30 ,4");
  ASSERT_TRUE(ids.ok()) << ids.status().to_string();
  EXPECT_EQ(*ids, (std::vector<int64_t>{1, 2, 30, 4}));
  EXPECT_EQ(*parse_token_ids("0"), (std::vector<int64_t>{0}));
}

TEST(TokenIds, RejectsMalformed) {
  for (const char* bad : {"", "1,,2", "1,", "-1", "1a", "+3", "99999999999999999999"}) {
    auto ids = parse_token_ids(bad);
    EXPECT_FALSE(ids.ok()) << bad;
    EXPECT_EQ(ids.status().kind(), ErrorKind::kInvalidArgument) << bad;
  }
  EXPECT_NE(parse_token_ids("1,x").status().message().find("#1"), std::string::npos);
}

}  // namespace
}  // namespace hlx::engine
