// quantization_config parsing: the supported methods and options, and a typed kUnsupported naming
// every unknown method, bit width, version or option.
#include <gtest/gtest.h>

#include <string>

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

}  // namespace
}  // namespace hlx
