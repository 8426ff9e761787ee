// Internal registration of the shape kernel files.
#pragma once

#include "runtime/op_kernel.h"

namespace hlx::rt::shape {
void register_static_shape_kernels(KernelRegistry& r);   // shape.cc
void register_dynamic_shape_kernels(KernelRegistry& r);  // shape_dynamic.cc
}  // namespace hlx::rt::shape
