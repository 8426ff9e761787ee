// The CPU runtime's entry point: a verified module compiled into per-function execution plans.
//
// compile() resolves every op to a kernel before anything runs, so an op or element type the runtime
// does not implement fails here with ErrorKind::kUnsupported naming it. Known composites run native
// kernels; unknown composites run their decomposition. Arguments marked `hlx.weight = "<name>"` are
// bound once with bind_weight() (memory-mapped tensors are used without copying, and may be packed
// for the matmul backend); the rest are passed to run() in order.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "stablehlo/ir.h"

namespace hlx::rt {

// Handler for `stablehlo.custom_call @<target>` ops (e.g. the conformance checks); it receives the
// call's operands and returns an error to fail the run.
using CustomCallHandler = std::function<Status(const std::vector<Tensor>& operands)>;

struct ProgramOptions {
  int threads = 0;                      // 0 = all cores (OpenMP)
  bool native_composites = true;        // false: always run decompositions (used by tests)
  std::vector<std::pair<std::string, CustomCallHandler>> custom_calls;
};

class Program {
 public:
  static Result<std::shared_ptr<Program>> compile(std::shared_ptr<const shlo::Module> module,
                                                  ProgramOptions options = {});
  virtual ~Program() = default;

  // Binds the argument(s) marked `hlx.weight = name` in every entry; checks dtype and shape.
  virtual Status bind_weight(std::string_view name, Tensor tensor) = 0;
  // Runs a public function. `args` are its non-weight arguments in order; each is checked for
  // count, dtype and shape. Donated arguments (`tf.aliasing_output`) may be updated in place.
  virtual Result<std::vector<Tensor>> run(std::string_view entry, std::vector<Tensor> args) = 0;
};

}  // namespace hlx::rt
