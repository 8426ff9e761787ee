// Program: static memory plan, in-place donated updates, inlining of calls and composite
// decompositions, native composites, custom_call handlers, weights, and typed input errors.
// Uses a private registry (structured kernels + small test kernels written here) so these tests
// do not depend on other kernel families.
#include <cstring>

#include "runtime/program.h"
#include "structured_test_util.h"

namespace hlx {
namespace {

using namespace hlx::testing;
using rt::OpKernel;

class NegateKernel : public OpKernel {
 public:
  Status run(const std::vector<const Tensor*>& in, const std::vector<Tensor*>& out) override {
    for (int64_t i = 0; i < in[0]->num_elements(); ++i) out[0]->data<float>()[i] = -in[0]->data<float>()[i];
    return ok_status();
  }
};
class AddKernel : public OpKernel {
 public:
  bool can_run_in_place(int) const override { return true; }
  Status run(const std::vector<const Tensor*>& in, const std::vector<Tensor*>& out) override {
    for (int64_t i = 0; i < in[0]->num_elements(); ++i)
      out[0]->data<float>()[i] = in[0]->data<float>()[i] + in[1]->data<float>()[i];
    return ok_status();
  }
};
class DoubleKernel : public OpKernel {
 public:
  Status run(const std::vector<const Tensor*>& in, const std::vector<Tensor*>& out) override {
    for (int64_t i = 0; i < in[0]->num_elements(); ++i) out[0]->data<float>()[i] = 2 * in[0]->data<float>()[i];
    return ok_status();
  }
};
// dynamic_update_slice for rank-2 operands with clamped scalar i32 start indices.
class DusKernel : public OpKernel {
 public:
  bool can_run_in_place(int index) const override { return index == 0; }
  Status run(const std::vector<const Tensor*>& in, const std::vector<Tensor*>& out) override {
    const Tensor &x = *in[0], &u = *in[1];
    if (out[0]->raw() != x.raw()) std::memcpy(out[0]->raw(), x.raw(), x.nbytes());
    int64_t r0 = std::clamp<int64_t>(in[2]->data<int32_t>()[0], 0, x.dim(0) - u.dim(0));
    int64_t c0 = std::clamp<int64_t>(in[3]->data<int32_t>()[0], 0, x.dim(1) - u.dim(1));
    for (int64_t i = 0; i < u.dim(0); ++i)
      for (int64_t j = 0; j < u.dim(1); ++j)
        out[0]->data<float>()[(r0 + i) * x.dim(1) + c0 + j] = u.data<float>()[i * u.dim(1) + j];
    return ok_status();
  }
};
template <class K>
Result<std::unique_ptr<OpKernel>> make(const shlo::Op&, const shlo::Function&) {
  return std::unique_ptr<OpKernel>(new K);
}

const rt::KernelRegistry& test_registry() {
  static const rt::KernelRegistry r = [] {
    rt::KernelRegistry x;
    rt::register_structured_kernels(x);
    x.add("stablehlo.negate", make<NegateKernel>);
    x.add("stablehlo.add", make<AddKernel>);
    x.add("stablehlo.dynamic_update_slice", make<DusKernel>);
    x.add("composite:test.double", make<DoubleKernel>);
    return x;
  }();
  return r;
}

rt::ProgramOptions opts() {
  rt::ProgramOptions o;
  o.registry = &test_registry();
  o.fuse_elementwise = false;  // fused kernels come from another registry
  return o;
}

shlo::Op& ret(IrBuilder& b, std::vector<shlo::ValueId> vals) {
  for (auto v : vals) b.fn.result_types.push_back(b.fn.type_of(v));
  b.fn.result_attrs.resize(vals.size());
  return b.op("func.return", std::move(vals), {});
}

std::shared_ptr<const shlo::Module> module_of(std::vector<shlo::Function> fns) {
  auto m = std::make_shared<shlo::Module>();
  m->functions = std::move(fns);
  return m;
}

Result<std::shared_ptr<rt::Program>> compile(std::vector<shlo::Function> fns, rt::ProgramOptions o = opts()) {
  return rt::Program::compile(module_of(std::move(fns)), std::move(o));
}

TEST(Program, ArenaIsSmallerThanTheSumOfIntermediatesOnAChain) {
  IrBuilder b;
  b.fn.name = "main";
  auto v = b.arg(tt(DType::kF32, {64}));
  for (int i = 0; i < 5; ++i) v = b.op("stablehlo.negate", {v}, {tt(DType::kF32, {64})}).results[0];
  ret(b, {v});
  auto p = compile({b.fn});
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  auto stats = (*p)->plan_stats("main");
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->intermediate_bytes, 4u * 256u);  // the four non-output values
  EXPECT_EQ(stats->arena_bytes, 2u * 256u);         // two buffers ping-pong
  Tensor x = random_tensor(DType::kF32, {64}, 1);
  for (int rep = 0; rep < 2; ++rep) {  // the arena is reused across runs
    auto out = (*p)->run("main", {x});
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    for (int i = 0; i < 64; ++i) EXPECT_EQ((*out)[0].data<float>()[i], -x.data<float>()[i]);
    EXPECT_NE((*out)[0].raw(), x.raw());
  }
  auto dump = (*p)->dump_plan("main");
  ASSERT_TRUE(dump.ok());
  EXPECT_NE(dump->find("arena+"), std::string::npos) << *dump;
}

// A result's buffer is recycled by a later run only after the caller has dropped it: results held
// across runs keep their own values.
TEST(Program, HeldResultsKeepTheirValuesAndDroppedOnesAreRecycled) {
  IrBuilder b;
  b.fn.name = "main";
  auto x = b.arg(tt(DType::kF32, {64}));
  ret(b, {b.op("stablehlo.negate", {x}, {tt(DType::kF32, {64})}).results[0]});
  auto p = compile({b.fn});
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  auto run = [&](const Tensor& in) {
    auto out = (*p)->run("main", {in});
    EXPECT_TRUE(out.ok()) << out.status().to_string();
    return out.ok() ? (*out)[0] : Tensor();
  };
  Tensor x1 = random_tensor(DType::kF32, {64}, 1), x2 = random_tensor(DType::kF32, {64}, 2);
  Tensor r1 = run(x1);
  Tensor r1_view = r1;  // a second reference to the same storage
  Tensor r2 = run(x2);
  ASSERT_NE(r2.raw(), r1.raw());
  const void* recycled = r2.raw();
  r2 = Tensor();  // dropped: the next run may write into it
  Tensor r3 = run(x1);
  EXPECT_EQ(r3.raw(), recycled);
  Tensor r4 = run(x2);  // r3 still held: a fresh buffer
  EXPECT_NE(r4.raw(), r3.raw());
  for (int i = 0; i < 64; ++i) {
    EXPECT_EQ(r1_view.data<float>()[i], -x1.data<float>()[i]);
    EXPECT_EQ(r3.data<float>()[i], -x1.data<float>()[i]);
    EXPECT_EQ(r4.data<float>()[i], -x2.data<float>()[i]);
  }
}

TEST(Program, InPlaceReuseWhenTheInputDies) {
  IrBuilder b;
  b.fn.name = "main";
  auto x = b.arg(tt(DType::kF32, {16}));
  auto n = b.op("stablehlo.negate", {x}, {tt(DType::kF32, {16})}).results[0];
  auto a = b.op("stablehlo.add", {n, x}, {tt(DType::kF32, {16})}).results[0];  // n dies here: in place
  auto c = b.op("stablehlo.add", {a, a}, {tt(DType::kF32, {16})}).results[0];  // same value twice: not in place
  ret(b, {c});
  auto p = compile({b.fn});
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ((*p)->plan_stats("main")->in_place_steps, 1);
  Tensor xt = random_tensor(DType::kF32, {16}, 2);
  Tensor keep = xt.clone();
  auto out = (*p)->run("main", {xt});
  ASSERT_TRUE(out.ok());
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ((*out)[0].data<float>()[i], 0.f);
    EXPECT_EQ(xt.data<float>()[i], keep.data<float>()[i]);  // an undonated argument is never written
  }
}

