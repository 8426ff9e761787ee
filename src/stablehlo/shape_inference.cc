#include "stablehlo/shape_inference.h"

#include <algorithm>
#include <cstring>
#include <set>

namespace hlx::shlo {
namespace {

template <class... Args>
Status verr(const Args&... args) {
  return make_error(ErrorKind::kVerify, args...);
}

std::string ts(const TensorType& t) { return t.to_string(); }

bool is_unique(const Dims& d) {
  std::set<int64_t> s(d.begin(), d.end());
  return s.size() == d.size();
}
bool is_sorted_dims(const Dims& d) { return std::is_sorted(d.begin(), d.end()); }
bool contains(const Dims& d, int64_t v) { return std::find(d.begin(), d.end(), v) != d.end(); }
Dims concat(const Dims& a, const Dims& b) {
  Dims r = a;
  r.insert(r.end(), b.begin(), b.end());
  return r;
}

// Checks 0 <= d < bound for every element; `label` and `what` name the constraint.
Status check_range(const Dims& d, int64_t bound, std::string_view label, std::string_view what) {
  for (int64_t v : d)
    if (v < 0 || v >= bound)
      return verr(label, ": ", what, " ", dims_to_string(d), " has ", v, " outside [0, ", bound, ")");
  return ok_status();
}

// ---- attribute field readers ----

Result<Dims> field_dims(const Attr& s, std::string_view key, std::string_view sname) {
  const Attr* a = s.find(key);
  if (!a) return Dims{};  // empty lists may be omitted
  if (a->kind != Attr::Kind::kI64Array) return verr(sname, "_attr: field '", key, "' must be an i64 array");
  return a->ints;
}
Result<int64_t> field_int(const Attr& s, std::string_view key, std::string_view sname, std::optional<int64_t> dflt) {
  const Attr* a = s.find(key);
  if (!a) {
    if (dflt) return *dflt;
    return verr(sname, "_attr: missing required field '", key, "'");
  }
  if (a->kind != Attr::Kind::kInt) return verr(sname, "_attr: field '", key, "' must be an integer");
  return a->i;
}
Status check_struct(const Attr& a, std::string_view sname) {
  if (a.kind != Attr::Kind::kStruct || a.name != sname)
    return verr(sname, "_attr: expected a #stablehlo.", sname, "<...> attribute");
  return ok_status();
}
void put_dims(AttrDict& d, const char* key, const Dims& v, bool keep_empty = false) {
  if (!v.empty() || keep_empty) d.push_back({key, Attr::i64_array(v)});
}

const std::set<std::string_view, std::less<>> kFloatUnary = {"exponential",
                                                             "exponential_minus_one",
                                                             "log",
                                                             "log_plus_one",
                                                             "sqrt",
                                                             "rsqrt",
                                                             "tanh",
                                                             "logistic",
                                                             "sine",
                                                             "cosine",
                                                             "floor",
                                                             "ceil",
                                                             "round_nearest_afz",
                                                             "round_nearest_even",
                                                             "erf"};
// Unary ops that also take integers (and `not`: integers and booleans).
const std::set<std::string_view, std::less<>> kNonFloatUnary = {"negate", "abs", "sign", "not"};
const std::set<std::string_view, std::less<>> kBinary = {
    "add", "subtract", "multiply", "divide", "remainder", "maximum", "minimum", "power", "and", "or", "xor"};

}  // namespace

std::string dims_to_string(const Dims& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

// ---------------------------------------------------------------- dimension-number structs

DotDims DotDims::matmul(int64_t lhs_rank, int64_t rhs_rank, int64_t batch) {
  DotDims d;
  for (int64_t i = 0; i < batch; ++i) {
    d.lhs_batching.push_back(i);
    d.rhs_batching.push_back(i);
  }
  d.lhs_contracting = {lhs_rank - 1};
  d.rhs_contracting = {batch};
  (void)rhs_rank;
  return d;
}

namespace {

// Each struct's fields are listed once, in a visitor that serves both directions: FieldReader
// fills the struct from an attribute, FieldWriter builds the attribute from the struct. `dflt`
// is the value an omitted integer field takes (none: the field is required, and always written);
// empty lists are omitted unless `keep_empty` (conv's spatial lists are printed even when empty).
struct FieldReader {
  const Attr& attr;
  std::string_view sname;
  Status status = ok_status();
  void list(const char* key, Dims& out, bool /*keep_empty*/ = false) {
    if (!status.ok()) return;
    Result<Dims> r = field_dims(attr, key, sname);
    if (r.ok())
      out = std::move(*r);
    else
      status = r.status();
  }
  void one(const char* key, int64_t& out, std::optional<int64_t> dflt) {
    if (!status.ok()) return;
    Result<int64_t> r = field_int(attr, key, sname, dflt);
    if (r.ok())
      out = *r;
    else
      status = r.status();
  }
};
struct FieldWriter {
  AttrDict fields;
  void list(const char* key, const Dims& v, bool keep_empty = false) { put_dims(fields, key, v, keep_empty); }
  void one(const char* key, int64_t v, std::optional<int64_t> dflt) {
    if (!dflt || v != *dflt) fields.push_back({key, Attr::integer(v)});
  }
};

template <class T, class Fields>
Result<T> read_struct(const Attr& a, std::string_view sname, Fields fields) {
  HLX_RETURN_IF_ERROR(check_struct(a, sname));
  T d;
  FieldReader r{a, sname};
  fields(r, d);
  if (!r.status.ok()) return r.status;
  return d;
}
template <class T, class Fields>
Attr write_struct(const T& d, const char* sname, Fields fields) {
  FieldWriter w;
  fields(w, d);
  return Attr::structure(sname, std::move(w.fields));
}

const auto kDotFields = [](auto& v, auto& d) {
  v.list("lhs_batching_dimensions", d.lhs_batching);
  v.list("rhs_batching_dimensions", d.rhs_batching);
  v.list("lhs_contracting_dimensions", d.lhs_contracting);
  v.list("rhs_contracting_dimensions", d.rhs_contracting);
};
const auto kGatherFields = [](auto& v, auto& d) {
  v.list("offset_dims", d.offset_dims);
  v.list("collapsed_slice_dims", d.collapsed_slice_dims);
  v.list("operand_batching_dims", d.operand_batching_dims);
  v.list("start_indices_batching_dims", d.start_indices_batching_dims);
  v.list("start_index_map", d.start_index_map);
  v.one("index_vector_dim", d.index_vector_dim, 0);
};
const auto kScatterFields = [](auto& v, auto& d) {
  v.list("update_window_dims", d.update_window_dims);
  v.list("inserted_window_dims", d.inserted_window_dims);
  v.list("input_batching_dims", d.input_batching_dims);
  v.list("scatter_indices_batching_dims", d.scatter_indices_batching_dims);
  v.list("scatter_dims_to_operand_dims", d.scatter_dims_to_operand_dims);
  v.one("index_vector_dim", d.index_vector_dim, 0);
};
const auto kConvFields = [](auto& v, auto& d) {
  v.one("input_batch_dimension", d.input_batch, std::nullopt);
  v.one("input_feature_dimension", d.input_feature, std::nullopt);
  v.list("input_spatial_dimensions", d.input_spatial, true);
  v.one("kernel_input_feature_dimension", d.kernel_input_feature, std::nullopt);
  v.one("kernel_output_feature_dimension", d.kernel_output_feature, std::nullopt);
  v.list("kernel_spatial_dimensions", d.kernel_spatial, true);
  v.one("output_batch_dimension", d.output_batch, std::nullopt);
  v.one("output_feature_dimension", d.output_feature, std::nullopt);
  v.list("output_spatial_dimensions", d.output_spatial, true);
};

}  // namespace

Result<DotDims> dot_dims_from_attr(const Attr& a) { return read_struct<DotDims>(a, "dot", kDotFields); }
Attr to_attr(const DotDims& d) { return write_struct(d, "dot", kDotFields); }
Result<GatherDims> gather_dims_from_attr(const Attr& a) { return read_struct<GatherDims>(a, "gather", kGatherFields); }
Attr to_attr(const GatherDims& d) { return write_struct(d, "gather", kGatherFields); }
Result<ScatterDims> scatter_dims_from_attr(const Attr& a) {
  return read_struct<ScatterDims>(a, "scatter", kScatterFields);
}
Attr to_attr(const ScatterDims& d) { return write_struct(d, "scatter", kScatterFields); }
Result<ConvDims> conv_dims_from_attr(const Attr& a) { return read_struct<ConvDims>(a, "conv", kConvFields); }
Attr to_attr(const ConvDims& d) { return write_struct(d, "conv", kConvFields); }

const std::vector<std::string>* dimension_field_names(std::string_view struct_name) {
  struct Names {  // a third visitor: records the keys
    std::vector<std::string> keys;
    void list(const char* key, const Dims&, bool = false) { keys.push_back(key); }
    void one(const char* key, int64_t, std::optional<int64_t>) { keys.push_back(key); }
  };
  auto names = [](auto fields, auto d) {
    Names n;
    fields(n, d);
    return n.keys;
  };
  static const std::vector<std::string> dot = names(kDotFields, DotDims{}), gather = names(kGatherFields, GatherDims{}),
                                        scatter = names(kScatterFields, ScatterDims{});
  if (struct_name == "dot") return &dot;
  if (struct_name == "gather") return &gather;
  if (struct_name == "scatter") return &scatter;
  return nullptr;
}

Result<ConvWindow> conv_window_from_attrs(const AttrDict& attrs) {
  ConvWindow w;
  auto arr = [&](const char* key, Dims& out) -> Status {
    const Attr* a = find_attr(attrs, key);
    if (!a) return ok_status();
    if (a->kind != Attr::Kind::kI64Array) return verr("convolution_attr: '", key, "' must be an i64 array");
    out = a->ints;
    return ok_status();
  };
  HLX_RETURN_IF_ERROR(arr("window_strides", w.window_strides));
  HLX_RETURN_IF_ERROR(arr("lhs_dilation", w.lhs_dilation));
  HLX_RETURN_IF_ERROR(arr("rhs_dilation", w.rhs_dilation));
  if (const Attr* a = find_attr(attrs, "window_reversal")) {
    if (a->kind != Attr::Kind::kBoolArray) return verr("convolution_attr: 'window_reversal' must be an i1 array");
    for (int64_t v : a->ints) w.window_reversal.push_back(v != 0);
  }
  if (const Attr* a = find_attr(attrs, "padding")) {
    if (a->kind != Attr::Kind::kDense || !a->dense || a->dense->type.dtype != DType::kI64)
      return verr("convolution_attr: 'padding' must be a dense i64 tensor");
    const DenseElements& d = *a->dense;
    // convolution_c4: shape(padding) = [N - 2, 2]; the rank part is checked at inference.
    if (d.type.rank() != 2 || d.type.shape[1] != 2)
      return verr("convolution_c4: padding has shape ", dims_to_string(d.type.shape), ", expected [N - 2, 2]");
    int64_t n = d.type.shape[0];
    if (d.bytes.size() != size_t(n) * 16)
      return verr("convolution_attr: padding holds ", d.bytes.size(), " bytes, expected ", n * 16);
    for (int64_t i = 0; i < n; ++i) {
      int64_t lo, hi;
      std::memcpy(&lo, d.bytes.data() + i * 16, 8);
      std::memcpy(&hi, d.bytes.data() + i * 16 + 8, 8);
      w.padding.push_back({lo, hi});
    }
    if (n == 0) w.padding.clear();
  }
  auto group = [&](const char* key, int64_t& out) -> Status {
    const Attr* a = find_attr(attrs, key);
    if (!a) return ok_status();
    if (a->kind != Attr::Kind::kInt) return verr("convolution_attr: '", key, "' must be an integer");
    out = a->i;
    return ok_status();
  };
  HLX_RETURN_IF_ERROR(group("feature_group_count", w.feature_group_count));
  HLX_RETURN_IF_ERROR(group("batch_group_count", w.batch_group_count));
  return w;
}

void set_conv_window_attrs(AttrDict& attrs, const ConvWindow& w) {
  if (!w.window_strides.empty()) set_attr(attrs, "window_strides", Attr::i64_array(w.window_strides));
  if (!w.padding.empty()) {
    DenseElements d;
    d.type = TensorType{DType::kI64, {int64_t(w.padding.size()), 2}};
    d.bytes.resize(w.padding.size() * 16);
    for (size_t i = 0; i < w.padding.size(); ++i) {
      std::memcpy(d.bytes.data() + i * 16, &w.padding[i].first, 8);
      std::memcpy(d.bytes.data() + i * 16 + 8, &w.padding[i].second, 8);
    }
    set_attr(attrs, "padding", Attr::dense_elements(std::move(d)));
  }
  if (!w.lhs_dilation.empty()) set_attr(attrs, "lhs_dilation", Attr::i64_array(w.lhs_dilation));
  if (!w.rhs_dilation.empty()) set_attr(attrs, "rhs_dilation", Attr::i64_array(w.rhs_dilation));
  if (!w.window_reversal.empty()) set_attr(attrs, "window_reversal", Attr::bool_array(w.window_reversal));
  set_attr(attrs, "feature_group_count", Attr::integer(w.feature_group_count));
  set_attr(attrs, "batch_group_count", Attr::integer(w.batch_group_count));
}

// ---------------------------------------------------------------- element-type classes

bool is_signed_int(DType t) { return is_integer(t) && !is_unsigned(t); }
bool is_bool(DType t) { return t == DType::kI1; }
bool is_promotable(DType x, DType y) {
  if (is_bool(x) || is_bool(y)) return is_bool(x) && is_bool(y);
  if (is_float(x) != is_float(y)) return false;
  // bf16 -> f16 is not a widening, but the spec only compares bit widths.
  return dtype_bits(x) <= dtype_bits(y);
}

// ---------------------------------------------------------------- elementwise

bool is_elementwise_unary(std::string_view op) { return kFloatUnary.count(op) != 0 || kNonFloatUnary.count(op) != 0; }
bool is_elementwise_binary(std::string_view op) { return kBinary.count(op) != 0; }

// The spec's input tables, as "<op>_i1" labels.
static Status check_elementwise_dtype(std::string_view op, DType t) {
  auto bad = [&](std::string_view allowed) {
    return verr(op, "_i1: element type ", dtype_name(t), " is not allowed (expected ", allowed, ")");
  };
  if (kFloatUnary.count(op)) return is_float(t) ? ok_status() : bad("floating-point");
  if (op == "abs" || op == "sign")
    return (is_float(t) || is_signed_int(t)) ? ok_status() : bad("signed integer or floating-point");
  if (op == "negate" || op == "subtract" || op == "divide" || op == "remainder" || op == "power")
    return (is_float(t) || is_integer(t)) ? ok_status() : bad("integer or floating-point");
  if (op == "and" || op == "or" || op == "xor" || op == "not")
    return (is_integer(t) || is_bool(t)) ? ok_status() : bad("boolean or integer");
  return ok_status();  // add, multiply, maximum, minimum: any tensor
}

Result<TensorType> infer_unary(std::string_view op, const TensorType& x) {
  if (!is_elementwise_unary(op)) return verr("unknown elementwise unary op '", op, "'");
  HLX_RETURN_IF_ERROR(check_elementwise_dtype(op, x.dtype));
  return x;
}

Result<TensorType> infer_binary(std::string_view op, const TensorType& lhs, const TensorType& rhs) {
  if (!is_elementwise_binary(op)) return verr("unknown elementwise binary op '", op, "'");
  if (lhs != rhs)
    return verr(op, "_c1: operand types differ: lhs ", ts(lhs), " vs rhs ", ts(rhs),
                " (no implicit broadcasting; use broadcast_in_dim)");
  HLX_RETURN_IF_ERROR(check_elementwise_dtype(op, lhs.dtype));
  return lhs;
}

std::string_view default_compare_type(DType t) {
  if (is_float(t)) return "FLOAT";
  if (is_unsigned(t) || is_bool(t)) return "UNSIGNED";
  return "SIGNED";
}

Result<TensorType> infer_compare(const TensorType& lhs, const TensorType& rhs, std::string_view direction,
                                 std::string_view compare_type) {
  static const std::set<std::string_view, std::less<>> kDirs = {"EQ", "NE", "GE", "GT", "LE", "LT"};
  if (!kDirs.count(direction))
    return verr("compare_i3: comparison_direction '", direction, "' is not one of EQ NE GE GT LE LT");
  if (lhs.dtype != rhs.dtype) return verr("compare_c1: element types differ: lhs ", ts(lhs), " vs rhs ", ts(rhs));
  if (lhs.shape != rhs.shape) return verr("compare_c2: shapes differ: lhs ", ts(lhs), " vs rhs ", ts(rhs));
  if (!compare_type.empty()) {
    bool ok = is_float(lhs.dtype) ? (compare_type == "FLOAT" || compare_type == "TOTALORDER")
                                  : compare_type == default_compare_type(lhs.dtype);
    if (!ok)
      return verr("compare_c3: compare_type ", compare_type, " does not fit element type ", dtype_name(lhs.dtype),
                  " (expected ", default_compare_type(lhs.dtype), ")");
  }
  return TensorType{DType::kI1, lhs.shape};
}

Result<TensorType> infer_select(const TensorType& pred, const TensorType& on_true, const TensorType& on_false) {
  if (pred.dtype != DType::kI1) return verr("select_i1: pred must have element type i1, got ", ts(pred));
  if (pred.rank() != 0 && pred.shape != on_true.shape)
    return verr("select_c1: pred ", ts(pred), " is neither a scalar nor shaped like on_true ", ts(on_true));
  if (on_true != on_false) return verr("select_c2: on_true ", ts(on_true), " and on_false ", ts(on_false), " differ");
  return on_true;
}

Result<TensorType> infer_clamp(const TensorType& min, const TensorType& operand, const TensorType& max) {
  if (min.rank() != 0 && min.shape != operand.shape)
    return verr("clamp_c1: min ", ts(min), " is neither a scalar nor shaped like operand ", ts(operand));
  if (max.rank() != 0 && max.shape != operand.shape)
    return verr("clamp_c2: max ", ts(max), " is neither a scalar nor shaped like operand ", ts(operand));
  if (min.dtype != operand.dtype || max.dtype != operand.dtype)
    return verr("clamp_c3: element types differ: min ", ts(min), ", operand ", ts(operand), ", max ", ts(max));
  return operand;
}

Result<TensorType> infer_convert(const TensorType& operand, DType to) { return TensorType{to, operand.shape}; }

// ---------------------------------------------------------------- shape ops

static Status check_shape_nonneg(const Shape& s, std::string_view label) {
  for (int64_t d : s)
    if (d < 0) return verr(label, ": negative dimension in shape ", dims_to_string(s));
  return ok_status();
}

Result<TensorType> infer_iota(const TensorType& result, int64_t iota_dimension) {
  if (iota_dimension < 0 || iota_dimension >= result.rank())
    return verr("iota_c1: iota_dimension ", iota_dimension, " outside [0, ", result.rank(), ") for ", ts(result));
  if (is_bool(result.dtype))
    return verr("iota_o1: output element type must be integer or floating-point, got ", ts(result));
  return result;
}

Result<TensorType> infer_constant(const DenseElements& value) {
  HLX_RETURN_IF_ERROR(check_shape_nonneg(value.type.shape, "constant_c1"));
  size_t want = size_t(num_elements(value.type.shape)) * dtype_size(value.type.dtype);
  if (value.bytes.size() != want)
    return verr("constant_c1: value of type ", ts(value.type), " holds ", value.bytes.size(), " bytes, expected ",
                want);
  return value.type;
}

Result<TensorType> infer_broadcast_in_dim(const TensorType& operand, const Dims& bdims, const Shape& result_shape) {
  HLX_RETURN_IF_ERROR(check_shape_nonneg(result_shape, "broadcast_in_dim_c5"));
  if (int64_t(bdims.size()) != operand.rank())
    return verr("broadcast_in_dim_c2: broadcast_dimensions ", dims_to_string(bdims), " has size ", bdims.size(),
                " but operand ", ts(operand), " has rank ", operand.rank());
  HLX_RETURN_IF_ERROR(check_range(bdims, int64_t(result_shape.size()), "broadcast_in_dim_c3", "broadcast_dimensions"));
  if (!is_unique(bdims))
    return verr("broadcast_in_dim_c4: broadcast_dimensions ", dims_to_string(bdims), " are not unique");
  for (size_t d = 0; d < bdims.size(); ++d) {
    int64_t od = operand.shape[d], rd = result_shape[size_t(bdims[d])];
    if (od != 1 && od != rd)
      return verr("broadcast_in_dim_c5: operand dim ", d, " has size ", od, " but result dim ", bdims[d], " has size ",
                  rd, " (operand ", ts(operand), ", result shape ", dims_to_string(result_shape), ")");
  }
  return TensorType{operand.dtype, result_shape};
}

Result<TensorType> infer_reshape(const TensorType& operand, const Shape& result_shape) {
  HLX_RETURN_IF_ERROR(check_shape_nonneg(result_shape, "reshape_c2"));
  if (num_elements(operand.shape) != num_elements(result_shape))
    return verr("reshape_c2: operand ", ts(operand), " has ", num_elements(operand.shape),
                " elements but result shape ", dims_to_string(result_shape), " has ", num_elements(result_shape));
  return TensorType{operand.dtype, result_shape};
}

Result<TensorType> infer_transpose(const TensorType& operand, const Dims& perm) {
  Dims sorted = perm;
  std::sort(sorted.begin(), sorted.end());
  bool ok = int64_t(perm.size()) == operand.rank();
  for (size_t i = 0; ok && i < sorted.size(); ++i) ok = sorted[i] == int64_t(i);
  if (!ok)
    return verr("transpose_c2: permutation ", dims_to_string(perm), " is not a permutation of range(", operand.rank(),
                ") for operand ", ts(operand));
  Shape s;
  for (int64_t p : perm) s.push_back(operand.shape[size_t(p)]);
  return TensorType{operand.dtype, s};
}

Result<TensorType> infer_slice(const TensorType& operand, const Dims& start, const Dims& limit, const Dims& strides) {
  int64_t r = operand.rank();
  if (int64_t(start.size()) != r || int64_t(limit.size()) != r || int64_t(strides.size()) != r)
    return verr("slice_c2: start_indices ", dims_to_string(start), ", limit_indices ", dims_to_string(limit),
                " and strides ", dims_to_string(strides), " must all have size rank(operand) = ", r);
  Shape s;
  for (int64_t d = 0; d < r; ++d) {
    if (!(0 <= start[d] && start[d] <= limit[d] && limit[d] <= operand.shape[d]))
      return verr("slice_c3: dim ", d, ": need 0 <= start ", start[d], " <= limit ", limit[d], " <= size ",
                  operand.shape[d], " (operand ", ts(operand), ")");
    if (strides[d] <= 0) return verr("slice_c4: stride ", strides[d], " of dim ", d, " is not positive");
    s.push_back((limit[d] - start[d] + strides[d] - 1) / strides[d]);
  }
  return TensorType{operand.dtype, s};
}

static Status check_start_indices(std::string_view op, std::string_view same_label,
                                  const std::vector<TensorType>& idx) {
  for (size_t i = 0; i < idx.size(); ++i) {
    if (idx[i].rank() != 0 || !is_integer(idx[i].dtype))
      return verr(op, "_i2: start index #", i, " must be a 0-d integer tensor, got ", ts(idx[i]));
    if (idx[i] != idx[0])
      return verr(same_label, ": start indices have different types: ", ts(idx[0]), " vs ", ts(idx[i]));
  }
  return ok_status();
}

Result<TensorType> infer_dynamic_slice(const TensorType& operand, const std::vector<TensorType>& start_indices,
                                       const Dims& slice_sizes) {
  if (int64_t(start_indices.size()) != operand.rank() || int64_t(slice_sizes.size()) != operand.rank())
    return verr("dynamic_slice_c2: ", start_indices.size(), " start indices and slice_sizes ",
                dims_to_string(slice_sizes), " must both match rank(operand) = ", operand.rank(), " of ", ts(operand));
  HLX_RETURN_IF_ERROR(check_start_indices("dynamic_slice", "dynamic_slice_c3", start_indices));
  for (size_t d = 0; d < slice_sizes.size(); ++d)
    if (slice_sizes[d] < 0 || slice_sizes[d] > operand.shape[d])
      return verr("dynamic_slice_c4: slice_sizes ", dims_to_string(slice_sizes), " dim ", d, " is outside [0, ",
                  operand.shape[d], "] of operand ", ts(operand));
  return TensorType{operand.dtype, slice_sizes};
}

Result<TensorType> infer_dynamic_update_slice(const TensorType& operand, const TensorType& update,
                                              const std::vector<TensorType>& start_indices) {
  if (update.dtype != operand.dtype)
    return verr("dynamic_update_slice_c2: update ", ts(update), " and operand ", ts(operand), " element types differ");
  if (update.rank() != operand.rank())
    return verr("dynamic_update_slice_c3: update ", ts(update), " and operand ", ts(operand), " ranks differ");
  if (int64_t(start_indices.size()) != operand.rank())
    return verr("dynamic_update_slice_c4: ", start_indices.size(),
                " start indices but rank(operand) = ", operand.rank());
  HLX_RETURN_IF_ERROR(check_start_indices("dynamic_update_slice", "dynamic_update_slice_c5", start_indices));
  for (int64_t d = 0; d < operand.rank(); ++d)
    if (update.shape[d] > operand.shape[d])
      return verr("dynamic_update_slice_c6: update ", ts(update), " dim ", d, " is larger than operand ", ts(operand));
  return operand;
}

Result<TensorType> infer_concatenate(const std::vector<TensorType>& inputs, int64_t dimension) {
  if (inputs.empty()) return verr("concatenate_c3: no inputs");
  const TensorType& first = inputs[0];
  if (dimension < 0 || dimension >= first.rank())
    return verr("concatenate_c4: dimension ", dimension, " outside [0, ", first.rank(), ") of ", ts(first));
  Shape s = first.shape;
  s[size_t(dimension)] = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const TensorType& t = inputs[i];
    if (t.dtype != first.dtype)
      return verr("concatenate_c1: input #", i, " ", ts(t), " has a different element type than ", ts(first));
    bool same = t.rank() == first.rank();
    for (int64_t d = 0; same && d < t.rank(); ++d) same = d == dimension || t.shape[d] == first.shape[d];
    if (!same)
      return verr("concatenate_c2: input #", i, " ", ts(t), " differs from ", ts(first), " outside dimension ",
                  dimension);
    s[size_t(dimension)] += t.shape[size_t(dimension)];
  }
  return TensorType{first.dtype, s};
}

Result<TensorType> infer_pad(const TensorType& operand, const TensorType& padding_value, const Dims& low,
                             const Dims& high, const Dims& interior) {
  if (padding_value.rank() != 0) return verr("pad_i2: padding_value must be a 0-d tensor, got ", ts(padding_value));
  if (padding_value.dtype != operand.dtype)
    return verr("pad_c1: padding_value ", ts(padding_value), " and operand ", ts(operand), " element types differ");
  int64_t r = operand.rank();
  if (int64_t(low.size()) != r || int64_t(high.size()) != r || int64_t(interior.size()) != r)
    return verr("pad_c2: edge_padding_low ", dims_to_string(low), ", edge_padding_high ", dims_to_string(high),
                " and interior_padding ", dims_to_string(interior), " must all have size rank(operand) = ", r);
  Shape s;
  for (int64_t d = 0; d < r; ++d) {
    if (interior[d] < 0) return verr("pad_c3: interior_padding ", dims_to_string(interior), " is negative");
    int64_t n = operand.shape[d];
    int64_t size = n + low[d] + std::max<int64_t>(n - 1, 0) * interior[d] + high[d];
    if (size < 0)
      return verr("pad_c4: dim ", d, " of ", ts(operand), " padded by low ", low[d], " high ", high[d],
                  " gives negative size ", size);
    s.push_back(size);
  }
  return TensorType{operand.dtype, s};
}

// ---------------------------------------------------------------- reduce

Result<std::vector<DType>> check_reduction_body(std::string_view op, const std::vector<TensorType>& inputs,
                                                const std::vector<TensorType>& args,
                                                const std::vector<TensorType>& returned) {
  const bool red = op == "reduce";
  const char* body_label = red ? "reduce_c6" : "scatter_c23";
  size_t n = inputs.size();
  if (args.size() != 2 * n)
    return verr(body_label, ": body must take ", 2 * n, " arguments for ", n, " inputs, but takes ", args.size());
  if (returned.size() != n) return verr(body_label, ": body must return ", n, " values, but returns ", returned.size());
  std::vector<DType> e;
  for (size_t i = 0; i < n; ++i) {
    const TensorType& r = returned[i];
    if (r.rank() != 0) return verr(body_label, ": body result #", i, " must be a 0-d tensor, got ", ts(r));
    if (args[i] != r || args[n + i] != r)
      return verr(body_label, ": body arguments #", i, " ", ts(args[i]), " and #", n + i, " ", ts(args[n + i]),
                  " must both have the body result type ", ts(r));
    if (!is_promotable(inputs[i].dtype, r.dtype))
      return verr(red ? "reduce_c6" : "scatter_c23", ": input #", i, " element type ", dtype_name(inputs[i].dtype),
                  " is not promotable to the body's ", dtype_name(r.dtype));
    e.push_back(r.dtype);
  }
  return e;
}

Result<std::vector<TensorType>> infer_reduce(const std::vector<TensorType>& inputs,
                                             const std::vector<TensorType>& init_values, const Dims& dimensions,
                                             const std::vector<DType>& body_types) {
  if (inputs.empty() || inputs.size() != init_values.size() || body_types.size() != inputs.size())
    return verr("reduce_c3: need 0 < size(inputs) = size(init_values) = size(results), got ", inputs.size(),
                " inputs, ", init_values.size(), " init values, ", body_types.size(), " body results");
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].shape != inputs[0].shape)
      return verr("reduce_c1: input #", i, " ", ts(inputs[i]), " and input #0 ", ts(inputs[0]), " shapes differ");
    if (init_values[i].rank() != 0) return verr("reduce_i2: init value #", i, " must be 0-d, got ", ts(init_values[i]));
    if (init_values[i].dtype != inputs[i].dtype)
      return verr("reduce_c2: init value #", i, " ", ts(init_values[i]), " and input ", ts(inputs[i]),
                  " element types differ");
  }
  HLX_RETURN_IF_ERROR(check_range(dimensions, inputs[0].rank(), "reduce_c4", "dimensions"));
  if (!is_unique(dimensions)) return verr("reduce_c5: dimensions ", dims_to_string(dimensions), " are not unique");
  Shape s;
  for (int64_t d = 0; d < inputs[0].rank(); ++d)
    if (!contains(dimensions, d)) s.push_back(inputs[0].shape[d]);
  std::vector<TensorType> out;
  for (DType e : body_types) out.push_back(TensorType{e, s});
  return out;
}

