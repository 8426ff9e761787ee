// A chain of float elementwise ops evaluated tile by tile through f32 scratch, so intermediates
// never reach memory. Every intermediate is rounded to its own element type right after it is
// computed (quantize_f), which makes the result bit-identical to running the ops one by one.
#include <algorithm>
#include <cstring>
#include <optional>
#include <string_view>
#include <unordered_map>

#include "runtime/kernels/ew_vec.h"
#include "runtime/op_kernel.h"
#include "runtime/ops/elementwise_common.h"
#include "runtime/ops/elementwise_functors.h"

namespace hlx::rt {
namespace {

using ew::BinOp;
using ew::UnOp;

// 512 f32 = 2 KiB per value: a chain of ~10 values stays in L1.
constexpr int64_t kTile = 512;

// args: the operand tiles; y: the result tile (may alias an operand tile).
using TileFn = void (*)(const float* const* args, float* y, int64_t n);

// Rounds a computed f32 tile to D's precision in place (the per-step quantize_f), vectorised for
// bf16 with the same bits.
template <DType D>
void quantize_tile(float* y, int64_t n) {
  if constexpr (D == DType::kBF16)
    kernels::round_to_bf16(y, y, n);
  else if constexpr (D != DType::kF32)
    for (int64_t i = 0; i < n; ++i) y[i] = ew::quantize_f<D>(y[i]);
}

template <UnOp O, DType D>
void un_tile(const float* const* a, float* y, int64_t n) {
  const float* x = a[0];
  if constexpr (ew::vector_unary(O)) {  // the same array kernel as the one-op path
    ew::unary_f32_n<O>(x, y, n);
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = ew::unary_f<O>(x[i]);
  }
  quantize_tile<D>(y, n);
}
// add/sub/mul/div are correctly rounded, so the array form gives binary_f's bits.
template <BinOp O>
constexpr bool vector_binary = O == BinOp::kAdd || O == BinOp::kSub || O == BinOp::kMul || O == BinOp::kDiv;
template <BinOp O, DType D>
void bin_tile(const float* const* a, float* y, int64_t n) {
  const float *x = a[0], *z = a[1];
  if constexpr (vector_binary<O>) {
    constexpr kernels::VecBinOp v = O == BinOp::kAdd   ? kernels::VecBinOp::kAdd
                                    : O == BinOp::kSub ? kernels::VecBinOp::kSub
                                    : O == BinOp::kMul ? kernels::VecBinOp::kMul
                                                       : kernels::VecBinOp::kDiv;
    kernels::binary_f32(v, x, z, y, n);
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = ew::binary_f<O>(x[i], z[i]);
  }
  quantize_tile<D>(y, n);
}
template <DType D>
void clamp_tile(const float* const* a, float* y, int64_t n) {
  const float *lo = a[0], *x = a[1], *hi = a[2];
  for (int64_t i = 0; i < n; ++i) y[i] = ew::fmin_nan(ew::fmax_nan(x[i], lo[i]), hi[i]);
  quantize_tile<D>(y, n);
}
template <DType D>
void convert_tile(const float* const* a, float* y, int64_t n) {
  if constexpr (D == DType::kF32) {
    if (y != a[0]) std::memcpy(y, a[0], size_t(n) * sizeof(float));
  } else if constexpr (D == DType::kBF16) {
    kernels::round_to_bf16(a[0], y, n);
  } else {
    const float* x = a[0];
    for (int64_t i = 0; i < n; ++i) y[i] = ew::quantize_f<D>(x[i]);
  }
}

struct OpInfo {
  enum Kind { kUnary, kBinary, kClamp, kConvert, kConstant } kind;
  UnOp un = UnOp::kNegate;
  BinOp bin = BinOp::kAdd;
};

const std::unordered_map<std::string_view, OpInfo>& op_table() {
  static const std::unordered_map<std::string_view, OpInfo> t = {
      {"stablehlo.negate", {OpInfo::kUnary, UnOp::kNegate}},
      {"stablehlo.abs", {OpInfo::kUnary, UnOp::kAbs}},
      {"stablehlo.sign", {OpInfo::kUnary, UnOp::kSign}},
      {"stablehlo.exponential", {OpInfo::kUnary, UnOp::kExp}},
      {"stablehlo.exponential_minus_one", {OpInfo::kUnary, UnOp::kExpm1}},
      {"stablehlo.log", {OpInfo::kUnary, UnOp::kLog}},
      {"stablehlo.log_plus_one", {OpInfo::kUnary, UnOp::kLog1p}},
      {"stablehlo.sqrt", {OpInfo::kUnary, UnOp::kSqrt}},
      {"stablehlo.rsqrt", {OpInfo::kUnary, UnOp::kRsqrt}},
      {"stablehlo.tanh", {OpInfo::kUnary, UnOp::kTanh}},
      {"stablehlo.logistic", {OpInfo::kUnary, UnOp::kLogistic}},
      {"stablehlo.sine", {OpInfo::kUnary, UnOp::kSin}},
      {"stablehlo.cosine", {OpInfo::kUnary, UnOp::kCos}},
      {"stablehlo.floor", {OpInfo::kUnary, UnOp::kFloor}},
      {"stablehlo.ceil", {OpInfo::kUnary, UnOp::kCeil}},
      {"stablehlo.round_nearest_afz", {OpInfo::kUnary, UnOp::kRoundAfz}},
      {"stablehlo.round_nearest_even", {OpInfo::kUnary, UnOp::kRoundEven}},
      {"chlo.erf", {OpInfo::kUnary, UnOp::kErf}},
      {"stablehlo.add", {OpInfo::kBinary, UnOp::kNegate, BinOp::kAdd}},
      {"stablehlo.subtract", {OpInfo::kBinary, UnOp::kNegate, BinOp::kSub}},
      {"stablehlo.multiply", {OpInfo::kBinary, UnOp::kNegate, BinOp::kMul}},
      {"stablehlo.divide", {OpInfo::kBinary, UnOp::kNegate, BinOp::kDiv}},
      {"stablehlo.remainder", {OpInfo::kBinary, UnOp::kNegate, BinOp::kRem}},
      {"stablehlo.maximum", {OpInfo::kBinary, UnOp::kNegate, BinOp::kMax}},
      {"stablehlo.minimum", {OpInfo::kBinary, UnOp::kNegate, BinOp::kMin}},
      {"stablehlo.power", {OpInfo::kBinary, UnOp::kNegate, BinOp::kPow}},
      {"stablehlo.clamp", {OpInfo::kClamp}},
      {"stablehlo.convert", {OpInfo::kConvert}},
      {"stablehlo.constant", {OpInfo::kConstant}},
  };
  return t;
}

// The case lists stay one row per line of ops (clang-format would rewrap them differently each run).
// clang-format off
#define HLX_UN(X) case UnOp::X: return &un_tile<UnOp::X, D>;
template <DType D> TileFn unary_tile(UnOp o) {
  switch (o) {
    HLX_UN(kNegate) HLX_UN(kAbs) HLX_UN(kSign) HLX_UN(kExp) HLX_UN(kExpm1) HLX_UN(kLog) HLX_UN(kLog1p)
    HLX_UN(kSqrt) HLX_UN(kRsqrt) HLX_UN(kTanh) HLX_UN(kLogistic) HLX_UN(kSin) HLX_UN(kCos) HLX_UN(kFloor)
    HLX_UN(kCeil) HLX_UN(kRoundAfz) HLX_UN(kRoundEven) HLX_UN(kErf)
    default: return nullptr;
  }
}
#undef HLX_UN
#define HLX_BIN(X) case BinOp::X: return &bin_tile<BinOp::X, D>;
template <DType D> TileFn binary_tile(BinOp o) {
  switch (o) {
    HLX_BIN(kAdd) HLX_BIN(kSub) HLX_BIN(kMul) HLX_BIN(kDiv) HLX_BIN(kRem) HLX_BIN(kMax) HLX_BIN(kMin) HLX_BIN(kPow)
    default: return nullptr;
  }
}
#undef HLX_BIN
// clang-format on

TileFn tile_fn(const OpInfo& info, DType t) {
  auto pick = [&](auto d) -> TileFn {
    constexpr DType D = decltype(d)::value;
    switch (info.kind) {
      case OpInfo::kUnary:
        return unary_tile<D>(info.un);
      case OpInfo::kBinary:
        return binary_tile<D>(info.bin);
      case OpInfo::kClamp:
        return &clamp_tile<D>;
      case OpInfo::kConvert:
        return &convert_tile<D>;
      default:
        return nullptr;
    }
  };
  switch (t) {
    case DType::kF32:
      return pick(ew::DTag<DType::kF32>{});
    case DType::kBF16:
      return pick(ew::DTag<DType::kBF16>{});
    case DType::kF16:
      return pick(ew::DTag<DType::kF16>{});
    default:
      return nullptr;
  }
}

// A splat constant's single value as f32, or nullopt when the constant is not a float splat.
std::optional<float> splat_value(const shlo::Op& op) {
  const shlo::Attr* a = op.attr("value");
  if (!a || a->kind != shlo::Attr::Kind::kDense || !a->dense || !is_float(a->dense->type.dtype)) return std::nullopt;
  const auto& b = a->dense->bytes;
  size_t es = dtype_size(a->dense->type.dtype);
  if (b.size() < es) return std::nullopt;
  for (size_t i = es; i < b.size(); i += es)
    if (std::memcmp(&b[i], &b[0], es) != 0) return std::nullopt;
  return ew::dispatch(a->dense->type.dtype, [&](auto d) -> float {
    constexpr DType D = decltype(d)::value;
    if constexpr (is_float(D)) {
      ew::St<D> v;
      std::memcpy(&v, b.data(), es);
      return ew::load_f<D>(v);
    } else {
      return 0.0f;
    }
  });
}

bool valid_value(const shlo::Function& fn, shlo::ValueId v) { return v >= 0 && size_t(v) < fn.value_types.size(); }

// Loads n elements of a float tensor into f32, and stores f32 back.
void load_tile(DType t, const void* base, int64_t off, float* y, int64_t n) {
  if (t == DType::kBF16) return kernels::bf16_to_f32_n(static_cast<const bf16*>(base) + off, y, n);
  ew::dispatch(t, [&](auto d) {
    constexpr DType D = decltype(d)::value;
    if constexpr (is_float(D)) {
      const ew::St<D>* x = static_cast<const ew::St<D>*>(base) + off;
      for (int64_t i = 0; i < n; ++i) y[i] = ew::load_f<D>(x[i]);
    }
  });
}
void store_tile(DType t, void* base, int64_t off, const float* x, int64_t n) {
  if (t == DType::kBF16) return kernels::f32_to_bf16_exact(x, static_cast<bf16*>(base) + off, n);
  if (t == DType::kF32) {
    float* y = static_cast<float*>(base) + off;
    if (y != x) std::memmove(y, x, size_t(n) * sizeof(float));
    return;
  }
  ew::dispatch(t, [&](auto d) {
    constexpr DType D = decltype(d)::value;
    if constexpr (is_float(D)) {
      ew::St<D>* y = static_cast<ew::St<D>*>(base) + off;
      for (int64_t i = 0; i < n; ++i) y[i] = ew::store_f<D>(x[i]);
    }
  });
}

class FusedKernel final : public OpKernel {
 public:
  struct Step {
    TileFn fn = nullptr;  // null: fill with `constant`
    float constant = 0.0f;
    int args[3] = {0, 0, 0};  // slots
    int nargs = 0;
    int dst = 0;
  };

