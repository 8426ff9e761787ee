// Program: compiles each public function of a module into an execution plan and runs it.
//
// compile(), one file per stage (program_internal.h):
//  1. Flatten (program_flatten.cc): calls (func.call) and composites without a native kernel are inlined (the
//     composite's `decomposition`), so one flat op list per entry is planned as a whole.
//     Constants become tensors owned by the plan.
//  2. Fuse (program_steps.cc): maximal chains of fusible elementwise ops whose intermediates have a single use become
//     one compile_fused_elementwise kernel (per-op kernels when it declines); a broadcast of a
//     one-value constant read by such a chain is filled inside it (and its own step dropped when
//     nothing else reads it). Sibling dot_generals
//     (same left operand, fixed right operands: q/k/v, gate/up) become one compile_grouped_dot
//     step at the first one's place (HLX_GROUP_DOTS=0 turns this off).
//  3. Compile every remaining op to a kernel (kUnsupported names op, types and function).
//  4. Plan memory (program_memory.cc): liveness per value; an output reuses an input's buffer when the kernel allows
//     it and the input dies at that op (and is not an undonated argument, weight or constant; so a
//     reshape is usually free);
//     donated arguments (tf.aliasing_output) are buffers too, so in-place chains on a KV cache
//     write straight into the caller's tensor; the remaining intermediates get offsets in one
//     arena per entry (plan_arena, 64-byte aligned first fit). Outputs are allocated per run.
//  5. Pass constants to set_constant_input once; bound weights when bind_weight() is called.
// Then run() (here); HLX_DUMP_PLAN / HLX_PROFILE output in program_profile.cc.
#include "runtime/program.h"

#include <cstring>
#include <iostream>
#include <mutex>

#include "runtime/kernels/parallel.h"
#include "runtime/program_internal.h"

namespace hlx::rt {

// native.cc: whether `kernel` multiplies by the packed weight `weight` bound as its input `index`.
bool multiplies_by_packed(const OpKernel* kernel, int index, const Tensor& weight);

namespace prog {

std::string type_str(const shlo::TensorType& t) {
  return str_cat(dtype_name(t.dtype), "[", shape_to_string(t.shape), "]");
}

std::string symbol_of(const shlo::Attr* a) {
  if (!a) return {};
  if (a->kind == shlo::Attr::Kind::kSymbol || a->kind == shlo::Attr::Kind::kString) return a->str;
  return {};
}

}  // namespace prog

namespace {

using namespace prog;  // NOLINT: this file is the stages' driver

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
      for (const auto& p : plans_) std::cerr << dump_plan_text(*p);
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
        if (!tensor.defined()) return make_error(ErrorKind::kInvalidArgument, "weight '", name, "' has no data");
        found = true;
      }
    if (!found) return make_error(ErrorKind::kNotFound, "no entry argument is marked hlx.weight = \"", name, "\"");
    kernels::ThreadLimit thread_limit(options_.threads);  // weight packing runs on oneDNN's threads
    kernels::PackScope pack_options({options_.weight_format, options_.product_order});
    const bool packed = is_packed_placeholder(tensor);
    for (auto& p : plans_)
      for (size_t k = 0; k < p->weight_name.size(); ++k) {
        if (p->weight_name[k] != name) continue;
        p->weights[k] = tensor;
        for (auto [s, i] : p->arg_uses[k]) {
          Step& st = p->steps[size_t(s)];
          if (!st.kernel && !packed) continue;
          Status status = st.kernel ? st.kernel->set_constant_input(i, tensor) : ok_status();
          if (!status.ok())
            return status.with_context(str_cat("weight '", name, "' in @", p->name, " (", st.label, ")"));
          if (packed && !multiplies_by_packed(st.kernel.get(), i, tensor))
            return make_error(ErrorKind::kUnsupported, "weight '", name,
                              "' is stored packed (a quantized checkpoint) "
                              "but @",
                              p->name, " (", st.label, ") does not multiply by it as a matmul weight");
        }
      }
    return ok_status();
  }

  Result<std::vector<Tensor>> run(std::string_view entry, std::vector<Tensor> args) override {
    HLX_ASSIGN_OR_RETURN(EntryPlan * p, find(entry));
    const shlo::Function& fn = *p->flat;
    if (args.size() != p->input_args.size())
      return make_error(ErrorKind::kInvalidArgument, "@", p->name, " takes ", p->input_args.size(), " inputs, got ",
                        args.size());
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
        return make_error(ErrorKind::kNotFound, "@", p->name, ": weight '", p->weight_name[k], "' (argument #", k,
                          ") is not bound");
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
      if (p->consts.count(v))
        results.push_back(vals[size_t(v)].clone());
      else
        results.push_back(vals[size_t(v)]);
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
      if (p->name == entry) return dump_plan_text(*p);
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
  HLX_RETURN_IF_ERROR(flatten_into(*module_, options_, reg, f, args, flat, &p->returns));
  size_t nargs = f.args.size();
  p->weight_name.resize(nargs);
  p->arg_label.resize(nargs);
  p->alias_output.assign(nargs, -1);
  p->weights.resize(nargs);
  p->arg_uses.resize(nargs);
  for (size_t k = 0; k < nargs; ++k) {
    const shlo::AttrDict* attrs = k < f.arg_attrs.size() ? &f.arg_attrs[k] : nullptr;
    const shlo::Attr* w = attrs ? shlo::find_attr(*attrs, shlo::kWeightAttr) : nullptr;
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
        return make_error(ErrorKind::kInvalidArgument, "@", f.name, " argument #", k, " (",
                          type_str(flat.type_of(args[k])), ") is donated to result #", al->i, " of a different type (",
                          type_str(f.result_types[size_t(al->i)]), ")");
      p->alias_output[k] = int(al->i);
    }
  }
  for (size_t i = 0; i < p->returns.size(); ++i)
    if (flat.type_of(p->returns[i]) != f.result_types[i])
      return make_error(ErrorKind::kInvalidArgument, "@", f.name, " result #", i, " is ",
                        type_str(flat.type_of(p->returns[i])), ", function declares ", type_str(f.result_types[i]));
  HLX_RETURN_IF_ERROR(compile_steps(*p, reg, options_));
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

}  // namespace

Result<std::shared_ptr<Program>> Program::compile(std::shared_ptr<const shlo::Module> module, ProgramOptions options) {
  if (!module) return make_error(ErrorKind::kInvalidArgument, "Program::compile: null module");
  auto p = std::make_shared<ProgramImpl>(std::move(module), std::move(options));
  HLX_RETURN_IF_ERROR(p->compile_all());
  return std::shared_ptr<Program>(std::move(p));
}

}  // namespace hlx::rt
