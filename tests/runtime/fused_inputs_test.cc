// The fused elementwise kernel reads f32 inputs in place (no copy into its scratch tiles) unless
// an output of the chain is one of its inputs. Checked here against plain loops: a large f32
// chain run on the thread pool, the same chain written over one of its inputs, and a chain that
// outputs an input value next to computed ones, in place over that input.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "runtime/op_kernel.h"

namespace hlx::rt {
namespace {

struct F32Chain {
  shlo::Function fn;
  std::vector<shlo::Op> ops;
  std::vector<shlo::ValueId> inputs, outputs;
  Shape shape;

  shlo::ValueId input() {
    inputs.push_back(fn.new_value({DType::kF32, shape}));
    return inputs.back();
  }
  shlo::ValueId op(const char* name, std::vector<shlo::ValueId> args) {
    shlo::Op o;
    o.name = name;
    o.operands = std::move(args);
    o.results.push_back(fn.new_value({DType::kF32, shape}));
    ops.push_back(o);
    return o.results[0];
  }
  std::unique_ptr<OpKernel> compile() const {
    std::vector<const shlo::Op*> p;
    for (const auto& o : ops) p.push_back(&o);
    auto k = compile_fused_elementwise(p, inputs, outputs, fn);
    EXPECT_TRUE(k.ok()) << k.status().to_string();
    return k.ok() ? std::move(*k) : nullptr;
  }
};

Tensor random_f32(const Shape& s, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-3.f, 3.f);
  Tensor t = Tensor::empty(DType::kF32, s);
  for (int64_t i = 0; i < t.num_elements(); ++i) t.data<float>()[i] = u(rng);
  return t;
}

// (a - b) * a, over 100003 elements (several chunks on the pool, a partial last tile).
TEST(FusedInputs, F32InputsReadInPlaceAlsoWhenWritingOverOne) {
  F32Chain c;
  c.shape = {100003};
  auto a = c.input(), b = c.input();
  c.outputs = {c.op("stablehlo.multiply", {c.op("stablehlo.subtract", {a, b}), a})};
  auto k = c.compile();
  ASSERT_TRUE(k);
  Tensor x = random_f32(c.shape, 1), y = random_f32(c.shape, 2);
  std::vector<float> want(size_t(x.num_elements()));
  for (size_t i = 0; i < want.size(); ++i) want[i] = (x.data<float>()[i] - y.data<float>()[i]) * x.data<float>()[i];
  Tensor out = Tensor::empty(DType::kF32, c.shape);
  ASSERT_TRUE(k->run({&x, &y}, {&out}).ok());
  EXPECT_EQ(std::memcmp(out.raw(), want.data(), want.size() * 4), 0);
  for (int over : {0, 1}) {
    Tensor xs = random_f32(c.shape, 1), ys = random_f32(c.shape, 2);
    Tensor& target = over == 0 ? xs : ys;
    Tensor alias = Tensor::borrow(DType::kF32, c.shape, target.raw(), target.storage());
    ASSERT_TRUE(k->run({&xs, &ys}, {&alias}).ok());
    EXPECT_EQ(std::memcmp(target.raw(), want.data(), want.size() * 4), 0) << "written over input " << over;
  }
}

// Outputs {a + b, b, a * b} with the first written over b: b must still come out unchanged.
TEST(FusedInputs, ChainOutputtingAnInputValue) {
  F32Chain c;
  c.shape = {40000};
  auto a = c.input(), b = c.input();
  auto s = c.op("stablehlo.add", {a, b});
  auto m = c.op("stablehlo.multiply", {a, b});
  c.outputs = {s, b, m};
  auto k = c.compile();
  ASSERT_TRUE(k);
  Tensor x = random_f32(c.shape, 3), y = random_f32(c.shape, 4), y0 = random_f32(c.shape, 4);
  Tensor out_b = Tensor::empty(DType::kF32, c.shape), out_m = Tensor::empty(DType::kF32, c.shape);
  Tensor alias = Tensor::borrow(DType::kF32, c.shape, y.raw(), y.storage());
  ASSERT_TRUE(k->run({&x, &y}, {&alias, &out_b, &out_m}).ok());
  for (int64_t i = 0; i < x.num_elements(); ++i) {
    const float xv = x.data<float>()[i], yv = y0.data<float>()[i];
    ASSERT_EQ(y.data<float>()[i], xv + yv) << i;
    ASSERT_EQ(out_b.data<float>()[i], yv) << i;
    ASSERT_EQ(out_m.data<float>()[i], xv * yv) << i;
  }
}

}  // namespace
}  // namespace hlx::rt
