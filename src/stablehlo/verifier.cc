// Structural checks (SSA dominance, terminators, counts, calls) plus the StableHLO spec's per-op
// constraints. Per-op type rules live in shape_inference.cc; this file reads the ops' attributes,
// asks inference for the result types and compares them with the declared ones.
#include "stablehlo/verifier.h"

#include <regex>
#include <string_view>

#include "stablehlo/shape_inference.h"

namespace hlx::shlo {
namespace {

std::string ts(const TensorType& t) { return t.to_string(); }

std::string types_str(const std::vector<TensorType>& ts_) {
  std::string s = "(";
  for (size_t i = 0; i < ts_.size(); ++i) s += (i ? ", " : "") + ts_[i].to_string();
  return s + ")";
}

// "stablehlo.add" -> "add", "chlo.erf" -> "erf".
std::string_view short_name(std::string_view name) {
  size_t dot = name.find('.');
  return dot == std::string_view::npos ? name : name.substr(dot + 1);
}

class Verifier {
 public:
  explicit Verifier(const Module& m) : m_(m) {}

  Status run() {
    for (size_t i = 0; i < m_.functions.size(); ++i)
      for (size_t j = 0; j < i; ++j)
        if (m_.functions[i].name == m_.functions[j].name)
          return make_error(ErrorKind::kVerify, "symbol_unique: function @", m_.functions[i].name,
                            " is defined twice (functions #", j, " and #", i, ")");
    for (const Function& f : m_.functions) HLX_RETURN_IF_ERROR(verify_function(f));
    return ok_status();
  }

 private:
  struct Frame {
    size_t index;
    std::string_view name;
    size_t region;  // region of this op we are inside (when a deeper frame exists)
  };

  // Wraps an error with where it happened: "(function @main, op #3 stablehlo.reduce, region 0
  // op #1 stablehlo.add)". The label stays first in the message.
  Status fail(const std::string& msg) const {
    std::string where = str_cat(" (function @", fn_->name);
    for (size_t i = 0; i < frames_.size(); ++i) {
      where += i == 0 ? ", op #" : str_cat(", region ", frames_[i - 1].region, " op #");
      where += str_cat(frames_[i].index, " ", frames_[i].name);
    }
    return Status(ErrorKind::kVerify, msg + where + ")");
  }
  template <class... Args>
  Status failf(const Args&... args) const {
    return fail(str_cat(args...));
  }
  Status ctx(const Status& s) const { return s.ok() ? s : fail(s.message()); }

  bool valid_id(ValueId v) const { return v >= 0 && size_t(v) < fn_->value_types.size(); }
  const TensorType& type(ValueId v) const { return fn_->type_of(v); }

  // Defines `v` in the current scope; values are defined exactly once per function.
  Status define(ValueId v, std::string_view what) {
    if (!valid_id(v))
      return failf("ssa_value_id: ", what, " %", v, " is not a value of this function (it has ",
                   fn_->value_types.size(), " values)");
    if (ever_defined_[size_t(v)]) return failf("ssa_single_definition: ", what, " %", v, " is already defined");
    for (int64_t d : type(v).shape)
      if (d < 0) return failf("type_static_shape: ", what, " %", v, " has negative dimension in ", ts(type(v)));
    ever_defined_[size_t(v)] = 1;
    visible_[size_t(v)] = 1;
    scope_.back().push_back(v);
    return ok_status();
  }

