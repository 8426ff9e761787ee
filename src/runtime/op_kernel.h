// Op kernels: one compiled op of a plan. Factories decode attributes and check element types once,
// at compile time, so unsupported ops fail before anything runs. Kernels never allocate their
// outputs: the executor hands them buffers from the entry's static memory plan.
#pragma once

#include <memory>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "stablehlo/ir.h"

namespace hlx::rt {

class OpKernel {
 public:
  virtual ~OpKernel() = default;
  // `outputs` are preallocated with the op's result types. They may alias an input only where
  // can_run_in_place(input) said so.
  virtual Status run(const std::vector<const Tensor*>& inputs, const std::vector<Tensor*>& outputs) = 0;
  // True when output 0 may share input `index`'s buffer (elementwise ops, dynamic_update_slice, scatter,
  // reshape: the planner shares buffers of the same dtype and element count).
  virtual bool can_run_in_place(int index) const { return false; }
  // Called once for each input that stays fixed for the program's life (a bound weight or a
  // constant) before the first run, so the kernel may pre-pack it (e.g. matmul weights).
  virtual Status set_constant_input(int index, const Tensor& value) { return ok_status(); }
};

// Compiles `op` (whose value types live in `fn`). Returns a kernel, or kUnsupported when the factory
// does not handle this op / element type, so the registry can try the next one.
using OpKernelFactory = Result<std::unique_ptr<OpKernel>> (*)(const shlo::Op& op, const shlo::Function& fn);

class KernelRegistry {
 public:
  // `key` is an op name ("stablehlo.add") or, for composites, "composite:" + the composite name.
  // Factories registered later for the same key are tried first (native fast paths over generic).
  void add(std::string_view key, OpKernelFactory factory);
  // kUnsupported naming the op and its types when no factory accepts it.
  Result<std::unique_ptr<OpKernel>> compile(std::string_view key, const shlo::Op& op, const shlo::Function& fn) const;
  bool has(std::string_view key) const;

  // The process-wide registry with every kernel hlx has (reference kernels, then native ones).
  static const KernelRegistry& builtin();

 private:
  std::vector<std::pair<std::string, OpKernelFactory>> entries_;
};

// A fused chain of elementwise ops (no broadcasts inside; all shapes equal to the result shape),
// evaluated in cache-sized tiles so intermediates never reach memory. `ops` are in program order;
// `inputs` are the values read from outside the chain, `outputs` the values read after it.
// `splat_inputs` are further values read from outside, each a broadcast of one float (value,
// exact in the value's type): the kernel fills their tiles instead of reading a materialised tensor.
Result<std::unique_ptr<OpKernel>> compile_fused_elementwise(
    const std::vector<const shlo::Op*>& ops, const std::vector<shlo::ValueId>& inputs,
    const std::vector<shlo::ValueId>& outputs, const shlo::Function& fn,
    const std::vector<std::pair<shlo::ValueId, float>>& splat_inputs = {});
// Whether `op` is a stablehlo.constant holding one float value in every element (*value: it, as f32).
bool float_splat_constant(const shlo::Op& op, float* value);
bool is_fusible_elementwise(const shlo::Op& op, const shlo::Function& fn);

// Sibling stablehlo.dot_general ops that read the same left operand and whose right operands are
// fixed (bound weights or constants), run as one step (kernels/native.cc): inputs are {the left
// operand, each op's right operand}, outputs each op's result, in `ops` order. kUnsupported when
// the ops are not plain matmuls of one M, K and operand/result types (run them one by one).
Result<std::unique_ptr<OpKernel>> compile_grouped_dot(const std::vector<const shlo::Op*>& ops,
                                                      const shlo::Function& fn);

// Registration functions, one per kernel family file group; builtin() calls them in this order.
void register_elementwise_kernels(
    KernelRegistry& r);                          // ops/elementwise*.cc: unary, binary, compare, select, clamp, convert
void register_shape_kernels(KernelRegistry& r);  // ops/shape*.cc: constant, iota, broadcast, reshape, transpose, slice,
                                                 // dynamic_(update_)slice, concatenate, pad
void register_structured_kernels(KernelRegistry& r);  // ops/{reduce,gather,scatter,convolution,dot_general}.cc
void register_native_kernels(KernelRegistry& r);      // kernels/: oneDNN dot_general, hlx.* composites

}  // namespace hlx::rt