// ---------------------------------------------------------------- dot_general

Result<TensorType> infer_dot_general(const TensorType& lhs, const TensorType& rhs, const DotDims& d,
                                     std::optional<DType> result_dtype) {
  if (d.lhs_batching.size() != d.rhs_batching.size())
    return verr("dot_general_c1: lhs_batching_dimensions ", dims_to_string(d.lhs_batching),
                " and rhs_batching_dimensions ", dims_to_string(d.rhs_batching), " differ in size");
  if (d.lhs_contracting.size() != d.rhs_contracting.size())
    return verr("dot_general_c2: lhs_contracting_dimensions ", dims_to_string(d.lhs_contracting),
                " and rhs_contracting_dimensions ", dims_to_string(d.rhs_contracting), " differ in size");
  if (!is_unique(concat(d.lhs_batching, d.lhs_contracting)))
    return verr("dot_general_c3: lhs batching ", dims_to_string(d.lhs_batching), " + contracting ",
                dims_to_string(d.lhs_contracting), " dimensions are not unique");
  if (!is_unique(concat(d.rhs_batching, d.rhs_contracting)))
    return verr("dot_general_c4: rhs batching ", dims_to_string(d.rhs_batching), " + contracting ",
                dims_to_string(d.rhs_contracting), " dimensions are not unique");
  HLX_RETURN_IF_ERROR(check_range(d.lhs_batching, lhs.rank(), "dot_general_c5", "lhs_batching_dimensions"));
  HLX_RETURN_IF_ERROR(check_range(d.lhs_contracting, lhs.rank(), "dot_general_c6", "lhs_contracting_dimensions"));
  HLX_RETURN_IF_ERROR(check_range(d.rhs_batching, rhs.rank(), "dot_general_c7", "rhs_batching_dimensions"));
  HLX_RETURN_IF_ERROR(check_range(d.rhs_contracting, rhs.rank(), "dot_general_c8", "rhs_contracting_dimensions"));
  for (size_t i = 0; i < d.lhs_batching.size(); ++i) {
    int64_t a = lhs.shape[size_t(d.lhs_batching[i])], b = rhs.shape[size_t(d.rhs_batching[i])];
    if (a != b)
      return verr("dot_general_c9: lhs batching dim ", d.lhs_batching[i], " has size ", a, " but rhs batching dim ",
                  d.rhs_batching[i], " has size ", b, " (", ts(lhs), " x ", ts(rhs), ")");
  }
  for (size_t i = 0; i < d.lhs_contracting.size(); ++i) {
    int64_t a = lhs.shape[size_t(d.lhs_contracting[i])], b = rhs.shape[size_t(d.rhs_contracting[i])];
    if (a != b)
      return verr("dot_general_c10: lhs contracting dim ", d.lhs_contracting[i], " has size ", a,
                  " but rhs contracting dim ", d.rhs_contracting[i], " has size ", b, " (", ts(lhs), " x ", ts(rhs),
                  ")");
  }
  Shape s;
  for (int64_t b : d.lhs_batching) s.push_back(lhs.shape[size_t(b)]);
  for (int64_t i = 0; i < lhs.rank(); ++i)
    if (!contains(d.lhs_batching, i) && !contains(d.lhs_contracting, i)) s.push_back(lhs.shape[i]);
  for (int64_t i = 0; i < rhs.rank(); ++i)
    if (!contains(d.rhs_batching, i) && !contains(d.rhs_contracting, i)) s.push_back(rhs.shape[i]);
  return TensorType{result_dtype.value_or(lhs.dtype), s};
}

