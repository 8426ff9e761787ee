// stablehlo.gather against loops written from the spec's examples: embedding lookup with
// index_vector_dim == rank, multi-dim start indices, clamping, and batching dims.
#include <sys/mman.h>

#include <cstring>
#include <fstream>
#include <memory>

#include "runtime/program.h"
#include "structured_test_util.h"

namespace hlx {
namespace {

using namespace hlx::testing;

shlo::Op& add_gather(IrBuilder& b, shlo::ValueId x, shlo::ValueId idx, shlo::TensorType out,
                     std::vector<int64_t> offset_dims, std::vector<int64_t> collapsed,
                     std::vector<int64_t> start_index_map, int64_t ivd, std::vector<int64_t> slice_sizes,
                     std::vector<int64_t> op_batch = {}, std::vector<int64_t> si_batch = {}) {
  auto& op = b.op("stablehlo.gather", {x, idx}, {out});
  op.attrs.push_back(
      {"dimension_numbers", shlo::Attr::structure("gather", {{"offset_dims", ints(offset_dims)},
                                                             {"collapsed_slice_dims", ints(collapsed)},
                                                             {"operand_batching_dims", ints(op_batch)},
                                                             {"start_indices_batching_dims", ints(si_batch)},
                                                             {"start_index_map", ints(start_index_map)},
                                                             {"index_vector_dim", shlo::Attr::integer(ivd)}})});
  op.attrs.push_back({"slice_sizes", ints(slice_sizes)});
  return op;
}

TEST(Gather, EmbeddingLookupBf16) {
  IrBuilder b;
  auto w = b.arg(tt(DType::kBF16, {10, 6})), ids = b.arg(tt(DType::kI32, {4}));
  auto& op = add_gather(b, w, ids, tt(DType::kBF16, {4, 6}), {1}, {0}, {0}, 1, {1, 6});
  Tensor wt = random_tensor(DType::kBF16, {10, 6}, 1);
  Tensor it = from_vector<int>(DType::kI32, {4}, {3, 0, 9, 3});
  auto out = run_op(op, b.fn, {wt, it});
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  for (int t = 0; t < 4; ++t)
    for (int h = 0; h < 6; ++h)
      EXPECT_EQ((*out)[0].data<bf16>()[t * 6 + h].bits, wt.data<bf16>()[it.data<int32_t>()[t] * 6 + h].bits);
}

TEST(Gather, StartIndicesAreClamped) {
  IrBuilder b;
  auto x = b.arg(tt(DType::kF32, {5, 4})), idx = b.arg(tt(DType::kI64, {3, 2}));
  // Slices of 2x3 at (row, col) pairs; result [3, 2, 3].
  auto& op = add_gather(b, x, idx, tt(DType::kF32, {3, 2, 3}), {1, 2}, {}, {0, 1}, 1, {2, 3});
  Tensor xt = random_tensor(DType::kF32, {5, 4}, 2);
  Tensor it = from_vector<int64_t>(DType::kI64, {3, 2}, {1, 1, -4, 7, 4, 2});
  auto out = run_op(op, b.fn, {xt, it});
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  int64_t want_start[3][2] = {{1, 1}, {0, 1}, {3, 1}};  // clamp to [0, 5-2] x [0, 4-3]
  for (int n = 0; n < 3; ++n)
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 3; ++j)
        EXPECT_EQ((*out)[0].data<float>()[(n * 2 + i) * 3 + j],
                  xt.data<float>()[(want_start[n][0] + i) * 4 + want_start[n][1] + j])
            << n << i << j;
}

TEST(Gather, OffsetDimsBeforeBatchDimsAndIndexVectorDimZero) {
  IrBuilder b;
  auto x = b.arg(tt(DType::kI32, {4, 5, 6})), idx = b.arg(tt(DType::kI32, {2, 3}));
  // Index vectors along dim 0 of idx: 3 positions, each (d0, d2); slices [1, 5, 2] with d0 collapsed.
  // offset_dims = [0, 2] -> result [5, 3, 2].
  auto& op = add_gather(b, x, idx, tt(DType::kI32, {5, 3, 2}), {0, 2}, {0}, {0, 2}, 0, {1, 5, 2});
  Tensor xt = random_tensor(DType::kI32, {4, 5, 6}, 3, -1000, 1000);
  Tensor it = from_vector<int>(DType::kI32, {2, 3}, {0, 3, 2, 4, 0, 1});
  auto out = run_op(op, b.fn, {xt, it});
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  for (int j = 0; j < 5; ++j)
    for (int p = 0; p < 3; ++p)
      for (int k = 0; k < 2; ++k) {
        int64_t d0 = it.data<int32_t>()[p], d2 = it.data<int32_t>()[3 + p];
        EXPECT_EQ((*out)[0].data<int32_t>()[(j * 3 + p) * 2 + k], xt.data<int32_t>()[(d0 * 5 + j) * 6 + d2 + k]);
      }
}

TEST(Gather, BatchingDims) {
  IrBuilder b;
  // operand [B=2, N=5, H=3], indices [B=2, T=4] (scalar indices, ivd = 2) -> [2, 4, 3]
  auto x = b.arg(tt(DType::kF16, {2, 5, 3})), idx = b.arg(tt(DType::kI32, {2, 4}));
  auto& op = add_gather(b, x, idx, tt(DType::kF16, {2, 4, 3}), {2}, {1}, {1}, 2, {1, 1, 3}, {0}, {0});
  Tensor xt = random_tensor(DType::kF16, {2, 5, 3}, 4);
  Tensor it = from_vector<int>(DType::kI32, {2, 4}, {0, 4, 2, 2, 1, 3, 0, 4});
  auto out = run_op(op, b.fn, {xt, it});
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  for (int bb = 0; bb < 2; ++bb)
    for (int t = 0; t < 4; ++t)
      for (int h = 0; h < 3; ++h)
        EXPECT_EQ((*out)[0].data<f16>()[(bb * 4 + t) * 3 + h].bits,
                  xt.data<f16>()[(bb * 5 + it.data<int32_t>()[bb * 4 + t]) * 3 + h].bits);
}

TEST(Gather, EmptyIndicesAndBadSliceSizes) {
  IrBuilder b;
  auto x = b.arg(tt(DType::kF32, {5, 4})), idx = b.arg(tt(DType::kI32, {0}));
  auto& op = add_gather(b, x, idx, tt(DType::kF32, {0, 4}), {1}, {0}, {0}, 1, {1, 4});
  auto out = run_op(op, b.fn, {Tensor::empty(DType::kF32, {5, 4}), Tensor::empty(DType::kI32, {0})});
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  IrBuilder b2;
  auto x2 = b2.arg(tt(DType::kF32, {5, 4})), idx2 = b2.arg(tt(DType::kI32, {2}));
  auto& bad = add_gather(b2, x2, idx2, tt(DType::kF32, {2, 9}), {1}, {0}, {0}, 1, {1, 9});
  auto k = structured_registry().compile(bad.name, bad, b2.fn);
  ASSERT_FALSE(k.ok());
  EXPECT_EQ(k.status().kind(), ErrorKind::kInvalidArgument);
}

// Resident bytes of the mapping that contains `p` (/proc/self/smaps), -1 when none does.
int64_t mapping_rss(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    unsigned long long a = 0, b = 0;
    if (std::sscanf(line.c_str(), "%llx-%llx ", &a, &b) == 2)  // a mapping's first line (details are "Name: ...")
      inside = uintptr_t(p) >= a && uintptr_t(p) < b;
    long long kb = 0;
    if (inside && std::sscanf(line.c_str(), "Rss: %lld kB", &kb) == 1) return kb * 1024;
  }
  return -1;
}