TEST(Program, DonatedCacheIsUpdatedInPlaceByADynamicUpdateSliceChain) {
  IrBuilder b;
  b.fn.name = "decode";
  auto cache = b.arg(tt(DType::kF32, {8, 4}));
  b.fn.arg_attrs[0].push_back({shlo::kAliasAttr, shlo::Attr::integer(0)});
  auto upd = b.arg(tt(DType::kF32, {2, 4}));
  auto row = b.arg(tt(DType::kI32, {}));
  auto& zc = b.op("stablehlo.constant", {}, {tt(DType::kI32, {})});
  shlo::DenseElements z{tt(DType::kI32, {}), {0, 0, 0, 0}};
  zc.attrs.push_back({"value", shlo::Attr::dense_elements(z)});
  auto zero = zc.results[0];
  auto& sc = b.op("stablehlo.constant", {}, {tt(DType::kI32, {})});
  shlo::DenseElements s{tt(DType::kI32, {}), {7, 0, 0, 0}};
  sc.attrs.push_back({"value", shlo::Attr::dense_elements(s)});
  auto seven = sc.results[0];
  auto one = b.op("stablehlo.dynamic_update_slice", {cache, upd, row, zero}, {tt(DType::kF32, {8, 4})}).results[0];
  auto neg = b.op("stablehlo.negate", {upd}, {tt(DType::kF32, {2, 4})}).results[0];
  auto two = b.op("stablehlo.dynamic_update_slice", {one, neg, seven, zero}, {tt(DType::kF32, {8, 4})}).results[0];
  ret(b, {two});
  auto p = compile({b.fn});
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ((*p)->plan_stats("decode")->in_place_steps, 2);
  Tensor ct = random_tensor(DType::kF32, {8, 4}, 3), ut = random_tensor(DType::kF32, {2, 4}, 4);
  Tensor before = ct.clone();
  auto out = (*p)->run("decode", {ct, ut, from_vector<int>(DType::kI32, {}, {2})});
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  EXPECT_EQ((*out)[0].raw(), ct.raw());  // no copy of the cache
  EXPECT_EQ((*out)[0].storage(), ct.storage());
  for (int r = 0; r < 8; ++r)
    for (int c = 0; c < 4; ++c) {
      float want = before.data<float>()[r * 4 + c];
      if (r == 2 || r == 3) want = ut.data<float>()[(r - 2) * 4 + c];
      if (r == 6 || r == 7) want = -ut.data<float>()[(r - 6) * 4 + c];  // start 7 clamps to 6
      EXPECT_EQ(ct.data<float>()[r * 4 + c], want) << r << "," << c;
    }
}