// ---------------------------------------------------------------- gather / scatter

Result<TensorType> infer_gather(const TensorType& operand, const TensorType& idx, const GatherDims& d,
                                const Dims& slice_sizes) {
  if (!is_integer(idx.dtype)) return verr("gather_i2: start_indices must have an integer element type, got ", ts(idx));
  if (operand.rank() != int64_t(d.offset_dims.size() + d.collapsed_slice_dims.size() + d.operand_batching_dims.size()))
    return verr("gather_c1: rank(operand) = ", operand.rank(), " but offset_dims ", dims_to_string(d.offset_dims),
                ", collapsed_slice_dims ", dims_to_string(d.collapsed_slice_dims), " and operand_batching_dims ",
                dims_to_string(d.operand_batching_dims), " have ",
                d.offset_dims.size() + d.collapsed_slice_dims.size() + d.operand_batching_dims.size(), " entries");
  if (d.index_vector_dim < 0 || d.index_vector_dim > idx.rank())
    return verr("gather_c2: index_vector_dim ", d.index_vector_dim, " outside [0, ", idx.rank(), "] of start_indices ",
                ts(idx));
  int64_t index_len = d.index_vector_dim < idx.rank() ? idx.shape[size_t(d.index_vector_dim)] : 1;
  if (int64_t(d.start_index_map.size()) != index_len)
    return verr("gather_c3: start_index_map ", dims_to_string(d.start_index_map), " has size ",
                d.start_index_map.size(), " but the index vector has length ", index_len);
  if (!is_unique(d.offset_dims) || !is_sorted_dims(d.offset_dims))
    return verr("gather_c4: offset_dims ", dims_to_string(d.offset_dims), " must be sorted and unique");
  // c5 needs rank(result), which is computed below.
  if (!is_unique(concat(d.collapsed_slice_dims, d.operand_batching_dims)))
    return verr("gather_c6: collapsed_slice_dims ", dims_to_string(d.collapsed_slice_dims), " + operand_batching_dims ",
                dims_to_string(d.operand_batching_dims), " are not unique");
  if (!is_sorted_dims(d.collapsed_slice_dims))
    return verr("gather_c7: collapsed_slice_dims ", dims_to_string(d.collapsed_slice_dims), " are not sorted");
  HLX_RETURN_IF_ERROR(check_range(d.collapsed_slice_dims, operand.rank(), "gather_c8", "collapsed_slice_dims"));
  if (int64_t(slice_sizes.size()) != operand.rank())
    return verr("gather_c20: slice_sizes ", dims_to_string(slice_sizes),
                " must have size rank(operand) = ", operand.rank());
  for (int64_t c : d.collapsed_slice_dims)
    if (slice_sizes[size_t(c)] > 1)
      return verr("gather_c9: slice_sizes ", dims_to_string(slice_sizes), " must be <= 1 at collapsed_slice_dims ",
                  dims_to_string(d.collapsed_slice_dims));
  if (!is_sorted_dims(d.operand_batching_dims))
    return verr("gather_c10: operand_batching_dims ", dims_to_string(d.operand_batching_dims), " are not sorted");
  HLX_RETURN_IF_ERROR(check_range(d.operand_batching_dims, operand.rank(), "gather_c11", "operand_batching_dims"));
  for (int64_t c : d.operand_batching_dims)
    if (slice_sizes[size_t(c)] > 1)
      return verr("gather_c12: slice_sizes ", dims_to_string(slice_sizes), " must be <= 1 at operand_batching_dims ",
                  dims_to_string(d.operand_batching_dims));
  if (!is_unique(d.start_indices_batching_dims))
    return verr("gather_c13: start_indices_batching_dims ", dims_to_string(d.start_indices_batching_dims),
                " are not unique");
  HLX_RETURN_IF_ERROR(
      check_range(d.start_indices_batching_dims, idx.rank(), "gather_c14", "start_indices_batching_dims"));
  if (contains(d.start_indices_batching_dims, d.index_vector_dim))
    return verr("gather_c15: index_vector_dim ", d.index_vector_dim, " is in start_indices_batching_dims ",
                dims_to_string(d.start_indices_batching_dims));
  if (d.operand_batching_dims.size() != d.start_indices_batching_dims.size())
    return verr("gather_c16: operand_batching_dims ", dims_to_string(d.operand_batching_dims),
                " and start_indices_batching_dims ", dims_to_string(d.start_indices_batching_dims), " differ in size");
  for (size_t i = 0; i < d.operand_batching_dims.size(); ++i) {
    int64_t a = operand.shape[size_t(d.operand_batching_dims[i])];
    int64_t b = idx.shape[size_t(d.start_indices_batching_dims[i])];
    if (a != b)
      return verr("gather_c17: operand batching dim ", d.operand_batching_dims[i], " has size ", a,
                  " but start_indices batching dim ", d.start_indices_batching_dims[i], " has size ", b);
  }
  if (!is_unique(concat(d.start_index_map, d.operand_batching_dims)))
    return verr("gather_c18: start_index_map ", dims_to_string(d.start_index_map), " + operand_batching_dims ",
                dims_to_string(d.operand_batching_dims), " are not unique");
  HLX_RETURN_IF_ERROR(check_range(d.start_index_map, operand.rank(), "gather_c19", "start_index_map"));
  for (size_t i = 0; i < slice_sizes.size(); ++i)
    if (slice_sizes[i] < 0 || slice_sizes[i] > operand.shape[i])
      return verr("gather_c21: slice_sizes ", dims_to_string(slice_sizes), " dim ", i, " outside [0, ",
                  operand.shape[i], "] of operand ", ts(operand));
  // c22: batch dims come from start_indices (without index_vector_dim), offset dims from
  // slice_sizes (without collapsed and batching dims), interleaved as offset_dims says.
  Shape batch, offset;
  for (int64_t i = 0; i < idx.rank(); ++i)
    if (i != d.index_vector_dim) batch.push_back(idx.shape[i]);
  for (int64_t i = 0; i < operand.rank(); ++i)
    if (!contains(d.collapsed_slice_dims, i) && !contains(d.operand_batching_dims, i)) offset.push_back(slice_sizes[i]);
  int64_t rank = int64_t(batch.size() + offset.size());
  HLX_RETURN_IF_ERROR(check_range(d.offset_dims, rank, "gather_c5", "offset_dims"));
  Shape s(size_t(rank), 0);
  size_t bi = 0, oi = 0;
  for (int64_t i = 0; i < rank; ++i) s[i] = contains(d.offset_dims, i) ? offset[oi++] : batch[bi++];
  return TensorType{operand.dtype, s};
}

