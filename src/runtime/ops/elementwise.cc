// Unary and binary elementwise kernels (stablehlo.add ... stablehlo.round_nearest_even, chlo.erf)
// for every element type the spec allows. Semantics live in elementwise_functors.h.
#include "runtime/ops/elementwise_functors.h"
#include "runtime/ops/elementwise_kernel.h"

namespace hlx::rt {
namespace ew {
namespace {

template <DType D, UnOp O>
void unary_loop(const void* const* in, void* out, int64_t b, int64_t e) {
  const St<D>* x = static_cast<const St<D>*>(in[0]);
  St<D>* y = static_cast<St<D>*>(out);
  if constexpr (is_float(D) && vector_unary(O)) {  // exp, logistic, tanh: f32 array kernel (vexp.h)
    float buf[kVecChunk];
    for (int64_t i0 = b; i0 < e; i0 += kVecChunk) {
      const int64_t m = std::min<int64_t>(kVecChunk, e - i0);
      if constexpr (D == DType::kF32) {
        unary_f32_n<O>(x + i0, y + i0, m);
      } else {
        for (int64_t i = 0; i < m; ++i) buf[i] = load_f<D>(x[i0 + i]);
        unary_f32_n<O>(buf, buf, m);
        for (int64_t i = 0; i < m; ++i) y[i0 + i] = store_f<D>(buf[i]);
      }
    }
    return;
  }
  for (int64_t i = b; i < e; ++i) {
    if constexpr (is_float(D))
      y[i] = store_f<D>(unary_f<O>(load_f<D>(x[i])));
    else if constexpr (D == DType::kI1)
      y[i] = unary_b<O>(x[i]);
    else
      y[i] = unary_i<O>(x[i]);
  }
}

template <DType D, BinOp O>
void binary_loop(const void* const* in, void* out, int64_t b, int64_t e) {
  const St<D>* x = static_cast<const St<D>*>(in[0]);
  const St<D>* z = static_cast<const St<D>*>(in[1]);
  St<D>* y = static_cast<St<D>*>(out);
  for (int64_t i = b; i < e; ++i) {
    if constexpr (is_float(D))
      y[i] = store_f<D>(binary_f<O>(load_f<D>(x[i]), load_f<D>(z[i])));
    else if constexpr (D == DType::kI1)
      y[i] = binary_b<O>(x[i], z[i]);
    else
      y[i] = binary_i<O>(x[i], z[i]);
  }
}

// Elementwise ops take and return one type; StableHLO has no implicit broadcasting.
Status check_same_types(const shlo::Op& op, const shlo::Function& fn, const OpTypes& t) {
  for (const auto& ty : t.in)
    if (ty != t.out[0])
      return make_error(ErrorKind::kInvalidArgument, describe(op, fn), ": operand and result types must match");
  return ok_status();
}

template <UnOp O>
Result<std::unique_ptr<OpKernel>> unary_factory(const shlo::Op& op, const shlo::Function& fn) {
  HLX_ASSIGN_OR_RETURN(OpTypes t, op_types(op, fn, 1, 1));
  HLX_RETURN_IF_ERROR(check_same_types(op, fn, t));
  LoopFn f = dispatch(t.out[0].dtype, [](auto d) -> LoopFn {
    if constexpr (unary_supported(O, decltype(d)::value))
      return &unary_loop<decltype(d)::value, O>;
    else
      return nullptr;
  });
  if (!f) return unsupported_type(op, fn);
  return make_map_kernel(op, f, t);
}

template <BinOp O>
Result<std::unique_ptr<OpKernel>> binary_factory(const shlo::Op& op, const shlo::Function& fn) {
  HLX_ASSIGN_OR_RETURN(OpTypes t, op_types(op, fn, 2, 2));
  HLX_RETURN_IF_ERROR(check_same_types(op, fn, t));
  LoopFn f = dispatch(t.out[0].dtype, [](auto d) -> LoopFn {
    if constexpr (binary_supported(O, decltype(d)::value))
      return &binary_loop<decltype(d)::value, O>;
    else
      return nullptr;
  });
  if (!f) return unsupported_type(op, fn);
  return make_map_kernel(op, f, t);
}

}  // namespace

void register_unary_binary(KernelRegistry& r) {
  r.add("stablehlo.negate", &unary_factory<UnOp::kNegate>);
  r.add("stablehlo.abs", &unary_factory<UnOp::kAbs>);
  r.add("stablehlo.sign", &unary_factory<UnOp::kSign>);
  r.add("stablehlo.not", &unary_factory<UnOp::kNot>);
  r.add("stablehlo.exponential", &unary_factory<UnOp::kExp>);
  r.add("stablehlo.exponential_minus_one", &unary_factory<UnOp::kExpm1>);
  r.add("stablehlo.log", &unary_factory<UnOp::kLog>);
  r.add("stablehlo.log_plus_one", &unary_factory<UnOp::kLog1p>);
  r.add("stablehlo.sqrt", &unary_factory<UnOp::kSqrt>);
  r.add("stablehlo.rsqrt", &unary_factory<UnOp::kRsqrt>);
  r.add("stablehlo.tanh", &unary_factory<UnOp::kTanh>);
  r.add("stablehlo.logistic", &unary_factory<UnOp::kLogistic>);
  r.add("stablehlo.sine", &unary_factory<UnOp::kSin>);
  r.add("stablehlo.cosine", &unary_factory<UnOp::kCos>);
  r.add("stablehlo.floor", &unary_factory<UnOp::kFloor>);
  r.add("stablehlo.ceil", &unary_factory<UnOp::kCeil>);
  r.add("stablehlo.round_nearest_afz", &unary_factory<UnOp::kRoundAfz>);
  r.add("stablehlo.round_nearest_even", &unary_factory<UnOp::kRoundEven>);
  r.add("chlo.erf", &unary_factory<UnOp::kErf>);

  r.add("stablehlo.add", &binary_factory<BinOp::kAdd>);
  r.add("stablehlo.subtract", &binary_factory<BinOp::kSub>);
  r.add("stablehlo.multiply", &binary_factory<BinOp::kMul>);
  r.add("stablehlo.divide", &binary_factory<BinOp::kDiv>);
  r.add("stablehlo.remainder", &binary_factory<BinOp::kRem>);
  r.add("stablehlo.maximum", &binary_factory<BinOp::kMax>);
  r.add("stablehlo.minimum", &binary_factory<BinOp::kMin>);
  r.add("stablehlo.power", &binary_factory<BinOp::kPow>);
  r.add("stablehlo.and", &binary_factory<BinOp::kAnd>);
  r.add("stablehlo.or", &binary_factory<BinOp::kOr>);
  r.add("stablehlo.xor", &binary_factory<BinOp::kXor>);
}

}  // namespace ew

void register_elementwise_kernels(KernelRegistry& r) {
  ew::register_unary_binary(r);
  ew::register_compare_select(r);
  ew::register_convert(r);
}

}  // namespace hlx::rt