  Status verify_function(const Function& f) {
    fn_ = &f;
    frames_.clear();
    ever_defined_.assign(f.value_types.size(), 0);
    visible_.assign(f.value_types.size(), 0);
    scope_.assign(1, {});
    if (!f.arg_attrs.empty() && f.arg_attrs.size() != f.args.size())
      return failf("func_arg_attrs: ", f.arg_attrs.size(), " argument attribute dicts for ", f.args.size(),
                   " arguments");
    if (!f.result_attrs.empty() && f.result_attrs.size() != f.result_types.size())
      return failf("func_result_attrs: ", f.result_attrs.size(), " result attribute dicts for ", f.result_types.size(),
                   " results");
    for (ValueId a : f.args) HLX_RETURN_IF_ERROR(define(a, "argument"));
    if (f.body.empty() || f.body.back().name != "func.return")
      return failf("func_terminator: the body of @", f.name, " must end with func.return");
    for (size_t i = 0; i < f.body.size(); ++i) {
      const Op& op = f.body[i];
      frames_.push_back({i, op.name, 0});
      if (op.name == "func.return") {
        if (i + 1 != f.body.size()) return failf("func_terminator: func.return before the end of the body");
        HLX_RETURN_IF_ERROR(check_uses(op));
        std::vector<TensorType> got = operand_types(op);
        if (!op.results.empty()) return failf("return_c1: func.return must not have results");
        if (got != f.result_types)
          return failf("return_c1: func.return operands ", types_str(got), " do not match the signature's results ",
                       types_str(f.result_types));
      } else {
        HLX_RETURN_IF_ERROR(verify_op(op));
      }
      frames_.pop_back();
    }
    return ok_status();
  }

  std::vector<TensorType> operand_types(const Op& op) const {
    std::vector<TensorType> t;
    for (ValueId v : op.operands) t.push_back(type(v));
    return t;
  }
  std::vector<TensorType> result_types(const Op& op) const {
    std::vector<TensorType> t;
    for (ValueId v : op.results) t.push_back(type(v));
    return t;
  }

  // Every operand must be a value defined earlier in this block or an enclosing one.
  Status check_uses(const Op& op) {
    for (size_t k = 0; k < op.operands.size(); ++k) {
      ValueId v = op.operands[k];
      if (!valid_id(v)) return failf("ssa_value_id: operand #", k, " %", v, " is not a value of this function");
      if (!visible_[size_t(v)])
        return failf("ssa_dominance: operand #", k, " %", v, " (", ts(type(v)),
                     ") is used before its definition or outside its region");
    }
    return ok_status();
  }

  // Verifies region `r` of `op` and returns its block argument and stablehlo.return operand types.
  Status verify_region(const Op& op, size_t r, std::vector<TensorType>& args, std::vector<TensorType>& returned) {
    const Block& b = op.regions[r];
    frames_.back().region = r;
    scope_.emplace_back();
    for (ValueId a : b.args) HLX_RETURN_IF_ERROR(define(a, "region argument"));
    for (ValueId a : b.args) args.push_back(type(a));
    if (b.ops.empty() || b.ops.back().name != "stablehlo.return")
      return failf("region_terminator: region ", r, " of ", op.name, " must end with stablehlo.return");
    for (size_t i = 0; i < b.ops.size(); ++i) {
      const Op& inner = b.ops[i];
      frames_.push_back({i, inner.name, 0});
      if (inner.name == "stablehlo.return") {
        if (i + 1 != b.ops.size()) return failf("region_terminator: stablehlo.return before the end of the region");
        HLX_RETURN_IF_ERROR(check_uses(inner));
        if (!inner.results.empty()) return failf("return_c1: stablehlo.return must not have results");
        returned = operand_types(inner);
      } else {
        HLX_RETURN_IF_ERROR(verify_op(inner));
      }
      frames_.pop_back();
    }
    // Values defined inside the region are not visible after it.
    for (ValueId v : scope_.back()) visible_[size_t(v)] = 0;
    scope_.pop_back();
    return ok_status();
  }

  Status counts(const Op& op, std::string_view sn, int64_t n_operands, int64_t n_results) {
    if (n_operands >= 0 && int64_t(op.operands.size()) != n_operands)
      return failf(sn, "_operands: expected ", n_operands, " operands, got ", op.operands.size());
    if (n_results >= 0 && int64_t(op.results.size()) != n_results)
      return failf(sn, "_results: expected ", n_results, " results, got ", op.results.size());
    return ok_status();
  }

