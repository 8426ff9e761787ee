// The API model emitters use to write StableHLO programs.
//
//   ModuleBuilder mb("llama");
//   FunctionBuilder& f = mb.function("main");
//   Value x = f.arg(TensorType{DType::kBF16, {8, 64}}, "x");
//   Value w = f.arg(TensorType{DType::kBF16, {64, 32}}, "model.layers.0.mlp.up_proj.weight");
//   Value y = f.dot_general(x, w, DotDims::matmul(2, 2));
//   f.ret({f.add(y, f.full(1.0, y.type()))});
//   HLX_ASSIGN_OR_RETURN(Module m, mb.finish());   // first error, or the verified module
//
// Error model: every op method infers its result types with shape_inference.h. On the first
// failure the function builder records the error (with the op about to be emitted and the
// builder's current `scope()` label) and from then on returns invalid Values; later ops on
// invalid Values are skipped silently, so the recorded error is the root cause. `finish()` returns
// that error, or runs verify_module and returns the module. `FunctionBuilder::status()` exposes
// the first error early. Nothing aborts or throws. Methods returning std::vector<Value> return at
// least one (invalid) Value on error, so `f.call(...)[0]` is always safe to write.
//
// Ownership and threads: a ModuleBuilder owns its FunctionBuilders (references stay valid until
// the ModuleBuilder is destroyed). Not thread-safe; build one module per thread.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "stablehlo/ir.h"
#include "stablehlo/shape_inference.h"

namespace hlx::shlo {

class FunctionBuilder;
class ModuleBuilder;

// A handle to an SSA value inside one FunctionBuilder. Cheap to copy. Invalid after an error.
class Value {
 public:
  Value() = default;
  bool valid() const { return id_ >= 0; }
  ValueId id() const { return id_; }
  const TensorType& type() const { return type_; }
  DType dtype() const { return type_.dtype; }
  const Shape& shape() const { return type_.shape; }
  int64_t rank() const { return type_.rank(); }
  int64_t dim(int64_t i) const { return i >= 0 && i < rank() ? type_.shape[size_t(i)] : -1; }

 private:
  friend class FunctionBuilder;
  Value(FunctionBuilder* owner, ValueId id, TensorType t) : owner_(owner), id_(id), type_(std::move(t)) {}
  FunctionBuilder* owner_ = nullptr;
  ValueId id_ = -1;
  TensorType type_;
};

enum class CompareDir { kEQ, kNE, kGE, kGT, kLE, kLT };
// Standard reduction / scatter update bodies.
enum class Reducer { kSum, kProd, kMax, kMin, kAnd, kOr, kReplace /* scatter only: new value */ };

// Body of a region or decomposition: receives the block arguments, returns the values to return.
using BodyFn = std::function<std::vector<Value>(FunctionBuilder&, const std::vector<Value>& args)>;

class FunctionBuilder {
 public:
  const std::string& name() const { return fn_.name; }
  // First recorded error (ok when none).
  const Status& status() const { return status_; }
  bool ok() const { return status_.ok(); }
  // A label added to error messages (e.g. "layer 3 attention"); emitters set it as they go.
  void set_scope(std::string scope) { scope_ = std::move(scope); }

  // ---- signature ----
  // Adds an argument (allowed at any time before ret(), e.g. when a layer first needs a weight);
  // `name` becomes `hlx.name` (omitted when empty), `alias_output` becomes `tf.aliasing_output`
  // (the argument is donated and aliases that result).
  Value arg(TensorType type, std::string name = "", std::optional<int> alias_output = std::nullopt);
  // Any other argument attribute (e.g. mhlo.sharding); `v` must be an argument.
  void set_arg_attr(const Value& v, std::string key, Attr value);
  // Terminates the function with func.return; fixes its result types. Call exactly once.
  void ret(const std::vector<Value>& values, std::vector<AttrDict> result_attrs = {});

  // ---- constants ----
  Value constant(const Tensor& t);
  Value constant(DenseElements value);
  // A rank-0 constant: value converted to `dtype` (round to nearest even for f16/bf16,
  // truncation toward zero for integers, != 0 for i1).
  Value scalar(double value, DType dtype);
  // A 1-D constant from integers, e.g. index tables.
  Value ints(const std::vector<int64_t>& values, DType dtype = DType::kI32);
  // `value` broadcast to `type` (a scalar constant + broadcast_in_dim; no large literal).
  Value full(double value, const TensorType& type);
  Value zeros(const TensorType& type) { return full(0.0, type); }
  // Most negative finite value (floats: -inf) / most positive; used as max/min identities.
  Value lowest(DType dtype);
  Value highest(DType dtype);
  Value iota(const TensorType& type, int64_t dimension);

