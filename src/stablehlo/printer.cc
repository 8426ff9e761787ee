// Prints modules in the pretty form stablehlo-opt prints. Value names follow MLIR's SSANameState:
// per function, block arguments are %argN, constants are %cst / %c (uniqued with a shared _N
// counter), other results are numbered %N in program order; a nested region is numbered after its
// whole parent block, starting from the parent's counters. Ops whose attributes do not fit their
// pretty syntax fall back to the generic form, so any IR prints as valid text.
#include "stablehlo/printer.h"

#include <algorithm>
#include <set>
#include <unordered_map>

#include "stablehlo/text_attr_printer.h"
#include "stablehlo/text_ops.h"

namespace hlx::shlo {

std::string print_type(const TensorType& type) { return type.to_string(); }

namespace text {
namespace {

struct NameState {
  int next_value = 0;
  int next_arg = 0;
  int next_conflict = 0;
  std::set<std::string> used;
};

class Printer {
 public:
  explicit Printer(std::string& out) : out_(out) {}

  void module(const Module& m) {
    out_ += "module";
    if (!m.name.empty()) out_ += " " + symbol_ref(m.name);
    std::string attrs = attr_dict(m.attrs);
    if (!attrs.empty()) out_ += " attributes " + attrs;
    out_ += " {\n";
    for (const Function& f : m.functions) function(f);
    out_ += "}\n";
  }

 private:
  std::string& out_;
  const Function* fn_ = nullptr;
  // Per ValueId: name without '%' and the result index within a multi-result op (-1: none).
  std::vector<std::string> base_;
  std::vector<int> index_;

  // ---- naming ----
  std::string unique(NameState& st, const std::string& name) {
    if (!st.used.count(name)) {
      st.used.insert(name);
      return name;
    }
    while (true) {
      std::string probe = name + "_" + std::to_string(st.next_conflict++);
      if (!st.used.count(probe)) {
        st.used.insert(probe);
        return probe;
      }
    }
  }
  void name_value(ValueId v, std::string base, int index) {
    if (v < 0) return;
    if (size_t(v) >= base_.size()) {
      base_.resize(size_t(v) + 1, "<<UNKNOWN>>");
      index_.resize(size_t(v) + 1, -1);
    }
    base_[size_t(v)] = std::move(base);
    index_[size_t(v)] = index;
  }
  void number_block(const std::vector<ValueId>& args, const std::vector<Op>& ops, NameState st) {
    for (ValueId a : args) name_value(a, unique(st, "arg" + std::to_string(st.next_arg++)), -1);
    for (const Op& op : ops) {
      if (op.results.empty()) continue;
      std::string base;
      if (op.name == "stablehlo.constant" && op.results.size() == 1 && valid(op.results[0])) {
        DType t = fn_->type_of(op.results[0]).dtype;
        base = unique(st, is_float(t) ? "cst" : "c");
      } else {
        base = std::to_string(st.next_value++);
      }
      for (size_t k = 0; k < op.results.size(); ++k)
        name_value(op.results[k], base, op.results.size() > 1 ? int(k) : -1);
    }
    // Every nested region starts from the state after its whole parent block.
    for (const Op& op : ops)
      for (const Block& b : op.regions) number_block(b.args, b.ops, st);
  }
  bool valid(ValueId v) const { return v >= 0 && size_t(v) < fn_->value_types.size(); }

