// Every verifier rule: a passing example and a failing one that must cite the rule's label.
#include <gtest/gtest.h>

#include "stablehlo/verifier.h"
#include "verify_test_util.h"

namespace hlx::shlo {
namespace {

using namespace hlx::shlo::testing;

Attr I(int64_t v) { return Attr::integer(v); }
Attr A(std::vector<int64_t> v) { return Attr::i64_array(std::move(v)); }
Attr E(const char* e, const char* v) { return Attr::enumeration(e, v); }

// ------------------------------------------------------------------ structure

TEST(VerifierStructure, ValidProgramPasses) {
  Raw r;
  ValueId a = r.arg(T(F32, {2}));
  ValueId b = r.op1("stablehlo.add", {a, a}, T(F32, {2}));
  r.ret({b});
  EXPECT_TRUE(IsOk(r.verify()));
}

TEST(VerifierStructure, DuplicateFunctionNames) {
  Raw r;
  r.ret({});
  r.add_function("main");
  r.ret({});
  EXPECT_TRUE(FailsWith(r.verify(), "symbol_unique"));
}

TEST(VerifierStructure, UseBeforeDefinition) {
  Raw r;
  ValueId a = r.arg(T(F32, {2}));
  ValueId later = r.f().new_value(T(F32, {2}));  // defined by the second op
  ValueId b = r.op1("stablehlo.add", {a, later}, T(F32, {2}));
  Op def;
  def.name = "stablehlo.negate";
  def.operands = {a};
  def.results = {later};
  r.f().body.push_back(def);
  r.ret({b});
  Status s = r.verify();
  EXPECT_TRUE(FailsWith(s, "ssa_dominance"));
  // The message locates the op and names the value.
  EXPECT_NE(s.message().find("function @main, op #0 stablehlo.add"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("%1"), std::string::npos) << s.message();
}

TEST(VerifierStructure, ValueDefinedTwice) {
  Raw r;
  ValueId a = r.arg(T(F32, {2}));
  ValueId b = r.op1("stablehlo.negate", {a}, T(F32, {2}));
  Op again;
  again.name = "stablehlo.negate";
  again.operands = {a};
  again.results = {b};
  r.f().body.push_back(again);
  r.ret({b});
  EXPECT_TRUE(FailsWith(r.verify(), "ssa_single_definition"));
}

TEST(VerifierStructure, ArgumentRedefinedByOp) {
  Raw r;
  ValueId a = r.arg(T(F32, {2}));
  Op o;
  o.name = "stablehlo.negate";
  o.operands = {a};
  o.results = {a};
  r.f().body.push_back(o);
  r.ret({a});
  EXPECT_TRUE(FailsWith(r.verify(), "ssa_single_definition"));
}

TEST(VerifierStructure, OperandIdOutOfRange) {
  Raw r;
  ValueId a = r.arg(T(F32, {2}));
  ValueId b = r.op1("stablehlo.add", {a, 99}, T(F32, {2}));
  r.ret({b});
  EXPECT_TRUE(FailsWith(r.verify(), "ssa_value_id"));
}

TEST(VerifierStructure, MissingFuncReturn) {
  Raw r;
  ValueId a = r.arg(T(F32, {2}));
  r.op1("stablehlo.negate", {a}, T(F32, {2}));
  EXPECT_TRUE(FailsWith(r.verify(), "func_terminator"));
}

TEST(VerifierStructure, ReturnBeforeEnd) {
  Raw r;
  ValueId a = r.arg(T(F32, {2}));
  r.ret({a});
  r.op1("stablehlo.negate", {a}, T(F32, {2}));
  r.ret({a});
  EXPECT_TRUE(FailsWith(r.verify(), "func_terminator"));
}

TEST(VerifierStructure, ReturnTypesMustMatchSignature) {
  Raw r;
  ValueId a = r.arg(T(F32, {2}));
  r.ret({a});
  r.f().result_types = {T(F32, {3})};
  EXPECT_TRUE(FailsWith(r.verify(), "return_c1"));
}

TEST(VerifierStructure, StablehloReturnAtTopLevel) {
  Raw r;
  ValueId a = r.arg(T(F32, {2}));
  r.op("stablehlo.return", {a}, {});
  r.ret({a});
  EXPECT_TRUE(FailsWith(r.verify(), "op_terminator"));
}

TEST(VerifierStructure, UnknownOp) {
  Raw r;
  ValueId a = r.arg(T(F32, {2}));
  ValueId b = r.op1("stablehlo.frobnicate", {a}, T(F32, {2}));
  r.ret({b});
  Status s = r.verify();
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.kind(), ErrorKind::kVerify);
  EXPECT_NE(s.message().find("unknown op 'stablehlo.frobnicate'"), std::string::npos) << s.message();
  Raw r2;
  ValueId c = r2.arg(T(F32, {2}));
  r2.ret({r2.op1("mydialect.op", {c}, T(F32, {2}))});
  EXPECT_NE(r2.verify().message().find("unknown op"), std::string::npos);
}

TEST(VerifierStructure, OperandAndResultCounts) {
  OpCase add{"stablehlo.add", {T(F32, {2}), T(F32, {2})}, {T(F32, {2})}, {}, nullptr};
  EXPECT_TRUE(IsOk(add.verify()));
  EXPECT_TRUE(FailsWith(add.with([](OpCase& c) { c.operands.pop_back(); }).verify(), "add_operands"));
  EXPECT_TRUE(FailsWith(add.with([](OpCase& c) { c.results.push_back(T(F32, {2})); }).verify(), "add_results"));
}

TEST(VerifierStructure, RegionOnOpWithoutRegions) {
  OpCase add{"stablehlo.add", {T(F32, {2}), T(F32, {2})}, {T(F32, {2})}, {}, [](Function& f) {
               return std::vector<Block>{binary_body(f, "stablehlo.add", F32)};
             }};
  EXPECT_TRUE(FailsWith(add.verify(), "op_regions"));
}

// A reduce whose body is given by `make_body`.
Status reduce_with_body(const std::function<Block(Function&, ValueId outer)>& make_body) {
  Raw r;
  ValueId x = r.arg(T(F32, {4}));
  ValueId init = r.arg(T(F32));
  Block b = make_body(r.f(), init);
  ValueId y = r.op1("stablehlo.reduce", {x, init}, T(F32), {{"dimensions", A({0})}}, {b});
  r.ret({y});
  return r.verify();
}

TEST(VerifierStructure, RegionMayUseOuterValues) {
  EXPECT_TRUE(IsOk(reduce_with_body([](Function& f, ValueId outer) {
    Block b = binary_body(f, "stablehlo.add", F32);
    // %r2 = add(%r, %outer) -- outer scalar captured from the enclosing function.
    ValueId r2 = f.new_value(T(F32));
    Op use;
    use.name = "stablehlo.add";
    use.operands = {b.ops[0].results[0], outer};
    use.results = {r2};
    b.ops.insert(b.ops.begin() + 1, use);
    b.ops.back().operands = {r2};
    return b;
  })));
}

TEST(VerifierStructure, RegionMustEndWithStablehloReturn) {
  EXPECT_TRUE(FailsWith(reduce_with_body([](Function& f, ValueId) {
                          Block b = binary_body(f, "stablehlo.add", F32);
                          b.ops.pop_back();
                          return b;
                        }),
                        "region_terminator"));
  EXPECT_TRUE(FailsWith(reduce_with_body([](Function& f, ValueId) {
                          Block b = binary_body(f, "stablehlo.add", F32);
                          b.ops.back().name = "func.return";
                          return b;
                        }),
                        "region_terminator"));
}

TEST(VerifierStructure, RegionValuesInvisibleOutside) {
  Raw r;
  ValueId x = r.arg(T(F32, {4}));
  ValueId init = r.arg(T(F32));
  Block b = binary_body(r.f(), "stablehlo.add", F32);
  ValueId inner = b.ops[0].results[0];
  ValueId y = r.op1("stablehlo.reduce", {x, init}, T(F32), {{"dimensions", A({0})}}, {b});
  ValueId z = r.op1("stablehlo.add", {y, inner}, T(F32));
  r.ret({z});
  EXPECT_TRUE(FailsWith(r.verify(), "ssa_dominance"));
}

TEST(VerifierStructure, NestedOpErrorNamesRegionPath) {
  Status s = reduce_with_body([](Function& f, ValueId) {
    return binary_body(f, "stablehlo.exponential", F32);  // wrong operand count
  });
  EXPECT_TRUE(FailsWith(s, "exponential_operands"));
  EXPECT_NE(s.message().find("op #0 stablehlo.reduce, region 0 op #0 stablehlo.exponential"), std::string::npos)
      << s.message();
}

// ------------------------------------------------------------------ calls and composites

Raw with_callee(TensorType in, TensorType out) {
  Raw r;
  r.add_function("callee");
  ValueId a = r.arg(in);
  r.ret({r.op1("stablehlo.convert", {a}, out)});
  r.fi = 0;
  return r;
}

TEST(VerifierCalls, CallChecks) {
  {
    Raw r = with_callee(T(F32, {2}), T(BF16, {2}));
    ValueId a = r.arg(T(F32, {2}));
    r.ret({r.op1("func.call", {a}, T(BF16, {2}), {{"callee", Attr::symbol("callee")}})});
    EXPECT_TRUE(IsOk(r.verify()));
  }
  {
    Raw r = with_callee(T(F32, {2}), T(BF16, {2}));
    ValueId a = r.arg(T(F32, {2}));
    r.ret({r.op1("func.call", {a}, T(BF16, {2}), {{"callee", Attr::symbol("nope")}})});
    EXPECT_TRUE(FailsWith(r.verify(), "call_c1"));
  }
  {
    Raw r = with_callee(T(F32, {2}), T(BF16, {2}));
    ValueId a = r.arg(T(F32, {3}));
    r.ret({r.op1("func.call", {a}, T(BF16, {2}), {{"callee", Attr::symbol("callee")}})});
    EXPECT_TRUE(FailsWith(r.verify(), "call_c2"));
  }
  {
    Raw r = with_callee(T(F32, {2}), T(BF16, {2}));
    ValueId a = r.arg(T(F32, {2}));
    r.ret({r.op1("func.call", {a}, T(F16, {2}), {{"callee", Attr::symbol("callee")}})});
    EXPECT_TRUE(FailsWith(r.verify(), "call_c3"));
  }
  {
    Raw r = with_callee(T(F32, {2}), T(BF16, {2}));
    ValueId a = r.arg(T(F32, {2}));
    r.ret({r.op1("func.call", {a}, T(BF16, {2}))});
    EXPECT_TRUE(FailsWith(r.verify(), "call_attr"));
  }
}

Status composite(const std::string& name, const std::string& decomposition, TensorType in, TensorType out,
                 bool with_name = true) {
  Raw r = with_callee(T(F32, {2}), T(BF16, {2}));
  ValueId a = r.arg(in);
  AttrDict attrs;
  if (with_name) attrs.push_back({"name", Attr::string(name)});
  attrs.push_back({"composite_attributes", Attr::dictionary({{"epsilon", Attr::floating(1e-6)}})});
  attrs.push_back({"decomposition", Attr::symbol(decomposition)});
  r.ret({r.op1("stablehlo.composite", {a}, out, attrs)});
  return r.verify();
}

TEST(VerifierCalls, CompositeChecks) {
  EXPECT_TRUE(IsOk(composite("hlx.rms_norm", "callee", T(F32, {2}), T(BF16, {2}))));
  EXPECT_TRUE(FailsWith(composite("rms_norm", "callee", T(F32, {2}), T(BF16, {2})), "composite_c1"));
  EXPECT_TRUE(FailsWith(composite("hlx.rms-norm", "callee", T(F32, {2}), T(BF16, {2})), "composite_c1"));
  EXPECT_TRUE(FailsWith(composite("hlx.x", "missing", T(F32, {2}), T(BF16, {2})), "composite_c2"));
  EXPECT_TRUE(FailsWith(composite("hlx.x", "callee", T(F32, {3}), T(BF16, {2})), "composite_c3"));
  EXPECT_TRUE(FailsWith(composite("hlx.x", "callee", T(F32, {2}), T(F32, {2})), "composite_c4"));
  EXPECT_TRUE(FailsWith(composite("hlx.x", "callee", T(F32, {2}), T(BF16, {2}), false), "composite_attr"));
}

TEST(VerifierCalls, CustomCallAcceptsAnything) {
  OpCase c{"stablehlo.custom_call",
           {T(F32, {2}), T(F32, {2})},
           {},
           {{"call_target_name", Attr::string("check.expect_close")}, {"has_side_effect", Attr::boolean(true)}},
           nullptr};
  EXPECT_TRUE(IsOk(c.verify()));
  c.results = {T(I8, {7}), T(BF16)};
  EXPECT_TRUE(IsOk(c.verify()));
  c.attrs[0].value = Attr::integer(3);
  EXPECT_TRUE(FailsWith(c.verify(), "custom_call_attr"));
}

// ------------------------------------------------------------------ elementwise

TEST(VerifierElementwise, AllOpsPassOnTheirTypes) {
  for (const char* op : {"add", "subtract", "multiply", "divide", "remainder", "maximum", "minimum", "power"})
    for (DType d : {F32, BF16, I32}) {
      OpCase c{std::string("stablehlo.") + op, {T(d, {2, 3}), T(d, {2, 3})}, {T(d, {2, 3})}, {}, nullptr};
      EXPECT_TRUE(IsOk(c.verify())) << op;
    }
  for (const char* op : {"and", "or", "xor"})
    for (DType d : {I1, I32, U8}) {
      OpCase c{std::string("stablehlo.") + op, {T(d, {4}), T(d, {4})}, {T(d, {4})}, {}, nullptr};
      EXPECT_TRUE(IsOk(c.verify())) << op;
    }
  for (const char* op :
       {"exponential", "exponential_minus_one", "log", "log_plus_one", "sqrt", "rsqrt", "tanh", "logistic", "sine",
        "cosine", "floor", "ceil", "round_nearest_afz", "round_nearest_even", "negate", "abs", "sign"})
    for (DType d : {F32, F16, BF16}) {
      OpCase c{std::string("stablehlo.") + op, {T(d, {3})}, {T(d, {3})}, {}, nullptr};
      EXPECT_TRUE(IsOk(c.verify())) << op;
    }
  OpCase erf{"chlo.erf", {T(BF16, {3})}, {T(BF16, {3})}, {}, nullptr};
  EXPECT_TRUE(IsOk(erf.verify()));
  OpCase n{"stablehlo.not", {T(I1, {3})}, {T(I1, {3})}, {}, nullptr};
  EXPECT_TRUE(IsOk(n.verify()));
  OpCase abs_int{"stablehlo.abs", {T(I8, {3})}, {T(I8, {3})}, {}, nullptr};
  EXPECT_TRUE(IsOk(abs_int.verify()));
}

TEST(VerifierElementwise, TypeRules) {
  OpCase add{"stablehlo.add", {T(F32, {2}), T(F32, {2})}, {T(F32, {2})}, {}, nullptr};
  check_mutations(add, {
                           {"add_c1", [](OpCase& c) { c.operands[1] = T(F32, {1}); }},  // no implicit broadcast
                           {"add_c1", [](OpCase& c) { c.operands[1] = T(BF16, {2}); }},
                           {"add_c1", [](OpCase& c) { c.results[0] = T(F16, {2}); }},
                       });
  OpCase exp{"stablehlo.exponential", {T(F32, {2})}, {T(F32, {2})}, {}, nullptr};
  check_mutations(exp, {
                           {"exponential_i1",
                            [](OpCase& c) {
                              c.operands[0] = T(I32, {2});
                              c.results[0] = T(I32, {2});
                            }},
                           {"exponential_c1", [](OpCase& c) { c.results[0] = T(F32, {3}); }},
                       });
  EXPECT_TRUE(FailsWith(OpCase{"stablehlo.abs", {T(U8, {2})}, {T(U8, {2})}, {}, nullptr}.verify(), "abs_i1"));
  EXPECT_TRUE(FailsWith(OpCase{"stablehlo.abs", {T(F32, {2})}, {T(F16, {2})}, {}, nullptr}.verify(), "abs_c2"));
  EXPECT_TRUE(FailsWith(OpCase{"stablehlo.sign", {T(I1, {2})}, {T(I1, {2})}, {}, nullptr}.verify(), "sign_i1"));
  EXPECT_TRUE(FailsWith(OpCase{"stablehlo.floor", {T(I8, {2})}, {T(I8, {2})}, {}, nullptr}.verify(), "floor_i1"));
  EXPECT_TRUE(FailsWith(OpCase{"chlo.erf", {T(I32, {2})}, {T(I32, {2})}, {}, nullptr}.verify(), "erf_i1"));
  EXPECT_TRUE(FailsWith(OpCase{"chlo.erf", {T(F32, {2})}, {T(BF16, {2})}, {}, nullptr}.verify(), "erf_c1"));
  EXPECT_TRUE(
      FailsWith(OpCase{"stablehlo.and", {T(F32, {2}), T(F32, {2})}, {T(F32, {2})}, {}, nullptr}.verify(), "and_i1"));
  EXPECT_TRUE(FailsWith(OpCase{"stablehlo.not", {T(BF16, {2})}, {T(BF16, {2})}, {}, nullptr}.verify(), "not_i1"));
  EXPECT_TRUE(FailsWith(OpCase{"stablehlo.subtract", {T(I1, {2}), T(I1, {2})}, {T(I1, {2})}, {}, nullptr}.verify(),
                        "subtract_i1"));
  EXPECT_TRUE(FailsWith(OpCase{"stablehlo.power", {T(I32, {2}), T(I64, {2})}, {T(I32, {2})}, {}, nullptr}.verify(),
                        "power_c1"));
}

TEST(VerifierElementwise, Compare) {
  OpCase c{"stablehlo.compare",
           {T(F32, {2}), T(F32, {2})},
           {T(I1, {2})},
           {{"comparison_direction", E("comparison_direction", "GT")}, {"compare_type", E("comparison_type", "FLOAT")}},
           nullptr};
  check_mutations(
      c, {
             {"compare_c1", [](OpCase& c) { c.operands[1] = T(BF16, {2}); }},
             {"compare_c2", [](OpCase& c) { c.operands[1] = T(F32, {3}); }},
             {"compare_c2", [](OpCase& c) { c.results[0] = T(I1, {3}); }},
             {"compare_c2", [](OpCase& c) { c.results[0] = T(I32, {2}); }},
             {"compare_c3", [](OpCase& c) { *c.attr("compare_type") = E("comparison_type", "SIGNED"); }},
             {"compare_i3", [](OpCase& c) { *c.attr("comparison_direction") = E("comparison_direction", "XX"); }},
             {"compare_attr", [](OpCase& c) { c.attrs.erase(c.attrs.begin()); }},
         });
  OpCase u{
      "stablehlo.compare",
      {T(U8, {2}), T(U8, {2})},
      {T(I1, {2})},
      {{"comparison_direction", E("comparison_direction", "LT")}, {"compare_type", E("comparison_type", "UNSIGNED")}},
      nullptr};
  check_mutations(u, {{"compare_c3", [](OpCase& c) { *c.attr("compare_type") = E("comparison_type", "SIGNED"); }}});
  // compare_type is optional.
  EXPECT_TRUE(IsOk(u.with([](OpCase& c) { c.attrs.pop_back(); }).verify()));
}

TEST(VerifierElementwise, Select) {
  OpCase c{"stablehlo.select", {T(I1, {2, 3}), T(F32, {2, 3}), T(F32, {2, 3})}, {T(F32, {2, 3})}, {}, nullptr};
  check_mutations(c, {
                         {"select_i1",
                          [](OpCase& c) {
                            c.operands[0] = T(I32, {2, 3});
                          }},
                         {"select_c1", [](OpCase& c) { c.operands[0] = T(I1, {3}); }},
                         {"select_c2",
                          [](OpCase& c) {
                            c.operands[2] = T(BF16, {2, 3});
                          }},
                         {"select_c2",
                          [](OpCase& c) {
                            c.results[0] = T(F32, {3, 2});
                          }},
                     });
  EXPECT_TRUE(IsOk(c.with([](OpCase& c) { c.operands[0] = T(I1); }).verify()));  // scalar pred
}

TEST(VerifierElementwise, Clamp) {
  OpCase c{"stablehlo.clamp", {T(F32), T(F32, {4}), T(F32, {4})}, {T(F32, {4})}, {}, nullptr};
  check_mutations(c, {
                         {"clamp_c1", [](OpCase& c) { c.operands[0] = T(F32, {2}); }},
                         {"clamp_c2", [](OpCase& c) { c.operands[2] = T(F32, {1}); }},
                         {"clamp_c3", [](OpCase& c) { c.operands[0] = T(BF16); }},
                         {"clamp_c4", [](OpCase& c) { c.results[0] = T(F16, {4}); }},
                     });
}

TEST(VerifierElementwise, Convert) {
  OpCase c{"stablehlo.convert", {T(F32, {2, 3})}, {T(BF16, {2, 3})}, {}, nullptr};
  check_mutations(c, {{"convert_c1", [](OpCase& c) { c.results[0] = T(BF16, {3, 2}); }}});
  EXPECT_TRUE(IsOk(c.with([](OpCase& c) { c.results[0] = T(I1, {2, 3}); }).verify()));
}

// ------------------------------------------------------------------ constants, shapes

TEST(VerifierShape, Constant) {
  DenseElements d;
  d.type = T(F32, {2});
  d.bytes.resize(8);
  OpCase c{"stablehlo.constant", {}, {T(F32, {2})}, {{"value", Attr::dense_elements(d)}}, nullptr};
  check_mutations(c, {
                         {"constant_c1", [](OpCase& c) { c.results[0] = T(F32, {3}); }},
                         {"constant_c1", [](OpCase& c) { c.results[0] = T(BF16, {2}); }},
                         {"constant_c1",
                          [d](OpCase& c) {
                            DenseElements bad = d;
                            bad.bytes.resize(4);
                            *c.attr("value") = Attr::dense_elements(bad);
                          }},
                         {"constant_attr", [](OpCase& c) { *c.attr("value") = Attr::integer(1); }},
                     });
}

TEST(VerifierShape, Iota) {
  OpCase c{"stablehlo.iota", {}, {T(I32, {4, 5})}, {{"iota_dimension", I(1)}}, nullptr};
  check_mutations(c, {
                         {"iota_c1", [](OpCase& c) { *c.attr("iota_dimension") = I(2); }},
                         {"iota_c1", [](OpCase& c) { *c.attr("iota_dimension") = I(-1); }},
                         {"iota_attr", [](OpCase& c) { c.attrs.clear(); }},
                     });
}

TEST(VerifierShape, BroadcastInDim) {
  OpCase c{"stablehlo.broadcast_in_dim",
           {T(F32, {1, 3})},
           {T(F32, {2, 4, 3})},
           {{"broadcast_dimensions", A({0, 2})}},
           nullptr};
  check_mutations(c, {
                         {"broadcast_in_dim_c1",
                          [](OpCase& c) {
                            c.results[0] = T(BF16, {2, 4, 3});
                          }},
                         {"broadcast_in_dim_c2", [](OpCase& c) { *c.attr("broadcast_dimensions") = A({2}); }},
                         {"broadcast_in_dim_c3",
                          [](OpCase& c) {
                            *c.attr("broadcast_dimensions") = A({0, 3});
                          }},
                         {"broadcast_in_dim_c4",
                          [](OpCase& c) {
                            *c.attr("broadcast_dimensions") = A({2, 2});
                          }},
                         {"broadcast_in_dim_c5",
                          [](OpCase& c) {
                            c.results[0] = T(F32, {2, 4, 5});
                          }},
                     });
}

TEST(VerifierShape, Reshape) {
  OpCase c{"stablehlo.reshape", {T(F32, {2, 6})}, {T(F32, {3, 4})}, {}, nullptr};
  check_mutations(c, {
                         {"reshape_c1",
                          [](OpCase& c) {
                            c.results[0] = T(F16, {3, 4});
                          }},
                         {"reshape_c2",
                          [](OpCase& c) {
                            c.results[0] = T(F32, {3, 5});
                          }},
                     });
}

TEST(VerifierShape, Transpose) {
  OpCase c{"stablehlo.transpose", {T(F32, {2, 3, 4})}, {T(F32, {4, 2, 3})}, {{"permutation", A({2, 0, 1})}}, nullptr};
  check_mutations(c, {
                         {"transpose_c1",
                          [](OpCase& c) {
                            c.results[0] = T(I32, {4, 2, 3});
                          }},
                         {"transpose_c2",
                          [](OpCase& c) {
                            *c.attr("permutation") = A({2, 0, 0});
                          }},
                         {"transpose_c2",
                          [](OpCase& c) {
                            *c.attr("permutation") = A({1, 0});
                          }},
                         {"transpose_c3",
                          [](OpCase& c) {
                            c.results[0] = T(F32, {2, 3, 4});
                          }},
                     });
}

TEST(VerifierShape, Slice) {
  OpCase c{"stablehlo.slice",
           {T(F32, {10, 4})},
           {T(F32, {4, 2})},
           {{"start_indices", A({1, 0})}, {"limit_indices", A({8, 4})}, {"strides", A({2, 3})}},
           nullptr};
  check_mutations(c, {
                         {"slice_c1",
                          [](OpCase& c) {
                            c.results[0] = T(F16, {4, 2});
                          }},
                         {"slice_c2", [](OpCase& c) { *c.attr("strides") = A({1}); }},
                         {"slice_c3",
                          [](OpCase& c) {
                            *c.attr("limit_indices") = A({11, 4});
                          }},
                         {"slice_c3",
                          [](OpCase& c) {
                            *c.attr("start_indices") = A({9, 0});
                          }},
                         {"slice_c4",
                          [](OpCase& c) {
                            *c.attr("strides") = A({0, 1});
                          }},
                         {"slice_c5",
                          [](OpCase& c) {
                            c.results[0] = T(F32, {3, 2});
                          }},
                     });
}

TEST(VerifierShape, DynamicSlice) {
  OpCase c{"stablehlo.dynamic_slice",
           {T(F32, {8, 4}), T(I32), T(I32)},
           {T(F32, {2, 4})},
           {{"slice_sizes", A({2, 4})}},
           nullptr};
  check_mutations(c, {
                         {"dynamic_slice_c1",
                          [](OpCase& c) {
                            c.results[0] = T(BF16, {2, 4});
                          }},
                         {"dynamic_slice_c2", [](OpCase& c) { c.operands.pop_back(); }},
                         {"dynamic_slice_c2", [](OpCase& c) { *c.attr("slice_sizes") = A({2}); }},
                         {"dynamic_slice_c3", [](OpCase& c) { c.operands[2] = T(I64); }},
                         {"dynamic_slice_i2", [](OpCase& c) { c.operands[2] = T(I32, {1}); }},
                         {"dynamic_slice_i2",
                          [](OpCase& c) {
                            c.operands[1] = T(F32);
                            c.operands[2] = T(F32);
                          }},
                         {"dynamic_slice_c4",
                          [](OpCase& c) {
                            *c.attr("slice_sizes") = A({2, 5});
                          }},
                         {"dynamic_slice_c5",
                          [](OpCase& c) {
                            c.results[0] = T(F32, {2, 3});
                          }},
                     });
}

TEST(VerifierShape, DynamicUpdateSlice) {
  OpCase c{"stablehlo.dynamic_update_slice",
           {T(F32, {8, 4}), T(F32, {2, 4}), T(I64), T(I64)},
           {T(F32, {8, 4})},
           {},
           nullptr};
  check_mutations(c, {
                         {"dynamic_update_slice_c1",
                          [](OpCase& c) {
                            c.results[0] = T(F32, {8, 5});
                          }},
                         {"dynamic_update_slice_c2",
                          [](OpCase& c) {
                            c.operands[1] = T(BF16, {2, 4});
                          }},
                         {"dynamic_update_slice_c3", [](OpCase& c) { c.operands[1] = T(F32, {4}); }},
                         {"dynamic_update_slice_c4", [](OpCase& c) { c.operands.pop_back(); }},
                         {"dynamic_update_slice_c5", [](OpCase& c) { c.operands[3] = T(I32); }},
                         {"dynamic_update_slice_c6",
                          [](OpCase& c) {
                            c.operands[1] = T(F32, {2, 5});
                          }},
                     });
}

TEST(VerifierShape, Concatenate) {
  OpCase c{"stablehlo.concatenate", {T(F32, {2, 3}), T(F32, {2, 5})}, {T(F32, {2, 8})}, {{"dimension", I(1)}}, nullptr};
  check_mutations(c, {
                         {"concatenate_c1",
                          [](OpCase& c) {
                            c.operands[1] = T(F16, {2, 5});
                          }},
                         {"concatenate_c2",
                          [](OpCase& c) {
                            c.operands[1] = T(F32, {3, 5});
                          }},
                         {"concatenate_c2", [](OpCase& c) { c.operands[1] = T(F32, {2}); }},
                         {"concatenate_c3", [](OpCase& c) { c.operands.clear(); }},
                         {"concatenate_c4", [](OpCase& c) { *c.attr("dimension") = I(2); }},
                         {"concatenate_c5",
                          [](OpCase& c) {
                            c.results[0] = T(BF16, {2, 8});
                          }},
                         {"concatenate_c6",
                          [](OpCase& c) {
                            c.results[0] = T(F32, {2, 9});
                          }},
                     });
}

TEST(VerifierShape, Pad) {
  OpCase c{"stablehlo.pad",
           {T(F32, {3, 4}), T(F32)},
           {T(F32, {3 + 2 + 2 * 1 + 0, 4 - 1 + 0 + 1})},
           {{"edge_padding_low", A({2, -1})}, {"edge_padding_high", A({0, 1})}, {"interior_padding", A({1, 0})}},
           nullptr};
  check_mutations(c, {
                         {"pad_c1", [](OpCase& c) { c.operands[1] = T(BF16); }},
                         {"pad_c1",
                          [](OpCase& c) {
                            c.results[0] = T(BF16, {9, 4});
                          }},
                         {"pad_i2", [](OpCase& c) { c.operands[1] = T(F32, {1}); }},
                         {"pad_c2", [](OpCase& c) { *c.attr("interior_padding") = A({1}); }},
                         {"pad_c3",
                          [](OpCase& c) {
                            *c.attr("interior_padding") = A({-1, 0});
                          }},
                         {"pad_c4",
                          [](OpCase& c) {
                            c.results[0] = T(F32, {7, 5});
                          }},
                         {"pad_c4",
                          [](OpCase& c) {
                            *c.attr("edge_padding_low") = A({2, -9});
                          }},
                     });
}

// ------------------------------------------------------------------ reduce

OpCase reduce_case() {
  return OpCase{
      "stablehlo.reduce", {T(BF16, {2, 3, 4}), T(BF16)}, {T(BF16, {2, 4})}, {{"dimensions", A({1})}}, [](Function& f) {
        return std::vector<Block>{binary_body(f, "stablehlo.add", BF16)};
      }};
}

TEST(VerifierReduce, Rules) {
  check_mutations(reduce_case(), {
                                     {"reduce_c2", [](OpCase& c) { c.operands[1] = T(F32); }},
                                     {"reduce_i2", [](OpCase& c) { c.operands[1] = T(BF16, {1}); }},
                                     {"reduce_c3", [](OpCase& c) { c.operands.pop_back(); }},
                                     {"reduce_c4", [](OpCase& c) { *c.attr("dimensions") = A({3}); }},
                                     {"reduce_c5",
                                      [](OpCase& c) {
                                        *c.attr("dimensions") = A({1, 1});
                                      }},
                                     {"reduce_c6",
                                      [](OpCase& c) {
                                        c.regions = [](Function& f) {
                                          return std::vector<Block>{binary_body(f, "stablehlo.add", I32)};
                                        };
                                      }},
                                     {"reduce_c6", [](OpCase& c) { c.regions = nullptr; }},
                                     {"reduce_c7",
                                      [](OpCase& c) {
                                        c.results[0] = T(BF16, {2, 3});
                                      }},
                                     {"reduce_c8",
                                      [](OpCase& c) {
                                        c.results[0] = T(F32, {2, 4});
                                      }},
                                     {"reduce_attr", [](OpCase& c) { c.attrs.clear(); }},
                                 });
}

TEST(VerifierReduce, PromotedBodyAndVariadic) {
  // bf16 inputs accumulated in an f32 body: is_promotable(bf16, f32) holds.
  OpCase promoted{"stablehlo.reduce", {T(BF16, {8}), T(BF16)}, {T(F32)}, {{"dimensions", A({0})}}, [](Function& f) {
                    return std::vector<Block>{binary_body(f, "stablehlo.add", F32)};
                  }};
  // reduce_c2 requires element_type(init) = element_type(input), so the init stays bf16 while the
  // body is f32; the reference verifier allows this promotion.
  EXPECT_TRUE(IsOk(promoted.verify()));
  OpCase demoted = promoted.with([](OpCase& c) {
    c.operands = {T(F32, {8}), T(F32)};
    c.results = {T(BF16)};
    c.regions = [](Function& f) { return std::vector<Block>{binary_body(f, "stablehlo.add", BF16)}; };
  });
  EXPECT_TRUE(FailsWith(demoted.verify(), "reduce_c6"));

  // Variadic (argmax-style) reduce with a 4-argument body returning two values.
  OpCase var{"stablehlo.reduce",
             {T(F32, {3, 5}), T(I32, {3, 5}), T(F32), T(I32)},
             {T(F32, {3}), T(I32, {3})},
             {{"dimensions", A({1})}},
             [](Function& f) {
               Block b;
               ValueId av = f.new_value(T(F32)), ai = f.new_value(T(I32)), bv = f.new_value(T(F32)),
                       bi = f.new_value(T(I32));
               b.args = {av, ai, bv, bi};
               Op mx{"stablehlo.maximum", {av, bv}, {f.new_value(T(F32))}, {}, {}};
               Op mn{"stablehlo.minimum", {ai, bi}, {f.new_value(T(I32))}, {}, {}};
               Op ret{"stablehlo.return", {mx.results[0], mn.results[0]}, {}, {}, {}};
               b.ops = {mx, mn, ret};
               return std::vector<Block>{b};
             }};
  check_mutations(var, {
                           {"reduce_c1",
                            [](OpCase& c) {
                              c.operands[1] = T(I32, {5, 3});
                            }},
                           {"reduce_c8", [](OpCase& c) { c.results[1] = T(I64, {3}); }},
                           {"reduce_results", [](OpCase& c) { c.results.pop_back(); }},
                       });
}

// ------------------------------------------------------------------ dot_general

Attr dot(std::vector<int64_t> lb, std::vector<int64_t> rb, std::vector<int64_t> lc, std::vector<int64_t> rc) {
  return to_attr(DotDims{lb, rb, lc, rc});
}

TEST(VerifierDot, Rules) {
  OpCase c{"stablehlo.dot_general",
           {T(BF16, {4, 2, 3}), T(BF16, {4, 3, 5})},
           {T(F32, {4, 2, 5})},
           {{"dot_dimension_numbers", dot({0}, {0}, {2}, {1})}},
           nullptr};
  check_mutations(
      c, {
             {"dot_general_c1", [](OpCase& c) { *c.attr("dot_dimension_numbers") = dot({0}, {}, {2}, {1}); }},
             {"dot_general_c2", [](OpCase& c) { *c.attr("dot_dimension_numbers") = dot({0}, {0}, {2}, {}); }},
             {"dot_general_c3", [](OpCase& c) { *c.attr("dot_dimension_numbers") = dot({0}, {0}, {0}, {1}); }},
             {"dot_general_c4", [](OpCase& c) { *c.attr("dot_dimension_numbers") = dot({0}, {1}, {2}, {1}); }},
             {"dot_general_c5", [](OpCase& c) { *c.attr("dot_dimension_numbers") = dot({3}, {0}, {2}, {1}); }},
             {"dot_general_c6", [](OpCase& c) { *c.attr("dot_dimension_numbers") = dot({0}, {0}, {-1}, {1}); }},
             {"dot_general_c7", [](OpCase& c) { *c.attr("dot_dimension_numbers") = dot({0}, {5}, {2}, {1}); }},
             {"dot_general_c8", [](OpCase& c) { *c.attr("dot_dimension_numbers") = dot({0}, {0}, {2}, {3}); }},
             {"dot_general_c9",
              [](OpCase& c) {
                c.operands[1] = T(BF16, {3, 3, 5});
              }},
             {"dot_general_c10",
              [](OpCase& c) {
                c.operands[1] = T(BF16, {4, 2, 5});
              }},
             {"dot_general_c11",
              [](OpCase& c) {
                c.attrs.push_back({"precision_config", Attr::array({E("precision", "DEFAULT")})});
              }},
             {"dot_general_c12",
              [](OpCase& c) {
                c.results[0] = T(F32, {4, 5, 2});
              }},
             {"dot_attr", [](OpCase& c) { *c.attr("dot_dimension_numbers") = Attr::i64_array({1}); }},
             {"dot_general_attr", [](OpCase& c) { c.attrs.clear(); }},
         });
  // Mixed operand element types (bf16 activations x f16 weights) are accepted.
  EXPECT_TRUE(IsOk(c.with([](OpCase& c) { c.operands[1] = T(F16, {4, 3, 5}); }).verify()));
  // Omitted empty lists: a plain matmul.
  OpCase mm{"stablehlo.dot_general",
            {T(F32, {4, 3}), T(F32, {3, 6})},
            {T(F32, {4, 6})},
            {{"dot_dimension_numbers", Attr::structure("dot", {{"lhs_contracting_dimensions", A({1})},
                                                               {"rhs_contracting_dimensions", A({0})}})}},
            nullptr};
  EXPECT_TRUE(IsOk(mm.verify()));
}

// ------------------------------------------------------------------ gather

TEST(VerifierGather, Rules) {
  // Embedding lookup: table [V=10, D=4], ids [B=2, T=3, 1] -> [2, 3, 4].
  OpCase c{"stablehlo.gather",
           {T(F32, {10, 4}), T(I32, {2, 3, 1})},
           {T(F32, {2, 3, 4})},
           {{"dimension_numbers", to_attr(GatherDims{{2}, {0}, {}, {}, {0}, 2})}, {"slice_sizes", A({1, 4})}},
           nullptr};
  auto dn = [](OpCase& c, const char* f) -> Attr& { return c.field("dimension_numbers", f); };
  check_mutations(
      c, {
             {"gather_c1", [&](OpCase& c) { dn(c, "collapsed_slice_dims") = A({}); }},
             {"gather_c2", [&](OpCase& c) { dn(c, "index_vector_dim") = I(4); }},
             {"gather_c3",
              [&](OpCase& c) {
                dn(c, "start_index_map") = A({0, 1});
              }},
             {"gather_c4",
              [&](OpCase& c) {
                c.operands = {T(F32, {10, 4, 2}), T(I32, {2, 3, 1})};
                dn(c, "offset_dims") = A({3, 2});
                *c.attr("slice_sizes") = A({1, 4, 2});
              }},
             {"gather_c5", [&](OpCase& c) { dn(c, "offset_dims") = A({3}); }},
             {"gather_c6",
              [&](OpCase& c) {
                c.operands = {T(F32, {10, 4}), T(I32, {10, 1})};
                dn(c, "offset_dims") = A({});
                dn(c, "collapsed_slice_dims") = A({0});
                dn(c, "operand_batching_dims") = A({0});
                dn(c, "start_indices_batching_dims") = A({0});
                dn(c, "start_index_map") = A({1});
                dn(c, "index_vector_dim") = I(1);
              }},
             {"gather_c7",
              [&](OpCase& c) {
                c.operands = {T(F32, {10, 4}), T(I32, {2, 3, 2})};
                dn(c, "offset_dims") = A({});
                dn(c, "collapsed_slice_dims") = A({1, 0});
                dn(c, "start_index_map") = A({0, 1});
                *c.attr("slice_sizes") = A({1, 1});
              }},
             {"gather_c8", [&](OpCase& c) { dn(c, "collapsed_slice_dims") = A({2}); }},
             {"gather_c9",
              [&](OpCase& c) {
                *c.attr("slice_sizes") = A({2, 4});
              }},
             {"gather_c20", [&](OpCase& c) { *c.attr("slice_sizes") = A({1}); }},
             {"gather_c19", [&](OpCase& c) { dn(c, "start_index_map") = A({2}); }},
             {"gather_c21",
              [&](OpCase& c) {
                *c.attr("slice_sizes") = A({1, 5});
              }},
             {"gather_c22",
              [&](OpCase& c) {
                c.results[0] = T(F32, {2, 3, 5});
              }},
             {"gather_c23",
              [&](OpCase& c) {
                c.results[0] = T(BF16, {2, 3, 4});
              }},
             {"gather_i2",
              [&](OpCase& c) {
                c.operands[1] = T(F32, {2, 3, 1});
              }},
             {"gather_attr", [&](OpCase& c) { *c.attr("dimension_numbers") = Attr::structure("scatter", {}); }},
         });
}

TEST(VerifierGather, BatchingDims) {
  // Per-row lookup: operand [B=3, N=5, D=2], indices [B=3, K=4, 1] -> [3, 4, 2].
  OpCase c{"stablehlo.gather",
           {T(F32, {3, 5, 2}), T(I64, {3, 4, 1})},
           {T(F32, {3, 4, 2})},
           {{"dimension_numbers", to_attr(GatherDims{{2}, {1}, {0}, {0}, {1}, 2})}, {"slice_sizes", A({1, 1, 2})}},
           nullptr};
  auto dn = [](OpCase& c, const char* f) -> Attr& { return c.field("dimension_numbers", f); };
  check_mutations(c, {
                         {"gather_c10",
                          [&](OpCase& c) {
                            c.operands = {T(F32, {3, 5, 2, 3}), T(I64, {3, 3, 4, 1})};
                            dn(c, "operand_batching_dims") = A({3, 0});
                            dn(c, "start_indices_batching_dims") = A({0, 1});
                            dn(c, "index_vector_dim") = I(3);
                            *c.attr("slice_sizes") = A({1, 1, 2, 1});
                          }},
                         {"gather_c11", [&](OpCase& c) { dn(c, "operand_batching_dims") = A({3}); }},
                         {"gather_c12",
                          [&](OpCase& c) {
                            *c.attr("slice_sizes") = A({2, 1, 2});
                          }},
                         {"gather_c13",
                          [&](OpCase& c) {
                            dn(c, "operand_batching_dims") = A({0, 2});
                            dn(c, "offset_dims") = A({});
                            dn(c, "start_indices_batching_dims") = A({0, 0});
                            *c.attr("slice_sizes") = A({1, 1, 1});
                          }},
                         {"gather_c14", [&](OpCase& c) { dn(c, "start_indices_batching_dims") = A({3}); }},
                         {"gather_c15", [&](OpCase& c) { dn(c, "start_indices_batching_dims") = A({2}); }},
                         {"gather_c16",
                          [&](OpCase& c) {
                            dn(c, "start_indices_batching_dims") = A({0, 1});
                          }},
                         {"gather_c17",
                          [&](OpCase& c) {
                            c.operands[1] = T(I64, {2, 4, 1});
                          }},
                         {"gather_c18", [&](OpCase& c) { dn(c, "start_index_map") = A({0}); }},
                     });
}

// ------------------------------------------------------------------ scatter

OpCase scatter_case() {
  // KV-cache style row update: input [8, 4], indices [2, 1], updates [2, 4].
  return OpCase{"stablehlo.scatter",
                {T(F32, {8, 4}), T(I32, {2, 1}), T(F32, {2, 4})},
                {T(F32, {8, 4})},
                {{"scatter_dimension_numbers", to_attr(ScatterDims{{1}, {0}, {}, {}, {0}, 1})}},
                [](Function& f) { return std::vector<Block>{binary_body(f, "stablehlo.add", F32)}; }};
}

TEST(VerifierScatter, Rules) {
  auto dn = [](OpCase& c, const char* f) -> Attr& { return c.field("scatter_dimension_numbers", f); };
  check_mutations(scatter_case(),
                  {
                      {"scatter_c2", [&](OpCase& c) { dn(c, "inserted_window_dims") = A({}); }},
                      {"scatter_c4",
                       [&](OpCase& c) {
                         c.operands[2] = T(F32, {3, 4});
                       }},
                      {"scatter_c4",
                       [&](OpCase& c) {
                         c.operands[2] = T(F32, {2, 5});
                       }},
                      {"scatter_c4",
                       [&](OpCase& c) {
                         c.operands[2] = T(F32, {2, 4, 1});
                       }},
                      {"scatter_c5", [&](OpCase& c) { c.operands.pop_back(); }},
                      {"scatter_c6",
                       [&](OpCase& c) {
                         c.operands[2] = T(BF16, {2, 4});
                       }},
                      {"scatter_c7",
                       [&](OpCase& c) {
                         c.operands = {T(F32, {8, 4, 2}), T(I32, {2, 1}), T(F32, {2, 4, 2})};
                         c.results = {T(F32, {8, 4, 2})};
                         dn(c, "update_window_dims") = A({2, 1});
                       }},
                      {"scatter_c8", [&](OpCase& c) { dn(c, "update_window_dims") = A({2}); }},
                      {"scatter_c9",
                       [&](OpCase& c) {
                         dn(c, "update_window_dims") = A({});
                         dn(c, "inserted_window_dims") = A({0});
                         dn(c, "input_batching_dims") = A({0});
                       }},
                      {"scatter_c10",
                       [&](OpCase& c) {
                         c.operands = {T(F32, {8, 4}), T(I32, {2, 2}), T(F32, {2})};
                         dn(c, "update_window_dims") = A({});
                         dn(c, "inserted_window_dims") = A({1, 0});
                         dn(c, "scatter_dims_to_operand_dims") = A({0, 1});
                       }},
                      {"scatter_c11", [&](OpCase& c) { dn(c, "inserted_window_dims") = A({2}); }},
                      {"scatter_c19",
                       [&](OpCase& c) {
                         dn(c, "scatter_dims_to_operand_dims") = A({0, 1});
                       }},
                      {"scatter_c21", [&](OpCase& c) { dn(c, "scatter_dims_to_operand_dims") = A({2}); }},
                      {"scatter_c22", [&](OpCase& c) { dn(c, "index_vector_dim") = I(3); }},
                      {"scatter_c23",
                       [&](OpCase& c) {
                         c.regions = [](Function& f) {
                           return std::vector<Block>{binary_body(f, "stablehlo.add", BF16)};
                         };
                       }},
                      {"scatter_c23", [&](OpCase& c) { c.regions = nullptr; }},
                      {"scatter_c24",
                       [&](OpCase& c) {
                         c.results[0] = T(F32, {8, 5});
                       }},
                      {"scatter_c25",
                       [&](OpCase& c) {
                         c.results[0] = T(BF16, {8, 4});
                       }},
                      {"scatter_i2",
                       [&](OpCase& c) {
                         c.operands[1] = T(F32, {2, 1});
                       }},
                      {"scatter_attr", [&](OpCase& c) { c.attrs.clear(); }},
                  });
}

TEST(VerifierScatter, BatchingAndVariadic) {
  // Per-slot write: input [S=3, N=6, D=2], indices [S=3, 1] (position), updates [3, 2].
  OpCase c{"stablehlo.scatter",
           {T(F32, {3, 6, 2}), T(I32, {3, 1}), T(F32, {3, 2})},
           {T(F32, {3, 6, 2})},
           {{"scatter_dimension_numbers", to_attr(ScatterDims{{1}, {1}, {0}, {0}, {1}, 1})}},
           [](Function& f) { return std::vector<Block>{binary_body(f, "stablehlo.add", F32)}; }};
  auto dn = [](OpCase& c, const char* f) -> Attr& { return c.field("scatter_dimension_numbers", f); };
  check_mutations(c, {
                         {"scatter_c12",
                          [&](OpCase& c) {
                            c.operands = {T(F32, {3, 6, 2, 3}), T(I32, {3, 3, 1}), T(F32, {3, 3, 2})};
                            c.results = {T(F32, {3, 6, 2, 3})};
                            dn(c, "update_window_dims") = A({2});
                            dn(c, "input_batching_dims") = A({3, 0});
                            dn(c, "scatter_indices_batching_dims") = A({1, 0});
                            dn(c, "index_vector_dim") = I(2);
                          }},
                         {"scatter_c13", [&](OpCase& c) { dn(c, "input_batching_dims") = A({3}); }},
                         {"scatter_c14",
                          [&](OpCase& c) {
                            dn(c, "update_window_dims") = A({});
                            dn(c, "input_batching_dims") = A({0, 2});
                            dn(c, "scatter_indices_batching_dims") = A({0, 0});
                          }},
                         {"scatter_c15", [&](OpCase& c) { dn(c, "scatter_indices_batching_dims") = A({2}); }},
                         {"scatter_c16", [&](OpCase& c) { dn(c, "scatter_indices_batching_dims") = A({1}); }},
                         {"scatter_c17", [&](OpCase& c) { dn(c, "scatter_indices_batching_dims") = A({}); }},
                         {"scatter_c18",
                          [&](OpCase& c) {
                            c.operands[1] = T(I32, {2, 1});
                            c.operands[2] = T(F32, {2, 2});
                          }},
                         {"scatter_c20", [&](OpCase& c) { dn(c, "scatter_dims_to_operand_dims") = A({0}); }},
                     });
  // Two inputs, two updates, a 4-argument body.
  OpCase var{"stablehlo.scatter",
             {T(F32, {8}), T(I32, {8}), T(I32, {2, 1}), T(F32, {2}), T(I32, {2})},
             {T(F32, {8}), T(I32, {8})},
             {{"scatter_dimension_numbers", to_attr(ScatterDims{{}, {0}, {}, {}, {0}, 1})}},
             [](Function& f) {
               Block b;
               ValueId a0 = f.new_value(T(F32)), a1 = f.new_value(T(I32)), b0 = f.new_value(T(F32)),
                       b1 = f.new_value(T(I32));
               b.args = {a0, a1, b0, b1};
               b.ops = {Op{"stablehlo.return", {b0, b1}, {}, {}, {}}};
               return std::vector<Block>{b};
             }};
  check_mutations(var, {
                           {"scatter_c1", [](OpCase& c) { c.operands[1] = T(I32, {9}); }},
                           {"scatter_c3", [](OpCase& c) { c.operands[4] = T(I32, {3}); }},
                           {"scatter_c5", [](OpCase& c) { c.operands.pop_back(); }},
                       });
}

// ------------------------------------------------------------------ convolution

OpCase conv_case() {
  // NHWC x HWIO -> NHWC, 16x16 input, 3x3 kernel, stride 2, pad 1: (16 + 2 - 3) / 2 + 1 = 8.
  ConvDims d{0, 3, {1, 2}, 2, 3, {0, 1}, 0, 3, {1, 2}};
  AttrDict attrs;
  ConvWindow w;
  w.window_strides = {2, 2};
  w.padding = {{1, 1}, {1, 1}};
  set_conv_window_attrs(attrs, w);
  attrs.push_back({"dimension_numbers", to_attr(d)});
  return OpCase{
      "stablehlo.convolution", {T(F32, {1, 16, 16, 4}), T(F32, {3, 3, 4, 8})}, {T(F32, {1, 8, 8, 8})}, attrs, nullptr};
}

TEST(VerifierConvolution, Rules) {
  auto dn = [](OpCase& c, const char* f) -> Attr& { return c.field("dimension_numbers", f); };
  auto set = [](OpCase& c, const char* k, Attr v) { set_attr(c.attrs, k, std::move(v)); };
  check_mutations(
      conv_case(),
      {
          {"convolution_c1",
           [](OpCase& c) {
             c.operands[1] = T(F32, {3, 4, 8});
           }},
          {"convolution_c2", [&](OpCase& c) { set(c, "window_strides", A({2})); }},
          {"convolution_c3",
           [&](OpCase& c) {
             set(c, "window_strides", A({2, 0}));
           }},
          {"convolution_c4",
           [&](OpCase& c) {
             set(c, "padding", Attr::dense_elements(dense_i64({1, 2}, {1, 1})));
           }},
          {"convolution_c4",
           [&](OpCase& c) {
             set(c, "padding", Attr::dense_elements(dense_i64({2, 1}, {1, 1})));
           }},
          {"convolution_c5",
           [&](OpCase& c) {
             set(c, "lhs_dilation", A({1, 1, 1}));
           }},
          {"convolution_c6",
           [&](OpCase& c) {
             set(c, "lhs_dilation", A({1, 0}));
           }},
          {"convolution_c7", [&](OpCase& c) { set(c, "rhs_dilation", A({1})); }},
          {"convolution_c8",
           [&](OpCase& c) {
             set(c, "rhs_dilation", A({-1, 1}));
           }},
          {"convolution_c9", [&](OpCase& c) { set(c, "window_reversal", Attr::bool_array({false})); }},
          {"convolution_c10", [&](OpCase& c) { set(c, "batch_group_count", I(2)); }},
          {"convolution_c11", [&](OpCase& c) { set(c, "feature_group_count", I(3)); }},
          {"convolution_c12", [&](OpCase& c) { dn(c, "input_spatial_dimensions") = A({1}); }},
          {"convolution_c13",
           [&](OpCase& c) {
             dn(c, "input_spatial_dimensions") = A({1, 3});
           }},
          {"convolution_c13",
           [&](OpCase& c) {
             dn(c, "input_spatial_dimensions") = A({1, 4});
           }},
          {"convolution_c14",
           [](OpCase& c) {
             c.operands[1] = T(F32, {3, 3, 2, 8});
           }},
          {"convolution_c15",
           [&](OpCase& c) {
             c.operands = {T(F32, {2, 16, 16, 4}), T(F32, {3, 3, 4, 7})};
             set(c, "batch_group_count", I(2));
           }},
          {"convolution_c16",
           [&](OpCase& c) {
             c.operands[1] = T(F32, {3, 3, 2, 7});
             set(c, "feature_group_count", I(2));
           }},
          {"convolution_c17", [&](OpCase& c) { dn(c, "kernel_spatial_dimensions") = A({0}); }},
          {"convolution_c18",
           [&](OpCase& c) {
             dn(c, "kernel_spatial_dimensions") = A({0, 2});
           }},
          {"convolution_c19",
           [&](OpCase& c) {
             dn(c, "output_spatial_dimensions") = A({1, 2, 3});
           }},
          {"convolution_c20",
           [&](OpCase& c) {
             dn(c, "output_spatial_dimensions") = A({1, 0});
           }},
          {"convolution_c21", [&](OpCase& c) { set(c, "feature_group_count", I(0)); }},
          {"convolution_c22", [&](OpCase& c) { set(c, "batch_group_count", I(-1)); }},
          {"convolution_c23",
           [&](OpCase& c) {
             c.operands = {T(F32, {2, 16, 16, 4}), T(F32, {3, 3, 2, 8})};
             set(c, "feature_group_count", I(2));
             set(c, "batch_group_count", I(2));
           }},
          {"convolution_c24", [&](OpCase& c) { set(c, "precision_config", Attr::array({E("precision", "DEFAULT")})); }},
          {"convolution_c25",
           [](OpCase& c) {
             c.results[0] = T(F32, {1, 16, 16, 8});
           }},
          {"convolution_c27",
           [](OpCase& c) {
             c.operands[1] = T(BF16, {3, 3, 4, 8});
           }},
          {"conv_attr", [&](OpCase& c) { dn(c, "input_batch_dimension") = A({0}); }},
          {"convolution_attr",
           [&](OpCase& c) {
             set(c, "padding", A({1, 1}));
           }},
      });
  // The result element type may differ (e.g. bf16 x bf16 -> f32 accumulation).
  EXPECT_TRUE(IsOk(conv_case()
                       .with([](OpCase& c) {
                         c.operands = {T(BF16, {1, 16, 16, 4}), T(BF16, {3, 3, 4, 8})};
                       })
                       .verify()));
  // Grouped (depthwise) convolution: 4 groups of 1 input feature each.
  EXPECT_TRUE(IsOk(conv_case()
                       .with([&](OpCase& c) {
                         c.operands[1] = T(F32, {3, 3, 1, 8});
                         set(c, "feature_group_count", I(4));
                       })
                       .verify()));
}

}  // namespace
}  // namespace hlx::shlo
