#include "runtime/ops/structured_util.h"

#include <map>

namespace hlx::rt::structured {

using shlo::Attr;

std::vector<int64_t> ints_or_empty(const Attr* a) {
  if (!a) return {};
  if (a->kind == Attr::Kind::kInt) return {a->i};
  if (a->kind == Attr::Kind::kDense && a->dense) {
    std::vector<int64_t> v;
    const auto& d = *a->dense;
    int64_t n = num_elements(d.type.shape);
    for (int64_t i = 0; i < n; ++i) v.push_back(load_i64(d.bytes.data(), d.type.dtype, i));
    return v;
  }
  return a->ints;
}

Result<std::vector<int64_t>> i64_array_attr(const shlo::Op& op, std::string_view name, bool required) {
  const Attr* a = op.attr(name);
  if (!a) {
    if (required) return make_error(ErrorKind::kInvalidArgument, op.name, ": missing attribute '", name, "'");
    return std::vector<int64_t>{};
  }
  if (a->kind != Attr::Kind::kI64Array && a->kind != Attr::Kind::kBoolArray && a->kind != Attr::Kind::kDense &&
      a->kind != Attr::Kind::kInt)
    return make_error(ErrorKind::kInvalidArgument, op.name, ": attribute '", name, "' is not an integer array");
  return ints_or_empty(a);
}

Result<int64_t> int_attr(const shlo::Op& op, std::string_view name, int64_t fallback) {
  const Attr* a = op.attr(name);
  if (!a) return fallback;
  if (a->kind == Attr::Kind::kInt) return a->i;
  if (a->kind == Attr::Kind::kBool) return int64_t(a->b);
  return make_error(ErrorKind::kInvalidArgument, op.name, ": attribute '", name, "' is not an integer");
}

std::string op_signature(const shlo::Op& op, const shlo::Function& fn) {
  std::string s = op.name + "(";
  for (size_t i = 0; i < op.operands.size(); ++i) {
    if (i) s += ", ";
    const auto& t = fn.type_of(op.operands[i]);
    s += str_cat(dtype_name(t.dtype), "[", shape_to_string(t.shape), "]");
  }
  s += ") -> (";
  for (size_t i = 0; i < op.results.size(); ++i) {
    if (i) s += ", ";
    const auto& t = fn.type_of(op.results[i]);
    s += str_cat(dtype_name(t.dtype), "[", shape_to_string(t.shape), "]");
  }
  return s + ")";
}

Status unsupported(const shlo::Op& op, const shlo::Function& fn, const std::string& why) {
  return make_error(ErrorKind::kUnsupported, op_signature(op, fn), " in @", fn.name, ": ", why);
}
Status invalid(const shlo::Op& op, const shlo::Function& fn, const std::string& why) {
  return make_error(ErrorKind::kInvalidArgument, op_signature(op, fn), " in @", fn.name, ": ", why);
}

BinaryBody match_binary_body(const shlo::Block& block) {
  if (block.args.size() != 2) return BinaryBody::kNone;
  const auto& ops = block.ops;
  if (ops.size() == 1 && ops[0].name == "stablehlo.return" && ops[0].operands.size() == 1 &&
      ops[0].operands[0] == block.args[1])
    return BinaryBody::kReplace;
  if (ops.size() != 2 || ops[1].name != "stablehlo.return" || ops[1].operands.size() != 1) return BinaryBody::kNone;
  const auto& op = ops[0];
  if (op.results.size() != 1 || ops[1].operands[0] != op.results[0] || op.operands.size() != 2)
    return BinaryBody::kNone;
  // Commutative ops only, so either operand order matches.
  bool args_ok = (op.operands[0] == block.args[0] && op.operands[1] == block.args[1]) ||
                 (op.operands[0] == block.args[1] && op.operands[1] == block.args[0]);
  if (!args_ok) return BinaryBody::kNone;
  if (op.name == "stablehlo.add") return BinaryBody::kAdd;
  if (op.name == "stablehlo.multiply") return BinaryBody::kMul;
  if (op.name == "stablehlo.maximum") return BinaryBody::kMax;
  if (op.name == "stablehlo.minimum") return BinaryBody::kMin;
  if (op.name == "stablehlo.and") return BinaryBody::kAnd;
  if (op.name == "stablehlo.or") return BinaryBody::kOr;
  return BinaryBody::kNone;
}

Result<std::unique_ptr<RegionEvaluator>> RegionEvaluator::compile(const shlo::Block& block, const shlo::Function& fn) {
  auto ev = std::make_unique<RegionEvaluator>();
  std::map<shlo::ValueId, int> slot_of;
  auto add_slot = [&](shlo::ValueId v) {
    const auto& t = fn.type_of(v);
    slot_of[v] = int(ev->slots_.size());
    ev->slots_.push_back(Tensor::zeros(t.dtype, t.shape));
    return slot_of[v];
  };
  for (shlo::ValueId a : block.args) ev->arg_slots_.push_back(add_slot(a));
  const auto& reg = KernelRegistry::builtin();
  for (size_t i = 0; i < block.ops.size(); ++i) {
    const shlo::Op& op = block.ops[i];
    std::vector<int> in;
    for (shlo::ValueId v : op.operands) {
      auto it = slot_of.find(v);
      if (it == slot_of.end())
        return make_error(ErrorKind::kUnsupported, "region of @", fn.name, ": op ", op.name, " reads value %", v,
                          " defined outside the region");
      in.push_back(it->second);
    }
    if (op.name == "stablehlo.return") {
      if (i + 1 != block.ops.size())
        return make_error(ErrorKind::kInvalidArgument, "region of @", fn.name, ": return is not last");
      ev->result_slots_ = in;
      break;
    }
    if (!op.regions.empty())
      return make_error(ErrorKind::kUnsupported, "region of @", fn.name, ": nested region op ", op.name);
    std::vector<int> out;
    for (shlo::ValueId r : op.results) out.push_back(add_slot(r));
    if (op.name == "stablehlo.constant") {
      // Fill the slot once; no step needed.
      const shlo::Attr* v = op.attr("value");
      Tensor& t = ev->slots_[size_t(out.at(0))];
      if (!v || v->kind != shlo::Attr::Kind::kDense || !v->dense || v->dense->bytes.size() != t.nbytes())
        return make_error(ErrorKind::kInvalidArgument, "region of @", fn.name, ": malformed constant");
      std::memcpy(t.raw(), v->dense->bytes.data(), t.nbytes());
      continue;
    }
    HLX_ASSIGN_OR_RETURN(auto kernel, reg.compile(op.name, op, fn));
    ev->steps_.push_back(Step{std::move(kernel), std::move(in), std::move(out), op.name});
  }
  if (ev->result_slots_.empty() && !block.ops.empty() && block.ops.back().name != "stablehlo.return")
    return make_error(ErrorKind::kInvalidArgument, "region of @", fn.name, " does not end in stablehlo.return");
  return ev;
}

Status RegionEvaluator::run() {
  for (auto& s : steps_) {
    in_ptrs_.clear();
    out_ptrs_.clear();
    for (int i : s.in) in_ptrs_.push_back(&slots_[size_t(i)]);
    for (int o : s.out) out_ptrs_.push_back(&slots_[size_t(o)]);
    Status st = s.kernel->run(in_ptrs_, out_ptrs_);
    if (!st.ok()) return st.with_context("region op " + s.name);
  }
  return ok_status();
}

}  // namespace hlx::rt::structured
