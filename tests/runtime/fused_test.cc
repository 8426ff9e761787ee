// The fused elementwise kernel must equal running the same ops one by one through their own
// kernels, bit for bit (any NaN matching any NaN), for f32/bf16/f16 chains with converts and splat
// constants, sizes that are not multiples of the tile, several outputs, and in-place outputs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <vector>

#include "runtime/op_kernel.h"

namespace hlx::rt {
namespace {

using shlo::Attr;
using shlo::TensorType;
using shlo::ValueId;

struct Chain {
  shlo::Function fn;
  std::vector<shlo::Op> ops;
  std::vector<ValueId> inputs, outputs;

  ValueId input(DType t, const Shape& s) {
    ValueId v = fn.new_value({t, s});
    inputs.push_back(v);
    return v;
  }
  ValueId op(const std::string& name, std::vector<ValueId> args, DType t, shlo::AttrDict attrs = {}) {
    shlo::Op o;
    o.name = name;
    o.operands = std::move(args);
    Shape s = o.operands.empty() ? shape : fn.type_of(o.operands[0]).shape;
    o.results.push_back(fn.new_value({t, s}));
    o.attrs = std::move(attrs);
    ops.push_back(o);
    return o.results[0];
  }
  ValueId splat(DType t, float v) {
    shlo::DenseElements d{{t, shape}, {}};
    size_t n = size_t(num_elements(shape));
    for (size_t i = 0; i < n; ++i) {
      if (t == DType::kF32) {
        uint8_t b[4];
        std::memcpy(b, &v, 4);
        d.bytes.insert(d.bytes.end(), b, b + 4);
      } else {
        uint16_t h = t == DType::kBF16 ? f32_to_bf16(v).bits : f32_to_f16(v).bits;
        d.bytes.push_back(uint8_t(h)), d.bytes.push_back(uint8_t(h >> 8));
      }
    }
    return op("stablehlo.constant", {}, t, {{"value", Attr::dense_elements(d)}});
  }
  Shape shape;
};

Tensor random_float(DType t, const Shape& s, std::mt19937& rng) {
  Tensor x = Tensor::empty(t, s);
  std::uniform_real_distribution<float> u(-6.0f, 6.0f);
  const float edges[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1e-40f, 3.0e38f};
  for (int64_t i = 0; i < x.num_elements(); ++i) {
    float v = i % 97 < 7 ? edges[i % 97] : u(rng);
    if (t == DType::kF32)
      x.data<float>()[i] = v;
    else if (t == DType::kBF16)
      x.data<bf16>()[i] = f32_to_bf16(v);
    else
      x.data<f16>()[i] = f32_to_f16(v);
  }
  return x;
}

// Runs the chain op by op through the registry's single-op kernels.
std::map<ValueId, Tensor> run_unfused(const Chain& c, const std::vector<Tensor>& ins) {
  std::map<ValueId, Tensor> vals;
  for (size_t i = 0; i < ins.size(); ++i) vals[c.inputs[i]] = ins[i];
  for (const auto& o : c.ops) {
    auto k = KernelRegistry::builtin().compile(o.name, o, c.fn);
    EXPECT_TRUE(k.ok()) << o.name << ": " << k.status().to_string();
    if (!k.ok()) return {};
    std::vector<const Tensor*> args;
    for (auto v : o.operands) args.push_back(&vals.at(v));
    const auto& t = c.fn.type_of(o.results[0]);
    Tensor y = Tensor::empty(t.dtype, t.shape);
    Status s = (*k)->run(args, {&y});
    EXPECT_TRUE(s.ok()) << s.to_string();
    vals[o.results[0]] = y;
  }
  return vals;
}

std::vector<Tensor> run_fused(const Chain& c, const std::vector<Tensor>& ins) {
  std::vector<const shlo::Op*> ops;
  for (const auto& o : c.ops) ops.push_back(&o);
  auto k = compile_fused_elementwise(ops, c.inputs, c.outputs, c.fn);
  EXPECT_TRUE(k.ok()) << k.status().to_string();
  if (!k.ok()) return {};
  std::vector<const Tensor*> args;
  for (const auto& t : ins) args.push_back(&t);
  std::vector<Tensor> outs;
  for (auto v : c.outputs) outs.push_back(Tensor::empty(c.fn.type_of(v).dtype, c.fn.type_of(v).shape));
  std::vector<Tensor*> outp;
  for (auto& t : outs) outp.push_back(&t);
  Status s = (*k)->run(args, outp);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return outs;
}

// NaN payloads and signs are unspecified (the compiler may commute a + b, and x86 keeps the first
// NaN operand's payload), so any NaN matches any NaN; every other value must match bit for bit.
bool is_nan(DType t, const uint8_t* p) {
  if (t == DType::kF32) {
    uint32_t u;
    std::memcpy(&u, p, 4);
    return (u & 0x7fffffffu) > 0x7f800000u;
  }
  uint16_t u;
  std::memcpy(&u, p, 2);
  return t == DType::kBF16 ? (u & 0x7fff) > 0x7f80 : (u & 0x7fff) > 0x7c00;
}

void expect_bitwise_equal(const Chain& c, const std::vector<Tensor>& ins) {
  auto ref = run_unfused(c, ins);
  auto got = run_fused(c, ins);
  ASSERT_EQ(got.size(), c.outputs.size());
  for (size_t i = 0; i < c.outputs.size(); ++i) {
    const Tensor& want = ref.at(c.outputs[i]);
    ASSERT_EQ(got[i].nbytes(), want.nbytes());
    size_t es = dtype_size(want.dtype());
    for (int64_t e = 0; e < want.num_elements(); ++e) {
      const uint8_t* g = static_cast<const uint8_t*>(got[i].raw()) + e * int64_t(es);
      const uint8_t* w = static_cast<const uint8_t*>(want.raw()) + e * int64_t(es);
      if (is_nan(want.dtype(), g) && is_nan(want.dtype(), w)) continue;
      ASSERT_EQ(std::memcmp(g, w, es), 0) << "output " << i << " element " << e;
    }
  }
}

// A SiLU-like bf16 chain with f32 math inside, a splat constant, two outputs, and a clamp.
Chain silu_chain(int64_t n) {
  Chain c;
  c.shape = {n};
  ValueId x = c.input(DType::kBF16, c.shape), y = c.input(DType::kBF16, c.shape);
  ValueId lo = c.input(DType::kBF16, c.shape), hi = c.input(DType::kBF16, c.shape);
  ValueId xf = c.op("stablehlo.convert", {x}, DType::kF32);
  ValueId yf = c.op("stablehlo.convert", {y}, DType::kF32);
  ValueId half = c.splat(DType::kF32, 0.5f);
  ValueId t1 = c.op("stablehlo.multiply", {xf, half}, DType::kF32);
  ValueId t2 = c.op("stablehlo.add", {t1, yf}, DType::kF32);
  ValueId t3 = c.op("stablehlo.logistic", {t2}, DType::kF32);
  ValueId t4 = c.op("stablehlo.multiply", {t2, t3}, DType::kF32);
  ValueId t5 = c.op("stablehlo.convert", {t4}, DType::kBF16);
  ValueId t6 = c.op("stablehlo.exponential", {t5}, DType::kBF16);
  ValueId t7 = c.op("stablehlo.clamp", {lo, t6, hi}, DType::kBF16);
  ValueId t8 = c.op("stablehlo.divide", {t7, t5}, DType::kBF16);
  c.outputs = {t5, t8};
  return c;
}

TEST(Fused, Bf16ChainMatchesOpByOpBitForBit) {
  std::mt19937 rng(1);
  for (int64_t n : {int64_t(1), int64_t(2047), int64_t(2049), int64_t(70001)}) {  // tile remainders, threads
    Chain c = silu_chain(n);
    std::vector<Tensor> ins;
    for (int i = 0; i < 4; ++i) ins.push_back(random_float(DType::kBF16, c.shape, rng));
    SCOPED_TRACE(n);
    expect_bitwise_equal(c, ins);
  }
}

TEST(Fused, EveryFloatOpInF32F16Bf16) {
  const char* unary[] = {"stablehlo.negate",
                         "stablehlo.abs",
                         "stablehlo.sign",
                         "stablehlo.exponential",
                         "stablehlo.exponential_minus_one",
                         "stablehlo.log",
                         "stablehlo.log_plus_one",
                         "stablehlo.sqrt",
                         "stablehlo.rsqrt",
                         "stablehlo.tanh",
                         "stablehlo.logistic",
                         "stablehlo.sine",
                         "stablehlo.cosine",
                         "stablehlo.floor",
                         "stablehlo.ceil",
                         "stablehlo.round_nearest_afz",
                         "stablehlo.round_nearest_even",
                         "chlo.erf"};
  const char* binary[] = {"stablehlo.add",       "stablehlo.subtract", "stablehlo.multiply", "stablehlo.divide",
                          "stablehlo.remainder", "stablehlo.maximum",  "stablehlo.minimum",  "stablehlo.power"};
  std::mt19937 rng(2);
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
    Chain c;
    c.shape = {3, 1111};
    ValueId a = c.input(t, c.shape), b = c.input(t, c.shape);
    ValueId cur = a;
    for (const char* u : unary) {
      ValueId r = c.op(u, {cur}, t);
      cur = c.op("stablehlo.add", {r, b}, t);  // keep values in a useful range
      c.outputs.push_back(r);
    }
    for (const char* bn : binary) {
      cur = c.op(bn, {cur, a}, t);
      c.outputs.push_back(cur);
    }
    // f16 <-> bf16 <-> f32 converts.
    DType other = t == DType::kBF16 ? DType::kF16 : DType::kBF16;
    ValueId o1 = c.op("stablehlo.convert", {cur}, other);
    ValueId o2 = c.op("stablehlo.convert", {o1}, DType::kF32);
    c.outputs.push_back(o2);
    std::vector<Tensor> ins = {random_float(t, c.shape, rng), random_float(t, c.shape, rng)};
    SCOPED_TRACE(std::string(dtype_name(t)));
    expect_bitwise_equal(c, ins);
  }
}

TEST(Fused, InPlaceOutputOverAnInput) {
  std::mt19937 rng(3);
  Chain c;
  c.shape = {5000};
  ValueId a = c.input(DType::kF32, c.shape), b = c.input(DType::kF32, c.shape);
  ValueId s = c.op("stablehlo.subtract", {a, b}, DType::kF32);
  ValueId m = c.op("stablehlo.multiply", {s, s}, DType::kF32);
  c.outputs = {m};
  Tensor x = random_float(DType::kF32, c.shape, rng), y = random_float(DType::kF32, c.shape, rng);
  auto ref = run_unfused(c, {x, y});
  std::vector<const shlo::Op*> ops;
  for (const auto& o : c.ops) ops.push_back(&o);
  auto k = compile_fused_elementwise(ops, c.inputs, c.outputs, c.fn);
  ASSERT_TRUE(k.ok());
  EXPECT_TRUE((*k)->can_run_in_place(0));
  EXPECT_TRUE((*k)->can_run_in_place(1));
  Tensor alias = Tensor::borrow(DType::kF32, c.shape, x.raw(), x.storage());
  ASSERT_TRUE((*k)->run({&x, &y}, {&alias}).ok());
  EXPECT_EQ(std::memcmp(x.raw(), ref.at(m).raw(), x.nbytes()), 0);
}

TEST(Fused, FusibilityAndErrors) {
  Chain c;
  c.shape = {4};
  ValueId f = c.input(DType::kF32, c.shape), i = c.input(DType::kI32, c.shape);
  ValueId ok_add = c.op("stablehlo.add", {f, f}, DType::kF32);
  ValueId int_add = c.op("stablehlo.add", {i, i}, DType::kI32);
  ValueId to_int = c.op("stablehlo.convert", {f}, DType::kI32);
  ValueId cmp = c.op("stablehlo.compare", {f, f}, DType::kI1,
                     {{"comparison_direction", Attr::enumeration("comparison_direction", "LT")}});
  ValueId splat = c.splat(DType::kF32, 2.0f);
  shlo::DenseElements varied{{DType::kF32, {4}}, {}};
  varied.bytes.resize(16);
  varied.bytes[5] = 1;
  ValueId nonsplat = c.op("stablehlo.constant", {}, DType::kF32, {{"value", Attr::dense_elements(varied)}});
  (void)ok_add, (void)int_add, (void)to_int, (void)cmp, (void)splat, (void)nonsplat;
  const auto& ops = c.ops;
  EXPECT_TRUE(is_fusible_elementwise(ops[0], c.fn));   // f32 add
  EXPECT_FALSE(is_fusible_elementwise(ops[1], c.fn));  // i32 add
  EXPECT_FALSE(is_fusible_elementwise(ops[2], c.fn));  // float -> int convert
  EXPECT_FALSE(is_fusible_elementwise(ops[3], c.fn));  // compare (i1 result)
  EXPECT_TRUE(is_fusible_elementwise(ops[4], c.fn));   // splat constant
  EXPECT_FALSE(is_fusible_elementwise(ops[5], c.fn));  // non-splat constant
  shlo::Op bcast;
  bcast.name = "stablehlo.broadcast_in_dim";
  bcast.operands = {f};
  bcast.results = {c.fn.new_value({DType::kF32, {2, 4}})};
  EXPECT_FALSE(is_fusible_elementwise(bcast, c.fn));

  auto bad = compile_fused_elementwise({&ops[1]}, {i}, {int_add}, c.fn);
  EXPECT_EQ(bad.status().kind(), ErrorKind::kUnsupported);
  auto missing_input = compile_fused_elementwise({&ops[0]}, {}, {ok_add}, c.fn);
  EXPECT_EQ(missing_input.status().kind(), ErrorKind::kInvalidArgument);
  auto bad_output = compile_fused_elementwise({&ops[0]}, {f}, {splat}, c.fn);
  EXPECT_EQ(bad_output.status().kind(), ErrorKind::kInvalidArgument);
  auto empty = compile_fused_elementwise({}, {f}, {f}, c.fn);
  EXPECT_FALSE(empty.ok());
  // Run-time buffer checks.
  auto k = compile_fused_elementwise({&ops[0]}, {f}, {ok_add}, c.fn);
  ASSERT_TRUE(k.ok());
  Tensor wrong = Tensor::zeros(DType::kF32, {5}), out = Tensor::zeros(DType::kF32, {4});
  EXPECT_EQ((*k)->run({&wrong}, {&out}).kind(), ErrorKind::kInvalidArgument);
}

}  // namespace
}  // namespace hlx::rt
