// Registers the structured reference kernels: one file per op family.
#include "runtime/op_kernel.h"

namespace hlx::rt {

void register_reduce_kernels(KernelRegistry& r);
void register_gather_kernels(KernelRegistry& r);
void register_scatter_kernels(KernelRegistry& r);
void register_convolution_kernels(KernelRegistry& r);
void register_dot_general_kernels(KernelRegistry& r);

void register_structured_kernels(KernelRegistry& r) {
  register_reduce_kernels(r);
  register_gather_kernels(r);
  register_scatter_kernels(r);
  register_convolution_kernels(r);
  register_dot_general_kernels(r);
}

}  // namespace hlx::rt
