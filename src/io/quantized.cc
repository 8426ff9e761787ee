// quantization_config parsing and the stored AWQ / GPTQ tensors of one linear layer (formats in
// quantized.h, from the methods' public packing definitions).
#include "io/quantized.h"

#include <algorithm>
#include <cctype>
#include <cmath>

namespace hlx {
namespace {

std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// AWQ's nibble position of column 8c + j inside word c (the inverse of its pack order
// [0, 2, 4, 6, 1, 3, 5, 7]).
constexpr int kAwqNibbleOf[8] = {0, 4, 1, 5, 2, 6, 3, 7};

inline uint8_t nibble(int32_t word, int i) { return uint8_t((uint32_t(word) >> (4 * i)) & 15u); }

}  // namespace

Result<QuantConfig> quant_config(const HfConfig& config) {
  QuantConfig qc;
  const ConfigView* owner = &config.root();
  if (!owner->has("quantization_config") && config.text().has("quantization_config")) owner = &config.text();
  HLX_ASSIGN_OR_RETURN(ConfigView q, owner->optional_sub("quantization_config"));
  if (q.empty()) return qc;
  HLX_ASSIGN_OR_RETURN(std::string method, q.require_string("quant_method"));
  method = lower(method);
  HLX_ASSIGN_OR_RETURN(qc.bits, q.optional_int("bits", 0));
  if (method == "awq") {
    qc.method = QuantMethod::kAwq;
    HLX_ASSIGN_OR_RETURN(std::string version, q.optional_string("version", "gemm"));
    if (lower(version) != "gemm")
      return make_error(ErrorKind::kUnsupported, q.where(), ": awq version '", version, "' (supported: gemm)");
    HLX_ASSIGN_OR_RETURN(bool zero_point, q.optional_bool("zero_point", true));
    if (!zero_point) return make_error(ErrorKind::kUnsupported, q.where(), ": awq zero_point false (supported: true)");
    HLX_ASSIGN_OR_RETURN(qc.group_size, q.require_int("group_size"));
    HLX_ASSIGN_OR_RETURN(qc.modules_to_not_convert, q.optional_string_array("modules_to_not_convert"));
  } else if (method == "gptq") {
    qc.method = QuantMethod::kGptq;
    HLX_ASSIGN_OR_RETURN(qc.group_size, q.require_int("group_size"));
    HLX_ASSIGN_OR_RETURN(qc.desc_act, q.optional_bool("desc_act", false));
    HLX_ASSIGN_OR_RETURN(bool sym, q.optional_bool("sym", true));
    if (!sym) return make_error(ErrorKind::kUnsupported, q.where(), ": gptq sym false (supported: true)");
    HLX_ASSIGN_OR_RETURN(std::string format, q.optional_string("checkpoint_format", "gptq"));
    if (lower(format) != "gptq")
      return make_error(ErrorKind::kUnsupported, q.where(), ": gptq checkpoint_format '", format,
                        "' (supported: gptq)");
  } else {
    return make_error(ErrorKind::kUnsupported, q.where(), ": quant_method '", method, "' (supported: awq, gptq)");
  }
  if (qc.bits != 4)
    return make_error(ErrorKind::kUnsupported, q.where(), ": ", method, " bits ", qc.bits, " (supported: 4)");
  if (qc.group_size < 32 || qc.group_size > 128 || qc.group_size % 2 != 0)
    return make_error(ErrorKind::kUnsupported, q.where(), ": ", method, " group_size ", qc.group_size,
                      " (supported: even sizes 32..128)");
  return qc;
}

std::string weight_format_tag(const QuantConfig& qc, const std::string& runtime_format) {
  std::string tag;
  if (qc.method != QuantMethod::kNone)
    tag = str_cat(qc.method == QuantMethod::kAwq ? "awq" : "gptq", "-int", qc.bits, "-g", qc.group_size);
  if (!runtime_format.empty()) tag += (tag.empty() ? "" : "+") + runtime_format;
  return tag;
}

Result<Int4Linear> Int4Linear::load(const Checkpoint& ck, const std::string& base, const QuantConfig& qc, int64_t n,
                                    int64_t k) {
  Int4Linear l;
  l.method_ = qc.method;
  l.n_ = n;
  l.k_ = k;
  l.group_ = qc.group_size;
  const bool awq = qc.method == QuantMethod::kAwq;
  if (qc.method == QuantMethod::kNone)
    return make_error(ErrorKind::kInvalidArgument, base, ": not a quantized checkpoint");
  if (awq && k % l.group_ != 0)
    return make_error(ErrorKind::kInvalidArgument, base, ".qweight: group_size ", l.group_,
                      " does not divide in_features ", k);
  if (n % 8 != 0 || (!awq && k % 8 != 0))
    return make_error(ErrorKind::kInvalidArgument, base, ".qweight: ", awq ? "out_features " : "in/out_features ",
                      awq ? n : k, (awq ? "" : str_cat("/", n)), " not a multiple of 8 (eight codes per int32)");
  l.groups_ = (k + l.group_ - 1) / l.group_;
  auto get = [&](const char* suffix, DType want, const Shape& shape) -> Result<Tensor> {
    const std::string name = base + suffix;
    HLX_ASSIGN_OR_RETURN(Tensor t, ck.tensor(name));
    const bool dtype_ok = want == DType::kF16 ? is_float(t.dtype()) : t.dtype() == want;
    if (!dtype_ok)
      return make_error(ErrorKind::kInvalidArgument, ck.source(), ": ", name, " has dtype ", dtype_name(t.dtype()),
                        ", expected ", want == DType::kF16 ? "f16 (or bf16/f32)" : dtype_name(want));
    if (t.shape() != shape)
      return make_error(ErrorKind::kInvalidArgument, ck.source(), ": ", name, " has shape ", t.type_string(),
                        ", expected ", shape_to_string(shape), " for a ", n, "x", k, " weight with group_size ",
                        l.group_);
    return t;
  };
  HLX_ASSIGN_OR_RETURN(l.qweight_, get(".qweight", DType::kI32, awq ? Shape{k, n / 8} : Shape{k / 8, n}));
  HLX_ASSIGN_OR_RETURN(l.qzeros_, get(".qzeros", DType::kI32, Shape{l.groups_, n / 8}));
  HLX_ASSIGN_OR_RETURN(l.scales_, get(".scales", DType::kF16, Shape{l.groups_, n}));
  for (int64_t g = 0; g < l.groups_; ++g)
    for (int64_t j = 0; j < n; ++j)
      if (!std::isfinite(l.scale(g, j)))
        return make_error(ErrorKind::kInvalidArgument, ck.source(), ": ", base, ".scales[", g, ", ", j,
                          "] = ", l.scale(g, j), " is not finite");
  if (!awq && ck.has(base + ".g_idx")) {
    HLX_ASSIGN_OR_RETURN(Tensor gi, get(".g_idx", DType::kI32, Shape{k}));
    l.g_idx_.assign(gi.data<int32_t>(), gi.data<int32_t>() + k);
    for (int64_t i = 0; i < k; ++i)
      if (l.g_idx_[size_t(i)] < 0 || l.g_idx_[size_t(i)] >= l.groups_)
        return make_error(ErrorKind::kInvalidArgument, ck.source(), ": ", base, ".g_idx[", i,
                          "] = ", l.g_idx_[size_t(i)], " outside [0, ", l.groups_, ")");
  }
  return l;
}

uint8_t Int4Linear::code(int64_t n, int64_t k) const {
  const int32_t* q = qweight_.data<int32_t>();
  if (method_ == QuantMethod::kAwq) return nibble(q[k * (n_ / 8) + n / 8], kAwqNibbleOf[n % 8]);
  return nibble(q[(k / 8) * n_ + n], int(k % 8));
}

uint8_t Int4Linear::zero(int64_t g, int64_t n) const {
  const int32_t w = qzeros_.data<int32_t>()[g * (n_ / 8) + n / 8];
  if (method_ == QuantMethod::kAwq) return nibble(w, kAwqNibbleOf[n % 8]);
  return uint8_t(nibble(w, int(n % 8)) + 1);  // stored as zero - 1; 16 for a stored 15
}

float Int4Linear::scale(int64_t g, int64_t n) const {
  const int64_t i = g * n_ + n;
  switch (scales_.dtype()) {
    case DType::kF16:
      return f16_to_f32(scales_.data<f16>()[i]);
    case DType::kBF16:
      return bf16_to_f32(scales_.data<bf16>()[i]);
    default:
      return scales_.data<float>()[i];
  }
}

}  // namespace hlx
