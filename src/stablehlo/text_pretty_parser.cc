// The pretty (custom assembly) syntax of each op hlx knows, mapped onto the generic IR exactly as
// MLIR maps it: `dims = [0]` becomes broadcast_dimensions, `contracting_dims = [1] x [0]` becomes
// dot_dimension_numbers = #stablehlo.dot<...>, reduce's `applies stablehlo.add` becomes a region.
#include "stablehlo/text_ops.h"
#include "stablehlo/text_parser.h"

namespace hlx::shlo::text {

namespace {

TensorType scalar_of(const TensorType& t) { return TensorType{t.dtype, {}}; }

}  // namespace

Status TextParser::parse_pretty_op(Op& op, size_t op_pos, std::vector<TensorType>& result_types) {
  const std::string name = op.name;
  // `: T` (every operand and the result are T) or a full functional type.
  auto same_type = [&]() -> Status {
    HLX_RETURN_IF_ERROR(sc_.expect(":"));
    size_t at = sc_.pos();
    if (sc_.peek() == '(') {
      HLX_ASSIGN_OR_RETURN(FunctionSig sig, parse_function_type());
      if (sig.results.size() != 1)
        return sc_.error_at(at, "'", name, "' has exactly one result, type lists ", sig.results.size());
      HLX_RETURN_IF_ERROR(check_operand_types(op, sig.inputs, at));
      result_types = std::move(sig.results);
      return ok_status();
    }
    HLX_ASSIGN_OR_RETURN(TensorType t, parse_tensor_type());
    HLX_RETURN_IF_ERROR(check_operand_types(op, std::vector<TensorType>(op.operands.size(), t), at));
    result_types = {t};
    return ok_status();
  };
  auto functional = [&]() -> Status {
    HLX_RETURN_IF_ERROR(sc_.expect(":"));
    size_t at = sc_.pos();
    HLX_ASSIGN_OR_RETURN(FunctionSig sig, parse_function_type());
    HLX_RETURN_IF_ERROR(check_operand_types(op, sig.inputs, at));
    result_types = std::move(sig.results);
    return ok_status();
  };
  auto one_use = [&]() -> Status {
    HLX_ASSIGN_OR_RETURN(ValueId v, parse_use());
    op.operands.push_back(v);
    return ok_status();
  };
  auto need_operands = [&](size_t n) -> Status {
    if (op.operands.size() != n)
      return sc_.error_at(op_pos, "'", name, "' takes ", n, " operands, found ", op.operands.size());
    return ok_status();
  };
  // `keyword = [ints]` stored as an I64Array attribute.
  auto keyword_list = [&](std::string_view kw, std::string attr) -> Status {
    HLX_RETURN_IF_ERROR(sc_.expect_keyword(kw));
    HLX_RETURN_IF_ERROR(sc_.expect("="));
    HLX_ASSIGN_OR_RETURN(std::vector<int64_t> v, parse_int_list());
    op.attrs.push_back({std::move(attr), Attr::i64_array(std::move(v))});
    return ok_status();
  };
  // Operands each followed by ',' until a keyword (dynamic_slice, concatenate).
  auto uses_with_commas = [&]() -> Status {
    while (sc_.peek() == '%') {
      HLX_RETURN_IF_ERROR(one_use());
      HLX_RETURN_IF_ERROR(sc_.expect(","));
    }
    return ok_status();
  };
  auto attr_dict = [&]() { return parse_optional_attr_dict(op.attrs); };

  switch (syntax_of(name)) {
    case Syntax::kGeneric:
      return sc_.error_at(op_pos, "op '", name, "' must be written in generic form");
    case Syntax::kSameType: {
      HLX_RETURN_IF_ERROR(parse_uses(op.operands));
      if (op.operands.empty()) return sc_.error("expected operand of '", name, "', found ", sc_.found());
      HLX_RETURN_IF_ERROR(attr_dict());
      return same_type();
    }
    case Syntax::kFunctional:
      HLX_RETURN_IF_ERROR(parse_uses(op.operands));
      HLX_RETURN_IF_ERROR(attr_dict());
      return functional();
    case Syntax::kChloUnary: {
      HLX_RETURN_IF_ERROR(one_use());
      HLX_RETURN_IF_ERROR(attr_dict());
      HLX_RETURN_IF_ERROR(sc_.expect(":"));
      size_t at = sc_.pos();
      HLX_ASSIGN_OR_RETURN(TensorType in, parse_tensor_type());
      HLX_RETURN_IF_ERROR(check_operand_types(op, {in}, at));
      HLX_RETURN_IF_ERROR(sc_.expect("->"));
      HLX_ASSIGN_OR_RETURN(TensorType out, parse_tensor_type());
      result_types = {out};
      return ok_status();
    }
    case Syntax::kConstant: {
      HLX_RETURN_IF_ERROR(attr_dict());
      if (!sc_.try_keyword("dense"))
        return sc_.error("expected dense<...> value of 'stablehlo.constant', found ", sc_.found());
      HLX_ASSIGN_OR_RETURN(Attr value, parse_dense_after_keyword(nullptr));
      result_types = {value.dense->type};
      op.attrs.push_back({"value", std::move(value)});
      return ok_status();
    }
    case Syntax::kIota: {
      HLX_RETURN_IF_ERROR(sc_.expect_keyword("dim"));
      HLX_RETURN_IF_ERROR(sc_.expect("="));
      HLX_ASSIGN_OR_RETURN(int64_t d, sc_.integer());
      op.attrs.push_back({"iota_dimension", Attr::integer(d)});
      HLX_RETURN_IF_ERROR(attr_dict());
      HLX_RETURN_IF_ERROR(sc_.expect(":"));
      HLX_ASSIGN_OR_RETURN(TensorType t, parse_tensor_type());
      result_types = {t};
      return ok_status();
    }
    case Syntax::kCompare: {
      std::string dir(sc_.bare_id());
      if (dir.empty()) return sc_.error("expected comparison direction (EQ, NE, LT, LE, GT, GE), found ", sc_.found());
      op.attrs.push_back({"comparison_direction", Attr::enumeration("comparison_direction", dir)});
      HLX_RETURN_IF_ERROR(sc_.expect(","));
      HLX_RETURN_IF_ERROR(one_use());
      HLX_RETURN_IF_ERROR(sc_.expect(","));
      HLX_RETURN_IF_ERROR(one_use());
      if (sc_.try_consume(",")) {
        std::string type(sc_.bare_id());
        if (type.empty())
          return sc_.error("expected comparison type (FLOAT, SIGNED, UNSIGNED, TOTALORDER), found ", sc_.found());
        op.attrs.push_back({"compare_type", Attr::enumeration("comparison_type", type)});
      }
      HLX_RETURN_IF_ERROR(attr_dict());
      return functional();
    }
    case Syntax::kSelect: {
      HLX_RETURN_IF_ERROR(parse_uses(op.operands));
      HLX_RETURN_IF_ERROR(need_operands(3));
      HLX_RETURN_IF_ERROR(attr_dict());
      HLX_RETURN_IF_ERROR(sc_.expect(":"));
      size_t at = sc_.pos();
      if (sc_.peek() == '(') {
        HLX_ASSIGN_OR_RETURN(FunctionSig sig, parse_function_type());
        HLX_RETURN_IF_ERROR(check_operand_types(op, sig.inputs, at));
        result_types = std::move(sig.results);
        return ok_status();
      }
      HLX_ASSIGN_OR_RETURN(TensorType pred, parse_tensor_type());
      HLX_RETURN_IF_ERROR(sc_.expect(","));
      HLX_ASSIGN_OR_RETURN(TensorType t, parse_tensor_type());
      HLX_RETURN_IF_ERROR(check_operand_types(op, {pred, t, t}, at));
      result_types = {t};
      return ok_status();
    }
    case Syntax::kSlice: {
      HLX_RETURN_IF_ERROR(one_use());
      HLX_RETURN_IF_ERROR(sc_.expect("["));
      std::vector<int64_t> start, limit, stride;
      if (!sc_.try_consume("]")) {
        do {
          HLX_ASSIGN_OR_RETURN(int64_t s, sc_.integer());
          HLX_RETURN_IF_ERROR(sc_.expect(":"));
          HLX_ASSIGN_OR_RETURN(int64_t l, sc_.integer());
          int64_t st = 1;
          if (sc_.try_consume(":")) {
            HLX_ASSIGN_OR_RETURN(st, sc_.integer());
          }
          start.push_back(s);
          limit.push_back(l);
          stride.push_back(st);
        } while (sc_.try_consume(","));
        HLX_RETURN_IF_ERROR(sc_.expect("]"));
      }
      op.attrs.push_back({"start_indices", Attr::i64_array(std::move(start))});
      op.attrs.push_back({"limit_indices", Attr::i64_array(std::move(limit))});
      op.attrs.push_back({"strides", Attr::i64_array(std::move(stride))});
      HLX_RETURN_IF_ERROR(attr_dict());
      return functional();
    }
    case Syntax::kDynamicSlice:
      HLX_RETURN_IF_ERROR(one_use());
      HLX_RETURN_IF_ERROR(sc_.expect(","));
      HLX_RETURN_IF_ERROR(uses_with_commas());
      HLX_RETURN_IF_ERROR(keyword_list("sizes", "slice_sizes"));
      HLX_RETURN_IF_ERROR(attr_dict());
      return functional();
    case Syntax::kBroadcastInDim:
    case Syntax::kTranspose:
      HLX_RETURN_IF_ERROR(one_use());
      HLX_RETURN_IF_ERROR(sc_.expect(","));
      HLX_RETURN_IF_ERROR(
          keyword_list("dims", syntax_of(name) == Syntax::kTranspose ? "permutation" : "broadcast_dimensions"));
      HLX_RETURN_IF_ERROR(attr_dict());
      return functional();
    case Syntax::kConcatenate: {
      HLX_RETURN_IF_ERROR(uses_with_commas());
      HLX_RETURN_IF_ERROR(sc_.expect_keyword("dim"));
      HLX_RETURN_IF_ERROR(sc_.expect("="));
      HLX_ASSIGN_OR_RETURN(int64_t d, sc_.integer());
      op.attrs.push_back({"dimension", Attr::integer(d)});
      HLX_RETURN_IF_ERROR(attr_dict());
      return functional();
    }
    case Syntax::kPad:
      HLX_RETURN_IF_ERROR(one_use());
      HLX_RETURN_IF_ERROR(sc_.expect(","));
      HLX_RETURN_IF_ERROR(one_use());
      HLX_RETURN_IF_ERROR(sc_.expect(","));
      HLX_RETURN_IF_ERROR(keyword_list("low", "edge_padding_low"));
      HLX_RETURN_IF_ERROR(sc_.expect(","));
      HLX_RETURN_IF_ERROR(keyword_list("high", "edge_padding_high"));
      HLX_RETURN_IF_ERROR(sc_.expect(","));
      HLX_RETURN_IF_ERROR(keyword_list("interior", "interior_padding"));
      HLX_RETURN_IF_ERROR(attr_dict());
      return functional();
    case Syntax::kReduce: {
      std::vector<ValueId> inputs, inits;
      do {
        HLX_RETURN_IF_ERROR(sc_.expect("("));
        HLX_ASSIGN_OR_RETURN(ValueId in, parse_use());
        HLX_RETURN_IF_ERROR(sc_.expect_keyword("init"));
        HLX_RETURN_IF_ERROR(sc_.expect(":"));
        HLX_ASSIGN_OR_RETURN(ValueId init, parse_use());
        HLX_RETURN_IF_ERROR(sc_.expect(")"));
        inputs.push_back(in);
        inits.push_back(init);
      } while (sc_.try_consume(","));
      op.operands = inputs;
      op.operands.insert(op.operands.end(), inits.begin(), inits.end());
      std::string inner;
      size_t inner_at = sc_.pos();
      if (sc_.try_keyword("applies")) {
        inner_at = sc_.pos();
        inner = std::string(sc_.bare_id());
        if (!is_commutative_binary(inner))
          return sc_.error_at(inner_at,
                              "expected the inner op of 'applies' to be a commutative binary stablehlo op, found '",
                              inner, "'");
      }
      HLX_RETURN_IF_ERROR(sc_.expect_keyword("across"));
      HLX_RETURN_IF_ERROR(keyword_list("dimensions", "dimensions"));
      HLX_RETURN_IF_ERROR(attr_dict());
      HLX_RETURN_IF_ERROR(functional());
      Block body;
      if (!inner.empty()) {
        // Expand the short form into the region MLIR builds for it.
        TensorType s = scalar_of(fn_->type_of(inputs[0]));
        ValueId a = fn_->new_value(s), b = fn_->new_value(s), r = fn_->new_value(s);
        body.args = {a, b};
        Op inner_op;
        inner_op.name = inner;
        inner_op.operands = {a, b};
        inner_op.results = {r};
        Op ret;
        ret.name = "stablehlo.return";
        ret.operands = {r};
        body.ops.push_back(std::move(inner_op));
        body.ops.push_back(std::move(ret));
      } else {
        HLX_RETURN_IF_ERROR(sc_.expect_keyword("reducer"));
        scopes_.emplace_back();
        auto parse_args = [&]() -> Status {
          std::vector<ValueId> firsts, seconds;
          while (sc_.try_consume("(")) {
            for (int k = 0; k < 2; ++k) {
              if (k) HLX_RETURN_IF_ERROR(sc_.expect(","));
              size_t arg_at = sc_.pos();
              HLX_RETURN_IF_ERROR(sc_.expect("%"));
              std::string arg(sc_.suffix_id());
              if (arg.empty()) return sc_.error_at(arg_at, "expected reducer argument name after '%'");
              HLX_RETURN_IF_ERROR(sc_.expect(":"));
              HLX_ASSIGN_OR_RETURN(TensorType t, parse_tensor_type());
              HLX_RETURN_IF_ERROR(skip_location());
              ValueId v = fn_->new_value(std::move(t));
              HLX_RETURN_IF_ERROR(define(std::move(arg), {v}, arg_at));
              (k ? seconds : firsts).push_back(v);
            }
            HLX_RETURN_IF_ERROR(sc_.expect(")"));
          }
          if (firsts.size() != inputs.size())
            return sc_.error("reducer of 'stablehlo.reduce' has ", firsts.size(), " argument pairs, expected ",
                             inputs.size());
          body.args = firsts;
          body.args.insert(body.args.end(), seconds.begin(), seconds.end());
          return parse_region(body, /*allow_label=*/false);
        };
        Status s = parse_args();
        scopes_.pop_back();
        HLX_RETURN_IF_ERROR(s);
      }
      op.regions.push_back(std::move(body));
      return ok_status();
    }
    case Syntax::kDotGeneral: {
      HLX_RETURN_IF_ERROR(one_use());
      HLX_RETURN_IF_ERROR(sc_.expect(","));
      HLX_RETURN_IF_ERROR(one_use());
      HLX_RETURN_IF_ERROR(sc_.expect(","));
      AttrDict dims;
      auto pair = [&](std::string lhs, std::string rhs) -> Status {
        HLX_RETURN_IF_ERROR(sc_.expect("="));
        HLX_ASSIGN_OR_RETURN(std::vector<int64_t> l, parse_int_list());
        HLX_RETURN_IF_ERROR(sc_.expect_keyword("x"));
        HLX_ASSIGN_OR_RETURN(std::vector<int64_t> r, parse_int_list());
        if (!l.empty()) dims.push_back({std::move(lhs), Attr::i64_array(std::move(l))});
        if (!r.empty()) dims.push_back({std::move(rhs), Attr::i64_array(std::move(r))});
        return ok_status();
      };
      if (sc_.try_keyword("batching_dims")) {
        HLX_RETURN_IF_ERROR(pair("lhs_batching_dimensions", "rhs_batching_dimensions"));
        HLX_RETURN_IF_ERROR(sc_.expect(","));
      }
      HLX_RETURN_IF_ERROR(sc_.expect_keyword("contracting_dims"));
      HLX_RETURN_IF_ERROR(pair("lhs_contracting_dimensions", "rhs_contracting_dimensions"));
      op.attrs.push_back({"dot_dimension_numbers", Attr::structure("dot", std::move(dims))});
      if (sc_.try_consume(",")) {
        if (sc_.try_keyword("algorithm")) return sc_.unsupported("dot_general 'algorithm' is not supported");
        HLX_RETURN_IF_ERROR(sc_.expect_keyword("precision"));
        HLX_RETURN_IF_ERROR(sc_.expect("="));
        HLX_RETURN_IF_ERROR(sc_.expect("["));
        std::vector<Attr> precisions;
        if (!sc_.try_consume("]")) {
          do {
            std::string p(sc_.bare_id());
            if (p.empty()) return sc_.error("expected precision (DEFAULT, HIGH, HIGHEST), found ", sc_.found());
            precisions.push_back(Attr::enumeration("precision", p));
          } while (sc_.try_consume(","));
          HLX_RETURN_IF_ERROR(sc_.expect("]"));
        }
        op.attrs.push_back({"precision_config", Attr::array(std::move(precisions))});
        if (sc_.try_consume(",")) return sc_.unsupported("dot_general 'algorithm' is not supported");
      }
      HLX_RETURN_IF_ERROR(attr_dict());
      return functional();
    }
    case Syntax::kConvolution: {
      HLX_RETURN_IF_ERROR(sc_.expect("("));
      HLX_RETURN_IF_ERROR(parse_uses(op.operands));
      HLX_RETURN_IF_ERROR(sc_.expect(")"));
      HLX_RETURN_IF_ERROR(need_operands(2));
      HLX_RETURN_IF_ERROR(sc_.expect_keyword("dim_numbers"));
      HLX_RETURN_IF_ERROR(sc_.expect("="));
      HLX_ASSIGN_OR_RETURN(Attr dims, parse_conv_dims_compact());
      HLX_RETURN_IF_ERROR(sc_.expect(","));
      HLX_RETURN_IF_ERROR(sc_.expect_keyword("window"));
      HLX_RETURN_IF_ERROR(sc_.expect("="));
      HLX_RETURN_IF_ERROR(sc_.expect("{"));
      AttrDict window;
      if (!sc_.try_consume("}")) {
        do {
          size_t kw_at = sc_.pos();
          std::string kw(sc_.bare_id());
          static const std::pair<const char*, const char*> kNames[] = {{"stride", "window_strides"},
                                                                       {"pad", "padding"},
                                                                       {"lhs_dilate", "lhs_dilation"},
                                                                       {"rhs_dilate", "rhs_dilation"},
                                                                       {"reverse", "window_reversal"}};
          std::string attr;
          for (auto [k, a] : kNames)
            if (kw == k) attr = a;
          if (attr.empty())
            return sc_.error_at(kw_at, "unexpected keyword '", kw,
                                "' in convolution window (expected stride, pad, lhs_dilate, rhs_dilate, reverse)");
          if (find_attr(window, attr)) return sc_.error_at(kw_at, "duplicate window attribute '", kw, "'");
          HLX_RETURN_IF_ERROR(sc_.expect("="));
          if (kw == "pad") {
            HLX_RETURN_IF_ERROR(sc_.expect("["));
            std::vector<int64_t> flat;
            if (!sc_.try_consume("]")) {
              do {
                size_t pair_at = sc_.pos();
                HLX_ASSIGN_OR_RETURN(std::vector<int64_t> p, parse_int_list());
                if (p.size() != 2)
                  return sc_.error_at(pair_at, "expected [low, high] padding pair, found ", p.size(), " values");
                flat.insert(flat.end(), p.begin(), p.end());
                if (flat.size() > 512) return sc_.error_at(pair_at, "too many padding pairs");
              } while (sc_.try_consume(","));
              HLX_RETURN_IF_ERROR(sc_.expect("]"));
            }
            DenseElements d;
            d.type = TensorType{DType::kI64, {int64_t(flat.size() / 2), 2}};
            d.bytes.resize(flat.size() * 8);
            for (size_t i = 0; i < flat.size(); ++i)
              for (size_t b = 0; b < 8; ++b) d.bytes[i * 8 + b] = uint8_t(uint64_t(flat[i]) >> (8 * b));
            window.push_back({attr, Attr::dense_elements(std::move(d))});
          } else if (kw == "reverse") {
            HLX_RETURN_IF_ERROR(sc_.expect("["));
            std::vector<bool> flags;
            if (!sc_.try_consume("]")) {
              do {
                if (sc_.try_keyword("true"))
                  flags.push_back(true);
                else if (sc_.try_keyword("false"))
                  flags.push_back(false);
                else {
                  HLX_ASSIGN_OR_RETURN(int64_t x, sc_.integer());
                  flags.push_back(x != 0);
                }
              } while (sc_.try_consume(","));
              HLX_RETURN_IF_ERROR(sc_.expect("]"));
            }
            window.push_back({attr, Attr::bool_array(flags)});
          } else {
            HLX_ASSIGN_OR_RETURN(std::vector<int64_t> v, parse_int_list());
            window.push_back({attr, Attr::i64_array(std::move(v))});
          }
        } while (sc_.try_consume(","));
        HLX_RETURN_IF_ERROR(sc_.expect("}"));
      }
      for (NamedAttr& a : window) op.attrs.push_back(std::move(a));
      op.attrs.push_back({"dimension_numbers", std::move(dims)});
      HLX_RETURN_IF_ERROR(attr_dict());
      return functional();
    }
    case Syntax::kCustomCall:
    case Syntax::kCall: {
      size_t at = sc_.pos();
      HLX_RETURN_IF_ERROR(sc_.expect("@"));
      std::string target;
      if (sc_.pos() < sc_.text().size() && sc_.text()[sc_.pos()] == '"') {
        HLX_ASSIGN_OR_RETURN(target, sc_.string_literal());
      } else {
        target = std::string(sc_.suffix_id());
      }
      if (target.empty()) return sc_.error_at(at, "expected symbol name after '@'");
      if (syntax_of(name) == Syntax::kCall)
        op.attrs.push_back({"callee", Attr::symbol(target)});
      else
        op.attrs.push_back({"call_target_name", Attr::string(target)});
      HLX_RETURN_IF_ERROR(sc_.expect("("));
      HLX_RETURN_IF_ERROR(parse_uses(op.operands));
      HLX_RETURN_IF_ERROR(sc_.expect(")"));
      HLX_RETURN_IF_ERROR(attr_dict());
      return functional();
    }
    case Syntax::kComposite: {
      HLX_ASSIGN_OR_RETURN(std::string composite, sc_.string_literal());
      op.attrs.push_back({"name", Attr::string(std::move(composite))});
      HLX_RETURN_IF_ERROR(parse_uses(op.operands));
      if (sc_.peek() == '(') return sc_.unsupported("composite regions are not supported");
      HLX_RETURN_IF_ERROR(attr_dict());
      return functional();
    }
    case Syntax::kReturn: {
      HLX_RETURN_IF_ERROR(parse_uses(op.operands));
      HLX_RETURN_IF_ERROR(attr_dict());
      if (op.operands.empty()) return ok_status();
      HLX_RETURN_IF_ERROR(sc_.expect(":"));
      size_t at = sc_.pos();
      std::vector<TensorType> types;
      do {
        HLX_ASSIGN_OR_RETURN(TensorType t, parse_tensor_type());
        types.push_back(std::move(t));
      } while (sc_.try_consume(","));
      return check_operand_types(op, types, at);
    }
  }
  return sc_.error_at(op_pos, "internal: unhandled syntax for '", name, "'");
}

}  // namespace hlx::shlo::text
