// Program: compiles each public function of a module into an execution plan and runs it.
//
// compile():
//  1. Flatten: calls (func.call) and composites without a native kernel are inlined (the
//     composite's `decomposition`), so one flat op list per entry is planned as a whole.
//     Constants become tensors owned by the plan.
//  2. Fuse: maximal chains of fusible elementwise ops whose intermediates have a single use become
//     one compile_fused_elementwise kernel (per-op kernels when it declines); a broadcast of a
//     one-value constant read by such a chain is filled inside it (and its own step dropped when
//     nothing else reads it). Sibling dot_generals
//     (same left operand, fixed right operands: q/k/v, gate/up) become one compile_grouped_dot
//     step at the first one's place (HLX_GROUP_DOTS=0 turns this off).
//  3. Compile every remaining op to a kernel (kUnsupported names op, types and function).
//  4. Plan memory: liveness per value; an output reuses an input's buffer when the kernel allows
//     it and the input dies at that op (and is not an undonated argument, weight or constant; so a
//     reshape is usually free);
//     donated arguments (tf.aliasing_output) are buffers too, so in-place chains on a KV cache
//     write straight into the caller's tensor; the remaining intermediates get offsets in one
//     arena per entry (plan_arena, 64-byte aligned first fit). Outputs are allocated per run.
//  5. Pass constants to set_constant_input once; bound weights when bind_weight() is called.
#include "runtime/program.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <mutex>
#include <sstream>
#include <unordered_map>

#include "runtime/kernels/parallel.h"
#include "runtime/op_kernel.h"
#include "runtime/ops/structured_util.h"
#include "runtime/plan.h"

namespace hlx::rt {

// native.cc: whether `kernel` multiplies by the packed weight `weight` bound as its input `index`.
bool multiplies_by_packed(const OpKernel* kernel, int index, const Tensor& weight);

namespace {

using shlo::ValueId;

constexpr const char* kWeightAttr = shlo::kWeightAttr;

std::string type_str(const shlo::TensorType& t) {
  return str_cat(dtype_name(t.dtype), "[", shape_to_string(t.shape), "]");
}

bool is_call(const std::string& n) { return n == "func.call" || n == "call"; }
bool is_return(const std::string& n) { return n == "func.return" || n == "return"; }

std::string symbol_of(const shlo::Attr* a) {
  if (!a) return {};
  if (a->kind == shlo::Attr::Kind::kSymbol || a->kind == shlo::Attr::Kind::kString) return a->str;
  return {};
}

// ---------------------------------------------------------------------------------------------
// Flattening

class Flattener {
 public:
  Flattener(const shlo::Module& m, const ProgramOptions& o, const KernelRegistry& r, shlo::Function& flat)
      : module_(m), options_(o), reg_(r), flat_(flat) {}

