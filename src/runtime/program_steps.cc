// Program::compile, stages 2 and 3: elementwise chains fused, sibling dots grouped, every other op
// compiled to its kernel.
#include "runtime/program_internal.h"

#include <cstdlib>
#include <cstring>
#include <map>

#include "runtime/ops/structured_util.h"

namespace hlx::rt::prog {
namespace {

bool group_dots_enabled() {
  const char* e = std::getenv("HLX_GROUP_DOTS");
  return !(e && std::strcmp(e, "0") == 0);
}

Status check_const(const shlo::Op& op, const shlo::Function& fn, Tensor* out) {
  const shlo::Attr* v = op.attr("value");
  const auto& t = fn.type_of(op.results.at(0));
  Tensor c = Tensor::empty(t.dtype, t.shape);
  if (!v || v->kind != shlo::Attr::Kind::kDense || !v->dense || v->dense->bytes.size() != c.nbytes())
    return make_error(ErrorKind::kInvalidArgument, "@", fn.name, ": stablehlo.constant of type ", type_str(t),
                      " has no matching dense value");
  if (c.nbytes()) std::memcpy(c.raw(), v->dense->bytes.data(), c.nbytes());
  *out = std::move(c);
  return ok_status();
}

void count_uses(const shlo::Op& op, std::vector<int>& uses) {
  for (ValueId v : op.operands) ++uses[size_t(v)];
  for (const auto& b : op.regions)
    for (const auto& inner : b.ops) count_uses(inner, uses);
}

}  // namespace

Status compile_steps(EntryPlan& p, const KernelRegistry& reg, const ProgramOptions& options) {
  shlo::Function& fn = *p.flat;
  const auto& ops = fn.body;
  std::vector<int> uses(fn.value_types.size(), 0);
  for (const auto& op : ops) count_uses(op, uses);
  for (ValueId v : p.returns) ++uses[size_t(v)];
  // Broadcasts of a one-value float constant (FunctionBuilder::full): a fused chain reading one
  // fills its tiles with the value instead of reading the materialised tensor, and the broadcast
  // runs only if something else still reads it (the tanh-GELU chain of a vision tower read four
  // such [N, 4304] tensors per layer).
  std::unordered_map<ValueId, float> splat_of;
  {
    std::unordered_map<ValueId, float> const_splat;
    for (const auto& op : ops) {
      float value;
      if (op.results.size() == 1 && float_splat_constant(op, &value)) const_splat[op.results[0]] = value;
      if (op.name == "stablehlo.broadcast_in_dim" && op.operands.size() == 1 && op.results.size() == 1) {
        auto c = const_splat.find(op.operands[0]);
        if (c != const_splat.end() && fn.type_of(op.results[0]).dtype == fn.type_of(op.operands[0]).dtype)
          splat_of[op.results[0]] = c->second;
      }
    }
  }
  std::unordered_map<ValueId, int> absorbed;  // uses of a splat broadcast taken over by fused kernels
  // Fusion groups: an op joins the group whose tail it consumes when that tail has no other use.
  std::vector<int> group(ops.size(), -1);
  std::vector<std::vector<size_t>> members;
  std::vector<ValueId> tail;
  std::unordered_map<ValueId, size_t> def_op;
  for (size_t i = 0; i < ops.size(); ++i) {
    const shlo::Op& op = ops[i];
    for (ValueId r : op.results) def_op[r] = i;
    if (!options.fuse_elementwise || op.results.size() != 1 || !is_fusible_elementwise(op, fn)) continue;
    int joined = -1;
    for (ValueId v : op.operands) {
      auto d = def_op.find(v);
      if (d == def_op.end()) continue;
      int g = group[d->second];
      if (g >= 0 && tail[size_t(g)] == v && uses[size_t(v)] == 1 &&
          fn.type_of(v).shape == fn.type_of(op.results[0]).shape) {
        joined = g;
        break;
      }
    }
    if (joined < 0) {
      joined = int(members.size());
      members.emplace_back();
      tail.push_back(-1);
    }
    group[i] = joined;
    members[size_t(joined)].push_back(i);
    tail[size_t(joined)] = op.results[0];
  }
  // Sibling products: dot_generals with one left operand (and result type) whose right operands
  // are bound weights or constants. They are independent (their only other input is the shared
  // operand, defined before the first of them), so the group runs at the first member's place.
  // Only with the builtin registry: a private registry's own dot kernels are left alone.
  std::vector<int> dot_group(ops.size(), -1);
  std::vector<std::vector<size_t>> dot_members;
  std::vector<std::unique_ptr<OpKernel>> dot_kernels;
  if (group_dots_enabled() && &reg == &KernelRegistry::builtin()) {
    std::vector<bool> fixed(fn.value_types.size(), false);
    for (size_t k = 0; k < fn.args.size(); ++k)
      if (!p.weight_name[k].empty()) fixed[size_t(fn.args[k])] = true;
    for (const auto& op : ops)
      if (op.name == "stablehlo.constant")
        for (ValueId r : op.results) fixed[size_t(r)] = true;
    std::map<std::pair<ValueId, int>, size_t> by_lhs;  // (left operand, result dtype) -> group
    for (size_t i = 0; i < ops.size(); ++i) {
      const shlo::Op& op = ops[i];
      if (op.name != "stablehlo.dot_general" || op.operands.size() != 2 || op.results.size() != 1 ||
          !fixed[size_t(op.operands[1])])
        continue;
      auto [it, added] =
          by_lhs.emplace(std::make_pair(op.operands[0], int(fn.type_of(op.results[0]).dtype)), dot_members.size());
      if (added) dot_members.emplace_back();
      dot_members[it->second].push_back(i);
    }
    dot_kernels.resize(dot_members.size());
    for (size_t g = 0; g < dot_members.size(); ++g) {
      if (dot_members[g].size() < 2) continue;
      std::vector<const shlo::Op*> gops;
      for (size_t i : dot_members[g]) gops.push_back(&ops[i]);
      auto k = compile_grouped_dot(gops, fn);
      if (!k.ok()) {
        if (k.status().kind() != ErrorKind::kUnsupported)
          return k.status().with_context(str_cat("@", fn.name, " dot group at op #", dot_members[g][0]));
        continue;  // declined: the members run one by one
      }
      dot_kernels[g] = std::move(*k);
      for (size_t i : dot_members[g]) dot_group[i] = int(g);
    }
  }
  // Compile fused groups of two or more; a declined group runs op by op.
  std::vector<std::unique_ptr<OpKernel>> fused(members.size());
  std::vector<std::vector<ValueId>> fused_inputs(members.size());
  for (size_t g = 0; g < members.size(); ++g) {
    if (members[g].size() < 2) continue;
    std::vector<const shlo::Op*> gops;
    std::vector<ValueId> inputs;
    std::vector<std::pair<ValueId, float>> splats;
    std::unordered_map<ValueId, int> splat_uses;
    std::unordered_map<ValueId, bool> inside;
    for (size_t i : members[g]) {
      gops.push_back(&ops[i]);
      for (ValueId v : ops[i].operands) {
        if (inside.count(v)) continue;
        auto sp = splat_of.find(v);
        if (sp != splat_of.end()) {
          if (splat_uses[v]++ == 0) splats.emplace_back(v, sp->second);
        } else if (std::find(inputs.begin(), inputs.end(), v) == inputs.end()) {
          inputs.push_back(v);
        }
      }
      inside[ops[i].results[0]] = true;
    }
    auto k = compile_fused_elementwise(gops, inputs, {tail[g]}, fn, splats);
    if (k.ok()) {
      fused[g] = std::move(*k);
      fused_inputs[g] = std::move(inputs);
      for (const auto& [v, n] : splat_uses) absorbed[v] += n;
    } else if (k.status().kind() != ErrorKind::kUnsupported) {
      return k.status().with_context(str_cat("@", fn.name, " fused group at op #", members[g][0]));
    }
  }
  for (size_t i = 0; i < ops.size(); ++i) {
    const shlo::Op& op = ops[i];
    int g = group[i];
    if (g >= 0 && fused[size_t(g)]) {
      if (members[size_t(g)].back() != i) continue;
      Step st;
      st.kernel = std::move(fused[size_t(g)]);
      st.inputs = fused_inputs[size_t(g)];
      st.outputs = {tail[size_t(g)]};
      st.label = "fused[";
      for (size_t m : members[size_t(g)]) st.label += (m == members[size_t(g)][0] ? "" : ", ") + ops[m].name;
      st.label += "]";
      p.steps.push_back(std::move(st));
      ++p.stats.fused_groups;
      continue;
    }
    if (dot_group[i] >= 0) {
      const std::vector<size_t>& mem = dot_members[size_t(dot_group[i])];
      if (mem[0] != i) continue;
      Step st;
      st.kernel = std::move(dot_kernels[size_t(dot_group[i])]);
      st.inputs = {op.operands[0]};
      for (size_t m : mem) {
        st.inputs.push_back(ops[m].operands[1]);
        st.outputs.push_back(ops[m].results[0]);
      }
      st.label = str_cat("grouped[dot_general x", mem.size(), "]");
      p.steps.push_back(std::move(st));
      continue;
    }
    if (op.results.size() == 1 && splat_of.count(op.results[0]) &&
        absorbed[op.results[0]] == uses[size_t(op.results[0])])
      continue;  // every reader fills the value itself
    if (op.name == "stablehlo.constant") {
      Tensor c;
      HLX_RETURN_IF_ERROR(check_const(op, fn, &c));
      p.consts[op.results.at(0)] = std::move(c);
      continue;
    }
    Step st;
    st.inputs = op.operands;
    st.outputs = op.results;
    st.label = op.name;
    if (op.name == "stablehlo.composite") st.label += " " + symbol_of(op.attr("name"));
    if (op.name == "stablehlo.custom_call") {
      std::string target = symbol_of(op.attr("call_target_name"));
      for (const auto& [name, h] : options.custom_calls)
        if (name == target) st.handler = h;
      if (!st.handler)
        return make_error(ErrorKind::kUnsupported, "@", fn.name, " op #", i, ": no handler for custom_call @", target);
      if (!op.results.empty())
        return make_error(ErrorKind::kUnsupported, "@", fn.name, " op #", i, ": custom_call @", target,
                          " has results; handlers only check their operands");
      st.label += " @" + target;
      p.steps.push_back(std::move(st));
      continue;
    }
    std::string key = op.name;
    if (op.name == "stablehlo.composite") key = "composite:" + symbol_of(op.attr("name"));
    auto k = reg.compile(key, op, fn);
    if (!k.ok())
      return k.status().with_context(str_cat("function @", fn.name, " op #", i, " ", structured::op_signature(op, fn)));
    st.kernel = std::move(*k);
    p.steps.push_back(std::move(st));
  }
  p.stats.steps = int(p.steps.size());
  return ok_status();
}

}  // namespace hlx::rt::prog