Result<std::vector<TensorType>> infer_scatter(const std::vector<TensorType>& inputs, const TensorType& idx,
                                              const std::vector<TensorType>& updates, const ScatterDims& d,
                                              const std::vector<DType>& body_types) {
  if (inputs.empty() || inputs.size() != updates.size())
    return verr("scatter_c5: need 0 < size(inputs) = size(updates), got ", inputs.size(), " and ", updates.size());
  if (body_types.size() != inputs.size())
    return verr("scatter_c23: update computation returns ", body_types.size(), " values for ", inputs.size(),
                " inputs");
  if (!is_integer(idx.dtype))
    return verr("scatter_i2: scatter_indices must have an integer element type, got ", ts(idx));
  const TensorType& in0 = inputs[0];
  const TensorType& up0 = updates[0];
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].shape != in0.shape)
      return verr("scatter_c1: input #", i, " ", ts(inputs[i]), " and input #0 ", ts(in0), " shapes differ");
    if (updates[i].shape != up0.shape)
      return verr("scatter_c3: update #", i, " ", ts(updates[i]), " and update #0 ", ts(up0), " shapes differ");
    if (updates[i].dtype != inputs[i].dtype)
      return verr("scatter_c6: update #", i, " ", ts(updates[i]), " and input ", ts(inputs[i]),
                  " element types differ");
  }
  if (in0.rank() != int64_t(d.update_window_dims.size() + d.inserted_window_dims.size() + d.input_batching_dims.size()))
    return verr("scatter_c2: rank(inputs[0]) = ", in0.rank(), " but update_window_dims ",
                dims_to_string(d.update_window_dims), ", inserted_window_dims ", dims_to_string(d.inserted_window_dims),
                " and input_batching_dims ", dims_to_string(d.input_batching_dims), " have ",
                d.update_window_dims.size() + d.inserted_window_dims.size() + d.input_batching_dims.size(), " entries");
  if (!is_unique(d.update_window_dims) || !is_sorted_dims(d.update_window_dims))
    return verr("scatter_c7: update_window_dims ", dims_to_string(d.update_window_dims), " must be sorted and unique");
  HLX_RETURN_IF_ERROR(check_range(d.update_window_dims, up0.rank(), "scatter_c8", "update_window_dims"));
  if (!is_unique(concat(d.inserted_window_dims, d.input_batching_dims)))
    return verr("scatter_c9: inserted_window_dims ", dims_to_string(d.inserted_window_dims), " + input_batching_dims ",
                dims_to_string(d.input_batching_dims), " are not unique");
  if (!is_sorted_dims(d.inserted_window_dims))
    return verr("scatter_c10: inserted_window_dims ", dims_to_string(d.inserted_window_dims), " are not sorted");
  HLX_RETURN_IF_ERROR(check_range(d.inserted_window_dims, in0.rank(), "scatter_c11", "inserted_window_dims"));
  if (!is_sorted_dims(d.input_batching_dims))
    return verr("scatter_c12: input_batching_dims ", dims_to_string(d.input_batching_dims), " are not sorted");
  HLX_RETURN_IF_ERROR(check_range(d.input_batching_dims, in0.rank(), "scatter_c13", "input_batching_dims"));
  if (!is_unique(d.scatter_indices_batching_dims))
    return verr("scatter_c14: scatter_indices_batching_dims ", dims_to_string(d.scatter_indices_batching_dims),
                " are not unique");
  HLX_RETURN_IF_ERROR(
      check_range(d.scatter_indices_batching_dims, idx.rank(), "scatter_c15", "scatter_indices_batching_dims"));
  if (contains(d.scatter_indices_batching_dims, d.index_vector_dim))
    return verr("scatter_c16: index_vector_dim ", d.index_vector_dim, " is in scatter_indices_batching_dims ",
                dims_to_string(d.scatter_indices_batching_dims));
  if (d.input_batching_dims.size() != d.scatter_indices_batching_dims.size())
    return verr("scatter_c17: input_batching_dims ", dims_to_string(d.input_batching_dims),
                " and scatter_indices_batching_dims ", dims_to_string(d.scatter_indices_batching_dims),
                " differ in size");
  for (size_t i = 0; i < d.input_batching_dims.size(); ++i) {
    int64_t a = in0.shape[size_t(d.input_batching_dims[i])];
    int64_t b = idx.shape[size_t(d.scatter_indices_batching_dims[i])];
    if (a != b)
      return verr("scatter_c18: input batching dim ", d.input_batching_dims[i], " has size ", a,
                  " but scatter_indices batching dim ", d.scatter_indices_batching_dims[i], " has size ", b);
  }
  if (d.index_vector_dim < 0 || d.index_vector_dim > idx.rank())
    return verr("scatter_c22: index_vector_dim ", d.index_vector_dim, " outside [0, ", idx.rank(),
                "] of scatter_indices ", ts(idx));
  int64_t index_len = d.index_vector_dim < idx.rank() ? idx.shape[size_t(d.index_vector_dim)] : 1;
  if (int64_t(d.scatter_dims_to_operand_dims.size()) != index_len)
    return verr("scatter_c19: scatter_dims_to_operand_dims ", dims_to_string(d.scatter_dims_to_operand_dims),
                " has size ", d.scatter_dims_to_operand_dims.size(), " but the index vector has length ", index_len);
  if (!is_unique(concat(d.scatter_dims_to_operand_dims, d.input_batching_dims)))
    return verr("scatter_c20: scatter_dims_to_operand_dims ", dims_to_string(d.scatter_dims_to_operand_dims),
                " + input_batching_dims ", dims_to_string(d.input_batching_dims), " are not unique");
  HLX_RETURN_IF_ERROR(
      check_range(d.scatter_dims_to_operand_dims, in0.rank(), "scatter_c21", "scatter_dims_to_operand_dims"));
  // c4: updates = scatter dims (indices without index_vector_dim) interleaved with window dims,
  // each window dim no larger than the matching non-inserted, non-batching input dim.
  Shape scatter_sizes, window_bounds;
  for (int64_t i = 0; i < idx.rank(); ++i)
    if (i != d.index_vector_dim) scatter_sizes.push_back(idx.shape[i]);
  for (int64_t i = 0; i < in0.rank(); ++i)
    if (!contains(d.inserted_window_dims, i) && !contains(d.input_batching_dims, i))
      window_bounds.push_back(in0.shape[i]);
  int64_t want_rank = int64_t(scatter_sizes.size() + d.update_window_dims.size());
  if (up0.rank() != want_rank)
    return verr("scatter_c4: updates ", ts(up0), " must have rank ", want_rank, " (", scatter_sizes.size(),
                " scatter dims + ", d.update_window_dims.size(), " window dims)");
  size_t si = 0, wi = 0;
  for (int64_t i = 0; i < up0.rank(); ++i) {
    if (contains(d.update_window_dims, i)) {
      if (up0.shape[i] > window_bounds[wi])
        return verr("scatter_c4: updates ", ts(up0), " window dim ", i, " has size ", up0.shape[i],
                    " > input window bound ", window_bounds[wi]);
      ++wi;
    } else {
      if (up0.shape[i] != scatter_sizes[si])
        return verr("scatter_c4: updates ", ts(up0), " scatter dim ", i, " has size ", up0.shape[i],
                    " but scatter_indices ", ts(idx), " gives ", scatter_sizes[si]);
      ++si;
    }
  }
  std::vector<TensorType> out;
  for (size_t i = 0; i < inputs.size(); ++i) out.push_back(TensorType{body_types[i], inputs[i].shape});
  return out;
}