TEST(Program, DonatedOutputNotProducedInPlaceStillLandsInTheArgument) {
  IrBuilder b;
  b.fn.name = "main";
  auto st = b.arg(tt(DType::kF32, {4}));
  b.fn.arg_attrs[0].push_back({shlo::kAliasAttr, shlo::Attr::integer(0)});
  auto n = b.op("stablehlo.negate", {st}, {tt(DType::kF32, {4})}).results[0];
  auto m = b.op("stablehlo.negate", {n}, {tt(DType::kF32, {4})}).results[0];
  auto k = b.op("stablehlo.negate", {m}, {tt(DType::kF32, {4})}).results[0];
  ret(b, {k});
  auto p = compile({b.fn});
  ASSERT_TRUE(p.ok());
  Tensor s = from_vector<float>(DType::kF32, {4}, {1, 2, 3, 4});
  auto out = (*p)->run("main", {s});
  ASSERT_TRUE(out.ok());
  EXPECT_EQ((*out)[0].raw(), s.raw());
  EXPECT_EQ(s.data<float>()[2], -3.f);
}

TEST(Program, FuncCallIsInlined) {
  IrBuilder mm;
  mm.fn.name = "mm";
  mm.fn.is_public = false;
  auto a = mm.arg(tt(DType::kF32, {3, 4})), w = mm.arg(tt(DType::kF32, {4, 2}));
  auto& d = mm.op("stablehlo.dot_general", {a, w}, {tt(DType::kF32, {3, 2})});
  d.attrs.push_back(
      {"dot_dimension_numbers", shlo::Attr::structure("dot", {{"lhs_contracting_dimensions", ints({1})},
                                                              {"rhs_contracting_dimensions", ints({0})}})});
  ret(mm, {d.results[0]});
  IrBuilder b;
  b.fn.name = "main";
  auto x = b.arg(tt(DType::kF32, {3, 4})), y = b.arg(tt(DType::kF32, {4, 2}));
  auto& call = b.op("func.call", {x, y}, {tt(DType::kF32, {3, 2})});
  call.attrs.push_back({"callee", shlo::Attr::symbol("mm")});
  auto& twice = b.op("func.call", {x, y}, {tt(DType::kF32, {3, 2})});
  twice.attrs.push_back({"callee", shlo::Attr::symbol("mm")});
  auto r =
      b.op("stablehlo.add", {b.fn.body[0].results[0], b.fn.body[1].results[0]}, {tt(DType::kF32, {3, 2})}).results[0];
  ret(b, {r});
  auto p = compile({b.fn, mm.fn});
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  Tensor xt = random_tensor(DType::kF32, {3, 4}, 5), yt = random_tensor(DType::kF32, {4, 2}, 6);
  auto out = (*p)->run("main", {xt, yt});
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 2; ++j) {
      float acc = 0;
      for (int k = 0; k < 4; ++k) acc += xt.data<float>()[i * 4 + k] * yt.data<float>()[k * 2 + j];
      EXPECT_NEAR((*out)[0].data<float>()[i * 2 + j], 2 * acc, 1e-5f);
    }
  // Private functions are not entries.
  EXPECT_EQ((*p)->run("mm", {xt, yt}).status().kind(), ErrorKind::kNotFound);
}