  FusedKernel(std::vector<shlo::TensorType> in, std::vector<shlo::TensorType> out, std::vector<Step> steps,
              std::vector<int> out_slots, int nslots)
      : in_(std::move(in)),
        out_(std::move(out)),
        steps_(std::move(steps)),
        out_slots_(std::move(out_slots)),
        nslots_(nslots) {
    // f32 inputs are read in place (no copy into scratch) unless an output is an input value: then
    // storing one output could overwrite an input another output still copies from.
    read_f32_in_place_ = true;
    for (int s : out_slots_)
      if (s < int(in_.size())) read_f32_in_place_ = false;
  }

  Status run(const std::vector<const Tensor*>& inputs, const std::vector<Tensor*>& outputs) override {
    HLX_RETURN_IF_ERROR(ew::check_buffers("fused elementwise", inputs, outputs, in_, out_));
    const int64_t n = num_elements(out_[0].shape);
    ew::parallel_for(n, [&](int64_t b, int64_t e) {
      // Scratch kept per thread (a chunk is often only a few tiles); slot[s] is value s's tile.
      thread_local std::vector<float> scratch;
      thread_local std::vector<const float*> slot;
      if (scratch.size() < size_t(nslots_) * size_t(kTile)) scratch.resize(size_t(nslots_) * size_t(kTile));
      slot.resize(size_t(nslots_));
      for (int s = 0; s < nslots_; ++s) slot[size_t(s)] = scratch.data() + size_t(s) * size_t(kTile);
      auto dst = [&](int s) { return const_cast<float*>(slot[size_t(s)]); };
      for (int64_t t0 = b; t0 < e; t0 += kTile) {
        int64_t m = std::min(kTile, e - t0);
        // A tile's outputs are stored only after all its steps ran, so every input element of the
        // tile (read in place or loaded) is read before any output element of it is written.
        for (size_t i = 0; i < inputs.size(); ++i) {
          if (read_f32_in_place_ && in_[i].dtype == DType::kF32)
            slot[i] = static_cast<const float*>(inputs[i]->raw()) + t0;
          else
            load_tile(in_[i].dtype, inputs[i]->raw(), t0, dst(int(i)), m);
        }
        for (const Step& s : steps_) {
          float* y = dst(s.dst);
          if (!s.fn) {
            std::fill(y, y + m, s.constant);
            continue;
          }
          const float* args[3] = {slot[size_t(s.args[0])], slot[size_t(s.args[1])], slot[size_t(s.args[2])]};
          s.fn(args, y, m);
        }
        for (size_t o = 0; o < outputs.size(); ++o)
          store_tile(out_[o].dtype, outputs[o]->raw(), t0, slot[size_t(out_slots_[o])], m);
      }
    });
    return ok_status();
  }
  bool can_run_in_place(int index) const override {
    return index >= 0 && size_t(index) < in_.size() && in_[size_t(index)] == out_[0];
  }