  // ---- attribute accessors (errors cite "<op>_attr") ----
  Result<Dims> dims_attr(const Op& op, std::string_view sn, std::string_view key,
                         std::optional<Dims> dflt = std::nullopt) {
    const Attr* a = op.attr(key);
    if (!a) {
      if (dflt) return *dflt;
      return failf(sn, "_attr: missing attribute '", key, "'");
    }
    if (a->kind != Attr::Kind::kI64Array) return failf(sn, "_attr: '", key, "' must be array<i64: ...>");
    return a->ints;
  }
  Result<int64_t> int_attr(const Op& op, std::string_view sn, std::string_view key) {
    const Attr* a = op.attr(key);
    if (!a) return failf(sn, "_attr: missing attribute '", key, "'");
    if (a->kind != Attr::Kind::kInt) return failf(sn, "_attr: '", key, "' must be an integer");
    return a->i;
  }
  Result<const Attr*> required(const Op& op, std::string_view sn, std::string_view key) {
    const Attr* a = op.attr(key);
    if (!a) return failf(sn, "_attr: missing attribute '", key, "'");
    return a;
  }

  // Compares declared and inferred result types, citing `label` on mismatch.
  Status expect_result(const Op& op, size_t i, const TensorType& want, std::string_view label) {
    const TensorType& got = type(op.results[i]);
    if (got != want)
      return failf(label, ": result #", i, " has type ", ts(got), " but operands ", types_str(operand_types(op)),
                   " give ", ts(want));
    return ok_status();
  }
  // Like expect_result but picks the element-type or the shape label.
  Status expect_result2(const Op& op, const TensorType& want, std::string_view dtype_label,
                        std::string_view shape_label) {
    const TensorType& got = type(op.results[0]);
    if (got.dtype != want.dtype) return expect_result(op, 0, want, dtype_label);
    return expect_result(op, 0, want, shape_label);
  }

  Status verify_op(const Op& op) {
    HLX_RETURN_IF_ERROR(check_uses(op));
    for (ValueId r : op.results)
      if (!valid_id(r)) return failf("ssa_value_id: result %", r, " is not a value of this function");
    const bool has_regions_ok = op.name == "stablehlo.reduce" || op.name == "stablehlo.scatter";
    if (!op.regions.empty() && !has_regions_ok)
      return failf("op_regions: ", op.name, " takes no regions but has ", op.regions.size());
    HLX_RETURN_IF_ERROR(verify_op_rules(op));
    for (ValueId r : op.results) HLX_RETURN_IF_ERROR(define(r, "result"));
    return ok_status();
  }

