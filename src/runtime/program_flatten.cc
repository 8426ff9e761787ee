// Program::compile, stage 1: one flat op list per entry (calls and decomposed composites inlined).
#include "runtime/program_internal.h"

#include <string>
#include <vector>

namespace hlx::rt::prog {
namespace {

bool is_call(const std::string& n) { return n == "func.call" || n == "call"; }
bool is_return(const std::string& n) { return n == "func.return" || n == "return"; }

class Flattener {
 public:
  Flattener(const shlo::Module& m, const ProgramOptions& o, const KernelRegistry& r, shlo::Function& flat)
      : module_(m), options_(o), reg_(r), flat_(flat) {}

  Status inline_function(const shlo::Function& f, const std::vector<ValueId>& args, std::vector<ValueId>* results) {
    if (stack_.size() > 64) return make_error(ErrorKind::kUnsupported, "call depth above 64 at @", f.name);
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
                              type_str(g->type_of(g->args[a])), ", call passes ", type_str(flat_.type_of(operands[a])));
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

}  // namespace

Status flatten_into(const shlo::Module& module, const ProgramOptions& options, const KernelRegistry& reg,
                    const shlo::Function& f, const std::vector<ValueId>& args, shlo::Function& flat,
                    std::vector<ValueId>* results) {
  Flattener fl(module, options, reg, flat);
  return fl.inline_function(f, args, results);
}

}  // namespace hlx::rt::prog
