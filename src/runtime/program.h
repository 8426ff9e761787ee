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
#include "runtime/kernels/matmul.h"
#include "stablehlo/ir.h"

namespace hlx::rt {

// Handler for `stablehlo.custom_call @<target>` ops (e.g. the conformance checks); it receives the
// call's operands and returns an error to fail the run.
using CustomCallHandler = std::function<Status(const std::vector<Tensor>& operands)>;

class KernelRegistry;

struct ProgramOptions {
  int threads = 0;                // 0 = all cores (OpenMP)
  bool native_composites = true;  // false: always run decompositions (used by tests)
  std::vector<std::pair<std::string, CustomCallHandler>> custom_calls;
  // Kernels to compile with; null = KernelRegistry::builtin(). Must outlive compile().
  const KernelRegistry* registry = nullptr;
  // Print each entry's plan (steps, fused groups, in-place reuse, arena offsets) to stderr after
  // compiling. The environment variable HLX_DUMP_PLAN=1 does the same.
  bool dump_plan = false;
  // Fuse chains of elementwise ops into compile_fused_elementwise kernels.
  bool fuse_elementwise = true;
  // Format of the matmul weights bound with bind_weight() (packed at bind time): as stored, or
  // int8 per-channel (kernels/matmul.h). Constants and non-matmul uses keep their own type.
  kernels::WeightFormat weight_format = kernels::WeightFormat::kAsStored;
  // Whether bf16 products must keep each row's bits independent of M (kernels/matmul.h).
  kernels::ProductOrder product_order = kernels::ProductOrder::kRowInvariant;
};

// What compile() decided for one entry, for tests and tools.
struct PlanStats {
  size_t arena_bytes = 0;         // one arena per entry, reused across runs
  size_t intermediate_bytes = 0;  // sum of the sizes of all arena-resident values
  int steps = 0;                  // kernels run per call (a fused group counts once)
  int fused_groups = 0;
  int in_place_steps = 0;  // steps whose output 0 reuses an input's buffer
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
  //
  // Thread-safety: run() and bind_weight() may be called from any thread; calls on one Program
  // are serialised by an internal mutex (kernels and the arena are shared state). Use one Program
  // per thread for parallel execution. Returned tensors are owned by the caller and never reused
  // by later runs while the caller holds them (a result's buffer is recycled once every reference
  // to it is gone), except that an output aliased to a donated argument shares that argument's
  // storage (its contents are the output).
  virtual Result<std::vector<Tensor>> run(std::string_view entry, std::vector<Tensor> args) = 0;

  // kNotFound for an unknown entry.
  virtual Result<PlanStats> plan_stats(std::string_view entry) const = 0;
  // Human-readable plan of an entry (what HLX_DUMP_PLAN prints).
  virtual Result<std::string> dump_plan(std::string_view entry) const = 0;
};

// Checkpoints stored quantized: the loader packs such a weight itself (kernels::pack_int4) and binds
// a placeholder under its name. packed_placeholder() makes a tensor of the declared type whose bytes
// are address space only (never backed, never read); register_packed_weight() makes every matmul
// that multiplies by it (as a Linear's [N, K] weight) use `packed`, for as long as the returned
// handle lives. bind_weight() refuses a placeholder that reaches anything but such a matmul.
Result<Tensor> packed_placeholder(DType dtype, const Shape& shape);
std::shared_ptr<void> register_packed_weight(const Tensor& placeholder, std::unique_ptr<kernels::PackedWeight> packed);
bool is_packed_placeholder(const Tensor& t);

// A matmul's packed copy of `weight` ([N, K] bf16, used as a Linear) when it kept every bit
// (PackedWeight::copy_row), else null. A tied embedding gathers its rows from it, so the mapped
// table is not faulted back in row by row (on large page-cache folios ~1 MB of RSS per row).
std::shared_ptr<const kernels::PackedWeight> exact_packed_copy(const Tensor& weight);

// After whole rows of `table` ([rows, row elements]) were copied out: when the table lies in a
// read-only file mapping (a memory-mapped checkpoint), this process's mapping of the 2 MiB windows
// around those rows (within the table) is dropped. A gather from a table with no exact packed copy
// (an int8 / int4 lm_head, an untied embedding) otherwise keeps every folio it touched resident
// (~1 MB per random row on large page-cache folios: a server's RSS would grow towards a second
// copy of the table). The page cache keeps the bytes; the next read of a row faults them back in.
void release_table_rows(const Tensor& table, const int64_t* rows, size_t count);

// Calls read(i) for each i < count (read(i) reads row rows[i] of `table`) and releases the rows read
// every kTableRowsPerRelease: a freshly written checkpoint sits in 2 MiB folios, so the 512 random
// rows of one prompt, released only at the end, would map ~all of a 311 MB table at once.
constexpr size_t kTableRowsPerRelease = 8;
void read_table_rows(const Tensor& table, const int64_t* rows, size_t count, const std::function<void(size_t)>& read);

}  // namespace hlx::rt