  Status verify_op_rules(const Op& op) {
    const std::string& name = op.name;
    if (name == "func.call") return verify_call(op);
    if (name == "func.return" || name == "stablehlo.return")
      return failf("op_terminator: ", name, " is only allowed as the last op of ",
                   name == "func.return" ? "a function body" : "a region");
    if (name == "chlo.erf") return verify_unary(op, "erf");
    if (name.rfind("stablehlo.", 0) != 0) return failf("unknown op '", name, "'");
    std::string_view sn = short_name(name);
    std::vector<TensorType> in = operand_types(op);

    if (is_elementwise_unary(sn) && sn != "erf") return verify_unary(op, sn);
    if (is_elementwise_binary(sn)) {
      HLX_RETURN_IF_ERROR(counts(op, sn, 2, 1));
      HLX_ASSIGN_OR_RETURN(TensorType t, wrap(infer_binary(sn, in[0], in[1])));
      return expect_result(op, 0, t, str_cat(sn, "_c1"));
    }
    if (sn == "constant") {
      HLX_RETURN_IF_ERROR(counts(op, sn, 0, 1));
      HLX_ASSIGN_OR_RETURN(const Attr* v, required(op, sn, "value"));
      if (v->kind != Attr::Kind::kDense || !v->dense) return failf("constant_attr: 'value' must be dense<...>");
      HLX_ASSIGN_OR_RETURN(TensorType t, wrap(infer_constant(*v->dense)));
      return expect_result(op, 0, t, "constant_c1");
    }
    if (sn == "iota") {
      HLX_RETURN_IF_ERROR(counts(op, sn, 0, 1));
      HLX_ASSIGN_OR_RETURN(int64_t dim, int_attr(op, sn, "iota_dimension"));
      return ctx(infer_iota(type(op.results[0]), dim).status());
    }
    if (sn == "convert") {
      HLX_RETURN_IF_ERROR(counts(op, sn, 1, 1));
      HLX_ASSIGN_OR_RETURN(TensorType t, wrap(infer_convert(in[0], type(op.results[0]).dtype)));
      return expect_result(op, 0, t, "convert_c1");
    }
    if (sn == "broadcast_in_dim") {
      HLX_RETURN_IF_ERROR(counts(op, sn, 1, 1));
      HLX_ASSIGN_OR_RETURN(Dims dims, dims_attr(op, sn, "broadcast_dimensions"));
      HLX_ASSIGN_OR_RETURN(TensorType t, wrap(infer_broadcast_in_dim(in[0], dims, type(op.results[0]).shape)));
      return expect_result(op, 0, t, "broadcast_in_dim_c1");
    }
    if (sn == "reshape") {
      HLX_RETURN_IF_ERROR(counts(op, sn, 1, 1));
      HLX_ASSIGN_OR_RETURN(TensorType t, wrap(infer_reshape(in[0], type(op.results[0]).shape)));
      return expect_result(op, 0, t, "reshape_c1");
    }
    if (sn == "transpose") {
      HLX_RETURN_IF_ERROR(counts(op, sn, 1, 1));
      HLX_ASSIGN_OR_RETURN(Dims perm, dims_attr(op, sn, "permutation"));
      HLX_ASSIGN_OR_RETURN(TensorType t, wrap(infer_transpose(in[0], perm)));
      return expect_result2(op, t, "transpose_c1", "transpose_c3");
    }
    if (sn == "slice") {
      HLX_RETURN_IF_ERROR(counts(op, sn, 1, 1));
      HLX_ASSIGN_OR_RETURN(Dims start, dims_attr(op, sn, "start_indices"));
      HLX_ASSIGN_OR_RETURN(Dims limit, dims_attr(op, sn, "limit_indices"));
      HLX_ASSIGN_OR_RETURN(Dims strides, dims_attr(op, sn, "strides", Dims(in[0].shape.size(), 1)));
      HLX_ASSIGN_OR_RETURN(TensorType t, wrap(infer_slice(in[0], start, limit, strides)));
      return expect_result2(op, t, "slice_c1", "slice_c5");
    }
    if (sn == "dynamic_slice") {
      if (op.operands.empty()) return failf("dynamic_slice_operands: expected an operand");
      HLX_RETURN_IF_ERROR(counts(op, sn, -1, 1));
      HLX_ASSIGN_OR_RETURN(Dims sizes, dims_attr(op, sn, "slice_sizes"));
      std::vector<TensorType> starts(in.begin() + 1, in.end());
      HLX_ASSIGN_OR_RETURN(TensorType t, wrap(infer_dynamic_slice(in[0], starts, sizes)));
      return expect_result2(op, t, "dynamic_slice_c1", "dynamic_slice_c5");
    }
    if (sn == "dynamic_update_slice") {
      if (op.operands.size() < 2) return failf("dynamic_update_slice_operands: expected operand and update");
      HLX_RETURN_IF_ERROR(counts(op, sn, -1, 1));
      std::vector<TensorType> starts(in.begin() + 2, in.end());
      HLX_ASSIGN_OR_RETURN(TensorType t, wrap(infer_dynamic_update_slice(in[0], in[1], starts)));
      return expect_result(op, 0, t, "dynamic_update_slice_c1");
    }
    if (sn == "concatenate") {
      HLX_RETURN_IF_ERROR(counts(op, sn, -1, 1));
      HLX_ASSIGN_OR_RETURN(int64_t dim, int_attr(op, sn, "dimension"));
      HLX_ASSIGN_OR_RETURN(TensorType t, wrap(infer_concatenate(in, dim)));
      return expect_result2(op, t, "concatenate_c5", "concatenate_c6");
    }
    if (sn == "pad") {
      HLX_RETURN_IF_ERROR(counts(op, sn, 2, 1));
      HLX_ASSIGN_OR_RETURN(Dims lo, dims_attr(op, sn, "edge_padding_low"));
      HLX_ASSIGN_OR_RETURN(Dims hi, dims_attr(op, sn, "edge_padding_high"));
      HLX_ASSIGN_OR_RETURN(Dims interior, dims_attr(op, sn, "interior_padding"));
      HLX_ASSIGN_OR_RETURN(TensorType t, wrap(infer_pad(in[0], in[1], lo, hi, interior)));
      return expect_result2(op, t, "pad_c1", "pad_c4");
    }
    if (sn == "select") {
      HLX_RETURN_IF_ERROR(counts(op, sn, 3, 1));
      HLX_ASSIGN_OR_RETURN(TensorType t, wrap(infer_select(in[0], in[1], in[2])));
      return expect_result(op, 0, t, "select_c2");
    }
    if (sn == "clamp") {
      HLX_RETURN_IF_ERROR(counts(op, sn, 3, 1));
      HLX_ASSIGN_OR_RETURN(TensorType t, wrap(infer_clamp(in[0], in[1], in[2])));
      return expect_result(op, 0, t, "clamp_c4");
    }
    if (sn == "compare") {
      HLX_RETURN_IF_ERROR(counts(op, sn, 2, 1));
      HLX_ASSIGN_OR_RETURN(const Attr* dir, required(op, sn, "comparison_direction"));
      if (dir->kind != Attr::Kind::kEnum)
        return failf("compare_attr: 'comparison_direction' must be #stablehlo<comparison_direction ...>");
      std::string_view ctype;
      if (const Attr* c = op.attr("compare_type")) {
        if (c->kind != Attr::Kind::kEnum)
          return failf("compare_attr: 'compare_type' must be #stablehlo<comparison_type ...>");
        ctype = c->str;
      }
      HLX_ASSIGN_OR_RETURN(TensorType t, wrap(infer_compare(in[0], in[1], dir->str, ctype)));
      return expect_result(op, 0, t, "compare_c2");
    }
    if (sn == "reduce") return verify_reduce(op);
    if (sn == "dot_general") {
      HLX_RETURN_IF_ERROR(counts(op, sn, 2, 1));
      HLX_ASSIGN_OR_RETURN(const Attr* a, required(op, sn, "dot_dimension_numbers"));
      HLX_ASSIGN_OR_RETURN(DotDims d, wrap(dot_dims_from_attr(*a)));
      HLX_RETURN_IF_ERROR(check_precision_config(op, "dot_general_c11"));
      HLX_ASSIGN_OR_RETURN(TensorType t, wrap(infer_dot_general(in[0], in[1], d, type(op.results[0]).dtype)));
      return expect_result(op, 0, t, "dot_general_c12");
    }
    if (sn == "gather") {
      HLX_RETURN_IF_ERROR(counts(op, sn, 2, 1));
      HLX_ASSIGN_OR_RETURN(const Attr* a, required(op, sn, "dimension_numbers"));
      HLX_ASSIGN_OR_RETURN(GatherDims d, wrap(gather_dims_from_attr(*a)));
      HLX_ASSIGN_OR_RETURN(Dims sizes, dims_attr(op, sn, "slice_sizes"));
      HLX_ASSIGN_OR_RETURN(TensorType t, wrap(infer_gather(in[0], in[1], d, sizes)));
      return expect_result2(op, t, "gather_c23", "gather_c22");
    }
    if (sn == "scatter") return verify_scatter(op);
    if (sn == "convolution") {
      HLX_RETURN_IF_ERROR(counts(op, sn, 2, 1));
      HLX_ASSIGN_OR_RETURN(const Attr* a, required(op, sn, "dimension_numbers"));
      HLX_ASSIGN_OR_RETURN(ConvDims d, wrap(conv_dims_from_attr(*a)));
      HLX_ASSIGN_OR_RETURN(ConvWindow w, wrap(conv_window_from_attrs(op.attrs)));
      HLX_RETURN_IF_ERROR(check_precision_config(op, "convolution_c24"));
      HLX_ASSIGN_OR_RETURN(TensorType t, wrap(infer_convolution(in[0], in[1], d, w, type(op.results[0]).dtype)));
      return expect_result(op, 0, t, "convolution_c25");
    }
    if (sn == "custom_call") {
      // Any target with any operands and results (e.g. check.expect_close with no results).
      if (const Attr* t = op.attr("call_target_name"))
        if (t->kind != Attr::Kind::kString && t->kind != Attr::Kind::kSymbol)
          return failf("custom_call_attr: 'call_target_name' must be a string");
      return ok_status();
    }
    if (sn == "composite") return verify_composite(op);
    return failf("unknown op '", name, "'");
  }