std::vector<shlo::Function> composite_module(const std::string& name) {
  IrBuilder dec;
  dec.fn.name = "decomp";
  dec.fn.is_public = false;
  auto a = dec.arg(tt(DType::kF32, {5}));
  ret(dec, {dec.op("stablehlo.negate", {a}, {tt(DType::kF32, {5})}).results[0]});
  IrBuilder b;
  b.fn.name = "main";
  auto x = b.arg(tt(DType::kF32, {5}));
  auto& c = b.op("stablehlo.composite", {x}, {tt(DType::kF32, {5})});
  c.attrs.push_back({"name", shlo::Attr::string(name)});
  c.attrs.push_back({"composite_attributes", shlo::Attr::dictionary({})});
  c.attrs.push_back({"decomposition", shlo::Attr::symbol("decomp")});
  ret(b, {c.results[0]});
  return {b.fn, dec.fn};
}

TEST(Program, UnknownCompositeRunsItsDecomposition) {
  auto p = compile(composite_module("test.unknown"));
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  auto out = (*p)->run("main", {from_vector<float>(DType::kF32, {5}, {1, 2, 3, 4, 5})});
  ASSERT_TRUE(out.ok());
  EXPECT_EQ((*out)[0].data<float>()[3], -4.f);
}

TEST(Program, KnownCompositeUsesTheNativeKernelUnlessDisabled) {
  auto p = compile(composite_module("test.double"));
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  auto out = (*p)->run("main", {from_vector<float>(DType::kF32, {5}, {1, 2, 3, 4, 5})});
  ASSERT_TRUE(out.ok());
  EXPECT_EQ((*out)[0].data<float>()[3], 8.f);
  auto o = opts();
  o.native_composites = false;
  auto q = compile(composite_module("test.double"), o);
  ASSERT_TRUE(q.ok());
  EXPECT_EQ((*(*q)->run("main", {from_vector<float>(DType::kF32, {5}, {1, 2, 3, 4, 5})}))[0].data<float>()[3], -4.f);
}

std::vector<shlo::Function> custom_call_module() {
  IrBuilder b;
  b.fn.name = "main";
  auto x = b.arg(tt(DType::kF32, {2}));
  auto& cc = b.op("stablehlo.custom_call", {x, x}, {});
  cc.attrs.push_back({"call_target_name", shlo::Attr::string("check.eq")});
  cc.attrs.push_back({"has_side_effect", shlo::Attr::boolean(true)});
  ret(b, {x});
  return {b.fn};
}