  // ---- elementwise ----
  Value add(const Value& a, const Value& b) { return binary("add", a, b); }
  Value sub(const Value& a, const Value& b) { return binary("subtract", a, b); }
  Value mul(const Value& a, const Value& b) { return binary("multiply", a, b); }
  Value div(const Value& a, const Value& b) { return binary("divide", a, b); }
  Value rem(const Value& a, const Value& b) { return binary("remainder", a, b); }
  Value max(const Value& a, const Value& b) { return binary("maximum", a, b); }
  Value min(const Value& a, const Value& b) { return binary("minimum", a, b); }
  Value pow(const Value& a, const Value& b) { return binary("power", a, b); }
  Value logical_and(const Value& a, const Value& b) { return binary("and", a, b); }
  Value logical_or(const Value& a, const Value& b) { return binary("or", a, b); }
  Value logical_xor(const Value& a, const Value& b) { return binary("xor", a, b); }
  Value logical_not(const Value& a) { return unary("not", a); }
  Value neg(const Value& a) { return unary("negate", a); }
  Value abs(const Value& a) { return unary("abs", a); }
  Value sign(const Value& a) { return unary("sign", a); }
  Value exp(const Value& a) { return unary("exponential", a); }
  Value expm1(const Value& a) { return unary("exponential_minus_one", a); }
  Value log(const Value& a) { return unary("log", a); }
  Value log1p(const Value& a) { return unary("log_plus_one", a); }
  Value sqrt(const Value& a) { return unary("sqrt", a); }
  Value rsqrt(const Value& a) { return unary("rsqrt", a); }
  Value tanh(const Value& a) { return unary("tanh", a); }
  Value logistic(const Value& a) { return unary("logistic", a); }
  Value sin(const Value& a) { return unary("sine", a); }
  Value cos(const Value& a) { return unary("cosine", a); }
  Value floor(const Value& a) { return unary("floor", a); }
  Value ceil(const Value& a) { return unary("ceil", a); }
  Value round_afz(const Value& a) { return unary("round_nearest_afz", a); }
  Value round_even(const Value& a) { return unary("round_nearest_even", a); }
  Value erf(const Value& a);  // chlo.erf
  // By StableHLO short name ("add", "exponential", ...).
  Value unary(std::string_view op, const Value& a);
  Value binary(std::string_view op, const Value& a, const Value& b);

  // `compare_type` defaults to what the element type requires (FLOAT / SIGNED / UNSIGNED).
  Value compare(CompareDir dir, const Value& a, const Value& b, std::string compare_type = "");
  Value select(const Value& pred, const Value& on_true, const Value& on_false);
  Value clamp(const Value& min, const Value& x, const Value& max);
  // Returns `x` itself when it already has element type `to`.
  Value convert(const Value& x, DType to);

  // ---- shapes ----
  Value broadcast_in_dim(const Value& x, const Shape& shape, const Dims& broadcast_dimensions);
  // Numpy-style: aligns x's dims to the trailing dims of `shape`.
  Value broadcast_to(const Value& x, const Shape& shape);
  Value reshape(const Value& x, const Shape& shape);
  Value transpose(const Value& x, const Dims& permutation);
  // Empty strides mean all 1.
  Value slice(const Value& x, const Dims& start, const Dims& limit, const Dims& strides = {});
  Value dynamic_slice(const Value& x, const std::vector<Value>& start_indices, const Dims& sizes);
  Value dynamic_update_slice(const Value& x, const Value& update, const std::vector<Value>& start_indices);
  Value concatenate(const std::vector<Value>& inputs, int64_t dimension);
  Value pad(const Value& x, const Value& padding_value, const Dims& low, const Dims& high, const Dims& interior = {});

  // ---- reductions ----
  std::vector<Value> reduce(const std::vector<Value>& inputs, const std::vector<Value>& init_values,
                            const Dims& dimensions, const BodyFn& body);
  Value reduce(const Value& x, const Value& init, const Dims& dimensions, Reducer r);
  Value reduce_sum(const Value& x, const Dims& dimensions);
  Value reduce_max(const Value& x, const Dims& dimensions);
  Value reduce_min(const Value& x, const Dims& dimensions);
  // Index of the largest element along `dimension` (first one on ties; NaN counts as largest, as
  // in JAX). Returns {values, indices}.
  std::pair<Value, Value> argmax(const Value& x, int64_t dimension, DType index_dtype = DType::kI32);