  // Adds the op context to an inference error.
  template <class T>
  Result<T> wrap(Result<T> r) const {
    if (!r.ok()) return ctx(r.status());
    return r;
  }

  Status check_precision_config(const Op& op, std::string_view label) {
    const Attr* p = op.attr("precision_config");
    if (!p) return ok_status();
    if (p->kind != Attr::Kind::kArray) return failf(label, ": precision_config must be an array");
    if (!p->list.empty() && p->list.size() != 2)
      return failf(label, ": precision_config has ", p->list.size(), " entries, expected 2");
    return ok_status();
  }

  Status verify_unary(const Op& op, std::string_view sn) {
    HLX_RETURN_IF_ERROR(counts(op, sn, 1, 1));
    HLX_ASSIGN_OR_RETURN(TensorType t, wrap(infer_unary(sn, type(op.operands[0]))));
    return expect_result(op, 0, t, sn == "abs" ? "abs_c2" : str_cat(sn, "_c1"));
  }

  Status verify_reduce(const Op& op) {
    size_t n2 = op.operands.size();
    if (n2 == 0 || n2 % 2 != 0) return failf("reduce_c3: expected N inputs and N init values, got ", n2, " operands");
    size_t n = n2 / 2;
    HLX_RETURN_IF_ERROR(counts(op, "reduce", -1, int64_t(n)));
    if (op.regions.size() != 1) return failf("reduce_c6: expected one body region, got ", op.regions.size());
    HLX_ASSIGN_OR_RETURN(Dims dims, dims_attr(op, "reduce", "dimensions"));
    std::vector<TensorType> in = operand_types(op);
    std::vector<TensorType> inputs(in.begin(), in.begin() + n), inits(in.begin() + n, in.end());
    std::vector<TensorType> args, returned;
    HLX_RETURN_IF_ERROR(verify_region(op, 0, args, returned));
    HLX_ASSIGN_OR_RETURN(std::vector<DType> e, wrap(check_reduction_body("reduce", inputs, args, returned)));
    HLX_ASSIGN_OR_RETURN(std::vector<TensorType> out, wrap(infer_reduce(inputs, inits, dims, e)));
    for (size_t i = 0; i < n; ++i) {
      const TensorType& got = type(op.results[i]);
      if (got.dtype != out[i].dtype) HLX_RETURN_IF_ERROR(expect_result(op, i, out[i], "reduce_c8"));
      HLX_RETURN_IF_ERROR(expect_result(op, i, out[i], "reduce_c7"));
    }
    return ok_status();
  }