  std::string ref(ValueId v) const {
    if (v < 0 || size_t(v) >= base_.size()) return "%<<UNKNOWN>>";
    std::string s = "%" + base_[size_t(v)];
    if (index_[size_t(v)] >= 0) s += "#" + std::to_string(index_[size_t(v)]);
    return s;
  }
  std::string type(ValueId v) const {
    return valid(v) ? fn_->type_of(v).to_string() : std::string("tensor<<<UNKNOWN>>>");
  }
  std::string refs(const std::vector<ValueId>& vs) const {
    std::string s;
    for (size_t i = 0; i < vs.size(); ++i) s += (i ? ", " : "") + ref(vs[i]);
    return s;
  }
  std::string types(const std::vector<ValueId>& vs) const {
    std::string s;
    for (size_t i = 0; i < vs.size(); ++i) s += (i ? ", " : "") + type(vs[i]);
    return s;
  }
  std::string functional_type(const Op& op) const {
    std::string s = "(" + types(op.operands) + ") -> ";
    if (op.results.size() == 1) return s + type(op.results[0]);
    return s + "(" + types(op.results) + ")";
  }
  std::string same_type(const Op& op) const {
    if (op.results.size() != 1) return functional_type(op);
    std::string r = type(op.results[0]);
    for (ValueId v : op.operands)
      if (type(v) != r) return functional_type(op);
    return r;
  }

  // ---- functions and ops ----
  void function(const Function& f) {
    fn_ = &f;
    base_.clear();
    index_.clear();
    number_block(f.args, f.body, NameState{});
    out_ += "  func.func ";
    out_ += f.is_public ? "public " : "private ";
    out_ += symbol_ref(f.name) + "(";
    for (size_t i = 0; i < f.args.size(); ++i) {
      if (i) out_ += ", ";
      out_ += ref(f.args[i]) + ": " + type(f.args[i]);
      std::string attrs = i < f.arg_attrs.size() ? attr_dict(f.arg_attrs[i]) : "";
      if (!attrs.empty()) out_ += " " + attrs;
    }
    out_ += ")";
    bool any_result_attrs = false;
    for (const AttrDict& d : f.result_attrs) any_result_attrs |= !attr_dict(d).empty();
    if (f.result_types.size() == 1 && !any_result_attrs) {
      out_ += " -> " + f.result_types[0].to_string();
    } else if (!f.result_types.empty()) {
      out_ += " -> (";
      for (size_t i = 0; i < f.result_types.size(); ++i) {
        if (i) out_ += ", ";
        out_ += f.result_types[i].to_string();
        std::string attrs = i < f.result_attrs.size() ? attr_dict(f.result_attrs[i]) : "";
        if (!attrs.empty()) out_ += " " + attrs;
      }
      out_ += ")";
    }
    std::string fattrs = attr_dict(f.attrs);
    if (!fattrs.empty()) out_ += " attributes " + fattrs;
    out_ += " {\n";
    for (const Op& op : f.body) print_op(op, 4);
    out_ += "  }\n";
    fn_ = nullptr;
  }

  static const Attr* attr_of(const Op& op, std::string_view key, Attr::Kind kind) {
    const Attr* a = op.attr(key);
    return a && a->kind == kind ? a : nullptr;
  }
  static std::string list(const std::vector<int64_t>& v) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
    return s + "]";
  }
  static std::string with_space(const std::string& dict) { return dict.empty() ? "" : " " + dict; }

  void print_op(const Op& op, int indent) {
    out_.append(size_t(indent), ' ');
    if (!op.results.empty()) {
      out_ += ref(op.results[0]).substr(0, ref(op.results[0]).find('#'));
      if (op.results.size() > 1) out_ += ":" + std::to_string(op.results.size());
      out_ += " = ";
    }
    if (!pretty(op, indent)) generic(op, indent);
    out_ += "\n";
  }

