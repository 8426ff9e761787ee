// Internals of runtime/program.cc, one file per stage of Program::compile (see program.cc's
// header for the stages): program_flatten.cc, program_steps.cc (fuse, group, compile),
// program_memory.cc, program_profile.cc (dump and HLX_PROFILE). Not part of the runtime's API.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/op_kernel.h"
#include "runtime/plan.h"
#include "runtime/program.h"

namespace hlx::rt::prog {

using shlo::ValueId;

std::string type_str(const shlo::TensorType& t);
std::string symbol_of(const shlo::Attr* a);  // a symbol or string attribute; empty otherwise

enum class GroupKind { kArena, kOutput, kDonatedArg };

struct Step {
  std::unique_ptr<OpKernel> kernel;
  CustomCallHandler handler;  // set for custom_call steps
  std::vector<ValueId> inputs, outputs;
  std::string label;
  int in_place_input = -1;
};

// Values sharing one buffer (an in-place chain); all have the same dtype and element count.
struct Group {
  GroupKind kind = GroupKind::kArena;
  shlo::TensorType type;
  int first = 0, last = 0;
  int arg = -1;       // kDonatedArg: entry argument index
  size_t offset = 0;  // kArena
};

struct EntryPlan {
  std::string name;
  std::unique_ptr<shlo::Function> flat;  // kernels may keep references into it
  std::vector<Step> steps;
  std::vector<ValueId> returns;
  std::vector<int> input_args;           // entry args passed to run(), in order
  std::vector<std::string> weight_name;  // per entry arg; empty when not a weight
  std::vector<std::string> arg_label;    // per entry arg, for messages
  std::vector<int> alias_output;         // per entry arg: donated into output i, or -1
  std::vector<Tensor> weights;           // per entry arg (bound weights)
  std::unordered_map<ValueId, Tensor> consts;
  std::vector<Group> groups;
  std::vector<int> group_of;                               // per value; -1 when not a step output / donated arg
  std::vector<std::vector<std::pair<int, int>>> arg_uses;  // per entry arg: (step, input index)
  size_t arena_bytes = 0;
  std::shared_ptr<void> arena;
  // Per group: the storage of its last kOutput result, reused by the next run once the caller has
  // dropped every reference (use_count 1). A fresh multi-MiB buffer per run (decode logits at 8 rows:
  // 4.9 MB) was mmapped, faulted in as zeroed huge pages and unmapped again on every step.
  std::vector<std::shared_ptr<void>> out_storage;
  PlanStats stats;
  // HLX_PROFILE=1: wall time per step summed over runs, printed when the Program is destroyed.
  std::vector<double> step_ns;
  int64_t profiled_runs = 0;
  double run_ns = 0;
};

// HLX_GROUP_DOTS=0 runs sibling dot_generals as one step each (for A/B runs). Read at every

// Stage 1: inlines `f` (called with `args`, values of `flat`) into `flat`: calls, and composites
// without a native kernel (their decomposition); constants stay ops. Appends f's results.
Status flatten_into(const shlo::Module& module, const ProgramOptions& options, const KernelRegistry& reg,
                    const shlo::Function& f, const std::vector<ValueId>& args, shlo::Function& flat,
                    std::vector<ValueId>* results);
// Stages 2 and 3: p.flat's ops become p.steps (fused chains, grouped dots, one kernel per op).
Status compile_steps(EntryPlan& p, const KernelRegistry& reg, const ProgramOptions& options);
// Stage 4: buffer groups, in-place reuse, donated arguments, the arena layout.
Status plan_memory(EntryPlan& p);
// HLX_DUMP_PLAN text of a plan, and HLX_PROFILE's per-op summary (printed to stderr).
std::string dump_plan_text(const EntryPlan& p);
bool profiling_enabled();
void print_profile(const EntryPlan& p);

}  // namespace hlx::rt::prog