  Status verify_scatter(const Op& op) {
    size_t k = op.operands.size();
    if (k < 3 || k % 2 != 1)
      return failf("scatter_c5: expected N inputs, scatter_indices and N updates, got ", k, " operands");
    size_t n = (k - 1) / 2;
    HLX_RETURN_IF_ERROR(counts(op, "scatter", -1, int64_t(n)));
    if (op.regions.size() != 1)
      return failf("scatter_c23: expected one update_computation region, got ", op.regions.size());
    HLX_ASSIGN_OR_RETURN(const Attr* a, required(op, "scatter", "scatter_dimension_numbers"));
    HLX_ASSIGN_OR_RETURN(ScatterDims d, wrap(scatter_dims_from_attr(*a)));
    std::vector<TensorType> in = operand_types(op);
    std::vector<TensorType> inputs(in.begin(), in.begin() + n), updates(in.begin() + n + 1, in.end());
    std::vector<TensorType> args, returned;
    HLX_RETURN_IF_ERROR(verify_region(op, 0, args, returned));
    HLX_ASSIGN_OR_RETURN(std::vector<DType> e, wrap(check_reduction_body("scatter", inputs, args, returned)));
    HLX_ASSIGN_OR_RETURN(std::vector<TensorType> out, wrap(infer_scatter(inputs, in[n], updates, d, e)));
    for (size_t i = 0; i < n; ++i) {
      const TensorType& got = type(op.results[i]);
      if (got.dtype != out[i].dtype) HLX_RETURN_IF_ERROR(expect_result(op, i, out[i], "scatter_c25"));
      HLX_RETURN_IF_ERROR(expect_result(op, i, out[i], "scatter_c24"));
    }
    return ok_status();
  }