TEST(Program, CustomCallHandlers) {
  auto missing = compile(custom_call_module());
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().kind(), ErrorKind::kUnsupported);
  EXPECT_NE(missing.status().message().find("check.eq"), std::string::npos) << missing.status().message();
  int calls = 0;
  auto o = opts();
  o.custom_calls.push_back({"check.eq", [&](const std::vector<Tensor>& ops) {
                              ++calls;
                              if (ops.size() != 2 || ops[0].data<float>()[0] != ops[1].data<float>()[0])
                                return make_error(ErrorKind::kInternal, "bad");
                              if (ops[0].data<float>()[0] < 0)
                                return make_error(ErrorKind::kOutOfRange, "negative input");
                              return ok_status();
                            }});
  auto p = compile(custom_call_module(), o);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_TRUE((*p)->run("main", {from_vector<float>(DType::kF32, {2}, {1, 2})}).ok());
  auto bad = (*p)->run("main", {from_vector<float>(DType::kF32, {2}, {-1, 2})});
  EXPECT_EQ(bad.status().kind(), ErrorKind::kOutOfRange);
  EXPECT_EQ(calls, 2);
}

TEST(Program, TypedErrorsForBadInputsAndUnsupportedOps) {
  IrBuilder b;
  b.fn.name = "main";
  auto x = b.arg(tt(DType::kF32, {2, 3}));
  b.fn.arg_attrs[0].push_back({shlo::kArgNameAttr, shlo::Attr::string("tokens")});
  ret(b, {b.op("stablehlo.negate", {x}, {tt(DType::kF32, {2, 3})}).results[0]});
  auto p = compile({b.fn});
  ASSERT_TRUE(p.ok());
  auto count = (*p)->run("main", {});
  EXPECT_EQ(count.status().kind(), ErrorKind::kInvalidArgument);
  EXPECT_NE(count.status().message().find("takes 1 inputs, got 0"), std::string::npos) << count.status().message();
  auto dtype = (*p)->run("main", {Tensor::zeros(DType::kBF16, {2, 3})});
  EXPECT_EQ(dtype.status().kind(), ErrorKind::kInvalidArgument);
  EXPECT_NE(dtype.status().message().find("tokens"), std::string::npos) << dtype.status().message();
  EXPECT_NE(dtype.status().message().find("f32[2x3]"), std::string::npos) << dtype.status().message();
  EXPECT_NE(dtype.status().message().find("bf16[2x3]"), std::string::npos) << dtype.status().message();
  auto shape = (*p)->run("main", {Tensor::zeros(DType::kF32, {3, 2})});
  EXPECT_NE(shape.status().message().find("f32[3x2]"), std::string::npos) << shape.status().message();
  EXPECT_EQ((*p)->run("nope", {}).status().kind(), ErrorKind::kNotFound);

  IrBuilder u;
  u.fn.name = "entry";
  auto y = u.arg(tt(DType::kF32, {4}));
  ret(u, {u.op("stablehlo.sort", {y}, {tt(DType::kF32, {4})}).results[0]});
  auto q = compile({u.fn});
  ASSERT_FALSE(q.ok());
  EXPECT_EQ(q.status().kind(), ErrorKind::kUnsupported);
  EXPECT_NE(q.status().message().find("stablehlo.sort"), std::string::npos) << q.status().message();
  EXPECT_NE(q.status().message().find("@entry"), std::string::npos) << q.status().message();
  EXPECT_NE(q.status().message().find("f32[4]"), std::string::npos) << q.status().message();
}

