#include "io/checkpoint.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "io_test_util.h"

namespace hlx {
namespace {

using testing::TempDir;

NamedTensors three_tensors() {
  return {{"model.embed_tokens.weight", testing::pattern_tensor(DType::kBF16, {8, 4}, 1)},  // 64 B
          {"model.layers.0.mlp.weight", testing::pattern_tensor(DType::kF32, {4, 4}, 2)},   // 64 B
          {"model.norm.weight", testing::pattern_tensor(DType::kF16, {4}, 3)}};             // 8 B
}

void write_index(const std::string& path, const nlohmann::json& weight_map) {
  std::ofstream(path) << nlohmann::json{{"metadata", {{"total_size", 0}}}, {"weight_map", weight_map}}.dump();
}

TEST(Checkpoint, TwoShardsRoundTrip) {
  TempDir dir;
  NamedTensors tensors = three_tensors();
  auto files = write_safetensors_sharded(dir.path(), tensors, 100);
  ASSERT_TRUE(files.ok()) << files.status().to_string();
  ASSERT_EQ(files->size(), 2u);
  EXPECT_EQ((*files)[0], "model-00001-of-00002.safetensors");
  EXPECT_EQ((*files)[1], "model-00002-of-00002.safetensors");

  // The index, read with a plain JSON parser.
  auto index = nlohmann::json::parse(testing::read_bytes(dir.file("model.safetensors.index.json")));
  EXPECT_EQ(index["metadata"]["total_size"], 136);
  EXPECT_EQ(index["weight_map"]["model.embed_tokens.weight"], "model-00001-of-00002.safetensors");
  EXPECT_EQ(index["weight_map"]["model.layers.0.mlp.weight"], "model-00002-of-00002.safetensors");
  EXPECT_EQ(index["weight_map"]["model.norm.weight"], "model-00002-of-00002.safetensors");

  for (const std::string& path : {dir.path(), dir.file("model.safetensors.index.json")}) {
    auto ckpt = Checkpoint::open(path);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status().to_string();
    EXPECT_EQ(ckpt->size(), 3u);
    EXPECT_EQ(ckpt->shards().size(), 2u);
    EXPECT_EQ(ckpt->names(), (std::vector<std::string>{"model.embed_tokens.weight", "model.layers.0.mlp.weight",
                                                       "model.norm.weight"}));
    for (const auto& [name, expected] : tensors) {
      auto t = ckpt->tensor(name);
      ASSERT_TRUE(t.ok()) << t.status().to_string();
      EXPECT_TRUE(testing::same_bytes(*t, expected)) << name;
      EXPECT_EQ(ckpt->entry(name)->shape, expected.shape());
    }
    EXPECT_NE(ckpt->file_of("model.norm.weight")->find("model-00002-of-00002"), std::string::npos);
    EXPECT_NE(ckpt->file_of("model.embed_tokens.weight")->find("model-00001-of-00002"), std::string::npos);
    auto missing = ckpt->tensor("lm_head.weight");
    EXPECT_EQ(missing.status().kind(), ErrorKind::kNotFound);
    EXPECT_NE(missing.status().message().find("lm_head.weight"), std::string::npos);
  }
}

TEST(Checkpoint, OversizedTensorGetsItsOwnShard) {
  TempDir dir;
  auto files = write_safetensors_sharded(dir.path(), three_tensors(), 10);
  ASSERT_TRUE(files.ok());
  EXPECT_EQ(files->size(), 3u);
  auto ckpt = Checkpoint::open(dir.path());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().to_string();
  EXPECT_EQ(ckpt->shards().size(), 3u);
  EXPECT_EQ(write_safetensors_sharded(dir.path(), three_tensors(), 0).status().kind(), ErrorKind::kInvalidArgument);
}

TEST(Checkpoint, SingleFile) {
  TempDir dir;
  NamedTensors tensors = three_tensors();
  ASSERT_TRUE(write_safetensors(dir.file("model.safetensors"), tensors).ok());
  for (const std::string& path : {dir.path(), dir.file("model.safetensors")}) {
    auto ckpt = Checkpoint::open(path);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status().to_string();
    EXPECT_EQ(ckpt->size(), 3u);
    EXPECT_TRUE(ckpt->has("model.norm.weight"));
    EXPECT_TRUE(testing::same_bytes(*ckpt->tensor("model.norm.weight"), tensors[2].second));
  }
}

TEST(Checkpoint, BrokenIndexes) {
  TempDir dir;
  NamedTensors t = three_tensors();
  ASSERT_TRUE(write_safetensors(dir.file("a.safetensors"), {t[0], t[1]}).ok());
  ASSERT_TRUE(write_safetensors(dir.file("b.safetensors"), {t[1], t[2]}).ok());  // t[1] in both
  std::string index = dir.file("model.safetensors.index.json");
  auto open_kind = [&](std::string* msg = nullptr) {
    auto c = Checkpoint::open(dir.path());
    if (msg) *msg = c.status().message();
    return c.status().kind();
  };
  std::string msg;

  // Missing shard file.
  write_index(index, {{"model.norm.weight", "c.safetensors"}});
  EXPECT_EQ(open_kind(&msg), ErrorKind::kNotFound);
  EXPECT_NE(msg.find("c.safetensors"), std::string::npos) << msg;
  // weight_map points at a shard that lacks the tensor.
  write_index(index, {{"model.embed_tokens.weight", "a.safetensors"},
                      {"model.layers.0.mlp.weight", "a.safetensors"},
                      {"model.norm.weight", "a.safetensors"}});
  EXPECT_EQ(open_kind(&msg), ErrorKind::kNotFound);
  EXPECT_NE(msg.find("model.norm.weight"), std::string::npos) << msg;
  // The same tensor stored in two shards.
  write_index(index, {{"model.embed_tokens.weight", "a.safetensors"},
                      {"model.layers.0.mlp.weight", "a.safetensors"},
                      {"model.norm.weight", "b.safetensors"}});
  EXPECT_EQ(open_kind(&msg), ErrorKind::kParse);
  EXPECT_NE(msg.find("model.layers.0.mlp.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("a.safetensors"), std::string::npos) << msg;
  EXPECT_NE(msg.find("b.safetensors"), std::string::npos) << msg;
  // A shard tensor that the index does not list.
  write_index(index, {{"model.embed_tokens.weight", "a.safetensors"}});
  EXPECT_EQ(open_kind(&msg), ErrorKind::kParse);
  EXPECT_NE(msg.find("model.layers.0.mlp.weight"), std::string::npos) << msg;
  // Shard names must stay in the directory.
  write_index(index, {{"x", "../a.safetensors"}});
  EXPECT_EQ(open_kind(), ErrorKind::kParse);
  write_index(index, {{"x", 3}});
  EXPECT_EQ(open_kind(), ErrorKind::kParse);
  std::ofstream(index) << "{\"weight_map\": [";
  EXPECT_EQ(open_kind(), ErrorKind::kParse);
  std::ofstream(index) << "{\"metadata\": {}}";
  EXPECT_EQ(open_kind(), ErrorKind::kParse);
  // A corrupt shard is reported with its path.
  testing::write_bytes(dir.file("b.safetensors"), "garbage!garbage!");
  write_index(index, {{"model.norm.weight", "b.safetensors"}});
  EXPECT_EQ(open_kind(&msg), ErrorKind::kParse);
  EXPECT_NE(msg.find("b.safetensors"), std::string::npos) << msg;

  TempDir empty;
  EXPECT_EQ(Checkpoint::open(empty.path()).status().kind(), ErrorKind::kNotFound);
  EXPECT_EQ(Checkpoint::open(empty.file("nothing.safetensors")).status().kind(), ErrorKind::kNotFound);
}

}  // namespace
}  // namespace hlx
