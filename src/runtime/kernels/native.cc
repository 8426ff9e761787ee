// Placeholder: replaced by the oneDNN dot_general and hlx.* composite kernels.
#include "runtime/op_kernel.h"

namespace hlx::rt {
void register_native_kernels(KernelRegistry&) {}
}  // namespace hlx::rt