  // Operand/result types of a call-like op against a function's signature.
  Status check_signature(const Op& op, const Function& callee, std::string_view in_label, std::string_view out_label) {
    std::vector<TensorType> want_in;
    for (ValueId a : callee.args)
      want_in.push_back(a >= 0 && size_t(a) < callee.value_types.size() ? callee.type_of(a) : TensorType{});
    std::vector<TensorType> got_in = operand_types(op), got_out = result_types(op);
    if (got_in != want_in)
      return failf(in_label, ": operands ", types_str(got_in), " do not match @", callee.name, " arguments ",
                   types_str(want_in));
    if (got_out != callee.result_types)
      return failf(out_label, ": results ", types_str(got_out), " do not match @", callee.name, " results ",
                   types_str(callee.result_types));
    return ok_status();
  }

  Status verify_call(const Op& op) {
    HLX_ASSIGN_OR_RETURN(const Attr* c, required(op, "call", "callee"));
    if (c->kind != Attr::Kind::kSymbol && c->kind != Attr::Kind::kString)
      return failf("call_attr: 'callee' must be a symbol reference");
    const Function* callee = m_.find_function(c->str);
    if (!callee) return failf("call_c1: callee @", c->str, " is not a function of this module");
    return check_signature(op, *callee, "call_c2", "call_c3");
  }

  Status verify_composite(const Op& op) {
    HLX_ASSIGN_OR_RETURN(const Attr* name, required(op, "composite", "name"));
    if (name->kind != Attr::Kind::kString) return failf("composite_attr: 'name' must be a string");
    // composite_c1: a namespaced op name such as "hlx.rms_norm".
    static const std::regex kName("^[a-zA-Z][a-zA-Z0-9_]*([.][a-zA-Z0-9_$]+)+$");
    if (!std::regex_match(name->str, kName))
      return failf("composite_c1: name \"", name->str, "\" is not a namespaced op name (e.g. \"my_namespace.my_op\")");
    HLX_ASSIGN_OR_RETURN(const Attr* dec, required(op, "composite", "decomposition"));
    if (dec->kind != Attr::Kind::kSymbol && dec->kind != Attr::Kind::kString)
      return failf("composite_attr: 'decomposition' must be a symbol reference");
    if (const Attr* ca = op.attr("composite_attributes"))
      if (ca->kind != Attr::Kind::kDict) return failf("composite_attr: 'composite_attributes' must be a dictionary");
    if (const Attr* v = op.attr("version"))
      if (v->kind != Attr::Kind::kInt) return failf("composite_attr: 'version' must be an integer");
    const Function* f = m_.find_function(dec->str);
    if (!f)
      return failf("composite_c2: decomposition @", dec->str, " of composite \"", name->str,
                   "\" is not a function of this module");
    return check_signature(op, *f, "composite_c3", "composite_c4");
  }

  const Module& m_;
  const Function* fn_ = nullptr;
  std::vector<Frame> frames_;
  std::vector<char> ever_defined_, visible_;
  std::vector<std::vector<ValueId>> scope_;
};

}  // namespace

Status verify_module(const Module& module) { return Verifier(module).run(); }

}  // namespace hlx::shlo