  // Prints the pretty form when the op's shape fits it; returns false to fall back to generic.
  bool pretty(const Op& op, int indent) {
    using K = Attr::Kind;
    const size_t nops = op.operands.size(), nres = op.results.size();
    const bool no_regions = op.regions.empty();
    // Short name inside functions: `call`, `return` (func is the default dialect there).
    std::string name = op.name.starts_with("func.") && indent == 4 ? op.name.substr(5) : op.name;
    std::string& o = out_;
    switch (syntax_of(op.name)) {
      case Syntax::kGeneric:
        return false;
      case Syntax::kSameType:
        if (nops == 0 || nres != 1 || !no_regions) return false;
        o += name + " " + refs(op.operands) + with_space(attr_dict(op.attrs)) + " : " + same_type(op);
        return true;
      case Syntax::kFunctional:
        if (nres != 1 || !no_regions) return false;
        o += name + " " + refs(op.operands) + with_space(attr_dict(op.attrs)) + " : " + functional_type(op);
        return true;
      case Syntax::kChloUnary:
        if (nops != 1 || nres != 1 || !no_regions) return false;
        o += name + " " + refs(op.operands) + with_space(attr_dict(op.attrs)) + " : " + type(op.operands[0]) + " -> " +
             type(op.results[0]);
        return true;
      case Syntax::kConstant: {
        const Attr* v = attr_of(op, "value", K::kDense);
        if (nops != 0 || nres != 1 || !no_regions || !v || !v->dense || v->dense->type != fn_->type_of(op.results[0]))
          return false;
        o += name + with_space(attr_dict(op.attrs, {"value"})) + " " + dense_literal(*v->dense) + " : " +
             v->dense->type.to_string();
        return true;
      }
      case Syntax::kIota: {
        const Attr* d = attr_of(op, "iota_dimension", K::kInt);
        if (nops != 0 || nres != 1 || !no_regions || !d || d->dtype != DType::kI64) return false;
        o += name + " dim = " + std::to_string(d->i) + with_space(attr_dict(op.attrs, {"iota_dimension"})) + " : " +
             type(op.results[0]);
        return true;
      }
      case Syntax::kCompare: {
        const Attr* dir = attr_of(op, "comparison_direction", K::kEnum);
        const Attr* ct = op.attr("compare_type");
        if (nops != 2 || nres != 1 || !no_regions || !dir || dir->name != "comparison_direction" ||
            (ct && (ct->kind != K::kEnum || ct->name != "comparison_type")))
          return false;
        // The enum printer emits a leading space, hence the doubled spaces stablehlo-opt prints.
        o += name + "  " + dir->str + ", " + refs(op.operands);
        if (ct) o += ",  " + ct->str;
        o += with_space(attr_dict(op.attrs, {"comparison_direction", "compare_type"})) + " : " + functional_type(op);
        return true;
      }
      case Syntax::kSelect: {
        if (nops != 3 || nres != 1 || !no_regions) return false;
        o += name + " " + refs(op.operands) + with_space(attr_dict(op.attrs)) + " : ";
        std::string r = type(op.results[0]);
        if (type(op.operands[1]) == r && type(op.operands[2]) == r)
          o += type(op.operands[0]) + ", " + r;
        else
          o += functional_type(op);
        return true;
      }
      case Syntax::kSlice: {
        const Attr* s = attr_of(op, "start_indices", K::kI64Array);
        const Attr* l = attr_of(op, "limit_indices", K::kI64Array);
        const Attr* st = attr_of(op, "strides", K::kI64Array);
        if (nops != 1 || nres != 1 || !no_regions || !s || !l || !st || s->ints.size() != l->ints.size() ||
            s->ints.size() != st->ints.size())
          return false;
        o += name + " " + ref(op.operands[0]) + " [";
        for (size_t i = 0; i < s->ints.size(); ++i) {
          o += (i ? ", " : "") + std::to_string(s->ints[i]) + ":" + std::to_string(l->ints[i]);
          if (st->ints[i] != 1) o += ":" + std::to_string(st->ints[i]);
        }
        o += "]" + with_space(attr_dict(op.attrs, {"start_indices", "limit_indices", "strides"})) + " : " +
             functional_type(op);
        return true;
      }
      case Syntax::kDynamicSlice: {
        const Attr* sizes = attr_of(op, "slice_sizes", K::kI64Array);
        if (nops < 1 || nres != 1 || !no_regions || !sizes) return false;
        o += name + " " + refs(op.operands) + ", sizes = " + list(sizes->ints) +
             with_space(attr_dict(op.attrs, {"slice_sizes"})) + " : " + functional_type(op);
        return true;
      }
      case Syntax::kBroadcastInDim:
      case Syntax::kTranspose: {
        const char* key = syntax_of(op.name) == Syntax::kTranspose ? "permutation" : "broadcast_dimensions";
        const Attr* dims = attr_of(op, key, K::kI64Array);
        if (nops != 1 || nres != 1 || !no_regions || !dims) return false;
        o += name + " " + ref(op.operands[0]) + ", dims = " + list(dims->ints) +
             with_space(attr_dict(op.attrs, {key})) + " : " + functional_type(op);
        return true;
      }
      case Syntax::kConcatenate: {
        const Attr* d = attr_of(op, "dimension", K::kInt);
        if (nops < 1 || nres != 1 || !no_regions || !d || d->dtype != DType::kI64) return false;
        o += name + " " + refs(op.operands) + ", dim = " + std::to_string(d->i) +
             with_space(attr_dict(op.attrs, {"dimension"})) + " : " + functional_type(op);
        return true;
      }
      case Syntax::kPad: {
        const Attr* lo = attr_of(op, "edge_padding_low", K::kI64Array);
        const Attr* hi = attr_of(op, "edge_padding_high", K::kI64Array);
        const Attr* in = attr_of(op, "interior_padding", K::kI64Array);
        if (nops != 2 || nres != 1 || !no_regions || !lo || !hi || !in) return false;
        o += name + " " + refs(op.operands) + ", low = " + list(lo->ints) + ", high = " + list(hi->ints) +
             ", interior = " + list(in->ints) +
             with_space(attr_dict(op.attrs, {"edge_padding_low", "edge_padding_high", "interior_padding"})) + " : " +
             functional_type(op);
        return true;
      }
      case Syntax::kReduce:
        return reduce(op, name, indent);
      case Syntax::kDotGeneral: {
        const Attr* dims = attr_of(op, "dot_dimension_numbers", K::kStruct);
        const Attr* prec = op.attr("precision_config");
        if (nops != 2 || nres != 1 || !no_regions || !dims || dims->name != "dot" || op.attr("algorithm")) return false;
        static const char* kFields[] = {"lhs_batching_dimensions", "rhs_batching_dimensions",
                                        "lhs_contracting_dimensions", "rhs_contracting_dimensions"};
        std::vector<int64_t> f[4];
        for (const NamedAttr& a : dims->dict) {
          int k = -1;
          for (int j = 0; j < 4; ++j)
            if (a.name == kFields[j]) k = j;
          if (k < 0 || a.value.kind != K::kI64Array) return false;
          f[k] = a.value.ints;
        }
        if (prec) {
          if (prec->kind != K::kArray) return false;
          for (const Attr& p : prec->list)
            if (p.kind != K::kEnum || p.name != "precision") return false;
        }
        o += name + " " + refs(op.operands) + ", ";
        if (!f[0].empty() || !f[1].empty()) o += "batching_dims = " + list(f[0]) + " x " + list(f[1]) + ", ";
        o += "contracting_dims = " + list(f[2]) + " x " + list(f[3]);
        if (prec) {
          o += ", precision = [";
          for (size_t i = 0; i < prec->list.size(); ++i) o += (i ? ", " : "") + prec->list[i].str;
          o += "]";
        }
        o += with_space(attr_dict(op.attrs, {"dot_dimension_numbers", "precision_config"})) + " : " +
             functional_type(op);
        return true;
      }
      case Syntax::kConvolution:
        return convolution(op, name);
      case Syntax::kCustomCall:
      case Syntax::kCall: {
        bool call = syntax_of(op.name) == Syntax::kCall;
        const char* key = call ? "callee" : "call_target_name";
        const Attr* target = attr_of(op, key, call ? K::kSymbol : K::kString);
        if (!target || !no_regions) return false;
        o += name + " " + symbol_ref(target->str) + "(" + refs(op.operands) + ")" +
             with_space(attr_dict(op.attrs, {key})) + " : " + functional_type(op);
        return true;
      }
      case Syntax::kComposite: {
        const Attr* n = attr_of(op, "name", K::kString);
        if (!n || !no_regions) return false;
        o += name + " " + escape_string(n->str) + (nops ? " " : "") + refs(op.operands) +
             with_space(attr_dict(op.attrs, {"name"})) + " : " + functional_type(op);
        return true;
      }
      case Syntax::kReturn:
        if (nres != 0 || !no_regions) return false;
        o += name;
        if (nops) o += " " + refs(op.operands);
        o += with_space(attr_dict(op.attrs));
        if (nops) o += " : " + types(op.operands);
        return true;
    }
    return false;
  }

