// Grouped sibling products (issue 7): kernels::multiply_grouped must give every output exactly the
// bits of its own PackedWeight::multiply (M = 1..8 on the streaming kernel, prefill M on the
// grouped GEMM, 1 and 2 threads, f32/bf16 activations and results, int8 weights), and be close to
// a double-precision loop written here; a Program whose sibling dot_generals were grouped into one
// step must return the same bits as the plan with HLX_GROUP_DOTS=0.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "matmul_test_util.h"
#include "runtime/kernels/matmul.h"
#include "runtime/kernels/parallel.h"
#include "runtime/program.h"
#include "stablehlo/parser.h"

namespace hlx {
namespace {

using kernels::GroupedProduct;
using kernels::PackedWeight;
using matmul_test::load;
using matmul_test::rand_vec;
using matmul_test::store;

struct Sibling {
  int64_t n;
  std::vector<float> w;  // [n, k] (Linear layout), rounded to bf16
  std::unique_ptr<PackedWeight> packed;
};

std::vector<Sibling> make_siblings(int64_t k, const std::vector<int64_t>& ns, kernels::WeightFormat format,
                                   uint32_t seed) {
  std::vector<Sibling> s;
  for (size_t i = 0; i < ns.size(); ++i) {
    Sibling x{ns[i], rand_vec(ns[i] * k, seed + uint32_t(i)), nullptr};
    auto bytes = store(DType::kBF16, x.w);
    auto p = PackedWeight::pack(DType::kBF16, k, ns[i], /*transposed=*/true, bytes.data(), format);
    EXPECT_TRUE(p.ok()) << p.status().to_string();
    if (p.ok()) x.packed = std::move(p).value();
    s.push_back(std::move(x));
  }
  return s;
}

// For every M, thread count and type pair: grouped outputs == separate outputs, bit for bit, and
// within f32-accumulation error of a double loop (f32 results).
void check_group(int64_t k, std::vector<Sibling>& sib, const std::vector<int64_t>& ms) {
  for (DType a_type : {DType::kBF16, DType::kF32})
    for (DType c_type : {DType::kF32, DType::kBF16})
      for (int64_t m : ms)
        for (int threads : {1, 2}) {
          kernels::ThreadLimit limit(threads);
          std::vector<float> a = rand_vec(m * k, uint32_t(100 + m));
          auto a_bytes = store(a_type == DType::kF32 ? DType::kBF16 : a_type, a);  // bf16 values either way
          std::vector<uint8_t> a_in = a_type == DType::kF32 ? store(DType::kF32, a) : a_bytes;
          std::vector<std::vector<uint8_t>> grouped, separate;
          std::vector<GroupedProduct> products;
          for (auto& s : sib) {
            grouped.emplace_back(size_t(m * s.n) * dtype_size(c_type), uint8_t(0xAB));
            separate.emplace_back(size_t(m * s.n) * dtype_size(c_type), uint8_t(0xCD));
          }
          for (size_t i = 0; i < sib.size(); ++i) products.push_back({sib[i].packed.get(), grouped[i].data()});
          Status st = kernels::multiply_grouped(m, a_type, a_in.data(), c_type, products);
          ASSERT_TRUE(st.ok()) << st.to_string();
          for (size_t i = 0; i < sib.size(); ++i) {
            ASSERT_TRUE(sib[i].packed->multiply(m, a_type, a_in.data(), c_type, separate[i].data()).ok());
            std::string where = "m=" + std::to_string(m) + " threads=" + std::to_string(threads) + " product " +
                                std::to_string(i) + " a=" + std::string(dtype_name(a_type)) +
                                " c=" + std::string(dtype_name(c_type));
            ASSERT_EQ(0, std::memcmp(grouped[i].data(), separate[i].data(), grouped[i].size())) << where;
            if (c_type != DType::kF32) continue;
            for (int64_t r = 0; r < m; ++r)
              for (int64_t j = 0; j < sib[i].n; ++j) {
                double ref = 0, mag = 0;
                for (int64_t kk = 0; kk < k; ++kk) {
                  double x = double(a[size_t(r * k + kk)]) * double(sib[i].w[size_t(j * k + kk)]);
                  ref += x;
                  mag += std::fabs(x);
                }
                ASSERT_NEAR(load(c_type, grouped[i], size_t(r * sib[i].n + j)), ref, 1e-5 * mag + 1e-30)
                    << where << " row " << r << " col " << j;
              }
          }
        }
}

TEST(DotGroup, StreamingGroupHasEachProductsBits) {
  // Odd K (the last k alone), N not a multiple of 64 (a partial last block), and 11 + 4 + 3 + 1
  // column blocks, so that with 1 and with 2 threads some pieces run from one product into the next.
  const int64_t k = 77;
  auto sib = make_siblings(k, {704, 200, 130, 9}, kernels::WeightFormat::kAsStored, 7);
  check_group(k, sib, {1, 2, 3, 4, 5, 6, 7, 8});
}

TEST(DotGroup, PrefillMGivesEachMultiplysBits) {
  const int64_t k = 128;
  auto sib = make_siblings(k, {192, 64, 64}, kernels::WeightFormat::kAsStored, 11);
  check_group(k, sib, {9, 40});
}

TEST(DotGroup, Int8WeightsGiveEachMultiplysBits) {
  const int64_t k = 96;
  auto sib = make_siblings(k, {128, 64}, kernels::WeightFormat::kInt8, 13);
  for (DType c_type : {DType::kF32, DType::kBF16})
    for (int64_t m : {1, 5}) {
      std::vector<float> a = rand_vec(m * k, 5);
      auto a_in = store(DType::kF32, a);
      std::vector<std::vector<uint8_t>> g(2), s(2);
      std::vector<GroupedProduct> products;
      for (size_t i = 0; i < 2; ++i) {
        g[i].assign(size_t(m * sib[i].n) * dtype_size(c_type), 0);
        s[i].assign(g[i].size(), 1);
        products.push_back({sib[i].packed.get(), g[i].data()});
      }
      ASSERT_TRUE(kernels::multiply_grouped(m, DType::kF32, a_in.data(), c_type, products).ok());
      for (size_t i = 0; i < 2; ++i) {
        ASSERT_TRUE(sib[i].packed->multiply(m, DType::kF32, a_in.data(), c_type, s[i].data()).ok());
        EXPECT_EQ(0, std::memcmp(g[i].data(), s[i].data(), g[i].size())) << "m=" << m << " product " << i;
      }
    }
}

TEST(DotGroup, BadGroupIsATypedErrorAndWritesNothing) {
  auto a16 = make_siblings(64, {64}, kernels::WeightFormat::kAsStored, 1);
  auto b16 = make_siblings(96, {64}, kernels::WeightFormat::kAsStored, 2);
  std::vector<float> a = rand_vec(64, 3);
  auto a_in = store(DType::kBF16, a);
  std::vector<float> c0(64, 42.f), c1(64, 42.f);
  Status st = kernels::multiply_grouped(1, DType::kBF16, a_in.data(), DType::kF32,
                                        {{a16[0].packed.get(), c0.data()}, {b16[0].packed.get(), c1.data()}});
  EXPECT_EQ(st.kind(), ErrorKind::kInvalidArgument);
  EXPECT_NE(st.to_string().find("k=96"), std::string::npos) << st.to_string();
  st = kernels::multiply_grouped(1, DType::kBF16, a_in.data(), DType::kF32,
                                 {{a16[0].packed.get(), c0.data()}, {nullptr, c1.data()}});
  EXPECT_EQ(st.kind(), ErrorKind::kInvalidArgument);
  for (size_t i = 0; i < 64; ++i) ASSERT_TRUE(c0[i] == 42.f && c1[i] == 42.f) << i;
}

// ---- Program level: grouped plan == HLX_GROUP_DOTS=0 plan, bit for bit ----

// q/k/v-like siblings on one normalised input (one result read between the members), a product on
// another input (alone), and one whose right operand is a run-time input (never grouped).
std::string module_text(int64_t m) {
  const std::string M = std::to_string(m);
  auto t = [&](const std::string& dims, const char* ty) { return "tensor<" + dims + "x" + ty + ">"; };
  const std::string x = t(M + "x96", "f32");
  std::string s =
      "module @m {\n  func.func public @main(%x: " + x + ", %wq: " + t("160x96", "bf16") +
      " {hlx.weight = \"q\"}, %wk: " + t("64x96", "bf16") + " {hlx.weight = \"k\"}, %wv: " + t("70x96", "bf16") +
      " {hlx.weight = \"v\"}, %wo: " + t("64x96", "bf16") + " {hlx.weight = \"o\"}, %d: " + t("32x96", "f32") +
      ") -> (" + t(M + "x160", "f32") + ", " + t(M + "x64", "f32") + ", " + t(M + "x70", "f32") + ", " +
      t(M + "x64", "f32") + ", " + t(M + "x32", "f32") + ") {\n";
  auto dot = [&](const std::string& r, const std::string& lhs, const std::string& rhs, const std::string& rt,
                 int64_t n) {
    return "    " + r + " = stablehlo.dot_general " + lhs + ", " + rhs + ", contracting_dims = [1] x [1] : (" + x +
           ", " + rt + ") -> " + t(M + "x" + std::to_string(n), "f32") + "\n";
  };
  s += "    %h = stablehlo.multiply %x, %x : " + x + "\n";
  s += dot("%q", "%h", "%wq", t("160x96", "bf16"), 160);
  s += "    %q2 = stablehlo.add %q, %q : " + t(M + "x160", "f32") + "\n";
  s += dot("%k", "%h", "%wk", t("64x96", "bf16"), 64);
  s += dot("%v", "%h", "%wv", t("70x96", "bf16"), 70);
  s += dot("%o", "%x", "%wo", t("64x96", "bf16"), 64);
  s += dot("%e", "%h", "%d", t("32x96", "f32"), 32);
  s += "    return %q2, %k, %v, %o, %e : " + t(M + "x160", "f32") + ", " + t(M + "x64", "f32") + ", " +
       t(M + "x70", "f32") + ", " + t(M + "x64", "f32") + ", " + t(M + "x32", "f32") + "\n  }\n}\n";
  return s;
}

Tensor random_tensor(DType t, const Shape& shape, uint32_t seed) {
  Tensor x = Tensor::empty(t, shape);
  std::vector<float> v = rand_vec(x.num_elements(), seed);
  auto bytes = store(t, v);
  std::memcpy(x.raw(), bytes.data(), bytes.size());
  return x;
}

// Compiles with HLX_GROUP_DOTS as given (unset = default), binds, runs; returns outputs and the plan.
std::vector<Tensor> run_program(int64_t m, const char* group_env, int threads, std::string* plan) {
  if (group_env)
    setenv("HLX_GROUP_DOTS", group_env, 1);
  else
    unsetenv("HLX_GROUP_DOTS");
  auto mod = shlo::parse_module(module_text(m));
  EXPECT_TRUE(mod.ok()) << mod.status().to_string();
  if (!mod.ok()) return {};
  rt::ProgramOptions o;
  o.threads = threads;
  auto p = rt::Program::compile(std::make_shared<const shlo::Module>(std::move(mod).value()), o);
  unsetenv("HLX_GROUP_DOTS");
  EXPECT_TRUE(p.ok()) << p.status().to_string();
  if (!p.ok()) return {};
  const std::pair<const char*, Shape> weights[] = {{"q", {160, 96}}, {"k", {64, 96}}, {"v", {70, 96}}, {"o", {64, 96}}};
  uint32_t seed = 1;
  for (const auto& [name, shape] : weights)
    EXPECT_TRUE((*p)->bind_weight(name, random_tensor(DType::kBF16, shape, seed++)).ok());
  *plan = (*p)->dump_plan("main").value();
  auto r = (*p)->run("main", {random_tensor(DType::kF32, {m, 96}, 50), random_tensor(DType::kF32, {32, 96}, 51)});
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? std::move(r).value() : std::vector<Tensor>{};
}

TEST(DotGroup, ProgramGroupedPlanHasUngroupedBits) {
  for (int64_t m : {1, 2, 3, 4, 5, 6, 7, 8, 40})
    for (int threads : {1, 2}) {
      std::string grouped_plan, plain_plan;
      auto g = run_program(m, nullptr, threads, &grouped_plan);
      auto u = run_program(m, "0", threads, &plain_plan);
      ASSERT_EQ(g.size(), 5u);
      ASSERT_EQ(u.size(), 5u);
      // Exactly one group, the three siblings; the other-input and run-time-rhs products alone.
      EXPECT_NE(grouped_plan.find("grouped[dot_general x3]"), std::string::npos) << grouped_plan;
      EXPECT_EQ(grouped_plan.find("grouped[dot_general x2]"), std::string::npos) << grouped_plan;
      EXPECT_EQ(plain_plan.find("grouped["), std::string::npos) << plain_plan;
      for (size_t i = 0; i < 5; ++i) {
        ASSERT_EQ(g[i].nbytes(), u[i].nbytes());
        EXPECT_EQ(0, std::memcmp(g[i].raw(), u[i].raw(), g[i].nbytes()))
            << "m=" << m << " threads=" << threads << " output " << i;
      }
    }
}

// Batched siblings (dot_general with batching dims) are not grouped: the plan keeps one step each.
TEST(DotGroup, BatchedSiblingsStayUngrouped) {
  const std::string text = R"(module @m {
  func.func public @main(%x: tensor<2x3x16xf32>, %a: tensor<2x8x16xbf16> {hlx.weight = "a"}, %b: tensor<2x8x16xbf16> {hlx.weight = "b"}) -> (tensor<2x3x8xf32>, tensor<2x3x8xf32>) {
    %0 = stablehlo.dot_general %x, %a, batching_dims = [0] x [0], contracting_dims = [2] x [2] : (tensor<2x3x16xf32>, tensor<2x8x16xbf16>) -> tensor<2x3x8xf32>
    %1 = stablehlo.dot_general %x, %b, batching_dims = [0] x [0], contracting_dims = [2] x [2] : (tensor<2x3x16xf32>, tensor<2x8x16xbf16>) -> tensor<2x3x8xf32>
    return %0, %1 : tensor<2x3x8xf32>, tensor<2x3x8xf32>
  }
}
)";
  unsetenv("HLX_GROUP_DOTS");
  auto mod = shlo::parse_module(text);
  ASSERT_TRUE(mod.ok()) << mod.status().to_string();
  auto p = rt::Program::compile(std::make_shared<const shlo::Module>(std::move(mod).value()));
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  ASSERT_TRUE((*p)->bind_weight("a", random_tensor(DType::kBF16, {2, 8, 16}, 1)).ok());
  ASSERT_TRUE((*p)->bind_weight("b", random_tensor(DType::kBF16, {2, 8, 16}, 2)).ok());
  std::string plan = (*p)->dump_plan("main").value();
  EXPECT_EQ(plan.find("grouped["), std::string::npos) << plan;
  auto r = (*p)->run("main", {random_tensor(DType::kF32, {2, 3, 16}, 3)});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->size(), 2u);
}

}  // namespace
}  // namespace hlx