TEST(Program, WeightsAreBoundByNameAndChecked) {
  IrBuilder b;
  b.fn.name = "main";
  auto x = b.arg(tt(DType::kF32, {2, 3}));
  auto w = b.arg(tt(DType::kBF16, {3, 4}));
  b.fn.arg_attrs[1].push_back({shlo::kWeightAttr, shlo::Attr::string("proj.weight")});
  auto& d = b.op("stablehlo.dot_general", {x, w}, {tt(DType::kF32, {2, 4})});
  d.attrs.push_back(
      {"dot_dimension_numbers", shlo::Attr::structure("dot", {{"lhs_contracting_dimensions", ints({1})},
                                                              {"rhs_contracting_dimensions", ints({0})}})});
  ret(b, {d.results[0]});
  auto p = compile({b.fn});
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  Tensor xt = random_tensor(DType::kF32, {2, 3}, 7);
  auto unbound = (*p)->run("main", {xt});
  EXPECT_EQ(unbound.status().kind(), ErrorKind::kNotFound);
  EXPECT_NE(unbound.status().message().find("proj.weight"), std::string::npos);
  Status wrong = (*p)->bind_weight("proj.weight", Tensor::zeros(DType::kF32, {3, 4}));
  EXPECT_EQ(wrong.kind(), ErrorKind::kInvalidArgument);
  EXPECT_NE(wrong.message().find("bf16[3x4]"), std::string::npos) << wrong.message();
  EXPECT_NE(wrong.message().find("f32[3x4]"), std::string::npos) << wrong.message();
  EXPECT_EQ((*p)->bind_weight("nope", Tensor::zeros(DType::kF32, {1})).kind(), ErrorKind::kNotFound);
  Tensor wt = random_tensor(DType::kBF16, {3, 4}, 8);
  ASSERT_TRUE((*p)->bind_weight("proj.weight", wt).ok());
  auto out = (*p)->run("main", {xt});
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 4; ++j) {
      float acc = 0;
      for (int k = 0; k < 3; ++k) acc += xt.data<float>()[i * 3 + k] * get_f(wt, k * 4 + j);
      EXPECT_NEAR((*out)[0].data<float>()[i * 4 + j], acc, 1e-5f);
    }
}

TEST(Program, ReturnsConstantsAndArguments) {
  IrBuilder b;
  b.fn.name = "main";
  auto x = b.arg(tt(DType::kI32, {2}));
  auto& c = b.op("stablehlo.constant", {}, {tt(DType::kI32, {2})});
  c.attrs.push_back({"value", shlo::Attr::dense_elements({tt(DType::kI32, {2}), {5, 0, 0, 0, 6, 0, 0, 0}})});
  ret(b, {c.results[0], x});
  auto p = compile({b.fn});
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  auto out = (*p)->run("main", {from_vector<int>(DType::kI32, {2}, {1, 2})});
  ASSERT_TRUE(out.ok());
  (*out)[0].data<int32_t>()[0] = 99;  // the caller owns its copy; the plan's constant is unchanged
  auto again = (*p)->run("main", {from_vector<int>(DType::kI32, {2}, {1, 2})});
  EXPECT_EQ((*again)[0].data<int32_t>()[0], 5);
  EXPECT_EQ((*again)[1].data<int32_t>()[1], 2);
}

}  // namespace
}  // namespace hlx

namespace hlx {
namespace {

using namespace hlx::testing;

// With the builtin registry: an elementwise chain (single-use intermediates) becomes one fused
// step when the fused-elementwise kernel accepts it; the result matches a plain loop either way.
TEST(Program, ElementwiseChainIsFusedWithBuiltinKernels) {
  for (const char* k : {"stablehlo.negate", "stablehlo.add", "stablehlo.multiply"})
    if (!have_kernel(k)) GTEST_SKIP() << k << " not available yet";
  IrBuilder b;
  b.fn.name = "main";
  auto x = b.arg(tt(DType::kF32, {33})), y = b.arg(tt(DType::kF32, {33}));
  auto n = b.op("stablehlo.negate", {x}, {tt(DType::kF32, {33})}).results[0];
  auto a = b.op("stablehlo.add", {n, y}, {tt(DType::kF32, {33})}).results[0];
  auto m = b.op("stablehlo.multiply", {a, y}, {tt(DType::kF32, {33})}).results[0];
  b.fn.result_types = {tt(DType::kF32, {33})};
  b.op("func.return", {m}, {});
  auto mod = std::make_shared<shlo::Module>();
  mod->functions = {b.fn};
  auto p = rt::Program::compile(mod);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  auto stats = (*p)->plan_stats("main");
  if (shlo::Op probe = b.fn.body[0]; rt::is_fusible_elementwise(probe, b.fn)) {
    EXPECT_EQ(stats->fused_groups, 1) << *(*p)->dump_plan("main");
    EXPECT_EQ(stats->steps, 1);
  }
  Tensor xt = random_tensor(DType::kF32, {33}, 1), yt = random_tensor(DType::kF32, {33}, 2);
  auto out = (*p)->run("main", {xt, yt});
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  for (int i = 0; i < 33; ++i)
    EXPECT_NEAR((*out)[0].data<float>()[i], (-xt.data<float>()[i] + yt.data<float>()[i]) * yt.data<float>()[i], 1e-6f);
}

}  // namespace
}  // namespace hlx