  // Compact `applies` form when the body is exactly `return op(arg0, arg1)` of a commutative
  // binary op on scalars of the first input's element type (MLIR's eligibility rules E1-E5).
  bool reduce_compact(const Op& op) const {
    const Block& b = op.regions[0];
    if (b.ops.size() != 2 || b.args.size() != 2) return false;
    const Op& inner = b.ops[0];
    const Op& ret = b.ops[1];
    if (!is_commutative_binary(inner.name) || inner.operands.size() != 2 || inner.results.size() != 1 ||
        !inner.regions.empty() || !inner.attrs.empty())
      return false;
    TensorType scalar{fn_->type_of(op.operands[0]).dtype, {}};
    for (ValueId v : {inner.operands[0], inner.operands[1], inner.results[0]})
      if (!valid(v) || fn_->type_of(v) != scalar) return false;
    if (inner.operands[0] != b.args[0] || inner.operands[1] != b.args[1]) return false;
    return ret.name == "stablehlo.return" && ret.operands.size() == 1 && ret.operands[0] == inner.results[0] &&
           ret.results.empty() && ret.attrs.empty();
  }

  bool reduce(const Op& op, const std::string& name, int indent) {
    const Attr* dims = attr_of(op, "dimensions", Attr::Kind::kI64Array);
    size_t n = op.operands.size() / 2;
    if (!dims || op.operands.size() % 2 || n == 0 || op.results.size() != n || op.regions.size() != 1 ||
        op.regions[0].args.size() != 2 * n)
      return false;
    for (ValueId v : op.operands)
      if (!valid(v)) return false;
    std::string& o = out_;
    o += name;
    for (size_t i = 0; i < n; ++i)
      o += std::string(i ? ", " : "") + "(" + ref(op.operands[i]) + " init: " + ref(op.operands[n + i]) + ")";
    bool compact = reduce_compact(op);
    if (compact) o += " applies " + op.regions[0].ops[0].name;
    o += " across dimensions = " + list(dims->ints) + with_space(attr_dict(op.attrs, {"dimensions"})) + " : " +
         functional_type(op);
    if (compact) return true;
    const Block& b = op.regions[0];
    o += "\n" + std::string(size_t(indent), ' ') + " reducer";
    for (size_t i = 0; i < n; ++i)
      o +=
          "(" + ref(b.args[i]) + ": " + type(b.args[i]) + ", " + ref(b.args[n + i]) + ": " + type(b.args[n + i]) + ") ";
    o += " {\n";
    for (const Op& inner : b.ops) print_op(inner, indent + 2);
    o.append(size_t(indent), ' ');
    o += "}";
    return true;
  }

