#include "io/hf_config.h"

#include <gtest/gtest.h>

#include <fstream>

#include "io_test_util.h"

namespace hlx {
namespace {

using testing::TempDir;

// Shaped like a Gemma3 / Qwen3-VL multimodal config: the text model is nested.
const char* kVlmConfig = R"({
  "architectures": ["Gemma3ForConditionalGeneration"],
  "model_type": "gemma3",
  "image_token_index": 262144,
  "mm_tokens_per_image": 256,
  "tie_word_embeddings": true,
  "text_config": {
    "hidden_size": 2560,
    "num_hidden_layers": 34,
    "rope_theta": 1000000,
    "rms_norm_eps": 1e-06,
    "max_position_embeddings": 131072.0,
    "sliding_window": null,
    "layer_types": ["sliding_attention", "full_attention"],
    "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
    "deepstack_visual_indexes": [8, 16, 24]
  },
  "vision_config": {"image_size": 896, "patch_size": 14, "hidden_act": "gelu_pytorch_tanh"}
})";

const char* kGeneration = R"({"eos_token_id": [1, 106], "bos_token_id": 2, "top_p": 0.95, "do_sample": true})";

TEST(HfConfig, NestedTextAndVisionConfigs) {
  TempDir dir;
  std::ofstream(dir.file("config.json")) << kVlmConfig;
  std::ofstream(dir.file("generation_config.json")) << kGeneration;
  auto cfg = HfConfig::load(dir.path());
  ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();

  EXPECT_EQ(*cfg->model_type(), "gemma3");
  EXPECT_EQ(*cfg->architectures(), std::vector<std::string>{"Gemma3ForConditionalGeneration"});
  EXPECT_EQ(*cfg->root().require_int("image_token_index"), 262144);
  EXPECT_TRUE(*cfg->root().optional_bool("tie_word_embeddings", false));
  EXPECT_FALSE(cfg->root().has("hidden_size"));

  const ConfigView& text = cfg->text();
  EXPECT_EQ(*text.require_int("hidden_size"), 2560);
  EXPECT_EQ(*text.require_int("max_position_embeddings"), 131072);  // integral float accepted
  EXPECT_EQ(*text.require_float("rope_theta"), 1000000.0);          // int accepted as float
  EXPECT_DOUBLE_EQ(*text.require_float("rms_norm_eps"), 1e-6);
  EXPECT_FALSE(text.has("sliding_window"));  // null counts as absent
  EXPECT_EQ(*text.optional_int("sliding_window", -1), -1);
  EXPECT_EQ(*text.optional_int("head_dim", 256), 256);
  EXPECT_EQ(*text.require_string_array("layer_types"),
            (std::vector<std::string>{"sliding_attention", "full_attention"}));
  EXPECT_EQ(*text.require_int_array("deepstack_visual_indexes"), (std::vector<int64_t>{8, 16, 24}));
  auto scaling = text.sub("rope_scaling");
  ASSERT_TRUE(scaling.ok());
  EXPECT_EQ(*scaling->require_float("factor"), 8.0);
  EXPECT_EQ(*scaling->require_string("rope_type"), "linear");

  EXPECT_EQ(*cfg->vision().require_int("patch_size"), 14);
  EXPECT_EQ(*cfg->vision().optional_string("hidden_act", "gelu"), "gelu_pytorch_tanh");

  ASSERT_TRUE(cfg->has_generation());
  EXPECT_EQ(*cfg->generation().optional_int_list("eos_token_id"), (std::vector<int64_t>{1, 106}));
  EXPECT_EQ(*cfg->generation().optional_int_list("bos_token_id"), (std::vector<int64_t>{2}));
  EXPECT_EQ(*cfg->generation().optional_int_list("pad_token_id"), std::vector<int64_t>{});
  EXPECT_TRUE(*cfg->generation().optional_bool("do_sample", false));
}

TEST(HfConfig, FlatConfigTextIsRoot) {
  auto cfg = HfConfig::parse(R"({"model_type": "qwen3", "hidden_size": 1024, "eos_token_id": 151645})");
  ASSERT_TRUE(cfg.ok());
  EXPECT_EQ(*cfg->text().require_int("hidden_size"), 1024);
  EXPECT_TRUE(cfg->vision().empty());
  EXPECT_FALSE(cfg->vision().has("patch_size"));
  EXPECT_EQ(*cfg->vision().optional_int("patch_size", 16), 16);
  EXPECT_FALSE(cfg->has_generation());
  EXPECT_TRUE(cfg->generation().empty());
}

TEST(HfConfig, ErrorsNameKeyAndFile) {
  TempDir dir;
  std::ofstream(dir.file("config.json")) << kVlmConfig;
  auto cfg = HfConfig::load(dir.file("config.json"));
  ASSERT_TRUE(cfg.ok());
  EXPECT_FALSE(cfg->has_generation());

  auto missing = cfg->text().require_int("num_attention_heads");
  EXPECT_EQ(missing.status().kind(), ErrorKind::kNotFound);
  EXPECT_NE(missing.status().message().find("text_config.num_attention_heads"), std::string::npos)
      << missing.status().message();
  EXPECT_NE(missing.status().message().find(dir.file("config.json")), std::string::npos) << missing.status().message();

  auto wrong = cfg->text().require_int("rms_norm_eps");  // 1e-6 is not an integer
  EXPECT_EQ(wrong.status().kind(), ErrorKind::kParse);
  EXPECT_NE(wrong.status().message().find("text_config.rms_norm_eps"), std::string::npos) << wrong.status().message();
  EXPECT_EQ(cfg->text().require_float("layer_types").status().kind(), ErrorKind::kParse);
  EXPECT_EQ(cfg->text().require_string("hidden_size").status().kind(), ErrorKind::kParse);
  EXPECT_EQ(cfg->text().optional_bool("hidden_size", false).status().kind(), ErrorKind::kParse);
  EXPECT_EQ(cfg->text().require_int_array("layer_types").status().kind(), ErrorKind::kParse);
  EXPECT_EQ(cfg->text().require_string_array("deepstack_visual_indexes").status().kind(), ErrorKind::kParse);
  EXPECT_EQ(cfg->root().sub("audio_config").status().kind(), ErrorKind::kNotFound);
  auto none = cfg->root().optional_sub("audio_config");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
  EXPECT_EQ(cfg->root().sub("model_type").status().kind(), ErrorKind::kParse);
  EXPECT_EQ(cfg->root().optional_sub("model_type").status().kind(), ErrorKind::kParse);

  EXPECT_EQ(HfConfig::parse("{\"a\": ").status().kind(), ErrorKind::kParse);
  EXPECT_EQ(HfConfig::parse("[1]").status().kind(), ErrorKind::kParse);
  EXPECT_EQ(HfConfig::parse(R"({"text_config": 3})").status().kind(), ErrorKind::kParse);
  EXPECT_EQ(HfConfig::parse(R"({"n": 18446744073709551615})")->root().require_int("n").status().kind(),
            ErrorKind::kParse);
  EXPECT_EQ(HfConfig::load(dir.file("nope")).status().kind(), ErrorKind::kNotFound);
  TempDir empty;
  EXPECT_EQ(HfConfig::load(empty.path()).status().kind(), ErrorKind::kNotFound);
  std::ofstream(dir.file("generation_config.json")) << "{oops";
  auto bad_gen = HfConfig::load(dir.path());
  EXPECT_EQ(bad_gen.status().kind(), ErrorKind::kParse);
  EXPECT_NE(bad_gen.status().message().find("generation_config.json"), std::string::npos);
}

}  // namespace
}  // namespace hlx