// `bytes` of `data` written to a new file and mapped read-only and private, as a checkpoint is (the
// file is unlinked at once; the mapping lives as long as the result). Null on failure.
std::shared_ptr<void> map_new_file(const std::string& name, const void* data, size_t bytes) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path, std::ios::binary).write(static_cast<const char*>(data), std::streamsize(bytes));
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return nullptr;
  void* map = mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fileno(f), 0);
  std::fclose(f);
  std::remove(path.c_str());
  if (map == MAP_FAILED) return nullptr;
  return std::shared_ptr<void>(map, [bytes](void* m) { munmap(m, bytes); });
}

// An embedding table in a memory-mapped file (as a checkpoint's, when no exact packed copy serves
// the rows): the gather returns the file's rows and leaves none of the table's pages mapped in
// (rt::release_table_rows), which reading the same rows by hand does. A table in heap memory keeps
// its contents.
TEST(Gather, RowsOfAMappedTableLeaveTheResidentSet) {
  constexpr int64_t rows = 8192, cols = 1024;
  constexpr size_t bytes = size_t(rows * cols) * 2;
  std::vector<uint16_t> table(size_t(rows * cols));
  for (size_t i = 0; i < table.size(); ++i) table[i] = uint16_t(0x3c00 + (i * 2654435761u >> 20) % 512);
  const std::shared_ptr<void> map = map_new_file("hlx_gather_mapped_table.bin", table.data(), bytes);
  ASSERT_NE(map, nullptr);
  const Tensor wt = Tensor::borrow(DType::kBF16, {rows, cols}, map.get(), map);
  const std::vector<int> ids = {7, 4000, 8191, 0, 2500, 6001, 7, 1234};

  volatile uint32_t sum = 0;  // the same rows read by hand stay mapped in
  for (int id : ids) sum = sum + static_cast<const uint16_t*>(map.get())[size_t(id) * cols];
  EXPECT_GT(mapping_rss(map.get()), 0);

  IrBuilder b;
  auto w = b.arg(tt(DType::kBF16, {rows, cols})), idx = b.arg(tt(DType::kI32, {int64_t(ids.size())}));
  auto& op = add_gather(b, w, idx, tt(DType::kBF16, {int64_t(ids.size()), cols}), {1}, {0}, {0}, 1, {1, cols});
  auto out = run_op(op, b.fn, {wt, from_vector<int>(DType::kI32, {int64_t(ids.size())}, ids)});
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  EXPECT_EQ(mapping_rss(map.get()), 0) << "gathered rows left pages of the mapped table resident";
  for (size_t r = 0; r < ids.size(); ++r)
    EXPECT_EQ(std::memcmp((*out)[0].data<bf16>() + r * cols, table.data() + size_t(ids[r]) * cols, size_t(cols) * 2), 0)
        << "row " << ids[r];

  Tensor heap = Tensor::empty(DType::kBF16, {rows, cols});
  std::memcpy(heap.raw(), table.data(), bytes);
  const std::vector<int64_t> rows64(ids.begin(), ids.end());
  rt::release_table_rows(heap, rows64.data(), rows64.size());
  EXPECT_EQ(std::memcmp(heap.raw(), table.data(), bytes), 0) << "a heap table lost its contents";
}

