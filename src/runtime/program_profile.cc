// HLX_DUMP_PLAN and HLX_PROFILE: a plan as text, and wall time per op kind over all runs.
#include "runtime/program_internal.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>

namespace hlx::rt::prog {

bool profiling_enabled() {
  static const bool on = [] {
    const char* e = std::getenv("HLX_PROFILE");
    return e && std::string(e) == "1";
  }();
  return on;
}

std::string dump_plan_text(const EntryPlan& p) {
  const shlo::Function& fn = *p.flat;
  std::ostringstream os;
  os << "plan @" << p.name << ": " << p.steps.size() << " steps, " << p.stats.fused_groups << " fused, "
     << p.stats.in_place_steps << " in place, arena " << p.arena_bytes << " bytes (intermediates "
     << p.stats.intermediate_bytes << ")\n";
  auto where = [&](ValueId v) -> std::string {
    int g = p.group_of[size_t(v)];
    if (p.consts.count(v)) return "const";
    for (size_t k = 0; k < fn.args.size(); ++k)
      if (fn.args[k] == v && g < 0) return p.weight_name[k].empty() ? str_cat("arg", k) : "weight:" + p.weight_name[k];
    if (g < 0) return "?";
    const Group& gr = p.groups[size_t(g)];
    switch (gr.kind) {
      case GroupKind::kArena:
        return str_cat("arena+", gr.offset);
      case GroupKind::kOutput:
        return str_cat("out.g", g);
      case GroupKind::kDonatedArg:
        return str_cat("donated-arg", gr.arg);
    }
    return "?";
  };
  for (size_t s = 0; s < p.steps.size(); ++s) {
    const Step& st = p.steps[s];
    os << "  #" << s << " " << st.label << " (";
    for (size_t i = 0; i < st.inputs.size(); ++i)
      os << (i ? ", " : "") << "%" << st.inputs[i] << "@" << where(st.inputs[i]);
    os << ") -> (";
    for (size_t i = 0; i < st.outputs.size(); ++i)
      os << (i ? ", " : "") << "%" << st.outputs[i] << ":" << type_str(fn.type_of(st.outputs[i])) << "@"
         << where(st.outputs[i]);
    os << ")";
    if (st.in_place_input >= 0) os << " in-place(input " << st.in_place_input << ")";
    os << "\n";
  }
  os << "  returns";
  for (ValueId v : p.returns) os << " %" << v << "@" << where(v);
  os << "\n";
  return os.str();
}

// Per-op summary: steps grouped by label and output type, heaviest first.
void print_profile(const EntryPlan& p) {
  if (p.profiled_runs == 0) return;
  const shlo::Function& fn = *p.flat;
  struct Agg {
    double ns = 0;
    int count = 0;
  };
  std::map<std::string, Agg> by_kind;
  for (size_t s = 0; s < p.steps.size() && s < p.step_ns.size(); ++s) {
    const Step& st = p.steps[s];
    std::string key = st.label;
    if (!st.outputs.empty()) key += " -> " + type_str(fn.type_of(st.outputs[0]));
    Agg& a = by_kind[key];
    a.ns += p.step_ns[s];
    ++a.count;
  }
  std::vector<std::pair<std::string, Agg>> rows(by_kind.begin(), by_kind.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.ns > b.second.ns; });
  const double runs = double(p.profiled_runs);
  std::fprintf(stderr, "HLX_PROFILE @%s: %lld runs, %.3f ms per run, %zu steps\n", p.name.c_str(),
               static_cast<long long>(p.profiled_runs), p.run_ns / runs / 1e6, p.steps.size());
  double shown = 0;
  for (size_t i = 0; i < rows.size() && i < 25; ++i) {
    const auto& [key, a] = rows[i];
    shown += a.ns;
    std::fprintf(stderr, "  %8.3f ms %5.1f%%  x%-4d %s\n", a.ns / runs / 1e6, 100.0 * a.ns / p.run_ns, a.count,
                 key.c_str());
  }
  if (rows.size() > 25)
    std::fprintf(stderr, "  %8.3f ms %5.1f%%  (%zu more kinds)\n", (p.run_ns - shown) / runs / 1e6,
                 100.0 * (p.run_ns - shown) / p.run_ns, rows.size() - 25);
}

}  // namespace hlx::rt::prog