namespace hlx {
namespace {

using namespace hlx::testing;

// Broadcasts of one-value constants (FunctionBuilder::full) read by a fused chain: the chain fills
// the value itself and the broadcast step disappears, unless another op (here: a return) still
// reads the broadcast tensor. Results against the arithmetic written out here, in f32 and bf16
// (every intermediate rounded to bf16, as the op-by-op semantics do).
TEST(Program, SplatBroadcastsAreFilledInsideFusedChains) {
  for (const char* k : {"stablehlo.multiply", "stablehlo.add", "stablehlo.broadcast_in_dim"})
    if (!have_kernel(k)) GTEST_SKIP() << k << " not available yet";
  for (DType d : {DType::kF32, DType::kBF16})
    for (bool also_returned : {false, true}) {
      IrBuilder b;
      b.fn.name = "main";
      auto x = b.arg(tt(d, {1000}));
      auto scalar = [&](float v) {
        auto& c = b.op("stablehlo.constant", {}, {tt(d, {})});
        std::vector<uint8_t> bytes(dtype_size(d));
        if (d == DType::kF32)
          std::memcpy(bytes.data(), &v, 4);
        else {
          const bf16 h = f32_to_bf16(v);
          std::memcpy(bytes.data(), &h, 2);
        }
        c.attrs.push_back({"value", shlo::Attr::dense_elements({tt(d, {}), bytes})});
        auto& bc = b.op("stablehlo.broadcast_in_dim", {c.results[0]}, {tt(d, {1000})});
        bc.attrs.push_back({"broadcast_dimensions", shlo::Attr::i64_array({})});
        return bc.results[0];
      };
      auto two = scalar(2.5f), half = scalar(0.5f);
      auto m = b.op("stablehlo.multiply", {x, two}, {tt(d, {1000})}).results[0];
      auto a = b.op("stablehlo.add", {m, half}, {tt(d, {1000})}).results[0];
      auto y = b.op("stablehlo.multiply", {a, two}, {tt(d, {1000})}).results[0];
      b.fn.result_types = {tt(d, {1000})};
      std::vector<shlo::ValueId> rets = {y};
      if (also_returned) {
        b.fn.result_types.push_back(tt(d, {1000}));
        rets.push_back(half);
      }
      b.op("func.return", rets, {});
      auto mod = std::make_shared<shlo::Module>();
      mod->functions = {b.fn};
      auto p = rt::Program::compile(mod);
      ASSERT_TRUE(p.ok()) << p.status().to_string();
      const std::string what = str_cat(dtype_name(d), " also_returned=", also_returned);
      auto stats = (*p)->plan_stats("main");
      EXPECT_EQ(stats->fused_groups, 1) << what << "\n" << *(*p)->dump_plan("main");
      EXPECT_EQ(stats->steps, also_returned ? 2 : 1) << what << "\n" << *(*p)->dump_plan("main");
      Tensor xt = random_tensor(d, {1000}, 3);
      auto out = (*p)->run("main", {xt});
      ASSERT_TRUE(out.ok()) << out.status().to_string();
      auto round = [&](float v) { return d == DType::kF32 ? v : bf16_to_f32(f32_to_bf16(v)); };
      auto at = [&](const Tensor& t, int i) {
        return d == DType::kF32 ? t.data<float>()[i] : bf16_to_f32(t.data<bf16>()[i]);
      };
      for (int i = 0; i < 1000; ++i) {
        const float want = round(round(round(at(xt, i) * 2.5f) + 0.5f) * 2.5f);
        ASSERT_EQ(at((*out)[0], i), want) << what << " element " << i;
        if (also_returned) {
          ASSERT_EQ(at((*out)[1], i), 0.5f) << what << " element " << i;
        }
      }
    }
}

}  // namespace
}  // namespace hlx
