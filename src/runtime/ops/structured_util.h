// Helpers shared by the structured reference kernels (reduce, gather, scatter, convolution,
// dot_general): element loads/stores through a common wide type, attribute decoding, and a
// scalar evaluator for region bodies (reduce reducers, scatter update computations).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "core/tensor.h"
#include "runtime/op_kernel.h"
#include "stablehlo/ir.h"
#include "stablehlo/shape_inference.h"

namespace hlx::rt::structured {

// Element i of a buffer of type t, widened. Floats go through f32 (exact for f16/bf16).
inline float load_f32(const void* p, DType t, int64_t i) {
  switch (t) {
    case DType::kF32:
      return static_cast<const float*>(p)[i];
    case DType::kF16:
      return f16_to_f32(static_cast<const f16*>(p)[i]);
    case DType::kBF16:
      return bf16_to_f32(static_cast<const bf16*>(p)[i]);
    case DType::kI64:
      return float(static_cast<const int64_t*>(p)[i]);
    case DType::kI32:
      return float(static_cast<const int32_t*>(p)[i]);
    case DType::kI16:
      return float(static_cast<const int16_t*>(p)[i]);
    case DType::kI8:
      return float(static_cast<const int8_t*>(p)[i]);
    case DType::kU8:
      return float(static_cast<const uint8_t*>(p)[i]);
    case DType::kI1:
      return static_cast<const uint8_t*>(p)[i] ? 1.f : 0.f;
  }
  return 0.f;
}
inline int64_t load_i64(const void* p, DType t, int64_t i) {
  switch (t) {
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
      return int64_t(load_f32(p, t, i));
    case DType::kI64:
      return static_cast<const int64_t*>(p)[i];
    case DType::kI32:
      return static_cast<const int32_t*>(p)[i];
    case DType::kI16:
      return static_cast<const int16_t*>(p)[i];
    case DType::kI8:
      return static_cast<const int8_t*>(p)[i];
    case DType::kU8:
      return static_cast<const uint8_t*>(p)[i];
    case DType::kI1:
      return static_cast<const uint8_t*>(p)[i] ? 1 : 0;
  }
  return 0;
}
// Rounds to nearest even for f16/bf16.
inline void store_f32(void* p, DType t, int64_t i, float v) {
  switch (t) {
    case DType::kF32:
      static_cast<float*>(p)[i] = v;
      return;
    case DType::kF16:
      static_cast<f16*>(p)[i] = f32_to_f16(v);
      return;
    case DType::kBF16:
      static_cast<bf16*>(p)[i] = f32_to_bf16(v);
      return;
    default:
      break;
  }
}
// Integers wrap (two's complement truncation), i1 is v != 0.
inline void store_i64(void* p, DType t, int64_t i, int64_t v) {
  switch (t) {
    case DType::kI64:
      static_cast<int64_t*>(p)[i] = v;
      return;
    case DType::kI32:
      static_cast<int32_t*>(p)[i] = int32_t(uint32_t(uint64_t(v)));
      return;
    case DType::kI16:
      static_cast<int16_t*>(p)[i] = int16_t(uint16_t(uint64_t(v)));
      return;
    case DType::kI8:
      static_cast<int8_t*>(p)[i] = int8_t(uint8_t(uint64_t(v)));
      return;
    case DType::kU8:
      static_cast<uint8_t*>(p)[i] = uint8_t(uint64_t(v));
      return;
    case DType::kI1:
      static_cast<uint8_t*>(p)[i] = v != 0;
      return;
    default:
      store_f32(p, t, i, float(v));
      return;
  }
}

// Attribute decoding. Missing optional fields decode to their MLIR defaults (empty / 0).
std::vector<int64_t> ints_or_empty(const shlo::Attr* a);
Result<std::vector<int64_t>> i64_array_attr(const shlo::Op& op, std::string_view name, bool required);
Result<int64_t> int_attr(const shlo::Op& op, std::string_view name, int64_t fallback);
// The op's dimension-number attribute `attr_name`, decoded by the verifier's own decoder
// (stablehlo/shape_inference.h: shlo::dot_dims_from_attr and its siblings), so each field list
// is written once in the tree.
template <class T>
Result<T> dimension_numbers(const shlo::Op& op, std::string_view attr_name, Result<T> (*decode)(const shlo::Attr&)) {
  const shlo::Attr* a = op.attr(attr_name);
  if (!a) return make_error(ErrorKind::kInvalidArgument, op.name, ": missing attribute '", attr_name, "'");
  return decode(*a);
}

// "stablehlo.reduce(f32[4x5], f32[])" for error messages.
std::string op_signature(const shlo::Op& op, const shlo::Function& fn);
Status unsupported(const shlo::Op& op, const shlo::Function& fn, const std::string& why);
Status invalid(const shlo::Op& op, const shlo::Function& fn, const std::string& why);

// A recognised single-op region body: `return op(arg0, arg1)` or `return arg1` (replace).
enum class BinaryBody { kNone, kAdd, kMul, kMax, kMin, kAnd, kOr, kReplace };
// For a body with block args (a0, b0) [one operand pair]; kNone when not recognised.
BinaryBody match_binary_body(const shlo::Block& block);

inline float apply_f(BinaryBody b, float x, float y) {
  switch (b) {
    case BinaryBody::kAdd:
      return x + y;
    case BinaryBody::kMul:
      return x * y;
    case BinaryBody::kMax:
      if (std::isnan(x) || std::isnan(y)) return std::isnan(x) ? x : y;
      if (x == y) return std::signbit(x) ? y : x;  // max(-0, +0) = +0
      return x > y ? x : y;
    case BinaryBody::kMin:
      if (std::isnan(x) || std::isnan(y)) return std::isnan(x) ? x : y;
      if (x == y) return std::signbit(x) ? x : y;
      return x < y ? x : y;
    case BinaryBody::kReplace:
      return y;
    default:
      return x;
  }
}
// Integers (and i1) in wrapping 64-bit arithmetic; stored back with truncation. Unsigned
// comparisons are exact since ui8 widens to non-negative int64.
inline int64_t apply_i(BinaryBody b, int64_t x, int64_t y) {
  switch (b) {
    case BinaryBody::kAdd:
      return int64_t(uint64_t(x) + uint64_t(y));
    case BinaryBody::kMul:
      return int64_t(uint64_t(x) * uint64_t(y));
    case BinaryBody::kMax:
      return x > y ? x : y;
    case BinaryBody::kMin:
      return x < y ? x : y;
    case BinaryBody::kAnd:
      return x & y;
    case BinaryBody::kOr:
      return x | y;
    case BinaryBody::kReplace:
      return y;
    default:
      return x;
  }
}

// Evaluates a region body on scalars with kernels from the builtin registry. The block's args
// and returned values are rank-0 tensors; call set_arg() for each arg, run(), then read result().
// Not thread-safe (it owns its scalar buffers); one per kernel instance.
class RegionEvaluator {
 public:
  static Result<std::unique_ptr<RegionEvaluator>> compile(const shlo::Block& block, const shlo::Function& fn);
  int num_args() const { return int(arg_slots_.size()); }
  int num_results() const { return int(result_slots_.size()); }
  DType arg_type(int i) const { return slots_[size_t(arg_slots_[size_t(i)])].dtype(); }
  void* arg_data(int i) { return slots_[size_t(arg_slots_[size_t(i)])].raw(); }
  const void* result_data(int i) const { return slots_[size_t(result_slots_[size_t(i)])].raw(); }
  Status run();

 private:
  struct Step {
    std::unique_ptr<OpKernel> kernel;
    std::vector<int> in, out;
    std::string name;
  };
  std::vector<Tensor> slots_;  // one per value used in the block (all rank 0 or small)
  std::vector<int> arg_slots_, result_slots_;
  std::vector<Step> steps_;
  std::vector<const Tensor*> in_ptrs_;
  std::vector<Tensor*> out_ptrs_;
};

}  // namespace hlx::rt::structured
