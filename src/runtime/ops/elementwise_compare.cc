// stablehlo.compare, stablehlo.select and stablehlo.clamp for every element type.
#include "runtime/ops/elementwise_functors.h"
#include "runtime/ops/elementwise_kernel.h"

namespace hlx::rt::ew {
namespace {

enum class Dir { kEQ, kNE, kGE, kGT, kLE, kLT };

template <Dir C, class T>
inline bool cmp(T a, T b) {
  if constexpr (C == Dir::kEQ)
    return a == b;
  else if constexpr (C == Dir::kNE)
    return a != b;
  else if constexpr (C == Dir::kGE)
    return a >= b;
  else if constexpr (C == Dir::kGT)
    return a > b;
  else if constexpr (C == Dir::kLE)
    return a <= b;
  else
    return a < b;
}

// IEEE totalOrder as a signed integer key: -NaN < -inf < ... < -0 < +0 < ... < +inf < +NaN.
// Widening bf16/f16 to f32 keeps the order, NaN payloads included.
inline int32_t total_key(float f) {
  int32_t k = int32_t(f32_bits(f));
  return k ^ ((k >> 31) & 0x7fffffff);
}

template <DType D, Dir C, bool Total>
void compare_loop(const void* const* in, void* out, int64_t b, int64_t e) {
  const St<D>* x = static_cast<const St<D>*>(in[0]);
  const St<D>* z = static_cast<const St<D>*>(in[1]);
  uint8_t* y = static_cast<uint8_t*>(out);
  for (int64_t i = b; i < e; ++i) {
    if constexpr (is_float(D)) {
      float p = load_f<D>(x[i]), q = load_f<D>(z[i]);
      if constexpr (Total)
        y[i] = cmp<C>(total_key(p), total_key(q));
      else
        y[i] = cmp<C>(p, q);
    } else {
      y[i] = cmp<C>(x[i], z[i]);
    }
  }
}

template <Dir C>
LoopFn compare_fn(DType t, bool total) {
  return dispatch(t, [total](auto d) -> LoopFn {
    constexpr DType D = decltype(d)::value;
    if constexpr (is_float(D))
      return total ? &compare_loop<D, C, true> : &compare_loop<D, C, false>;
    else
      return &compare_loop<D, C, false>;
  });
}

const char* enum_value(const shlo::Attr* a) {
  if (!a) return nullptr;
  if (a->kind == shlo::Attr::Kind::kEnum || a->kind == shlo::Attr::Kind::kString) return a->str.c_str();
  return nullptr;
}

Result<std::unique_ptr<OpKernel>> compare_factory(const shlo::Op& op, const shlo::Function& fn) {
  HLX_ASSIGN_OR_RETURN(OpTypes t, op_types(op, fn, 2, 2));
  DType dt = t.in[0].dtype;
  if (t.in[1] != t.in[0] || t.out[0].dtype != DType::kI1 || t.out[0].shape != t.in[0].shape)
    return make_error(ErrorKind::kInvalidArgument, describe(op, fn),
                      ": operands must have one type and the result must be i1 of their shape");
  const char* dir = enum_value(op.attr("comparison_direction"));
  if (!dir) return make_error(ErrorKind::kInvalidArgument, op.name, ": missing comparison_direction");
  std::string_view d(dir);

  // comparison_type must fit the element type (stablehlo compare_c3); absent means the default.
  const char* ct = enum_value(op.attr("comparison_type"));
  std::string_view type = ct ? ct : "NOTYPE";
  bool total = false;
  if (type == "TOTALORDER" && is_float(dt))
    total = true;
  else if (type == "NOTYPE") {
  } else if (type == "FLOAT" && is_float(dt)) {
  } else if (type == "SIGNED" && is_integer(dt) && !is_unsigned(dt)) {
  } else if (type == "UNSIGNED" && (is_unsigned(dt) || dt == DType::kI1)) {
  } else
    return make_error(ErrorKind::kInvalidArgument, describe(op, fn), ": comparison_type ", type,
                      " does not fit element type ", dtype_name(dt));

  LoopFn f = nullptr;
  if (d == "EQ")
    f = compare_fn<Dir::kEQ>(dt, total);
  else if (d == "NE")
    f = compare_fn<Dir::kNE>(dt, total);
  else if (d == "GE")
    f = compare_fn<Dir::kGE>(dt, total);
  else if (d == "GT")
    f = compare_fn<Dir::kGT>(dt, total);
  else if (d == "LE")
    f = compare_fn<Dir::kLE>(dt, total);
  else if (d == "LT")
    f = compare_fn<Dir::kLT>(dt, total);
  else
    return make_error(ErrorKind::kInvalidArgument, op.name, ": unknown comparison_direction '", d, "'");
  return make_map_kernel(op, f, t);
}

// ---- select ----

template <class T, bool ScalarPred>
void select_loop(const void* const* in, void* out, int64_t b, int64_t e) {
  const uint8_t* p = static_cast<const uint8_t*>(in[0]);
  const T* x = static_cast<const T*>(in[1]);
  const T* z = static_cast<const T*>(in[2]);
  T* y = static_cast<T*>(out);
  for (int64_t i = b; i < e; ++i) y[i] = p[ScalarPred ? 0 : i] ? x[i] : z[i];
}

template <bool S>
LoopFn select_fn(size_t bytes) {
  switch (bytes) {
    case 1:
      return &select_loop<uint8_t, S>;
    case 2:
      return &select_loop<uint16_t, S>;
    case 4:
      return &select_loop<uint32_t, S>;
    default:
      return &select_loop<uint64_t, S>;
  }
}

Result<std::unique_ptr<OpKernel>> select_factory(const shlo::Op& op, const shlo::Function& fn) {
  HLX_ASSIGN_OR_RETURN(OpTypes t, op_types(op, fn, 3, 3));
  const auto& pred = t.in[0];
  bool scalar = pred.rank() == 0;
  if (pred.dtype != DType::kI1 || (!scalar && pred.shape != t.out[0].shape))
    return make_error(ErrorKind::kInvalidArgument, describe(op, fn),
                      ": pred must be i1, a scalar or of the result's shape (select_c1)");
  if (t.in[1] != t.out[0] || t.in[2] != t.out[0])
    return make_error(ErrorKind::kInvalidArgument, describe(op, fn), ": on_true, on_false and result types must match");
  size_t bytes = dtype_size(t.out[0].dtype);
  return make_map_kernel(op, scalar ? select_fn<true>(bytes) : select_fn<false>(bytes), t);
}

// ---- clamp(min, operand, max) ----

template <DType D, bool SLo, bool SHi>
void clamp_loop(const void* const* in, void* out, int64_t b, int64_t e) {
  const St<D>* lo = static_cast<const St<D>*>(in[0]);
  const St<D>* x = static_cast<const St<D>*>(in[1]);
  const St<D>* hi = static_cast<const St<D>*>(in[2]);
  St<D>* y = static_cast<St<D>*>(out);
  for (int64_t i = b; i < e; ++i) {
    auto l = lo[SLo ? 0 : i], h = hi[SHi ? 0 : i];
    if constexpr (is_float(D)) {
      y[i] = store_f<D>(fmin_nan(fmax_nan(load_f<D>(x[i]), load_f<D>(l)), load_f<D>(h)));
    } else {
      auto v = x[i] < l ? l : x[i];
      y[i] = v > h ? h : v;
    }
  }
}

Result<std::unique_ptr<OpKernel>> clamp_factory(const shlo::Op& op, const shlo::Function& fn) {
  HLX_ASSIGN_OR_RETURN(OpTypes t, op_types(op, fn, 3, 3));
  const auto& x = t.in[1];
  if (t.out[0] != x)
    return make_error(ErrorKind::kInvalidArgument, describe(op, fn), ": operand and result types must match");
  for (int i : {0, 2})
    if (t.in[size_t(i)].dtype != x.dtype || (t.in[size_t(i)].rank() != 0 && t.in[size_t(i)].shape != x.shape))
      return make_error(ErrorKind::kInvalidArgument, describe(op, fn),
                        ": min and max must be scalars or of the operand's shape, with its element type (clamp_c1)");
  bool slo = t.in[0].rank() == 0, shi = t.in[2].rank() == 0;
  LoopFn f = dispatch(x.dtype, [slo, shi](auto d) -> LoopFn {
    constexpr DType D = decltype(d)::value;
    if (slo) return shi ? &clamp_loop<D, true, true> : &clamp_loop<D, true, false>;
    return shi ? &clamp_loop<D, false, true> : &clamp_loop<D, false, false>;
  });
  return make_map_kernel(op, f, t);
}

}  // namespace

void register_compare_select(KernelRegistry& r) {
  r.add("stablehlo.compare", &compare_factory);
  r.add("stablehlo.select", &select_factory);
  r.add("stablehlo.clamp", &clamp_factory);
}

}  // namespace hlx::rt::ew