  Status inline_function(const shlo::Function& f, const std::vector<ValueId>& args,
                         std::vector<ValueId>* results) {
    if (stack_.size() > 64)
      return make_error(ErrorKind::kUnsupported, "call depth above 64 at @", f.name);
    for (const auto& s : stack_)
      if (s == f.name) return make_error(ErrorKind::kUnsupported, "recursive call to @", f.name);
    stack_.push_back(f.name);
    std::unordered_map<ValueId, ValueId> map;
    for (size_t i = 0; i < f.args.size(); ++i) map[f.args[i]] = args[i];
    bool returned = false;
    for (size_t i = 0; i < f.body.size() && !returned; ++i) {
      const shlo::Op& op = f.body[i];
      auto where = [&] { return str_cat("@", f.name, " op #", i, " (", op.name, ")"); };
      std::vector<ValueId> operands;
      for (ValueId v : op.operands) {
        auto it = map.find(v);
        if (it == map.end())
          return make_error(ErrorKind::kInvalidArgument, where(), ": operand %", v, " is not defined before use");
        operands.push_back(it->second);
      }
      if (is_return(op.name)) {
        if (op.operands.size() != f.result_types.size())
          return make_error(ErrorKind::kInvalidArgument, where(), ": returns ", op.operands.size(),
                            " values, function declares ", f.result_types.size());
        *results = operands;
        returned = true;
        break;
      }
      std::string callee;
      if (is_call(op.name)) {
        callee = symbol_of(op.attr("callee"));
        if (callee.empty()) return make_error(ErrorKind::kInvalidArgument, where(), ": missing callee");
      } else if (op.name == "stablehlo.composite") {
        std::string name = symbol_of(op.attr("name"));
        if (!(options_.native_composites && reg_.has("composite:" + name))) {
          callee = symbol_of(op.attr("decomposition"));
          if (callee.empty())
            return make_error(ErrorKind::kUnsupported, where(), ": composite '", name,
                              "' has no native kernel and no decomposition");
        }
      }
      if (!callee.empty()) {
        const shlo::Function* g = module_.find_function(callee);
        if (!g) return make_error(ErrorKind::kNotFound, where(), ": function @", callee, " not found");
        if (g->args.size() != operands.size())
          return make_error(ErrorKind::kInvalidArgument, where(), ": @", callee, " takes ", g->args.size(),
                            " arguments, call passes ", operands.size());
        for (size_t a = 0; a < operands.size(); ++a)
          if (g->type_of(g->args[a]) != flat_.type_of(operands[a]))
            return make_error(ErrorKind::kInvalidArgument, where(), ": argument ", a, " of @", callee, " is ",
                              type_str(g->type_of(g->args[a])), ", call passes ",
                              type_str(flat_.type_of(operands[a])));
        std::vector<ValueId> rs;
        HLX_RETURN_IF_ERROR(inline_function(*g, operands, &rs));
        if (rs.size() != op.results.size())
          return make_error(ErrorKind::kInvalidArgument, where(), ": @", callee, " returns ", rs.size(),
                            " values, op has ", op.results.size());
        for (size_t r = 0; r < rs.size(); ++r) {
          if (flat_.type_of(rs[r]) != f.type_of(op.results[r]))
            return make_error(ErrorKind::kInvalidArgument, where(), ": result ", r, " of @", callee, " is ",
                              type_str(flat_.type_of(rs[r])), ", op expects ", type_str(f.type_of(op.results[r])));
          map[op.results[r]] = rs[r];
        }
        continue;
      }
      shlo::Op copy;
      HLX_RETURN_IF_ERROR(copy_op(op, f, map, copy));
      copy.operands = std::move(operands);
      flat_.body.push_back(std::move(copy));
    }
    if (!returned) return make_error(ErrorKind::kInvalidArgument, "@", f.name, " has no func.return");
    stack_.pop_back();
    return ok_status();
  }

 private:
  // Copies op with fresh result values and regions renumbered into the flat function.
  Status copy_op(const shlo::Op& op, const shlo::Function& f, std::unordered_map<ValueId, ValueId>& map,
                 shlo::Op& out) {
    out.name = op.name;
    out.attrs = op.attrs;
    for (ValueId v : op.operands) {
      auto it = map.find(v);
      if (it == map.end())
        return make_error(ErrorKind::kInvalidArgument, "@", f.name, ": ", op.name, " reads undefined value %", v);
      out.operands.push_back(it->second);
    }
    for (const shlo::Block& b : op.regions) {
      shlo::Block nb;
      for (ValueId a : b.args) {
        ValueId n = flat_.new_value(f.type_of(a));
        map[a] = n;
        nb.args.push_back(n);
      }
      for (const shlo::Op& inner : b.ops) {
        shlo::Op c;
        HLX_RETURN_IF_ERROR(copy_op(inner, f, map, c));
        nb.ops.push_back(std::move(c));
      }
      out.regions.push_back(std::move(nb));
    }
    for (ValueId r : op.results) {
      ValueId n = flat_.new_value(f.type_of(r));
      map[r] = n;
      out.results.push_back(n);
    }
    return ok_status();
  }

