// Internal to the shape kernel files (shape.cc, shape_dynamic.cc): registration and shared helpers.
#pragma once

#include "runtime/op_kernel.h"
#include "runtime/ops/elementwise_common.h"

namespace hlx::rt::shape {

using ew::check_buffers;
using ew::describe;
using ew::op_types;
using ew::OpTypes;

// kInvalidArgument naming the op and its types.
inline Status bad(const shlo::Op& op, const shlo::Function& fn, std::string_view why) {
  return make_error(ErrorKind::kInvalidArgument, describe(op, fn), ": ", why);
}

void register_static_shape_kernels(KernelRegistry& r);   // shape.cc
void register_dynamic_shape_kernels(KernelRegistry& r);  // shape_dynamic.cc
}  // namespace hlx::rt::shape
