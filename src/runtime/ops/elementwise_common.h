// Shared helpers for the elementwise, shape and fused kernel files: storage types per DType,
// f32 load/store for the float types, dtype dispatch, a chunked OpenMP loop, attribute readers
// and checks of run-time buffers against compiled types.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "core/tensor.h"
#include "runtime/kernels/parallel.h"
#include "stablehlo/ir.h"

namespace hlx::rt::ew {

template <DType D>
struct Storage;
template <>
struct Storage<DType::kF32> {
  using type = float;
};
template <>
struct Storage<DType::kF16> {
  using type = hlx::f16;
};
template <>
struct Storage<DType::kBF16> {
  using type = hlx::bf16;
};
template <>
struct Storage<DType::kI64> {
  using type = int64_t;
};
template <>
struct Storage<DType::kI32> {
  using type = int32_t;
};
template <>
struct Storage<DType::kI16> {
  using type = int16_t;
};
template <>
struct Storage<DType::kI8> {
  using type = int8_t;
};
template <>
struct Storage<DType::kU8> {
  using type = uint8_t;
};
template <>
struct Storage<DType::kI1> {
  using type = uint8_t;
};  // one byte, 0 or 1
template <DType D>
using St = typename Storage<D>::type;

template <DType D>
using DTag = std::integral_constant<DType, D>;

// Float storage -> f32 (exact).
template <DType D>
inline float load_f(St<D> v) {
  if constexpr (D == DType::kF32)
    return v;
  else if constexpr (D == DType::kBF16)
    return bf16_to_f32(v);
  else
    return f16_to_f32(v);
}
// f32 -> float storage, rounding to nearest even once.
template <DType D>
inline St<D> store_f(float v) {
  if constexpr (D == DType::kF32)
    return v;
  else if constexpr (D == DType::kBF16)
    return f32_to_bf16(v);
  else
    return f32_to_f16(v);
}
// Rounds an f32 to D's precision and back (identity for f32): what a store + load would give.
template <DType D>
inline float quantize_f(float v) {
  return load_f<D>(store_f<D>(v));
}

// Calls f(DTag<D>{}) for the runtime dtype `t`.
template <class F>
decltype(auto) dispatch(DType t, F&& f) {
  switch (t) {
    case DType::kF32:
      return f(DTag<DType::kF32>{});
    case DType::kF16:
      return f(DTag<DType::kF16>{});
    case DType::kBF16:
      return f(DTag<DType::kBF16>{});
    case DType::kI64:
      return f(DTag<DType::kI64>{});
    case DType::kI32:
      return f(DTag<DType::kI32>{});
    case DType::kI16:
      return f(DTag<DType::kI16>{});
    case DType::kI8:
      return f(DTag<DType::kI8>{});
    case DType::kU8:
      return f(DTag<DType::kU8>{});
    case DType::kI1:
      break;
  }
  return f(DTag<DType::kI1>{});
}

// Below this many elements one thread is faster than waking the team (memory-bound loops).
inline constexpr int64_t kParallelThreshold = int64_t(1) << 15;

// Runs f(begin, end) over [0, n) on the runtime's pool (kernels/parallel.h) when n is large, in
// chunks claimed dynamically. Chunks are multiples of 64 elements so threads never share a cache
// line of the output.
template <class F>
void parallel_for(int64_t n, F&& f) {
  if (n <= 0) return;
  const int threads = kernels::max_threads();
  if (n < kParallelThreshold || threads == 1) {
    f(int64_t(0), n);
    return;
  }
  const int64_t grain = std::max<int64_t>(kParallelThreshold / 4, (n / (4 * threads) + 63) / 64 * 64);
  kernels::parallel_for(n, grain, [&](int64_t b, int64_t e) { f(b, e); });
}

// "stablehlo.add(tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>" for error messages.
inline std::string describe(const shlo::Op& op, const shlo::Function& fn) {
  std::string s = op.name + "(";
  for (size_t i = 0; i < op.operands.size(); ++i) {
    if (i) s += ", ";
    auto v = op.operands[i];
    s += (v >= 0 && size_t(v) < fn.value_types.size()) ? fn.type_of(v).to_string() : "<bad value>";
  }
  s += ") -> ";
  for (size_t i = 0; i < op.results.size(); ++i) {
    if (i) s += ", ";
    auto v = op.results[i];
    s += (v >= 0 && size_t(v) < fn.value_types.size()) ? fn.type_of(v).to_string() : "<bad value>";
  }
  return s;
}

// Checks operand/result counts and that every value id has a type; returns the types.
struct OpTypes {
  std::vector<shlo::TensorType> in, out;
};
inline Result<OpTypes> op_types(const shlo::Op& op, const shlo::Function& fn, size_t min_in, size_t max_in,
                                size_t n_out = 1) {
  if (op.operands.size() < min_in || op.operands.size() > max_in || op.results.size() != n_out)
    return make_error(ErrorKind::kInvalidArgument, op.name, ": expected ", min_in,
                      min_in == max_in ? "" : str_cat("..", max_in), " operands and ", n_out, " result(s), got ",
                      op.operands.size(), " and ", op.results.size());
  OpTypes t;
  for (auto v : op.operands) {
    if (v < 0 || size_t(v) >= fn.value_types.size())
      return make_error(ErrorKind::kInvalidArgument, op.name, ": operand value %", v, " has no type");
    t.in.push_back(fn.type_of(v));
  }
  for (auto v : op.results) {
    if (v < 0 || size_t(v) >= fn.value_types.size())
      return make_error(ErrorKind::kInvalidArgument, op.name, ": result value %", v, " has no type");
    t.out.push_back(fn.type_of(v));
  }
  return t;
}

// Integer-array attribute: array<i64: ...>, or the older dense<...> : tensor<Nxi64> spelling.
inline Result<std::vector<int64_t>> i64_array_attr(const shlo::Op& op, std::string_view name) {
  const shlo::Attr* a = op.attr(name);
  if (!a) return make_error(ErrorKind::kInvalidArgument, op.name, ": missing attribute '", name, "'");
  if (a->kind == shlo::Attr::Kind::kI64Array) return a->ints;
  if (a->kind == shlo::Attr::Kind::kDense && a->dense && a->dense->type.rank() <= 1 &&
      (a->dense->type.dtype == DType::kI64 || a->dense->type.dtype == DType::kI32)) {
    const auto& d = *a->dense;
    size_t es = dtype_size(d.type.dtype);
    std::vector<int64_t> v(d.bytes.size() / es);
    for (size_t i = 0; i < v.size(); ++i) {
      if (es == 8) {
        int64_t x;
        std::memcpy(&x, &d.bytes[i * 8], 8);
        v[i] = x;
      } else {
        int32_t x;
        std::memcpy(&x, &d.bytes[i * 4], 4);
        v[i] = x;
      }
    }
    return v;
  }
  return make_error(ErrorKind::kInvalidArgument, op.name, ": attribute '", name, "' must be an i64 array");
}

inline Result<int64_t> int_attr(const shlo::Op& op, std::string_view name) {
  const shlo::Attr* a = op.attr(name);
  if (!a) return make_error(ErrorKind::kInvalidArgument, op.name, ": missing attribute '", name, "'");
  if (a->kind != shlo::Attr::Kind::kInt)
    return make_error(ErrorKind::kInvalidArgument, op.name, ": attribute '", name, "' must be an integer");
  return a->i;
}

// Checks run-time buffers against the types the kernel was compiled for.
inline Status check_buffers(std::string_view op, const std::vector<const Tensor*>& inputs,
                            const std::vector<Tensor*>& outputs, const std::vector<shlo::TensorType>& in,
                            const std::vector<shlo::TensorType>& out) {
  if (inputs.size() != in.size() || outputs.size() != out.size())
    return make_error(ErrorKind::kInvalidArgument, op, ": expected ", in.size(), " inputs and ", out.size(),
                      " outputs, got ", inputs.size(), " and ", outputs.size());
  for (size_t i = 0; i < in.size(); ++i) {
    const Tensor* t = inputs[i];
    if (!t || t->dtype() != in[i].dtype || t->shape() != in[i].shape || !t->defined())
      return make_error(ErrorKind::kInvalidArgument, op, ": input ", i, " is ", t ? t->type_string() : "null",
                        ", expected ", in[i].to_string());
  }
  for (size_t i = 0; i < out.size(); ++i) {
    const Tensor* t = outputs[i];
    if (!t || t->dtype() != out[i].dtype || t->shape() != out[i].shape || !t->defined())
      return make_error(ErrorKind::kInvalidArgument, op, ": output ", i, " is ", t ? t->type_string() : "null",
                        ", expected ", out[i].to_string());
  }
  return ok_status();
}

}  // namespace hlx::rt::ew