 private:
  std::vector<shlo::TensorType> in_, out_;
  std::vector<Step> steps_;
  std::vector<int> out_slots_;
  int nslots_;
  bool read_f32_in_place_ = false;
};

}  // namespace

bool is_fusible_elementwise(const shlo::Op& op, const shlo::Function& fn) {
  auto it = op_table().find(op.name);
  if (it == op_table().end() || op.results.size() != 1 || !valid_value(fn, op.results[0])) return false;
  const auto& rt = fn.type_of(op.results[0]);
  if (!is_float(rt.dtype)) return false;
  const OpInfo& info = it->second;
  size_t want = info.kind == OpInfo::kUnary || info.kind == OpInfo::kConvert ? 1
                : info.kind == OpInfo::kBinary                               ? 2
                : info.kind == OpInfo::kClamp                                ? 3
                                                                             : 0;
  if (op.operands.size() != want) return false;
  if (info.kind == OpInfo::kConstant) {
    auto v = splat_value(op);
    return v.has_value() && op.attr("value")->dense->type == rt;
  }
  for (auto v : op.operands) {
    if (!valid_value(fn, v)) return false;
    const auto& t = fn.type_of(v);
    if (!is_float(t.dtype) || t.shape != rt.shape) return false;
    if (info.kind != OpInfo::kConvert && t.dtype != rt.dtype) return false;
  }
  return true;
}

bool float_splat_constant(const shlo::Op& op, float* value) {
  if (op.name != "stablehlo.constant") return false;
  auto v = splat_value(op);
  if (v) *value = *v;
  return v.has_value();
}

Result<std::unique_ptr<OpKernel>> compile_fused_elementwise(
    const std::vector<const shlo::Op*>& ops, const std::vector<shlo::ValueId>& inputs,
    const std::vector<shlo::ValueId>& outputs, const shlo::Function& fn,
    const std::vector<std::pair<shlo::ValueId, float>>& splat_inputs) {
  if (ops.empty() || outputs.empty())
    return make_error(ErrorKind::kInvalidArgument, "fused elementwise: needs at least one op and one output");
  const shlo::Op& first = *ops[0];
  if (first.results.size() != 1 || !valid_value(fn, first.results[0]))
    return make_error(ErrorKind::kInvalidArgument, "fused elementwise: op ", first.name, " has no typed result");
  const Shape shape = fn.type_of(first.results[0]).shape;

  std::unordered_map<shlo::ValueId, int> slot_of;
  std::vector<shlo::TensorType> in_types, out_types;
  int nslots = 0;
  for (auto v : inputs) {
    if (!valid_value(fn, v))
      return make_error(ErrorKind::kInvalidArgument, "fused elementwise: input %", v, " has no type");
    const auto& t = fn.type_of(v);
    if (!is_float(t.dtype) || t.shape != shape)
      return make_error(ErrorKind::kUnsupported, "fused elementwise: input %", v, " is ", t.to_string(),
                        ", need a float tensor of shape [", shape_to_string(shape), "]");
    if (slot_of.count(v))
      return make_error(ErrorKind::kInvalidArgument, "fused elementwise: input %", v, " listed twice");
    slot_of[v] = nslots++;
    in_types.push_back(t);
  }

  std::vector<FusedKernel::Step> steps;
  for (const auto& [v, value] : splat_inputs) {  // filled per tile, before the chain's steps
    if (!valid_value(fn, v))
      return make_error(ErrorKind::kInvalidArgument, "fused elementwise: splat input %", v, " has no type");
    const auto& t = fn.type_of(v);
    if (!is_float(t.dtype) || t.shape != shape)
      return make_error(ErrorKind::kUnsupported, "fused elementwise: splat input %", v, " is ", t.to_string(),
                        ", need a float tensor of shape [", shape_to_string(shape), "]");
    if (slot_of.count(v))
      return make_error(ErrorKind::kInvalidArgument, "fused elementwise: input %", v, " listed twice");
    FusedKernel::Step st;
    st.constant = value;
    st.dst = slot_of[v] = nslots++;
    steps.push_back(st);
  }
  for (const shlo::Op* op : ops) {
    if (!op || !is_fusible_elementwise(*op, fn))
      return make_error(ErrorKind::kUnsupported, "fused elementwise: ", op ? ew::describe(*op, fn) : "null op",
                        " is not a fusible float elementwise op");
    const auto& rt = fn.type_of(op->results[0]);
    if (rt.shape != shape)
      return make_error(ErrorKind::kUnsupported, "fused elementwise: ", ew::describe(*op, fn),
                        " has a shape other than [", shape_to_string(shape), "]");
    const OpInfo& info = op_table().at(op->name);
    FusedKernel::Step s;
    if (info.kind == OpInfo::kConstant) {
      s.constant = *splat_value(*op);
    } else {
      s.fn = tile_fn(info, rt.dtype);
      if (!s.fn)
        return make_error(ErrorKind::kUnsupported, "fused elementwise: no tile kernel for ", ew::describe(*op, fn));
      for (auto v : op->operands) {
        auto it = slot_of.find(v);
        if (it == slot_of.end())
          return make_error(ErrorKind::kInvalidArgument, "fused elementwise: ", op->name, " reads %", v,
                            ", which is neither a chain input nor computed earlier in the chain");
        s.args[s.nargs++] = it->second;
      }
    }
    if (slot_of.count(op->results[0]))
      return make_error(ErrorKind::kInvalidArgument, "fused elementwise: value %", op->results[0], " defined twice");
    s.dst = slot_of[op->results[0]] = nslots++;
    steps.push_back(s);
  }

  std::vector<int> out_slots;
  for (auto v : outputs) {
    auto it = slot_of.find(v);
    if (it == slot_of.end() || !valid_value(fn, v))
      return make_error(ErrorKind::kInvalidArgument, "fused elementwise: output %", v, " is not computed by the chain");
    out_slots.push_back(it->second);
    out_types.push_back(fn.type_of(v));
  }
  return std::unique_ptr<OpKernel>(
      new FusedKernel(std::move(in_types), std::move(out_types), std::move(steps), std::move(out_slots), nslots));
}

}  // namespace hlx::rt