// ---------------------------------------------------------------- convolution

Result<TensorType> infer_convolution(const TensorType& lhs, const TensorType& rhs, const ConvDims& d,
                                     const ConvWindow& w, std::optional<DType> result_dtype) {
  int64_t n = lhs.rank();
  if (n < 2 || rhs.rank() != n)
    return verr("convolution_c1: lhs ", ts(lhs), " and rhs ", ts(rhs), " must have the same rank N >= 2");
  int64_t ns = n - 2;
  auto size_is = [&](const auto& v, std::string_view label, std::string_view what) -> Status {
    if (!v.empty() && int64_t(v.size()) != ns)
      return verr(label, ": ", what, " has size ", v.size(), ", expected N - 2 = ", ns);
    return ok_status();
  };
  HLX_RETURN_IF_ERROR(size_is(w.window_strides, "convolution_c2", "window_strides"));
  for (int64_t s : w.window_strides)
    if (s <= 0) return verr("convolution_c3: window_strides ", dims_to_string(w.window_strides), " must be > 0");
  if (!w.padding.empty() && int64_t(w.padding.size()) != ns)
    return verr("convolution_c4: padding has ", w.padding.size(), " rows, expected N - 2 = ", ns);
  HLX_RETURN_IF_ERROR(size_is(w.lhs_dilation, "convolution_c5", "lhs_dilation"));
  for (int64_t s : w.lhs_dilation)
    if (s <= 0) return verr("convolution_c6: lhs_dilation ", dims_to_string(w.lhs_dilation), " must be > 0");
  HLX_RETURN_IF_ERROR(size_is(w.rhs_dilation, "convolution_c7", "rhs_dilation"));
  for (int64_t s : w.rhs_dilation)
    if (s <= 0) return verr("convolution_c8: rhs_dilation ", dims_to_string(w.rhs_dilation), " must be > 0");
  HLX_RETURN_IF_ERROR(size_is(w.window_reversal, "convolution_c9", "window_reversal"));
  if (w.feature_group_count <= 0)
    return verr("convolution_c21: feature_group_count ", w.feature_group_count, " must be > 0");
  if (w.batch_group_count <= 0) return verr("convolution_c22: batch_group_count ", w.batch_group_count, " must be > 0");
  if (w.feature_group_count != 1 && w.batch_group_count != 1)
    return verr("convolution_c23: feature_group_count ", w.feature_group_count, " and batch_group_count ",
                w.batch_group_count, " are both != 1");
  if (int64_t(d.input_spatial.size()) != ns)
    return verr("convolution_c12: input_spatial_dimensions ", dims_to_string(d.input_spatial),
                " must have size N - 2 = ", ns);
  Dims in_dims = concat(concat({d.input_batch}, d.input_spatial), {d.input_feature});
  if (!is_unique(in_dims))
    return verr("convolution_c13: input dimensions ", dims_to_string(in_dims), " are not unique");
  HLX_RETURN_IF_ERROR(check_range(in_dims, n, "convolution_c13", "input dimensions"));
  if (int64_t(d.kernel_spatial.size()) != ns)
    return verr("convolution_c17: kernel_spatial_dimensions ", dims_to_string(d.kernel_spatial),
                " must have size N - 2 = ", ns);
  Dims k_dims = concat(d.kernel_spatial, {d.kernel_input_feature, d.kernel_output_feature});
  if (!is_unique(k_dims)) return verr("convolution_c18: kernel dimensions ", dims_to_string(k_dims), " are not unique");
  HLX_RETURN_IF_ERROR(check_range(k_dims, n, "convolution_c18", "kernel dimensions"));
  if (int64_t(d.output_spatial.size()) != ns)
    return verr("convolution_c19: output_spatial_dimensions ", dims_to_string(d.output_spatial),
                " must have size N - 2 = ", ns);
  Dims o_dims = concat(concat({d.output_batch}, d.output_spatial), {d.output_feature});
  if (!is_unique(o_dims)) return verr("convolution_c20: output dimensions ", dims_to_string(o_dims), " are not unique");
  HLX_RETURN_IF_ERROR(check_range(o_dims, n, "convolution_c20", "output dimensions"));

  int64_t in_batch = lhs.shape[size_t(d.input_batch)], in_feat = lhs.shape[size_t(d.input_feature)];
  int64_t k_in = rhs.shape[size_t(d.kernel_input_feature)];
  int64_t k_out = rhs.shape[size_t(d.kernel_output_feature)];
  if (in_batch % w.batch_group_count != 0)
    return verr("convolution_c10: input batch ", in_batch, " is not divisible by batch_group_count ",
                w.batch_group_count);
  if (in_feat % w.feature_group_count != 0)
    return verr("convolution_c11: input features ", in_feat, " are not divisible by feature_group_count ",
                w.feature_group_count);
  if (k_in != in_feat / w.feature_group_count)
    return verr("convolution_c14: kernel input features ", k_in, " != input features ", in_feat,
                " / feature_group_count ", w.feature_group_count, " (lhs ", ts(lhs), ", rhs ", ts(rhs), ")");
  if (k_out % w.batch_group_count != 0)
    return verr("convolution_c15: kernel output features ", k_out, " are not divisible by batch_group_count ",
                w.batch_group_count);
  if (k_out % w.feature_group_count != 0)
    return verr("convolution_c16: kernel output features ", k_out, " are not divisible by feature_group_count ",
                w.feature_group_count);
  if (lhs.dtype != rhs.dtype)
    return verr("convolution_c27: lhs ", ts(lhs), " and rhs ", ts(rhs), " element types differ");

  Shape s(size_t(n), 0);
  s[size_t(d.output_batch)] = in_batch / w.batch_group_count;
  s[size_t(d.output_feature)] = k_out;
  for (int64_t i = 0; i < ns; ++i) {
    int64_t in = lhs.shape[size_t(d.input_spatial[i])];
    int64_t k = rhs.shape[size_t(d.kernel_spatial[i])];
    int64_t ld = w.lhs_dilation.empty() ? 1 : w.lhs_dilation[i];
    int64_t rd = w.rhs_dilation.empty() ? 1 : w.rhs_dilation[i];
    int64_t st = w.window_strides.empty() ? 1 : w.window_strides[i];
    int64_t lo = w.padding.empty() ? 0 : w.padding[i].first;
    int64_t hi = w.padding.empty() ? 0 : w.padding[i].second;
    int64_t dil_in = in == 0 ? 0 : (in - 1) * ld + 1;
    int64_t padded = lo + dil_in + hi;
    int64_t dil_k = k == 0 ? 0 : (k - 1) * rd + 1;
    bool empty = padded <= 0 || dil_k > padded;
    s[size_t(d.output_spatial[i])] = empty ? 0 : (padded - dil_k) / st + 1;
  }
  return TensorType{result_dtype.value_or(lhs.dtype), s};
}

}  // namespace hlx::shlo
