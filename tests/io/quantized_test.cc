// quantization_config parsing: the supported methods and options, and a typed kUnsupported naming
// every unknown method, bit width, version or option.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "io/quantized.h"

namespace hlx {
namespace {

Result<QuantConfig> parse(const std::string& qc) {
  auto cfg = HfConfig::parse(R"({"model_type": "qwen3", "quantization_config": )" + qc + "}");
  EXPECT_TRUE(cfg.ok()) << cfg.status().to_string();
  return quant_config(*cfg);
}

TEST(QuantConfig, AbsentIsNone) {
  auto cfg = HfConfig::parse(R"({"model_type": "qwen3"})");
  ASSERT_TRUE(cfg.ok());
  auto q = quant_config(*cfg);
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q->method, QuantMethod::kNone);
  EXPECT_EQ(weight_format_tag(*q, ""), "");
  EXPECT_EQ(weight_format_tag(*q, "int8"), "int8");
}

TEST(QuantConfig, AwqAndGptq) {
  auto a = parse(R"({"quant_method": "awq", "bits": 4, "group_size": 128, "version": "GEMM", "zero_point": true})");
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  EXPECT_EQ(a->method, QuantMethod::kAwq);
  EXPECT_EQ(a->group_size, 128);
  EXPECT_EQ(weight_format_tag(*a, ""), "awq-int4-g128");
  auto g = parse(R"({"quant_method": "gptq", "bits": 4, "group_size": 64, "desc_act": true, "sym": true})");
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  EXPECT_EQ(g->method, QuantMethod::kGptq);
  EXPECT_TRUE(g->desc_act);
  EXPECT_EQ(weight_format_tag(*g, "int8"), "gptq-int4-g64+int8");
}

TEST(QuantConfig, UnknownMethodsBitsAndOptionsAreUnsupported) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"quant_method": "bitsandbytes", "bits": 4})", "bitsandbytes"},
      {R"({"quant_method": "awq", "bits": 3, "group_size": 128})", "bits 3"},
      {R"({"quant_method": "awq", "bits": 4, "group_size": 128, "version": "gemv"})", "version 'gemv'"},
      {R"({"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": false})", "zero_point false"},
      {R"({"quant_method": "awq", "bits": 4, "group_size": 256})", "group_size 256"},
      {R"({"quant_method": "gptq", "bits": 8, "group_size": 128})", "bits 8"},
      {R"({"quant_method": "gptq", "bits": 4, "group_size": 128, "sym": false})", "sym false"},
      {R"({"quant_method": "gptq", "bits": 4, "group_size": 128, "checkpoint_format": "gptq_v2"})", "gptq_v2"},
      {R"({"quant_method": "gptq", "bits": 4, "group_size": -1})", "group_size -1"},
  };
  for (const auto& [qc, needle] : cases) {
    auto q = parse(qc);
    ASSERT_FALSE(q.ok()) << qc;
    EXPECT_EQ(q.status().kind(), ErrorKind::kUnsupported) << qc;
    EXPECT_NE(q.status().to_string().find(needle), std::string::npos) << q.status().to_string();
  }
}

TEST(QuantConfig, Fp8AsQwen3PublishesIt) {
  auto f = parse(R"({"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                     "weight_block_size": [128, 128], "ignored_layers": ["lm_head"]})");
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ(f->method, QuantMethod::kFp8);
  EXPECT_EQ(f->block_n, 128);
  EXPECT_EQ(f->block_k, 128);
  EXPECT_EQ(f->modules_to_not_convert, std::vector<std::string>{"lm_head"});
  EXPECT_EQ(weight_format_tag(*f, ""), "fp8-e4m3-b128x128");
  EXPECT_EQ(weight_format_tag(*f, "int4"), "fp8-e4m3-b128x128+int4");
  auto d = parse(R"({"quant_method": "fp8"})");  // transformers' defaults: dynamic, [128, 128]
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d->block_k, 128);
}

TEST(QuantConfig, Fp8UnsupportedOptionsAreNamed) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"quant_method": "fp8", "fmt": "e5m2"})", "fmt 'e5m2'"},
      {R"({"quant_method": "fp8", "activation_scheme": "static"})", "activation_scheme 'static'"},
      {R"({"quant_method": "fp8", "weight_block_size": [64, 64]})", "weight_block_size [64, 64]"},
      {R"({"quant_method": "fp8", "weight_block_size": [128, 128, 1]})", "weight_block_size [128, 128, 1]"},
  };
  for (const auto& [qc, needle] : cases) {
    auto q = parse(qc);
    ASSERT_FALSE(q.ok()) << qc;
    EXPECT_EQ(q.status().kind(), ErrorKind::kUnsupported) << qc;
    EXPECT_NE(q.status().to_string().find(needle), std::string::npos) << q.status().to_string();
  }
}

// Every e4m3fn code against its value built a second way: the f32 bit pattern for normals (sign,
// exponent rebiased from 7 to 127, mantissa shifted to the top) and m * 2^-9 for subnormals.
TEST(Fp8E4m3, EveryCode) {
  for (int b = 0; b < 256; ++b) {
    const uint32_t sign = uint32_t(b >> 7) << 31, e = (uint32_t(b) >> 3) & 15, m = uint32_t(b) & 7;
    const float got = fp8_e4m3_to_f32(uint8_t(b));
    if (e == 15 && m == 7) {
      EXPECT_TRUE(std::isnan(got)) << b;
      continue;
    }
    float want = e ? f32_from_bits(sign | ((e + 120) << 23) | (m << 20)) : float(m) / 512.f;
    if (!e && sign) want = -want;
    EXPECT_EQ(f32_bits(got), f32_bits(want)) << "code 0x" << std::hex << b;
  }
  EXPECT_EQ(fp8_e4m3_to_f32(0x7e), 448.f);  // largest finite
  EXPECT_EQ(fp8_e4m3_to_f32(0x01), 1.f / 512.f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x38), 1.f);
}

}  // namespace
}  // namespace hlx