  bool convolution(const Op& op, const std::string& name) {
    using K = Attr::Kind;
    const Attr* dims = attr_of(op, "dimension_numbers", K::kStruct);
    if (op.operands.size() != 2 || op.results.size() != 1 || !op.regions.empty() || !dims ||
        !conv_dims_printable(*dims))
      return false;
    struct W {
      const char* attr;
      const char* kw;
      K kind;
    };
    static const W kWindow[] = {{"window_strides", "stride", K::kI64Array},
                                {"padding", "pad", K::kDense},
                                {"lhs_dilation", "lhs_dilate", K::kI64Array},
                                {"rhs_dilation", "rhs_dilate", K::kI64Array},
                                {"window_reversal", "reverse", K::kBoolArray}};
    std::string window;
    for (const W& w : kWindow) {
      const Attr* a = op.attr(w.attr);
      if (!a) continue;
      if (a->kind != w.kind) return false;
      if (!window.empty()) window += ", ";
      window += std::string(w.kw) + " = [";
      if (w.kind == K::kDense) {
        const DenseElements* d = a->dense.get();
        if (!d || d->type.dtype != DType::kI64 || d->type.rank() != 2 || d->type.shape[1] != 2) return false;
        for (int64_t r = 0; r < d->type.shape[0]; ++r) {
          int64_t lo = 0, hi = 0;
          for (size_t b = 0; b < 8; ++b) {
            lo |= int64_t(d->bytes[size_t(r) * 16 + b]) << (8 * b);
            hi |= int64_t(d->bytes[size_t(r) * 16 + 8 + b]) << (8 * b);
          }
          window += (r ? ", [" : "[") + std::to_string(lo) + ", " + std::to_string(hi) + "]";
        }
      } else if (w.kind == K::kBoolArray) {
        for (size_t i = 0; i < a->ints.size(); ++i)
          window += std::string(i ? ", " : "") + (a->ints[i] ? "true" : "false");
      } else {
        for (size_t i = 0; i < a->ints.size(); ++i) window += (i ? ", " : "") + std::to_string(a->ints[i]);
      }
      window += "]";
    }
    out_ += name + "(" + refs(op.operands) + ") dim_numbers = " + conv_dims_compact(*dims) + ", window = {" + window +
            "}" +
            with_space(attr_dict(op.attrs, {"dimension_numbers", "window_strides", "padding", "lhs_dilation",
                                            "rhs_dilation", "window_reversal"})) +
            " : " + functional_type(op);
    return true;
  }