  const shlo::Module& module_;
  const ProgramOptions& options_;
  const KernelRegistry& reg_;
  shlo::Function& flat_;
  std::vector<std::string> stack_;
};

// ---------------------------------------------------------------------------------------------
// Plans

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
  int arg = -1;          // kDonatedArg: entry argument index
  size_t offset = 0;     // kArena
};

struct EntryPlan {
  std::string name;
  std::unique_ptr<shlo::Function> flat;  // kernels may keep references into it
  std::vector<Step> steps;
  std::vector<ValueId> returns;
  std::vector<int> input_args;            // entry args passed to run(), in order
  std::vector<std::string> weight_name;   // per entry arg; empty when not a weight
  std::vector<std::string> arg_label;     // per entry arg, for messages
  std::vector<int> alias_output;          // per entry arg: donated into output i, or -1
  std::vector<Tensor> weights;            // per entry arg (bound weights)
  std::unordered_map<ValueId, Tensor> consts;
  std::vector<Group> groups;
  std::vector<int> group_of;              // per value; -1 when not a step output / donated arg
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
// compile, so one process can build both plans (tests compare their bits).
bool group_dots_enabled() {
  const char* e = std::getenv("HLX_GROUP_DOTS");
  return !(e && std::strcmp(e, "0") == 0);
}

bool profiling_enabled() {
  static const bool on = [] {
    const char* e = std::getenv("HLX_PROFILE");
    return e && std::string(e) == "1";
  }();
  return on;
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

// Two values may share one buffer when they hold the same elements as bytes: the same type, or a
// reshape of it (the only in-place kernel whose result shape differs from its input's).
bool same_bytes(const shlo::TensorType& a, const shlo::TensorType& b) {
  return a.dtype == b.dtype && num_elements(a.shape) == num_elements(b.shape);
}

void count_uses(const shlo::Op& op, std::vector<int>& uses) {
  for (ValueId v : op.operands) ++uses[size_t(v)];
  for (const auto& b : op.regions)
    for (const auto& inner : b.ops) count_uses(inner, uses);
}

class ProgramImpl : public Program {
 public:
  ProgramImpl(std::shared_ptr<const shlo::Module> m, ProgramOptions o)
      : module_(std::move(m)), options_(std::move(o)) {}
  ~ProgramImpl() override {
    if (profiling_enabled())
      for (const auto& p : plans_) print_profile(*p);
  }

  Status compile_all() {
    const KernelRegistry& reg = options_.registry ? *options_.registry : KernelRegistry::builtin();
    for (const auto& f : module_->functions) {
      if (!f.is_public) continue;
      auto plan = compile_entry(f, reg);
      if (!plan.ok()) return plan.status();
      plans_.push_back(std::move(*plan));
    }
    const char* env = std::getenv("HLX_DUMP_PLAN");
    if (options_.dump_plan || (env && std::string(env) == "1"))
      for (const auto& p : plans_) std::cerr << dump(*p);
    return ok_status();
  }

  Status bind_weight(std::string_view name, Tensor tensor) override {
    std::lock_guard<std::mutex> lock(mu_);
    bool found = false;
    for (auto& p : plans_)
      for (size_t k = 0; k < p->weight_name.size(); ++k) {
        if (p->weight_name[k] != name) continue;
        const auto& t = p->flat->type_of(p->flat->args[k]);
        if (tensor.dtype() != t.dtype || tensor.shape() != t.shape)
          return make_error(ErrorKind::kInvalidArgument, "weight '", name, "': argument #", k, " of @", p->name,
                            " expects ", type_str(t), ", got ", tensor.type_string());
        if (!tensor.defined())
          return make_error(ErrorKind::kInvalidArgument, "weight '", name, "' has no data");
        found = true;
      }
    if (!found) return make_error(ErrorKind::kNotFound, "no entry argument is marked hlx.weight = \"", name, "\"");
    kernels::ThreadLimit thread_limit(options_.threads);  // weight packing runs on oneDNN's threads
    kernels::WeightFormatScope weight_format(options_.weight_format);
    const bool packed = is_packed_placeholder(tensor);
    for (auto& p : plans_)
      for (size_t k = 0; k < p->weight_name.size(); ++k) {
        if (p->weight_name[k] != name) continue;
        p->weights[k] = tensor;
        for (auto [s, i] : p->arg_uses[k]) {
          Step& st = p->steps[size_t(s)];
          if (!st.kernel && !packed) continue;
          Status status = st.kernel ? st.kernel->set_constant_input(i, tensor) : ok_status();
          if (!status.ok()) return status.with_context(str_cat("weight '", name, "' in @", p->name, " (", st.label, ")"));
          if (packed && !multiplies_by_packed(st.kernel.get(), i, tensor))
            return make_error(ErrorKind::kUnsupported, "weight '", name, "' is stored packed (a quantized checkpoint) "
                              "but @", p->name, " (", st.label, ") does not multiply by it as a matmul weight");
        }
      }
    return ok_status();
  }

  Result<std::vector<Tensor>> run(std::string_view entry, std::vector<Tensor> args) override {
    HLX_ASSIGN_OR_RETURN(EntryPlan * p, find(entry));
    const shlo::Function& fn = *p->flat;
    if (args.size() != p->input_args.size())
      return make_error(ErrorKind::kInvalidArgument, "@", p->name, " takes ", p->input_args.size(),
                        " inputs, got ", args.size());
    for (size_t i = 0; i < args.size(); ++i) {
      int k = p->input_args[i];
      const auto& t = fn.type_of(fn.args[size_t(k)]);
      if (args[i].dtype() != t.dtype || args[i].shape() != t.shape)
        return make_error(ErrorKind::kInvalidArgument, "@", p->name, " input #", i, " (", p->arg_label[size_t(k)],
                          "): expected ", type_str(t), ", got ", args[i].type_string());
      if (!args[i].defined())
        return make_error(ErrorKind::kInvalidArgument, "@", p->name, " input #", i, " (", p->arg_label[size_t(k)],
                          ") has no data");
    }
    std::lock_guard<std::mutex> lock(mu_);
    kernels::ThreadLimit thread_limit(options_.threads);  // our pool and oneDNN's OpenMP regions
    for (size_t k = 0; k < p->weight_name.size(); ++k)
      if (!p->weight_name[k].empty() && !p->weights[k].defined())
        return make_error(ErrorKind::kNotFound, "@", p->name, ": weight '", p->weight_name[k],
                          "' (argument #", k, ") is not bound");
    std::vector<Tensor> vals(fn.value_types.size());
    std::vector<Tensor> arg_tensors(fn.args.size());
    for (size_t i = 0; i < args.size(); ++i) arg_tensors[size_t(p->input_args[i])] = args[i];
    for (size_t k = 0; k < fn.args.size(); ++k)
      if (!p->weight_name[k].empty()) arg_tensors[k] = p->weights[k];
    if (p->arena_bytes && !p->arena) p->arena = allocate_aligned(p->arena_bytes);
    std::vector<std::pair<void*, std::shared_ptr<void>>> gmem(p->groups.size());
    for (size_t g = 0; g < p->groups.size(); ++g) {
      const Group& gr = p->groups[g];
      switch (gr.kind) {
        case GroupKind::kArena:
          gmem[g] = {static_cast<uint8_t*>(p->arena.get()) + gr.offset, p->arena};
          break;
        case GroupKind::kOutput: {
          // Outputs above kKeepOutputBytes (all-rows prefill logits) are not kept between runs.
          constexpr size_t kKeepOutputBytes = size_t(64) << 20;
          if (p->out_storage.size() != p->groups.size()) p->out_storage.resize(p->groups.size());
          std::shared_ptr<void>& kept = p->out_storage[g];
          if (!kept || kept.use_count() != 1) {
            Tensor t = Tensor::empty(gr.type.dtype, gr.type.shape);
            kept = t.nbytes() <= kKeepOutputBytes ? t.storage() : nullptr;
            gmem[g] = {t.raw(), t.storage()};
          } else {
            // Pairs with the release in the caller's last shared_ptr drop (another thread may have
            // read the buffer before dropping it).
            std::atomic_thread_fence(std::memory_order_acquire);
            gmem[g] = {kept.get(), kept};
          }
          break;
        }
        case GroupKind::kDonatedArg: {
          Tensor& a = arg_tensors[size_t(gr.arg)];
          gmem[g] = {a.raw(), a.storage()};
          break;
        }
      }
    }
    for (size_t v = 0; v < p->group_of.size(); ++v) {
      int g = p->group_of[v];
      if (g < 0) continue;
      const auto& t = fn.value_types[v];
      vals[v] = Tensor::borrow(t.dtype, t.shape, gmem[size_t(g)].first, gmem[size_t(g)].second);
    }
    for (size_t k = 0; k < fn.args.size(); ++k) vals[size_t(fn.args[k])] = arg_tensors[k];
    for (auto& [v, t] : p->consts) vals[size_t(v)] = t;
    std::vector<const Tensor*> in;
    std::vector<Tensor*> out;
    std::vector<Tensor> cc_args;
    const bool prof = profiling_enabled();
    using clock = std::chrono::steady_clock;
    const clock::time_point run_start = prof ? clock::now() : clock::time_point();
    clock::time_point step_start = run_start;
    if (prof && p->step_ns.empty()) p->step_ns.assign(p->steps.size(), 0.0);
    for (size_t s = 0; s < p->steps.size(); ++s) {
      Step& st = p->steps[s];
      if (prof && s > 0) {
        clock::time_point now = clock::now();
        p->step_ns[s - 1] += std::chrono::duration<double, std::nano>(now - step_start).count();
        step_start = now;
      }
      if (st.handler) {
        cc_args.clear();
        for (ValueId v : st.inputs) cc_args.push_back(vals[size_t(v)]);
        Status status = st.handler(cc_args);
        if (!status.ok()) return status.with_context(str_cat("@", p->name, " step #", s, " (", st.label, ")"));
        continue;
      }
      in.clear();
      out.clear();
      for (ValueId v : st.inputs) in.push_back(&vals[size_t(v)]);
      for (ValueId v : st.outputs) out.push_back(&vals[size_t(v)]);
      Status status = st.kernel->run(in, out);
      if (!status.ok()) return status.with_context(str_cat("@", p->name, " step #", s, " (", st.label, ")"));
    }
    if (prof && !p->steps.empty()) {
      clock::time_point now = clock::now();
      p->step_ns.back() += std::chrono::duration<double, std::nano>(now - step_start).count();
      p->run_ns += std::chrono::duration<double, std::nano>(now - run_start).count();
      ++p->profiled_runs;
    }
    std::vector<Tensor> results;
    for (size_t i = 0; i < p->returns.size(); ++i) {
      ValueId v = p->returns[i];
      if (p->consts.count(v)) results.push_back(vals[size_t(v)].clone());
      else results.push_back(vals[size_t(v)]);
    }
    // Outputs aliased to donated arguments end up in the argument's storage.
    for (size_t k = 0; k < p->alias_output.size(); ++k) {
      int i = p->alias_output[k];
      if (i < 0) continue;
      Tensor& a = arg_tensors[k];
      Tensor& r = results[size_t(i)];
      if (r.raw() != a.raw()) {
        if (a.nbytes()) std::memcpy(a.raw(), r.raw(), a.nbytes());
        r = a;
      }
    }
    return results;
  }

  Result<PlanStats> plan_stats(std::string_view entry) const override {
    for (const auto& p : plans_)
      if (p->name == entry) return p->stats;
    return not_found(entry);
  }
  Result<std::string> dump_plan(std::string_view entry) const override {
    for (const auto& p : plans_)
      if (p->name == entry) return dump(*p);
    return not_found(entry);
  }

 private:
  Status not_found(std::string_view entry) const {
    std::string names;
    for (const auto& p : plans_) names += (names.empty() ? "@" : ", @") + p->name;
    return make_error(ErrorKind::kNotFound, "no public function @", entry, " (entries: ", names, ")");
  }
  Result<EntryPlan*> find(std::string_view entry) {
    for (auto& p : plans_)
      if (p->name == entry) return p.get();
    return not_found(entry);
  }

  Result<std::unique_ptr<EntryPlan>> compile_entry(const shlo::Function& f, const KernelRegistry& reg);
  Status compile_steps(EntryPlan& p, const KernelRegistry& reg);
  Status plan_memory(EntryPlan& p);
  std::string dump(const EntryPlan& p) const;
  void print_profile(const EntryPlan& p) const;

  std::shared_ptr<const shlo::Module> module_;
  ProgramOptions options_;
  std::vector<std::unique_ptr<EntryPlan>> plans_;
  mutable std::mutex mu_;
};

Result<std::unique_ptr<EntryPlan>> ProgramImpl::compile_entry(const shlo::Function& f, const KernelRegistry& reg) {
  auto p = std::make_unique<EntryPlan>();
  p->name = f.name;
  p->flat = std::make_unique<shlo::Function>();
  shlo::Function& flat = *p->flat;
  flat.name = f.name;
  flat.result_types = f.result_types;
  flat.arg_attrs = f.arg_attrs;
  std::vector<ValueId> args;
  for (ValueId a : f.args) args.push_back(flat.new_value(f.type_of(a)));
  flat.args = args;
  Flattener fl(*module_, options_, reg, flat);
  HLX_RETURN_IF_ERROR(fl.inline_function(f, args, &p->returns));
  size_t nargs = f.args.size();
  p->weight_name.resize(nargs);
  p->arg_label.resize(nargs);
  p->alias_output.assign(nargs, -1);
  p->weights.resize(nargs);
  p->arg_uses.resize(nargs);
  for (size_t k = 0; k < nargs; ++k) {
    const shlo::AttrDict* attrs = k < f.arg_attrs.size() ? &f.arg_attrs[k] : nullptr;
    const shlo::Attr* w = attrs ? shlo::find_attr(*attrs, kWeightAttr) : nullptr;
    const shlo::Attr* n = attrs ? shlo::find_attr(*attrs, shlo::kArgNameAttr) : nullptr;
    const shlo::Attr* al = attrs ? shlo::find_attr(*attrs, shlo::kAliasAttr) : nullptr;
    if (w) p->weight_name[k] = symbol_of(w);
    if (w && p->weight_name[k].empty())
      return make_error(ErrorKind::kInvalidArgument, "@", f.name, " argument #", k, ": hlx.weight must be a string");
    p->arg_label[k] = n ? symbol_of(n) : (w ? p->weight_name[k] : str_cat("%arg", k));
    if (w) continue;
    p->input_args.push_back(int(k));
    if (al) {
      if (al->kind != shlo::Attr::Kind::kInt || al->i < 0 || al->i >= int64_t(f.result_types.size()))
        return make_error(ErrorKind::kInvalidArgument, "@", f.name, " argument #", k,
                          ": tf.aliasing_output must be a result index below ", f.result_types.size());
      if (f.result_types[size_t(al->i)] != flat.type_of(args[k]))
        return make_error(ErrorKind::kInvalidArgument, "@", f.name, " argument #", k, " (", type_str(flat.type_of(args[k])),
                          ") is donated to result #", al->i, " of a different type (",
                          type_str(f.result_types[size_t(al->i)]), ")");
      p->alias_output[k] = int(al->i);
    }
  }
  for (size_t i = 0; i < p->returns.size(); ++i)
    if (flat.type_of(p->returns[i]) != f.result_types[i])
      return make_error(ErrorKind::kInvalidArgument, "@", f.name, " result #", i, " is ",
                        type_str(flat.type_of(p->returns[i])), ", function declares ", type_str(f.result_types[i]));
  HLX_RETURN_IF_ERROR(compile_steps(*p, reg));
  HLX_RETURN_IF_ERROR(plan_memory(*p));
  // Constants are handed to kernels once, so they can pre-pack them.
  for (size_t s = 0; s < p->steps.size(); ++s) {
    Step& st = p->steps[s];
    for (size_t i = 0; i < st.inputs.size(); ++i) {
      auto c = p->consts.find(st.inputs[i]);
      if (c != p->consts.end() && st.kernel) {
        Status status = st.kernel->set_constant_input(int(i), c->second);
        if (!status.ok()) return status.with_context(str_cat("@", f.name, " step #", s, " (", st.label, ")"));
      }
      for (size_t k = 0; k < nargs; ++k)
        if (flat.args[k] == st.inputs[i]) p->arg_uses[k].emplace_back(int(s), int(i));
    }
  }
  return p;
}

Status ProgramImpl::compile_steps(EntryPlan& p, const KernelRegistry& reg) {
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
    if (!options_.fuse_elementwise || op.results.size() != 1 || !is_fusible_elementwise(op, fn)) continue;
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
      auto [it, added] = by_lhs.emplace(std::make_pair(op.operands[0], int(fn.type_of(op.results[0]).dtype)),
                                        dot_members.size());
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
      for (const auto& [name, h] : options_.custom_calls)
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

Status ProgramImpl::plan_memory(EntryPlan& p) {
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

std::string ProgramImpl::dump(const EntryPlan& p) const {
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
      case GroupKind::kArena: return str_cat("arena+", gr.offset);
      case GroupKind::kOutput: return str_cat("out.g", g);
      case GroupKind::kDonatedArg: return str_cat("donated-arg", gr.arg);
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
void ProgramImpl::print_profile(const EntryPlan& p) const {
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

}  // namespace

Result<std::shared_ptr<Program>> Program::compile(std::shared_ptr<const shlo::Module> module, ProgramOptions options) {
  if (!module) return make_error(ErrorKind::kInvalidArgument, "Program::compile: null module");
  auto p = std::make_shared<ProgramImpl>(std::move(module), std::move(options));
  HLX_RETURN_IF_ERROR(p->compile_all());
  return std::shared_ptr<Program>(std::move(p));
}

}  // namespace hlx::rt
