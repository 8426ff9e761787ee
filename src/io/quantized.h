// Checkpoints whose config.json has a `quantization_config`: which method, and the stored tensors
// of one 4-bit linear layer decoded on demand (codes, zero points, scales, group of each input k).
//
// AWQ (quant_method "awq", version "gemm"), for a Linear with in_features K, out_features N and
// group size G: `qweight` int32 [K, N / 8] and `qzeros` int32 [K / G, N / 8] hold eight 4-bit
// values per word, nibble i (bits 4i..4i+3) of word c being column 8c + order[i] with
// order = [0, 2, 4, 6, 1, 3, 5, 7]; `scales` f16 [K / G, N]; w[n, k] = (q - z) * s of k's group.
// GPTQ (quant_method "gptq", auto-gptq / optimum layout): `qweight` int32 [K / 8, N], nibble i of
// word r being input row 8r + i; `qzeros` int32 [groups, N / 8], nibble i of word c column 8c + i,
// stored as zero - 1 (checkpoint_format "gptq"); `scales` f16 [groups, N]; `g_idx` int32 [K]: the
// group of each input k (act-order shuffles it); w[n, k] = (q - (z + 1)) * s[g_idx[k]].
// FP8 (quant_method "fp8", fine-grained / block-scaled, as Qwen3-*-FP8 and DeepSeek-V3 publish it):
// `weight` F8_E4M3 [N, K] (float8_e4m3fn: sign, 4 exponent bits with bias 7, 3 mantissa bits,
// subnormals at exponent 0, 0x7f / 0xff NaN, no infinity; largest finite 448) and
// `weight_scale_inv` f32 (or bf16/f16) [ceil(N / bn), ceil(K / bk)] for weight_block_size
// [bn, bk] = [128, 128]: w[n, k] = fp8(n, k) * scale_inv[n / bn, k / bk]. Linear layers stored in
// another dtype (lm_head in the published checkpoints) are ordinary weights.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "io/checkpoint.h"
#include "io/hf_config.h"

namespace hlx {

enum class QuantMethod { kNone, kAwq, kGptq, kFp8 };

struct QuantConfig {
  QuantMethod method = QuantMethod::kNone;
  int64_t bits = 0, group_size = 0;
  bool desc_act = false;                            // GPTQ: g_idx is a shuffled grouping
  std::vector<std::string> modules_to_not_convert;  // AWQ / FP8: linear layers kept unquantized
  int64_t block_n = 0, block_k = 0;                 // FP8: weight_block_size [out, in]
};

// quantization_config of config.json (root, or text_config's for multimodal checkpoints); kNone
// when absent. kUnsupported names an unknown quant_method, bit width, version or option.
Result<QuantConfig> quant_config(const HfConfig& config);

// The weight-format part of module identity: "awq-int4-g128" / "gptq-int4-g128" /
// "fp8-e4m3-b128x128" for a stored
// method, then "+<runtime_format>" ("int8", "int4") when matmul weights are also quantized at load;
// "" when neither (as-stored identities unchanged).
std::string weight_format_tag(const QuantConfig& qc, const std::string& runtime_format);

// One stored 4-bit linear layer W[N, K] (`base` without the ".qweight" suffix). load() checks
// every tensor's presence, dtype and shape against N, K and the group size, that the group size
// divides K, that every scale is finite and (GPTQ) that g_idx holds valid groups; errors name the
// tensor.
class Int4Linear {
 public:
  static Result<Int4Linear> load(const Checkpoint& ck, const std::string& base, const QuantConfig& qc, int64_t n,
                                 int64_t k);
  int64_t n() const { return n_; }
  int64_t k() const { return k_; }
  int64_t group_size() const { return group_; }
  int64_t groups() const { return groups_; }
  // The 4-bit code of w[n, k], the zero point and scale of (group g, column n), the group of k.
  uint8_t code(int64_t n, int64_t k) const;
  uint8_t zero(int64_t g, int64_t n) const;
  float scale(int64_t g, int64_t n) const;
  int64_t group_of(int64_t k) const { return g_idx_.empty() ? k / group_ : g_idx_[size_t(k)]; }
  bool has_g_idx() const { return !g_idx_.empty(); }

 private:
  QuantMethod method_ = QuantMethod::kNone;
  int64_t n_ = 0, k_ = 0, group_ = 0, groups_ = 0;
  Tensor qweight_, qzeros_, scales_;
  std::vector<int32_t> g_idx_;
};

// One stored FP8 linear layer W[N, K] (`base` without the ".weight" suffix).
class Fp8Linear {
 public:
  // True when `<base>.weight` is stored F8_E4M3.
  static bool stored(const Checkpoint& ck, const std::string& base);
  // Checks the weight's dtype and shape, the scale_inv's presence, dtype, shape (the block grid)
  // and that every scale is finite, and that `base` is not one of modules_to_not_convert; errors
  // name the tensor.
  static Result<Fp8Linear> load(const Checkpoint& ck, const std::string& base, const QuantConfig& qc, int64_t n,
                                int64_t k);
  int64_t n() const { return n_; }
  int64_t k() const { return k_; }
  // Row n of W dequantized: out[k] = fp8(n, k) * scale_inv (a float product, one rounding). NaN
  // where the stored byte is a NaN code.
  void dequantize_row(int64_t n, float* out) const;
  const Tensor& weight() const { return weight_; }

 private:
  int64_t n_ = 0, k_ = 0, bn_ = 0, bk_ = 0, kb_ = 0;
  Tensor weight_;
  std::vector<float> scale_;  // [ceil(N / bn), ceil(K / bk)] as f32
};

// The float8_e4m3fn value of a byte (NaN for 0x7f, 0xff).
float fp8_e4m3_to_f32(uint8_t b);

}  // namespace hlx
