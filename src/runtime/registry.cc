#include "runtime/op_kernel.h"

namespace hlx::rt {

void KernelRegistry::add(std::string_view key, OpKernelFactory factory) {
  entries_.emplace_back(std::string(key), factory);
}

bool KernelRegistry::has(std::string_view key) const {
  for (const auto& e : entries_)
    if (e.first == key) return true;
  return false;
}

Result<std::unique_ptr<OpKernel>> KernelRegistry::compile(std::string_view key, const shlo::Op& op,
                                                          const shlo::Function& fn) const {
  Status last = make_error(ErrorKind::kUnsupported, "no kernel for op '", key, "'");
  for (auto it = entries_.rbegin(); it != entries_.rend(); ++it) {
    if (it->first != key) continue;
    auto kernel = it->second(op, fn);
    if (kernel.ok() || kernel.status().kind() != ErrorKind::kUnsupported) return kernel;
    last = kernel.status();
  }
  return last;
}

const KernelRegistry& KernelRegistry::builtin() {
  static const KernelRegistry registry = [] {
    KernelRegistry r;
    register_elementwise_kernels(r);
    register_shape_kernels(r);
    register_structured_kernels(r);
    register_native_kernels(r);
    return r;
  }();
  return registry;
}

}  // namespace hlx::rt
