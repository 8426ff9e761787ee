// Placeholder: replaced by the tiled fused-elementwise kernel.
#include "runtime/op_kernel.h"

namespace hlx::rt {
Result<std::unique_ptr<OpKernel>> compile_fused_elementwise(const std::vector<const shlo::Op*>&,
                                                           const std::vector<shlo::ValueId>&,
                                                           const std::vector<shlo::ValueId>&,
                                                           const shlo::Function&) {
  return make_error(ErrorKind::kUnsupported, "fused elementwise kernels not built yet");
}
bool is_fusible_elementwise(const shlo::Op&, const shlo::Function&) { return false; }
}  // namespace hlx::rt
