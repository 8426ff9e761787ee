// quantization_config parsing and the stored AWQ / GPTQ tensors of one linear layer (formats in
// quantized.h, from the methods' public packing definitions).
#include "io/quantized.h"

#include <algorithm>
#include <array>
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
  } else if (method == "fp8") {
    // FineGrainedFP8Config: activation_scheme, weight_block_size, modules_to_not_convert (older
    // writers: ignored_layers); DeepSeek-style configs add fmt "e4m3" and scale_fmt.
    qc.method = QuantMethod::kFp8;
    HLX_ASSIGN_OR_RETURN(std::string fmt, q.optional_string("fmt", "e4m3"));
    if (lower(fmt) != "e4m3")
      return make_error(ErrorKind::kUnsupported, q.where(), ": fp8 fmt '", fmt, "' (supported: e4m3)");
    HLX_ASSIGN_OR_RETURN(std::string act, q.optional_string("activation_scheme", "dynamic"));
    if (lower(act) != "dynamic")
      return make_error(ErrorKind::kUnsupported, q.where(), ": fp8 activation_scheme '", act, "' (supported: dynamic)");
    HLX_ASSIGN_OR_RETURN(std::vector<int64_t> block, q.optional_int_array("weight_block_size"));
    if (block.empty()) block = {128, 128};
    if (block.size() != 2 || block[0] != 128 || block[1] != 128) {
      std::string got;
      for (size_t i = 0; i < block.size(); ++i) got += str_cat(i ? ", " : "", block[i]);
      return make_error(ErrorKind::kUnsupported, q.where(), ": fp8 weight_block_size [", got,
                        "] (supported: [128, 128])");
    }
    qc.block_n = block[0];
    qc.block_k = block[1];
    HLX_ASSIGN_OR_RETURN(qc.modules_to_not_convert, q.optional_string_array("modules_to_not_convert"));
    if (qc.modules_to_not_convert.empty()) {
      HLX_ASSIGN_OR_RETURN(qc.modules_to_not_convert, q.optional_string_array("ignored_layers"));
    }
    return qc;
  } else {
    return make_error(ErrorKind::kUnsupported, q.where(), ": quant_method '", method, "' (supported: awq, gptq, fp8)");
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
  if (qc.method == QuantMethod::kFp8)
    tag = str_cat("fp8-e4m3-b", qc.block_n, "x", qc.block_k);
  else if (qc.method != QuantMethod::kNone)
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
  if (qc.method != QuantMethod::kAwq && qc.method != QuantMethod::kGptq)
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

float fp8_e4m3_to_f32(uint8_t b) {
  const int e = (b >> 3) & 15, m = b & 7;
  if (e == 15 && m == 7) return std::nanf("");                  // e4m3fn: the only non-finite codes, no infinity
  const float mag = e == 0 ? std::ldexp(float(m), -9)           // subnormal: m / 8 * 2^-6
                           : std::ldexp(float(8 + m), e - 10);  // (1 + m / 8) * 2^(e - 7)
  return (b & 0x80) ? -mag : mag;
}

bool Fp8Linear::stored(const Checkpoint& ck, const std::string& base) {
  auto e = ck.entry(base + ".weight");
  return e.ok() && e->f8_e4m3;
}

Result<Fp8Linear> Fp8Linear::load(const Checkpoint& ck, const std::string& base, const QuantConfig& qc, int64_t n,
                                  int64_t k) {
  if (qc.method != QuantMethod::kFp8) return make_error(ErrorKind::kInvalidArgument, base, ": not an fp8 checkpoint");
  // As transformers matches them: a listed name anywhere in the module's name.
  for (const std::string& m : qc.modules_to_not_convert)
    if (!m.empty() && base.find(m) != std::string::npos)
      return make_error(ErrorKind::kInvalidArgument, ck.source(), ": ", base,
                        ".weight is stored F8_E4M3 but quantization_config.modules_to_not_convert lists '", m, "'");
  Fp8Linear l;
  l.n_ = n;
  l.k_ = k;
  l.bn_ = qc.block_n;
  l.bk_ = qc.block_k;
  const std::string wname = base + ".weight", sname = base + ".weight_scale_inv";
  HLX_ASSIGN_OR_RETURN(SafetensorsEntry we, ck.entry(wname));
  if (!we.f8_e4m3)
    return make_error(ErrorKind::kInvalidArgument, ck.source(), ": ", wname, " has dtype ", dtype_name(we.dtype),
                      ", expected F8_E4M3");
  if (we.shape != Shape{n, k})
    return make_error(ErrorKind::kInvalidArgument, ck.source(), ": ", wname, " has shape [", shape_to_string(we.shape),
                      "], expected [", shape_to_string({n, k}), "]");
  HLX_ASSIGN_OR_RETURN(l.weight_, ck.tensor(wname));
  if (!ck.has(sname))
    return make_error(ErrorKind::kNotFound, ck.source(), ": missing tensor '", sname, "' (the block scales of ", wname,
                      ")");
  HLX_ASSIGN_OR_RETURN(Tensor s, ck.tensor(sname));
  const int64_t nb = (n + l.bn_ - 1) / l.bn_;
  l.kb_ = (k + l.bk_ - 1) / l.bk_;
  if (!is_float(s.dtype()))
    return make_error(ErrorKind::kInvalidArgument, ck.source(), ": ", sname, " has dtype ", dtype_name(s.dtype()),
                      ", expected f32 (or bf16/f16)");
  if (s.shape() != Shape{nb, l.kb_})
    return make_error(ErrorKind::kInvalidArgument, ck.source(), ": ", sname, " has shape [", shape_to_string(s.shape()),
                      "], expected [", shape_to_string({nb, l.kb_}), "]: one scale per ", l.bn_, "x", l.bk_,
                      " block of the ", n, "x", k, " weight (edge blocks included)");
  l.scale_.resize(size_t(nb * l.kb_));
  for (int64_t i = 0; i < nb * l.kb_; ++i) {
    const float v = s.dtype() == DType::kF32    ? s.data<float>()[i]
                    : s.dtype() == DType::kBF16 ? bf16_to_f32(s.data<bf16>()[i])
                                                : f16_to_f32(s.data<f16>()[i]);
    if (!std::isfinite(v))
      return make_error(ErrorKind::kInvalidArgument, ck.source(), ": ", sname, "[", i / l.kb_, ", ", i % l.kb_,
                        "] = ", v, " is not finite");
    l.scale_[size_t(i)] = v;
  }
  return l;
}

void Fp8Linear::dequantize_row(int64_t n, float* out) const {
  static const auto table = [] {
    std::array<float, 256> t{};
    for (int b = 0; b < 256; ++b) t[size_t(b)] = fp8_e4m3_to_f32(uint8_t(b));
    return t;
  }();
  const uint8_t* w = weight_.data<uint8_t>() + n * k_;
  const float* s = scale_.data() + (n / bn_) * kb_;
  for (int64_t k0 = 0; k0 < k_; k0 += bk_) {  // one scale per block: no division per element
    const float sk = s[k0 / bk_];
    for (int64_t k = k0; k < std::min(k_, k0 + bk_); ++k) out[k] = table[w[k]] * sk;
  }
}

}  // namespace hlx