  // ---- contractions, indexing ----
  // `result_dtype` defaults to lhs's.
  Value dot_general(const Value& lhs, const Value& rhs, const DotDims& dims,
                    std::optional<DType> result_dtype = std::nullopt);
  Value gather(const Value& operand, const Value& start_indices, const GatherDims& dims, const Dims& slice_sizes,
               bool indices_are_sorted = false);
  std::vector<Value> scatter(const std::vector<Value>& inputs, const Value& scatter_indices,
                             const std::vector<Value>& updates, const ScatterDims& dims,
                             const BodyFn& update_computation, bool indices_are_sorted = false,
                             bool unique_indices = false);
  Value scatter(const Value& input, const Value& scatter_indices, const Value& updates, const ScatterDims& dims,
                Reducer r, bool indices_are_sorted = false, bool unique_indices = false);
  Value convolution(const Value& lhs, const Value& rhs, const ConvDims& dims, const ConvWindow& window = {},
                    std::optional<DType> result_dtype = std::nullopt);

  // ---- calls ----
  // `callee` must already have been ret()-ed (its result types are known).
  std::vector<Value> call(const std::string& callee, const std::vector<Value>& args);
  Value call1(const std::string& callee, const std::vector<Value>& args);
  // stablehlo.composite with an existing decomposition function.
  std::vector<Value> composite(const std::string& name, const std::vector<Value>& operands, AttrDict attributes,
                               const std::string& decomposition, int version = 0);
  // Same, building the private decomposition function @`decomposition` from `body` the first
  // time the name is used; later uses reuse it (their operand types must match).
  std::vector<Value> composite(const std::string& name, const std::vector<Value>& operands, AttrDict attributes,
                               const std::string& decomposition, const BodyFn& body, int version = 0);
  std::vector<Value> custom_call(const std::string& target, const std::vector<Value>& operands,
                                 const std::vector<TensorType>& result_types, AttrDict attrs = {});

  // Escape hatch: appends `op` with the given result types, unchecked until finish() verifies.
  std::vector<Value> raw_op(std::string name, const std::vector<Value>& operands,
                            const std::vector<TensorType>& result_types, AttrDict attrs = {},
                            std::vector<Block> regions = {});

 private:
  friend class ModuleBuilder;
  FunctionBuilder(ModuleBuilder* module, std::string name, bool is_public);

  // Records the first error (with the op name and scope) and returns an invalid Value.
  Value fail(std::string_view op, const Status& s);
  std::vector<Value> fail_n(std::string_view op, const Status& s, size_t n);
  // False (silently) when any value is invalid; error when it belongs to another function.
  bool usable(std::string_view op, const std::vector<Value>& vs);
  std::vector<Value> emit(std::string name, const std::vector<Value>& operands,
                          const std::vector<TensorType>& result_types, AttrDict attrs, std::vector<Block> regions = {});
  Value emit1(std::string name, const std::vector<Value>& operands, const TensorType& result, AttrDict attrs = {});
  // Builds a single-block region with scalar args of `arg_types` from `body`.
  Result<Block> build_region(const std::vector<TensorType>& arg_types, const BodyFn& body,
                             std::vector<TensorType>& returned);
  static BodyFn reducer_body(Reducer r, std::string_view op);

  ModuleBuilder* module_;
  Function fn_;
  Status status_;
  std::string scope_;
  bool returned_ = false;
  std::vector<std::vector<Op>*> blocks_;  // innermost block receives new ops
};

class ModuleBuilder {
 public:
  explicit ModuleBuilder(std::string name = "");
  ModuleBuilder(const ModuleBuilder&) = delete;
  ModuleBuilder& operator=(const ModuleBuilder&) = delete;

  // Starts a new function (names must be unique; a duplicate is recorded as an error).
  FunctionBuilder& function(std::string name, bool is_public = true);
  FunctionBuilder* find(const std::string& name);
  bool has_function(const std::string& name) const;
  void set_attr(std::string key, Attr value);

  // First error of any function, or the verified module. Leaves the builder empty.
  Result<Module> finish();

 private:
  friend class FunctionBuilder;
  Status status_;
  Module module_;
  std::vector<std::unique_ptr<FunctionBuilder>> functions_;
};

}  // namespace hlx::shlo
