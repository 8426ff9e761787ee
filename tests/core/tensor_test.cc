#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "core/tensor.h"

namespace hlx {
namespace {

// Packed weights of 1 MiB (a 0.6B model's int8 k/v projections) must sit side by side in shared
// slabs, not one per 2 MiB huge page: that padding was ~0.14 GB of a 0.75 GB FP8 model's RSS.
TEST(AllocatePacked, SmallPiecesShareSlabsAndKeepThemAlive) {
  constexpr size_t kMiB = size_t(1) << 20;
  std::vector<std::shared_ptr<void>> pieces;
  for (int i = 0; i < 3; ++i) pieces.push_back(allocate_packed(kMiB));
  int adjacent = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const uintptr_t p = uintptr_t(pieces[i].get());
    EXPECT_EQ(p % 4096, 0u) << i;
    std::memset(pieces[i].get(), int(i + 1), kMiB);  // every byte is ours (ASan checks the bounds)
    if (i > 0 && p == uintptr_t(pieces[i - 1].get()) + kMiB) ++adjacent;
  }
  // A slab boundary may fall between two of the three, not between both pairs.
  EXPECT_GE(adjacent, 1);
  for (size_t i = 0; i < pieces.size(); ++i)
    EXPECT_EQ(static_cast<const uint8_t*>(pieces[i].get())[kMiB - 1], uint8_t(i + 1)) << "pieces overlap";
  // Adjacent pieces own their slab together: it lives as long as either does.
  const long owners = pieces[1].use_count();
  if (uintptr_t(pieces[1].get()) == uintptr_t(pieces[0].get()) + kMiB) {
    EXPECT_GE(owners, 2);
    pieces[0].reset();
    EXPECT_EQ(pieces[1].use_count(), owners - 1);
  }
}

TEST(AllocatePacked, LargeWeightsGetTheirOwnHugePages) {
  constexpr size_t kBytes = size_t(40) << 20;
  std::shared_ptr<void> w = allocate_packed(kBytes);
  EXPECT_EQ(uintptr_t(w.get()) % (size_t(2) << 20), 0u);
  EXPECT_EQ(w.use_count(), 1);
  std::memset(w.get(), 7, kBytes);
  EXPECT_NE(allocate_packed(0), nullptr);
}

}  // namespace
}  // namespace hlx
