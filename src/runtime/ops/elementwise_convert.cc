// stablehlo.convert between every pair of element types, with XLA CPU semantics:
// float -> int truncates toward zero and saturates (NaN -> 0); int -> int wraps; int -> float
// rounds to nearest even once; anything -> i1 is x != 0; i1 -> anything is 0 or 1.
#include "runtime/ops/elementwise_convert.h"
#include "runtime/kernels/ew_vec.h"
#include "runtime/ops/elementwise_kernel.h"

namespace hlx::rt::ew {

namespace {

template <DType S, DType D>
void convert_loop(const void* const* in, void* out, int64_t b, int64_t e) {
  const St<S>* x = static_cast<const St<S>*>(in[0]);
  St<D>* y = static_cast<St<D>*>(out);
  // f32 <-> bf16 (the prefill activations) have array forms with the same bits (kernels/ew_vec.h).
  if constexpr (S == DType::kF32 && D == DType::kBF16)
    kernels::f32_to_bf16_exact(x + b, y + b, e - b);
  else if constexpr (S == DType::kBF16 && D == DType::kF32)
    kernels::bf16_to_f32_n(x + b, y + b, e - b);
  else
    for (int64_t i = b; i < e; ++i) y[i] = convert_scalar<S, D>(x[i]);
}

Result<std::unique_ptr<OpKernel>> convert_factory(const shlo::Op& op, const shlo::Function& fn) {
  HLX_ASSIGN_OR_RETURN(OpTypes t, op_types(op, fn, 1, 1));
  if (t.in[0].shape != t.out[0].shape)
    return make_error(ErrorKind::kInvalidArgument, describe(op, fn), ": operand and result shapes must match");
  LoopFn f = dispatch(t.in[0].dtype, [&](auto s) -> LoopFn {
    return dispatch(t.out[0].dtype,
                    [](auto d) -> LoopFn { return &convert_loop<decltype(s)::value, decltype(d)::value>; });
  });
  return make_map_kernel(op, f, t);
}

}  // namespace

void register_convert(KernelRegistry& r) { r.add("stablehlo.convert", &convert_factory); }

}  // namespace hlx::rt::ew
