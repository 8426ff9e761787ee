// Helpers shared by the verifier / shape-inference / builder tests: hand-built IR (bypassing the
// builder's inference, so tests can build invalid programs) and label-checking assertions.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "stablehlo/ir.h"
#include "stablehlo/shape_inference.h"
#include "stablehlo/verifier.h"

namespace hlx::shlo::testing {

inline TensorType T(DType d, Shape s = {}) { return TensorType{d, std::move(s)}; }
constexpr DType F32 = DType::kF32, BF16 = DType::kBF16, F16 = DType::kF16, I64 = DType::kI64, I32 = DType::kI32,
                I8 = DType::kI8, U8 = DType::kU8, I1 = DType::kI1;

// Asserts a kVerify error whose message cites `label` (as "label:" so that c1 != c12).
inline ::testing::AssertionResult FailsWith(const Status& s, const std::string& label) {
  if (s.ok()) return ::testing::AssertionFailure() << "expected " << label << ", got OK";
  if (s.kind() != ErrorKind::kVerify)
    return ::testing::AssertionFailure() << "expected a verify error, got " << s.to_string();
  if (s.message().find(label + ":") == std::string::npos)
    return ::testing::AssertionFailure() << "expected " << label << " in: " << s.message();
  return ::testing::AssertionSuccess() << s.message();
}
inline ::testing::AssertionResult IsOk(const Status& s) {
  if (s.ok()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << s.to_string();
}
template <class T>
::testing::AssertionResult FailsWith(const Result<T>& r, const std::string& label) {
  return FailsWith(r.status(), label);
}

// Builds a function body op by op with explicit types.
struct Raw {
  Module m;
  size_t fi = 0;
  Raw() { add_function("main"); }
  Function& f() { return m.functions[fi]; }
  void add_function(std::string name) {
    m.functions.emplace_back();
    m.functions.back().name = std::move(name);
    fi = m.functions.size() - 1;
  }
  ValueId arg(TensorType t) {
    ValueId v = f().new_value(std::move(t));
    f().args.push_back(v);
    f().arg_attrs.push_back({});
    return v;
  }
  std::vector<ValueId> op(std::string name, std::vector<ValueId> operands, std::vector<TensorType> results,
                          AttrDict attrs = {}, std::vector<Block> regions = {}) {
    Op o;
    o.name = std::move(name);
    o.operands = std::move(operands);
    for (auto& t : results) o.results.push_back(f().new_value(t));
    o.attrs = std::move(attrs);
    o.regions = std::move(regions);
    f().body.push_back(o);
    return o.results;
  }
  ValueId op1(std::string name, std::vector<ValueId> operands, TensorType result, AttrDict attrs = {},
              std::vector<Block> regions = {}) {
    return op(std::move(name), std::move(operands), {std::move(result)}, std::move(attrs), std::move(regions))[0];
  }
  void ret(std::vector<ValueId> vs) {
    Op o;
    o.name = "func.return";
    o.operands = vs;
    f().result_types.clear();
    for (ValueId v : vs) f().result_types.push_back(f().type_of(v));
    f().body.push_back(o);
  }
  Status verify() const { return verify_module(m); }
};

// A scalar reduction body `op(a, b)` over element type `t` (N = 1), built in function `f`.
inline Block binary_body(Function& f, const std::string& op, DType t, DType ret_t) {
  Block b;
  ValueId x = f.new_value(TensorType{t, {}});
  ValueId y = f.new_value(TensorType{t, {}});
  b.args = {x, y};
  Op o;
  o.name = op;
  o.operands = {x, y};
  ValueId r = f.new_value(TensorType{ret_t, {}});
  o.results = {r};
  Op ret;
  ret.name = "stablehlo.return";
  ret.operands = {r};
  b.ops = {o, ret};
  return b;
}
inline Block binary_body(Function& f, const std::string& op, DType t) { return binary_body(f, op, t, t); }

// One op applied to function arguments of the given types; its results are returned.
struct OpCase {
  std::string name;
  std::vector<TensorType> operands;
  std::vector<TensorType> results;
  AttrDict attrs;
  std::function<std::vector<Block>(Function&)> regions;

  Status verify() const {
    Raw r;
    std::vector<ValueId> args;
    for (const TensorType& t : operands) args.push_back(r.arg(t));
    std::vector<Block> regs = regions ? regions(r.f()) : std::vector<Block>{};
    std::vector<ValueId> res = r.op(name, args, results, attrs, std::move(regs));
    r.ret(res);
    return r.verify();
  }
  OpCase with(const std::function<void(OpCase&)>& mutate) const {
    OpCase c = *this;
    mutate(c);
    return c;
  }
  Attr* attr(std::string_view key) {
    for (NamedAttr& a : attrs)
      if (a.name == key) return &a.value;
    return nullptr;
  }
  // Field of a struct attribute (created when missing).
  Attr& field(std::string_view key, std::string_view f) {
    Attr* s = attr(key);
    for (NamedAttr& a : s->dict)
      if (a.name == f) return a.value;
    s->dict.push_back({std::string(f), Attr::i64_array({})});
    return s->dict.back().value;
  }
};

// Runs `base` (must pass) and each mutation (must fail with its label).
struct Mutation {
  std::string label;
  std::function<void(OpCase&)> mutate;
};
inline void check_mutations(const OpCase& base, const std::vector<Mutation>& muts) {
  EXPECT_TRUE(IsOk(base.verify())) << base.name;
  for (const Mutation& m : muts) EXPECT_TRUE(FailsWith(base.with(m.mutate).verify(), m.label));
}

inline DenseElements dense_i64(Shape shape, std::vector<int64_t> v) {
  DenseElements d;
  d.type = TensorType{DType::kI64, std::move(shape)};
  d.bytes.resize(v.size() * 8);
  std::memcpy(d.bytes.data(), v.data(), d.bytes.size());
  return d;
}

}  // namespace hlx::shlo::testing
