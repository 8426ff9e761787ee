// The one kernel class behind every non-fused elementwise op: a typed loop chosen at compile time,
// run over contiguous chunks (OpenMP above a size threshold). Each loop reads element i of every
// input before writing element i of the output, so an output may alias a same-typed input.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "runtime/op_kernel.h"
#include "runtime/ops/elementwise_common.h"

namespace hlx::rt::ew {

// Processes elements [b, e) of the output; `in` are the inputs' base pointers.
using LoopFn = void (*)(const void* const* in, void* out, int64_t b, int64_t e);

class MapKernel final : public OpKernel {
 public:
  MapKernel(std::string name, LoopFn fn, std::vector<shlo::TensorType> in, shlo::TensorType out)
      : name_(std::move(name)), fn_(fn), in_(std::move(in)), out_{std::move(out)} {}

  Status run(const std::vector<const Tensor*>& inputs, const std::vector<Tensor*>& outputs) override {
    HLX_RETURN_IF_ERROR(check_buffers(name_, inputs, outputs, in_, out_));
    const void* ptrs[4] = {};
    for (size_t i = 0; i < inputs.size() && i < 4; ++i) ptrs[i] = inputs[i]->raw();
    void* out = outputs[0]->raw();
    parallel_for(outputs[0]->num_elements(), [&](int64_t b, int64_t e) { fn_(ptrs, out, b, e); });
    return ok_status();
  }
  bool can_run_in_place(int index) const override {
    return index >= 0 && size_t(index) < in_.size() && in_[size_t(index)] == out_[0];
  }

 private:
  std::string name_;
  LoopFn fn_;
  std::vector<shlo::TensorType> in_;
  std::vector<shlo::TensorType> out_;
};

inline Result<std::unique_ptr<OpKernel>> make_map_kernel(const shlo::Op& op, LoopFn fn, const OpTypes& t) {
  return std::unique_ptr<OpKernel>(new MapKernel(op.name, fn, t.in, t.out[0]));
}

inline Status unsupported_type(const shlo::Op& op, const shlo::Function& fn) {
  return make_error(ErrorKind::kUnsupported, "no kernel for ", describe(op, fn), ": element type not supported by ",
                    op.name);
}

// Internal registration, one per file of this family.
void register_unary_binary(KernelRegistry& r);    // elementwise.cc
void register_compare_select(KernelRegistry& r);  // elementwise_compare.cc
void register_convert(KernelRegistry& r);         // elementwise_convert.cc

}  // namespace hlx::rt::ew
