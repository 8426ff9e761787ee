// Placeholder: replaced by the real kernels of this family.
#include "runtime/op_kernel.h"

namespace hlx::rt {
void register_shape_kernels(KernelRegistry&) {}
}  // namespace hlx::rt
