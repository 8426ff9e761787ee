#include "stablehlo/builder.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "stablehlo/verifier.h"

namespace hlx::shlo {
namespace {

const char* dir_name(CompareDir d) {
  switch (d) {
    case CompareDir::kEQ:
      return "EQ";
    case CompareDir::kNE:
      return "NE";
    case CompareDir::kGE:
      return "GE";
    case CompareDir::kGT:
      return "GT";
    case CompareDir::kLE:
      return "LE";
    case CompareDir::kLT:
      return "LT";
  }
  return "EQ";
}

// Writes one element of `dtype` holding `v` (floats) or `iv` (integers, exact) at `out`.
void encode_scalar(DType dtype, double v, std::optional<int64_t> iv, uint8_t* out) {
  auto to_int = [&](double lo, double hi) -> int64_t {
    if (iv) return *iv;
    if (std::isnan(v)) return 0;
    // Clamp first: converting an out-of-range double to an integer is undefined behaviour.
    return int64_t(std::fmax(lo, std::fmin(hi, std::trunc(v))));
  };
  switch (dtype) {
    case DType::kF32: {
      float f = iv ? float(*iv) : float(v);
      std::memcpy(out, &f, 4);
      break;
    }
    case DType::kF16: {
      f16 h = f32_to_f16(iv ? float(*iv) : float(v));
      std::memcpy(out, &h.bits, 2);
      break;
    }
    case DType::kBF16: {
      bf16 h = f32_to_bf16(iv ? float(*iv) : float(v));
      std::memcpy(out, &h.bits, 2);
      break;
    }
    case DType::kI64: {
      int64_t x = to_int(-9.2233720368547758e18, 9.2233720368547748e18);
      std::memcpy(out, &x, 8);
      break;
    }
    case DType::kI32: {
      int32_t x = int32_t(to_int(-2147483648.0, 2147483647.0));
      std::memcpy(out, &x, 4);
      break;
    }
    case DType::kI16: {
      int16_t x = int16_t(to_int(-32768.0, 32767.0));
      std::memcpy(out, &x, 2);
      break;
    }
    case DType::kI8: {
      int8_t x = int8_t(to_int(-128.0, 127.0));
      std::memcpy(out, &x, 1);
      break;
    }
    case DType::kU8: {
      uint8_t x = uint8_t(to_int(0.0, 255.0));
      std::memcpy(out, &x, 1);
      break;
    }
    case DType::kI1:
      out[0] = (iv ? *iv != 0 : v != 0) ? 1 : 0;
      break;
  }
}

DenseElements scalar_dense(DType dtype, double v, std::optional<int64_t> iv = std::nullopt) {
  DenseElements d;
  d.type = TensorType{dtype, {}};
  d.bytes.resize(dtype_size(dtype));
  encode_scalar(dtype, v, iv, d.bytes.data());
  return d;
}

std::vector<TensorType> types_of(const std::vector<Value>& vs) {
  std::vector<TensorType> t;
  for (const Value& v : vs) t.push_back(v.type());
  return t;
}

}  // namespace

// ------------------------------------------------------------------ FunctionBuilder basics

FunctionBuilder::FunctionBuilder(ModuleBuilder* module, std::string name, bool is_public) : module_(module) {
  fn_.name = std::move(name);
  fn_.is_public = is_public;
  blocks_.push_back(&fn_.body);
}

Value FunctionBuilder::fail(std::string_view op, const Status& s) {
  if (status_.ok()) {
    std::string where = str_cat(" (building @", fn_.name, ", op ", op);
    if (!scope_.empty()) where += str_cat(", scope '", scope_, "'");
    status_ = Status(s.kind(), s.message() + where + ")");
  }
  return Value();
}

std::vector<Value> FunctionBuilder::fail_n(std::string_view op, const Status& s, size_t n) {
  fail(op, s);
  // Never empty, so that `op(...)[0]` stays safe when the result count is unknown.
  return std::vector<Value>(std::max<size_t>(n, 1));
}

bool FunctionBuilder::usable(std::string_view op, const std::vector<Value>& vs) {
  for (size_t i = 0; i < vs.size(); ++i) {
    if (!vs[i].valid()) {
      // An invalid Value after an error is the normal cascade; before one it is a caller bug.
      if (status_.ok()) fail(op, make_error(ErrorKind::kInvalidArgument, "operand #", i, " is an invalid Value"));
      return false;
    }
    if (vs[i].owner_ != this) {
      fail(op,
           make_error(ErrorKind::kInvalidArgument, "operand #", i, " %", vs[i].id(), " belongs to another function"));
      return false;
    }
  }
  return status_.ok();
}

std::vector<Value> FunctionBuilder::emit(std::string name, const std::vector<Value>& operands,
                                         const std::vector<TensorType>& result_types, AttrDict attrs,
                                         std::vector<Block> regions) {
  if (returned_)
    return fail_n(name, make_error(ErrorKind::kInvalidArgument, "op emitted after ret()"), result_types.size());
  Op op;
  op.name = std::move(name);
  for (const Value& v : operands) op.operands.push_back(v.id());
  std::vector<Value> out;
  for (const TensorType& t : result_types) {
    ValueId id = fn_.new_value(t);
    op.results.push_back(id);
    out.push_back(Value(this, id, t));
  }
  op.attrs = std::move(attrs);
  op.regions = std::move(regions);
  blocks_.back()->push_back(std::move(op));
  return out;
}

Value FunctionBuilder::emit1(std::string name, const std::vector<Value>& operands, const TensorType& result,
                             AttrDict attrs) {
  return emit(std::move(name), operands, {result}, std::move(attrs))[0];
}

std::vector<Value> FunctionBuilder::raw_op(std::string name, const std::vector<Value>& operands,
                                           const std::vector<TensorType>& result_types, AttrDict attrs,
                                           std::vector<Block> regions) {
  if (!usable(name, operands)) return std::vector<Value>(std::max<size_t>(result_types.size(), 1));
  return emit(std::move(name), operands, result_types, std::move(attrs), std::move(regions));
}

// ------------------------------------------------------------------ signature

Value FunctionBuilder::arg(TensorType type, std::string name, std::optional<int> alias_output) {
  // Arguments may be added at any point (e.g. a layer's weights when the layer is emitted); they
  // are function arguments, visible everywhere, whatever their position among the ops.
  if (returned_) return fail("arg", make_error(ErrorKind::kInvalidArgument, "argument added after ret()"));
  ValueId id = fn_.new_value(type);
  fn_.args.push_back(id);
  AttrDict attrs;
  if (!name.empty()) attrs.push_back({kArgNameAttr, Attr::string(std::move(name))});
  if (alias_output) attrs.push_back({kAliasAttr, Attr::integer(*alias_output, DType::kI32)});
  fn_.arg_attrs.push_back(std::move(attrs));
  return Value(this, id, std::move(type));
}

void FunctionBuilder::set_arg_attr(const Value& v, std::string key, Attr value) {
  for (size_t i = 0; i < fn_.args.size(); ++i)
    if (v.owner_ == this && fn_.args[i] == v.id()) {
      set_attr(fn_.arg_attrs[i], std::move(key), std::move(value));
      return;
    }
  fail("set_arg_attr", make_error(ErrorKind::kInvalidArgument, "%", v.id(), " is not an argument of @", fn_.name));
}

void FunctionBuilder::ret(const std::vector<Value>& values, std::vector<AttrDict> result_attrs) {
  if (returned_) {
    fail("func.return", make_error(ErrorKind::kInvalidArgument, "ret() called twice"));
    return;
  }
  if (blocks_.size() != 1) {
    fail("func.return", make_error(ErrorKind::kInvalidArgument, "ret() called inside a region body"));
    return;
  }
  if (!result_attrs.empty() && result_attrs.size() != values.size()) {
    fail("func.return", make_error(ErrorKind::kInvalidArgument, result_attrs.size(), " result attribute dicts for ",
                                   values.size(), " results"));
    return;
  }
  if (!usable("func.return", values)) return;
  emit("func.return", values, {}, {});
  fn_.result_types = types_of(values);
  fn_.result_attrs = std::move(result_attrs);
  returned_ = true;
}

// ------------------------------------------------------------------ constants

Value FunctionBuilder::constant(DenseElements value) {
  auto t = infer_constant(value);
  if (!t.ok()) return fail("stablehlo.constant", t.status());
  TensorType type = *t;
  return emit1("stablehlo.constant", {}, type, {{"value", Attr::dense_elements(std::move(value))}});
}

Value FunctionBuilder::constant(const Tensor& t) {
  if (!t.defined()) return fail("stablehlo.constant", make_error(ErrorKind::kInvalidArgument, "tensor has no data"));
  DenseElements d;
  d.type = TensorType{t.dtype(), t.shape()};
  const uint8_t* p = static_cast<const uint8_t*>(t.raw());
  d.bytes.assign(p, p + t.nbytes());
  return constant(std::move(d));
}

Value FunctionBuilder::scalar(double value, DType dtype) { return constant(scalar_dense(dtype, value)); }

Value FunctionBuilder::ints(const std::vector<int64_t>& values, DType dtype) {
  DenseElements d;
  d.type = TensorType{dtype, {int64_t(values.size())}};
  d.bytes.resize(values.size() * dtype_size(dtype));
  for (size_t i = 0; i < values.size(); ++i) encode_scalar(dtype, 0, values[i], d.bytes.data() + i * dtype_size(dtype));
  return constant(std::move(d));
}

Value FunctionBuilder::full(double value, const TensorType& type) {
  Value s = scalar(value, type.dtype);
  if (type.rank() == 0) return s;
  return broadcast_in_dim(s, type.shape, {});
}

Value FunctionBuilder::lowest(DType dtype) {
  switch (dtype) {
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
      return scalar(-std::numeric_limits<double>::infinity(), dtype);
    case DType::kI64:
      return constant(scalar_dense(dtype, 0, std::numeric_limits<int64_t>::min()));
    case DType::kI32:
      return constant(scalar_dense(dtype, 0, std::numeric_limits<int32_t>::min()));
    case DType::kI16:
      return constant(scalar_dense(dtype, 0, std::numeric_limits<int16_t>::min()));
    case DType::kI8:
      return constant(scalar_dense(dtype, 0, std::numeric_limits<int8_t>::min()));
    case DType::kU8:
    case DType::kI1:
      return constant(scalar_dense(dtype, 0, 0));
  }
  return Value();
}

Value FunctionBuilder::highest(DType dtype) {
  switch (dtype) {
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
      return scalar(std::numeric_limits<double>::infinity(), dtype);
    case DType::kI64:
      return constant(scalar_dense(dtype, 0, std::numeric_limits<int64_t>::max()));
    case DType::kI32:
      return constant(scalar_dense(dtype, 0, std::numeric_limits<int32_t>::max()));
    case DType::kI16:
      return constant(scalar_dense(dtype, 0, std::numeric_limits<int16_t>::max()));
    case DType::kI8:
      return constant(scalar_dense(dtype, 0, std::numeric_limits<int8_t>::max()));
    case DType::kU8:
      return constant(scalar_dense(dtype, 0, 255));
    case DType::kI1:
      return constant(scalar_dense(dtype, 0, 1));
  }
  return Value();
}

Value FunctionBuilder::iota(const TensorType& type, int64_t dimension) {
  auto t = infer_iota(type, dimension);
  if (!t.ok()) return fail("stablehlo.iota", t.status());
  return emit1("stablehlo.iota", {}, type, {{"iota_dimension", Attr::integer(dimension)}});
}

// ------------------------------------------------------------------ elementwise

Value FunctionBuilder::unary(std::string_view op, const Value& a) {
  std::string name = op == "erf" ? "chlo.erf" : str_cat("stablehlo.", op);
  if (!usable(name, {a})) return Value();
  auto t = infer_unary(op, a.type());
  if (!t.ok()) return fail(name, t.status());
  return emit1(name, {a}, *t);
}

Value FunctionBuilder::erf(const Value& a) { return unary("erf", a); }

Value FunctionBuilder::binary(std::string_view op, const Value& a, const Value& b) {
  std::string name = str_cat("stablehlo.", op);
  if (!usable(name, {a, b})) return Value();
  auto t = infer_binary(op, a.type(), b.type());
  if (!t.ok()) return fail(name, t.status());
  return emit1(name, {a, b}, *t);
}

Value FunctionBuilder::compare(CompareDir dir, const Value& a, const Value& b, std::string compare_type) {
  if (!usable("stablehlo.compare", {a, b})) return Value();
  if (compare_type.empty()) compare_type = std::string(default_compare_type(a.dtype()));
  auto t = infer_compare(a.type(), b.type(), dir_name(dir), compare_type);
  if (!t.ok()) return fail("stablehlo.compare", t.status());
  return emit1("stablehlo.compare", {a, b}, *t,
               {{"comparison_direction", Attr::enumeration("comparison_direction", dir_name(dir))},
                {"compare_type", Attr::enumeration("comparison_type", compare_type)}});
}

Value FunctionBuilder::select(const Value& pred, const Value& on_true, const Value& on_false) {
  if (!usable("stablehlo.select", {pred, on_true, on_false})) return Value();
  auto t = infer_select(pred.type(), on_true.type(), on_false.type());
  if (!t.ok()) return fail("stablehlo.select", t.status());
  return emit1("stablehlo.select", {pred, on_true, on_false}, *t);
}

Value FunctionBuilder::clamp(const Value& min, const Value& x, const Value& max) {
  if (!usable("stablehlo.clamp", {min, x, max})) return Value();
  auto t = infer_clamp(min.type(), x.type(), max.type());
  if (!t.ok()) return fail("stablehlo.clamp", t.status());
  return emit1("stablehlo.clamp", {min, x, max}, *t);
}

Value FunctionBuilder::convert(const Value& x, DType to) {
  if (!usable("stablehlo.convert", {x})) return Value();
  if (x.dtype() == to) return x;  // a no-op convert only adds noise to the program
  auto t = infer_convert(x.type(), to);
  if (!t.ok()) return fail("stablehlo.convert", t.status());
  return emit1("stablehlo.convert", {x}, *t);
}

// ------------------------------------------------------------------ shapes

Value FunctionBuilder::broadcast_in_dim(const Value& x, const Shape& shape, const Dims& dims) {
  if (!usable("stablehlo.broadcast_in_dim", {x})) return Value();
  auto t = infer_broadcast_in_dim(x.type(), dims, shape);
  if (!t.ok()) return fail("stablehlo.broadcast_in_dim", t.status());
  return emit1("stablehlo.broadcast_in_dim", {x}, *t, {{"broadcast_dimensions", Attr::i64_array(dims)}});
}

Value FunctionBuilder::broadcast_to(const Value& x, const Shape& shape) {
  if (!usable("stablehlo.broadcast_in_dim", {x})) return Value();
  if (x.rank() > int64_t(shape.size()))
    return fail("stablehlo.broadcast_in_dim",
                make_error(ErrorKind::kInvalidArgument, "broadcast_to: ", x.type().to_string(),
                           " has higher rank than target shape ", dims_to_string(shape)));
  if (x.shape() == shape) return x;
  Dims dims;
  for (int64_t i = 0; i < x.rank(); ++i) dims.push_back(int64_t(shape.size()) - x.rank() + i);
  return broadcast_in_dim(x, shape, dims);
}

Value FunctionBuilder::reshape(const Value& x, const Shape& shape) {
  if (!usable("stablehlo.reshape", {x})) return Value();
  auto t = infer_reshape(x.type(), shape);
  if (!t.ok()) return fail("stablehlo.reshape", t.status());
  return emit1("stablehlo.reshape", {x}, *t);
}

Value FunctionBuilder::transpose(const Value& x, const Dims& perm) {
  if (!usable("stablehlo.transpose", {x})) return Value();
  auto t = infer_transpose(x.type(), perm);
  if (!t.ok()) return fail("stablehlo.transpose", t.status());
  return emit1("stablehlo.transpose", {x}, *t, {{"permutation", Attr::i64_array(perm)}});
}

Value FunctionBuilder::slice(const Value& x, const Dims& start, const Dims& limit, const Dims& strides_in) {
  if (!usable("stablehlo.slice", {x})) return Value();
  Dims strides = strides_in.empty() ? Dims(start.size(), 1) : strides_in;
  auto t = infer_slice(x.type(), start, limit, strides);
  if (!t.ok()) return fail("stablehlo.slice", t.status());
  return emit1("stablehlo.slice", {x}, *t,
               {{"start_indices", Attr::i64_array(start)},
                {"limit_indices", Attr::i64_array(limit)},
                {"strides", Attr::i64_array(strides)}});
}

Value FunctionBuilder::dynamic_slice(const Value& x, const std::vector<Value>& starts, const Dims& sizes) {
  std::vector<Value> ops = {x};
  ops.insert(ops.end(), starts.begin(), starts.end());
  if (!usable("stablehlo.dynamic_slice", ops)) return Value();
  auto t = infer_dynamic_slice(x.type(), types_of(starts), sizes);
  if (!t.ok()) return fail("stablehlo.dynamic_slice", t.status());
  return emit1("stablehlo.dynamic_slice", ops, *t, {{"slice_sizes", Attr::i64_array(sizes)}});
}

Value FunctionBuilder::dynamic_update_slice(const Value& x, const Value& update, const std::vector<Value>& starts) {
  std::vector<Value> ops = {x, update};
  ops.insert(ops.end(), starts.begin(), starts.end());
  if (!usable("stablehlo.dynamic_update_slice", ops)) return Value();
  auto t = infer_dynamic_update_slice(x.type(), update.type(), types_of(starts));
  if (!t.ok()) return fail("stablehlo.dynamic_update_slice", t.status());
  return emit1("stablehlo.dynamic_update_slice", ops, *t);
}

Value FunctionBuilder::concatenate(const std::vector<Value>& inputs, int64_t dimension) {
  if (!usable("stablehlo.concatenate", inputs)) return Value();
  auto t = infer_concatenate(types_of(inputs), dimension);
  if (!t.ok()) return fail("stablehlo.concatenate", t.status());
  return emit1("stablehlo.concatenate", inputs, *t, {{"dimension", Attr::integer(dimension)}});
}

Value FunctionBuilder::pad(const Value& x, const Value& padding_value, const Dims& low, const Dims& high,
                           const Dims& interior_in) {
  if (!usable("stablehlo.pad", {x, padding_value})) return Value();
  Dims interior = interior_in.empty() ? Dims(low.size(), 0) : interior_in;
  auto t = infer_pad(x.type(), padding_value.type(), low, high, interior);
  if (!t.ok()) return fail("stablehlo.pad", t.status());
  return emit1("stablehlo.pad", {x, padding_value}, *t,
               {{"edge_padding_low", Attr::i64_array(low)},
                {"edge_padding_high", Attr::i64_array(high)},
                {"interior_padding", Attr::i64_array(interior)}});
}

// ------------------------------------------------------------------ regions and reductions

Result<Block> FunctionBuilder::build_region(const std::vector<TensorType>& arg_types, const BodyFn& body,
                                            std::vector<TensorType>& returned) {
  Block blk;
  std::vector<Value> args;
  for (const TensorType& t : arg_types) {
    ValueId id = fn_.new_value(t);
    blk.args.push_back(id);
    args.push_back(Value(this, id, t));
  }
  blocks_.push_back(&blk.ops);
  std::vector<Value> rets = body ? body(*this, args) : std::vector<Value>{};
  blocks_.pop_back();
  if (!status_.ok()) return status_;
  for (size_t i = 0; i < rets.size(); ++i)
    if (!rets[i].valid() || rets[i].owner_ != this)
      return make_error(ErrorKind::kInvalidArgument, "region body returned an invalid value #", i);
  Op ret;
  ret.name = "stablehlo.return";
  for (const Value& v : rets) ret.operands.push_back(v.id());
  blk.ops.push_back(std::move(ret));
  returned = types_of(rets);
  return blk;
}

BodyFn FunctionBuilder::reducer_body(Reducer r, std::string_view op) {
  return [r](FunctionBuilder& b, const std::vector<Value>& a) -> std::vector<Value> {
    switch (r) {
      case Reducer::kSum:
        return {b.add(a[0], a[1])};
      case Reducer::kProd:
        return {b.mul(a[0], a[1])};
      case Reducer::kMax:
        return {b.max(a[0], a[1])};
      case Reducer::kMin:
        return {b.min(a[0], a[1])};
      case Reducer::kAnd:
        return {b.logical_and(a[0], a[1])};
      case Reducer::kOr:
        return {b.logical_or(a[0], a[1])};
      case Reducer::kReplace:
        return {a[1]};
    }
    return {};
  };
}

std::vector<Value> FunctionBuilder::reduce(const std::vector<Value>& inputs, const std::vector<Value>& inits,
                                           const Dims& dims, const BodyFn& body) {
  const char* name = "stablehlo.reduce";
  std::vector<Value> ops = inputs;
  ops.insert(ops.end(), inits.begin(), inits.end());
  if (!usable(name, ops)) return std::vector<Value>(std::max<size_t>(inputs.size(), 1));
  if (inputs.size() != inits.size() || inputs.empty())
    return fail_n(
        name,
        make_error(ErrorKind::kVerify, "reduce_c3: ", inputs.size(), " inputs and ", inits.size(), " init values"),
        inputs.size());
  // The body works on scalars of the init values' element types.
  std::vector<TensorType> arg_types;
  for (int k = 0; k < 2; ++k)
    for (const Value& v : inits) arg_types.push_back(TensorType{v.dtype(), {}});
  std::vector<TensorType> returned;
  auto blk = build_region(arg_types, body, returned);
  if (!blk.ok()) return fail_n(name, blk.status(), inputs.size());
  auto e = check_reduction_body("reduce", types_of(inputs), arg_types, returned);
  if (!e.ok()) return fail_n(name, e.status(), inputs.size());
  auto out = infer_reduce(types_of(inputs), types_of(inits), dims, *e);
  if (!out.ok()) return fail_n(name, out.status(), inputs.size());
  std::vector<Block> regions;
  regions.push_back(std::move(*blk));
  return emit(name, ops, *out, {{"dimensions", Attr::i64_array(dims)}}, std::move(regions));
}

Value FunctionBuilder::reduce(const Value& x, const Value& init, const Dims& dims, Reducer r) {
  if (r == Reducer::kReplace)
    return fail("stablehlo.reduce",
                make_error(ErrorKind::kInvalidArgument, "Reducer::kReplace is only meaningful for scatter"));
  return reduce(std::vector<Value>{x}, std::vector<Value>{init}, dims, reducer_body(r, "reduce"))[0];
}

Value FunctionBuilder::reduce_sum(const Value& x, const Dims& dims) {
  if (!usable("stablehlo.reduce", {x})) return Value();
  return reduce(x, scalar(0, x.dtype()), dims, Reducer::kSum);
}
Value FunctionBuilder::reduce_max(const Value& x, const Dims& dims) {
  if (!usable("stablehlo.reduce", {x})) return Value();
  return reduce(x, lowest(x.dtype()), dims, Reducer::kMax);
}
Value FunctionBuilder::reduce_min(const Value& x, const Dims& dims) {
  if (!usable("stablehlo.reduce", {x})) return Value();
  return reduce(x, highest(x.dtype()), dims, Reducer::kMin);
}

std::pair<Value, Value> FunctionBuilder::argmax(const Value& x, int64_t dimension, DType index_dtype) {
  if (!usable("argmax", {x})) return {};
  if (!is_integer(index_dtype)) {
    fail("argmax",
         make_error(ErrorKind::kInvalidArgument, "index type ", dtype_name(index_dtype), " is not an integer type"));
    return {};
  }
  Value idx = iota(TensorType{index_dtype, x.shape()}, dimension);
  Value init_v = lowest(x.dtype());
  Value init_i = scalar(0, index_dtype);
  const bool fp = is_float(x.dtype());
  // Same body as JAX's argmax: prefer the larger value, NaN wins, ties go to the smaller index.
  auto body = [fp](FunctionBuilder& b, const std::vector<Value>& a) -> std::vector<Value> {
    const Value &av = a[0], &ai = a[1], &bv = a[2], &bi = a[3];
    Value pick_a = b.compare(CompareDir::kGT, av, bv);
    if (fp) {
      Value is_nan = b.compare(CompareDir::kNE, av, av);
      pick_a = b.logical_or(pick_a, is_nan);
    }
    // Named steps: C++ leaves argument evaluation order unspecified, and the emitted op order
    // must not depend on the compiler.
    Value eq = b.compare(CompareDir::kEQ, av, bv);
    Value lt = b.compare(CompareDir::kLT, ai, bi);
    Value tie = b.logical_and(eq, lt);
    Value pick_i = b.logical_or(pick_a, tie);
    return {b.select(pick_a, av, bv), b.select(pick_i, ai, bi)};
  };
  std::vector<Value> r = reduce({x, idx}, {init_v, init_i}, {dimension}, body);
  if (r.size() != 2) return {};
  return {r[0], r[1]};
}

// ------------------------------------------------------------------ contractions, indexing

Value FunctionBuilder::dot_general(const Value& lhs, const Value& rhs, const DotDims& dims,
                                   std::optional<DType> result_dtype) {
  if (!usable("stablehlo.dot_general", {lhs, rhs})) return Value();
  auto t = infer_dot_general(lhs.type(), rhs.type(), dims, result_dtype);
  if (!t.ok()) return fail("stablehlo.dot_general", t.status());
  return emit1("stablehlo.dot_general", {lhs, rhs}, *t, {{"dot_dimension_numbers", to_attr(dims)}});
}

Value FunctionBuilder::gather(const Value& operand, const Value& idx, const GatherDims& dims, const Dims& slice_sizes,
                              bool indices_are_sorted) {
  if (!usable("stablehlo.gather", {operand, idx})) return Value();
  auto t = infer_gather(operand.type(), idx.type(), dims, slice_sizes);
  if (!t.ok()) return fail("stablehlo.gather", t.status());
  AttrDict attrs = {{"dimension_numbers", to_attr(dims)}, {"slice_sizes", Attr::i64_array(slice_sizes)}};
  if (indices_are_sorted) attrs.push_back({"indices_are_sorted", Attr::boolean(true)});
  return emit1("stablehlo.gather", {operand, idx}, *t, std::move(attrs));
}

std::vector<Value> FunctionBuilder::scatter(const std::vector<Value>& inputs, const Value& idx,
                                            const std::vector<Value>& updates, const ScatterDims& dims,
                                            const BodyFn& update_computation, bool indices_are_sorted,
                                            bool unique_indices) {
  const char* name = "stablehlo.scatter";
  std::vector<Value> ops = inputs;
  ops.push_back(idx);
  ops.insert(ops.end(), updates.begin(), updates.end());
  if (!usable(name, ops)) return std::vector<Value>(std::max<size_t>(inputs.size(), 1));
  std::vector<TensorType> arg_types;
  for (int k = 0; k < 2; ++k)
    for (const Value& v : inputs) arg_types.push_back(TensorType{v.dtype(), {}});
  std::vector<TensorType> returned;
  auto blk = build_region(arg_types, update_computation, returned);
  if (!blk.ok()) return fail_n(name, blk.status(), inputs.size());
  auto e = check_reduction_body("scatter", types_of(inputs), arg_types, returned);
  if (!e.ok()) return fail_n(name, e.status(), inputs.size());
  auto out = infer_scatter(types_of(inputs), idx.type(), types_of(updates), dims, *e);
  if (!out.ok()) return fail_n(name, out.status(), inputs.size());
  AttrDict attrs = {{"scatter_dimension_numbers", to_attr(dims)}};
  if (indices_are_sorted) attrs.push_back({"indices_are_sorted", Attr::boolean(true)});
  if (unique_indices) attrs.push_back({"unique_indices", Attr::boolean(true)});
  std::vector<Block> regions;
  regions.push_back(std::move(*blk));
  return emit(name, ops, *out, std::move(attrs), std::move(regions));
}

Value FunctionBuilder::scatter(const Value& input, const Value& idx, const Value& updates, const ScatterDims& dims,
                               Reducer r, bool indices_are_sorted, bool unique_indices) {
  return scatter(std::vector<Value>{input}, idx, std::vector<Value>{updates}, dims, reducer_body(r, "scatter"),
                 indices_are_sorted, unique_indices)[0];
}

Value FunctionBuilder::convolution(const Value& lhs, const Value& rhs, const ConvDims& dims, const ConvWindow& window,
                                   std::optional<DType> result_dtype) {
  if (!usable("stablehlo.convolution", {lhs, rhs})) return Value();
  auto t = infer_convolution(lhs.type(), rhs.type(), dims, window, result_dtype);
  if (!t.ok()) return fail("stablehlo.convolution", t.status());
  AttrDict attrs;
  set_conv_window_attrs(attrs, window);
  attrs.push_back({"dimension_numbers", to_attr(dims)});
  return emit1("stablehlo.convolution", {lhs, rhs}, *t, std::move(attrs));
}

// ------------------------------------------------------------------ calls

std::vector<Value> FunctionBuilder::call(const std::string& callee, const std::vector<Value>& args) {
  FunctionBuilder* f = module_->find(callee);
  if (!f || !f->returned_)
    return fail_n("func.call",
                  make_error(ErrorKind::kInvalidArgument, "call_c1: callee @", callee,
                             f ? " has not been finished with ret()" : " does not exist"),
                  f ? f->fn_.result_types.size() : 0);
  if (!usable("func.call", args)) return std::vector<Value>(std::max<size_t>(f->fn_.result_types.size(), 1));
  std::vector<TensorType> want;
  for (ValueId a : f->fn_.args) want.push_back(f->fn_.type_of(a));
  if (types_of(args) != want)
    return fail_n("func.call",
                  make_error(ErrorKind::kVerify, "call_c2: arguments do not match @", callee, "'s signature"),
                  f->fn_.result_types.size());
  return emit("func.call", args, f->fn_.result_types, {{"callee", Attr::symbol(callee)}});
}

Value FunctionBuilder::call1(const std::string& callee, const std::vector<Value>& args) {
  std::vector<Value> r = call(callee, args);
  if (r.size() != 1) {
    if (status_.ok())
      fail("func.call",
           make_error(ErrorKind::kInvalidArgument, "call1: @", callee, " returns ", r.size(), " values, not 1"));
    return Value();
  }
  return r[0];
}

std::vector<Value> FunctionBuilder::composite(const std::string& name, const std::vector<Value>& operands,
                                              AttrDict attributes, const std::string& decomposition, int version) {
  const char* op = "stablehlo.composite";
  FunctionBuilder* f = module_->find(decomposition);
  if (!f || !f->returned_)
    return fail_n(op,
                  make_error(ErrorKind::kVerify, "composite_c2: decomposition @", decomposition,
                             f ? " has not been finished with ret()" : " does not exist"),
                  f ? f->fn_.result_types.size() : 0);
  size_t n = f->fn_.result_types.size();
  if (!usable(op, operands)) return std::vector<Value>(std::max<size_t>(n, 1));
  std::vector<TensorType> want;
  for (ValueId a : f->fn_.args) want.push_back(f->fn_.type_of(a));
  if (types_of(operands) != want)
    return fail_n(op,
                  make_error(ErrorKind::kVerify, "composite_c3: operands of \"", name,
                             "\" do not match decomposition @", decomposition, "'s arguments"),
                  n);
  AttrDict attrs = {{"name", Attr::string(name)}};
  if (!attributes.empty()) attrs.push_back({"composite_attributes", Attr::dictionary(std::move(attributes))});
  attrs.push_back({"decomposition", Attr::symbol(decomposition)});
  if (version != 0) attrs.push_back({"version", Attr::integer(version, DType::kI32)});
  return emit(op, operands, f->fn_.result_types, std::move(attrs));
}

std::vector<Value> FunctionBuilder::composite(const std::string& name, const std::vector<Value>& operands,
                                              AttrDict attributes, const std::string& decomposition, const BodyFn& body,
                                              int version) {
  if (!usable("stablehlo.composite", operands)) return std::vector<Value>(1);
  if (!module_->has_function(decomposition)) {
    FunctionBuilder& d = module_->function(decomposition, /*is_public=*/false);
    std::vector<Value> args;
    for (const Value& v : operands) args.push_back(d.arg(v.type()));
    std::vector<Value> rets = body ? body(d, args) : std::vector<Value>{};
    d.ret(rets);
    if (!d.ok()) return fail_n("stablehlo.composite", d.status(), 0);
  }
  return composite(name, operands, std::move(attributes), decomposition, version);
}

std::vector<Value> FunctionBuilder::custom_call(const std::string& target, const std::vector<Value>& operands,
                                                const std::vector<TensorType>& result_types, AttrDict attrs) {
  if (!usable("stablehlo.custom_call", operands)) return std::vector<Value>(std::max<size_t>(result_types.size(), 1));
  AttrDict all = {{"call_target_name", Attr::string(target)}};
  for (NamedAttr& a : attrs) set_attr(all, std::move(a.name), std::move(a.value));
  return emit("stablehlo.custom_call", operands, result_types, std::move(all));
}

// ------------------------------------------------------------------ ModuleBuilder

ModuleBuilder::ModuleBuilder(std::string name) { module_.name = std::move(name); }

FunctionBuilder& ModuleBuilder::function(std::string name, bool is_public) {
  if (has_function(name) && status_.ok())
    status_ = make_error(ErrorKind::kInvalidArgument, "symbol_unique: function @", name, " is defined twice");
  functions_.push_back(std::unique_ptr<FunctionBuilder>(new FunctionBuilder(this, std::move(name), is_public)));
  return *functions_.back();
}

FunctionBuilder* ModuleBuilder::find(const std::string& name) {
  for (auto& f : functions_)
    if (f->name() == name) return f.get();
  return nullptr;
}

bool ModuleBuilder::has_function(const std::string& name) const {
  for (const auto& f : functions_)
    if (f->name() == name) return true;
  return false;
}

void ModuleBuilder::set_attr(std::string key, Attr value) {
  ::hlx::shlo::set_attr(module_.attrs, std::move(key), std::move(value));
}

Result<Module> ModuleBuilder::finish() {
  if (!status_.ok()) return status_;
  for (auto& f : functions_) {
    if (!f->ok()) return f->status();
    if (!f->returned_)
      return make_error(ErrorKind::kInvalidArgument, "function @", f->name(), " was never finished with ret()");
  }
  Module m = std::move(module_);
  for (auto& f : functions_) m.functions.push_back(std::move(f->fn_));
  functions_.clear();
  module_ = Module{};
  HLX_RETURN_IF_ERROR(verify_module(m));
  return m;
}

}  // namespace hlx::shlo