// Sanitizer trees (make test-sanitize, test-tsan) map shadow memory as the program touches memory.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
constexpr bool kSanitized = __has_feature(address_sanitizer) || __has_feature(thread_sanitizer);
#else
constexpr bool kSanitized = false;
#endif

// Peak resident bytes of this process (VmHWM), after reset_peak_rss() the current ones.
int64_t peak_rss() {
  std::ifstream status("/proc/self/status");
  std::string line;
  long long kb = -1;
  while (std::getline(status, line))
    if (std::sscanf(line.c_str(), "VmHWM: %lld kB", &kb) == 1) break;
  return kb * 1024;
}
void reset_peak_rss() { std::ofstream("/proc/self/clear_refs") << "5"; }

// A long prompt's gather from a memory-mapped table (a freshly written checkpoint's sits in large
// page-cache folios, each mapped whole by one read) never holds much of the table mapped at once:
// rows are released every rt::kTableRowsPerRelease. Reading all 1024 rows before releasing any
// mapped 64 MB (64 KiB fault-around per row) to all 128 MB (2 MiB folios) of it at the peak.
TEST(Gather, ALongPromptNeverMapsMuchOfAMappedTable) {
  if (kSanitized) GTEST_SKIP() << "sanitizer shadow memory moves the peak RSS this test measures";
  constexpr int64_t rows = 65536, cols = 1024, n = 1024;
  constexpr size_t bytes = size_t(rows * cols) * 2;
  auto value = [](size_t i) { return uint16_t(0x3c00 + (i * 2654435761u >> 20) % 512); };
  std::shared_ptr<void> map;
  {
    std::vector<uint16_t> table(size_t(rows * cols));
    for (size_t i = 0; i < table.size(); ++i) table[i] = value(i);
    map = map_new_file("hlx_gather_long_prompt_table.bin", table.data(), bytes);
  }
  ASSERT_NE(map, nullptr);
  const Tensor wt = Tensor::borrow(DType::kBF16, {rows, cols}, map.get(), map);
  std::vector<int> ids(n);
  uint32_t state = 12345;
  for (int& id : ids) id = int((state = state * 1664525u + 1013904223u) >> 16) % int(rows);

  IrBuilder b;
  auto w = b.arg(tt(DType::kBF16, {rows, cols})), idx = b.arg(tt(DType::kI32, {n}));
  auto& op = add_gather(b, w, idx, tt(DType::kBF16, {n, cols}), {1}, {0}, {0}, 1, {1, cols});
  const Tensor indices = from_vector<int>(DType::kI32, {n}, ids);
  reset_peak_rss();
  const int64_t before = peak_rss();
  auto out = run_op(op, b.fn, {wt, indices});
  const int64_t growth = peak_rss() - before;
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  // The result (2 MiB), the rows mapped between two releases (<= 8 x 2 MiB), some slack.
  EXPECT_LE(growth, int64_t(24) << 20) << "the gather held " << (growth >> 20) << " MiB more at its peak";
  for (size_t r = 0; r < ids.size(); r += 97)
    for (int64_t c = 0; c < cols; c += 131)
      EXPECT_EQ((*out)[0].data<uint16_t>()[r * cols + size_t(c)], value(size_t(ids[r]) * cols + size_t(c)))
          << "row " << ids[r];
}

}  // namespace
}  // namespace hlx
