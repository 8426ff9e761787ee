// Program::compile, stage 4: the static memory plan (buffer groups, in-place chains, the arena).
#include "runtime/program_internal.h"

#include <algorithm>

namespace hlx::rt::prog {
namespace {

// Two values may share one buffer when they hold the same elements as bytes: the same type, or a
// reshape of it (the only in-place kernel whose result shape differs from its input's).
bool same_bytes(const shlo::TensorType& a, const shlo::TensorType& b) {
  return a.dtype == b.dtype && num_elements(a.shape) == num_elements(b.shape);
}

}  // namespace

Status plan_memory(EntryPlan& p) {
  const shlo::Function& fn = *p.flat;
  size_t nv = fn.value_types.size();
  int nsteps = int(p.steps.size());
  std::vector<int> def(nv, -1), last(nv, -1);
  for (int s = 0; s < nsteps; ++s) {
    for (ValueId v : p.steps[size_t(s)].inputs) last[size_t(v)] = s;
    for (ValueId v : p.steps[size_t(s)].outputs) def[size_t(v)] = s;
  }
  for (ValueId v : p.returns) last[size_t(v)] = nsteps;  // outputs outlive every step
  p.group_of.assign(nv, -1);
  // Donated arguments are buffers the plan may write into.
  for (size_t k = 0; k < fn.args.size(); ++k)
    if (p.alias_output[k] >= 0) {
      Group g;
      g.kind = GroupKind::kDonatedArg;
      g.type = fn.type_of(fn.args[k]);
      g.first = -1;
      g.arg = int(k);
      p.group_of[size_t(fn.args[k])] = int(p.groups.size());
      p.groups.push_back(g);
    }
  for (int s = 0; s < nsteps; ++s) {
    Step& st = p.steps[size_t(s)];
    for (size_t o = 0; o < st.outputs.size(); ++o) {
      ValueId v = st.outputs[o];
      if (o == 0 && st.kernel) {
        for (size_t i = 0; i < st.inputs.size(); ++i) {
          ValueId in = st.inputs[i];
          if (!st.kernel->can_run_in_place(int(i)) || p.group_of[size_t(in)] < 0 || last[size_t(in)] != s ||
              std::count(st.inputs.begin(), st.inputs.end(), in) != 1 || !same_bytes(fn.type_of(in), fn.type_of(v)))
            continue;
          p.group_of[size_t(v)] = p.group_of[size_t(in)];
          st.in_place_input = int(i);
          ++p.stats.in_place_steps;
          break;
        }
        if (p.group_of[size_t(v)] >= 0) continue;
      }
      Group g;
      g.type = fn.type_of(v);
      g.first = s;
      p.group_of[size_t(v)] = int(p.groups.size());
      p.groups.push_back(g);
    }
  }
  for (size_t v = 0; v < nv; ++v) {
    int g = p.group_of[v];
    if (g >= 0) p.groups[size_t(g)].last = std::max(p.groups[size_t(g)].last, last[v]);
  }
  for (ValueId v : p.returns) {
    int g = p.group_of[size_t(v)];
    if (g >= 0 && p.groups[size_t(g)].kind == GroupKind::kArena) p.groups[size_t(g)].kind = GroupKind::kOutput;
  }
  // An aliased output not produced in place may still be computed straight into the donated
  // argument when the argument is dead before the output's first write.
  for (size_t k = 0; k < fn.args.size(); ++k) {
    int i = p.alias_output[k];
    if (i < 0) continue;
    int ga = p.group_of[size_t(fn.args[k])];
    int go = p.group_of[size_t(p.returns[size_t(i)])];
    if (go < 0 || go == ga) continue;
    Group& o = p.groups[size_t(go)];
    if (o.kind == GroupKind::kOutput && p.groups[size_t(ga)].last < o.first) {
      o.kind = GroupKind::kDonatedArg;
      o.arg = int(k);
    }
  }
  std::vector<BufferLifetime> req;
  std::vector<size_t> which;
  for (size_t g = 0; g < p.groups.size(); ++g) {
    const Group& gr = p.groups[g];
    if (gr.kind != GroupKind::kArena) continue;
    size_t bytes = size_t(num_elements(gr.type.shape)) * dtype_size(gr.type.dtype);
    req.push_back({bytes, gr.first, std::max(gr.last, gr.first)});
    which.push_back(g);
  }
  for (size_t v = 0; v < nv; ++v) {
    int g = p.group_of[v];
    if (g >= 0 && p.groups[size_t(g)].kind == GroupKind::kArena)
      p.stats.intermediate_bytes += size_t(num_elements(fn.value_types[v].shape)) * dtype_size(fn.value_types[v].dtype);
  }
  ArenaLayout layout = plan_arena(req);
  for (size_t j = 0; j < which.size(); ++j) p.groups[which[j]].offset = layout.offsets[j];
  p.arena_bytes = layout.total_bytes;
  p.stats.arena_bytes = layout.total_bytes;
  return ok_status();
}

}  // namespace hlx::rt::prog