  void generic(const Op& op, int indent) {
    std::string& o = out_;
    o += escape_string(op.name) + "(" + refs(op.operands) + ")";
    // Inherent attributes in declaration order inside <{...}>, the rest sorted in {...}.
    const auto& inherent = inherent_attrs(op.name);
    std::string props;
    for (std::string_view key : inherent)
      if (const Attr* a = op.attr(key))
        props += (props.empty() ? "" : ", ") + std::string(key) + " = " + print_attr(*a);
    if (!props.empty()) o += " <{" + props + "}>";
    if (!op.regions.empty()) {
      o += " (";
      for (size_t r = 0; r < op.regions.size(); ++r) {
        const Block& b = op.regions[r];
        o += r ? ", {\n" : "{\n";
        if (!b.args.empty()) {
          o.append(size_t(indent), ' ');
          o += "^bb0(";
          for (size_t i = 0; i < b.args.size(); ++i) o += (i ? ", " : "") + ref(b.args[i]) + ": " + type(b.args[i]);
          o += "):\n";
        }
        for (const Op& inner : b.ops) print_op(inner, indent + 2);
        o.append(size_t(indent), ' ');
        o += "}";
      }
      o += ")";
    }
    AttrDict rest;
    for (const NamedAttr& a : op.attrs)
      if (std::find(inherent.begin(), inherent.end(), a.name) == inherent.end()) rest.push_back(a);
    o += with_space(attr_dict(rest)) + " : " + functional_type(op);
  }
};

}  // namespace
}  // namespace text

std::string print_module(const Module& module) {
  std::string out;
  text::Printer(out).module(module);
  return out;
}

}  // namespace hlx::shlo
