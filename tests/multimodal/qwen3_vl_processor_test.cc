// Qwen3-VL host side: typed refusals and config routing. Pixel and position parity with the
// upstream processor lives in test_qwen3_vl_preprocess.py.
#include <gtest/gtest.h>

#include "multimodal/preprocess.h"
#include "multimodal/qwen3_vl_processor.h"

namespace hlx::mm {
namespace {

HfConfig parse(const std::string& json) {
  auto c = HfConfig::parse(json, "preprocessor_config.json");
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  return *c;
}

constexpr const char* kQwen3 =
    R"({"image_processor_type": "Qwen2VLImageProcessorFast", "patch_size": 16, "merge_size": 2,
        "temporal_patch_size": 2, "size": {"shortest_edge": 65536, "longest_edge": 16777216},
        "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5]})";

TEST(Qwen2VLImageConfig, ReadsPixelBoundsFromSize) {
  HfConfig c = parse(kQwen3);
  auto kind = image_processor_kind(c.root());
  ASSERT_TRUE(kind.ok());
  EXPECT_EQ(*kind, ImageProcessorKind::kQwen2VL);
  auto q = Qwen2VLImageConfig::from_config(c.root());
  ASSERT_TRUE(q.ok()) << q.status().to_string();
  EXPECT_EQ(q->min_pixels, 65536);
  EXPECT_EQ(q->max_pixels, 16777216);
  EXPECT_EQ(q->factor(), 32);
  EXPECT_EQ(q->patch_dim(), 3 * 2 * 16 * 16);
}

TEST(Qwen2VLImageConfig, OlderKeysWin) {
  HfConfig c = parse(R"({"image_processor_type": "Qwen2VLImageProcessor", "min_pixels": 100, "max_pixels": 5000,
                         "size": {"shortest_edge": 1, "longest_edge": 2}})");
  auto q = Qwen2VLImageConfig::from_config(c.root());
  ASSERT_TRUE(q.ok()) << q.status().to_string();
  EXPECT_EQ(q->min_pixels, 100);
  EXPECT_EQ(q->max_pixels, 5000);
  EXPECT_EQ(q->patch_size, 14);
}

// The fixed-size parser must not read a Qwen `size` (pixel counts) as a CLIP shortest edge.
TEST(Qwen2VLImageConfig, ClipParserRefusesQwenConfig) {
  HfConfig c = parse(kQwen3);
  auto p = PreprocessConfig::from_config(c.root());
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().kind(), ErrorKind::kUnsupported);
  EXPECT_NE(p.status().message().find("Qwen2VL"), std::string::npos) << p.status().message();
  // And the reverse: a CLIP config is not a Qwen one.
  HfConfig clip = parse(R"({"image_processor_type": "CLIPImageProcessor", "size": {"shortest_edge": 224}})");
  auto kind = image_processor_kind(clip.root());
  ASSERT_TRUE(kind.ok());
  EXPECT_EQ(*kind, ImageProcessorKind::kFixed);
  EXPECT_EQ(Qwen2VLImageConfig::from_config(clip.root()).status().kind(), ErrorKind::kUnsupported);
}

TEST(Qwen2VLImageConfig, BadValuesAreInvalidArgument) {
  for (const char* json : {
           R"({"image_processor_type": "Qwen2VLImageProcessor", "size": {"shortest_edge": 10}})",
           R"({"image_processor_type": "Qwen2VLImageProcessor", "min_pixels": 5000, "max_pixels": 100})",
           R"({"image_processor_type": "Qwen2VLImageProcessor", "patch_size": 0})",
           R"({"image_processor_type": "Qwen2VLImageProcessor", "image_std": [0.5, 0, 0.5]})",
       }) {
    auto q = Qwen2VLImageConfig::from_config(parse(json).root());
    ASSERT_FALSE(q.ok()) << json;
    EXPECT_EQ(q.status().kind(), ErrorKind::kInvalidArgument) << json;
  }
}

TEST(SmartResize, RoundsHalfToEvenAndClamps) {
  // 70 / 28 = 2.5 -> 2, 98 / 28 = 3.5 -> 4 (Python round).
  auto r = qwen_smart_resize(70, 98, 28, 56 * 56, 28 * 28 * 1280);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->first, 56);
  EXPECT_EQ(r->second, 112);
  // Above max_pixels: scaled down, each side floored to the factor.
  r = qwen_smart_resize(1000, 1000, 28, 56 * 56, 28 * 28 * 4);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->first * r->second, 56 * 56);
  // Below min_pixels: scaled up, each side ceiled.
  r = qwen_smart_resize(10, 10, 28, 56 * 56, 28 * 28 * 1280);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->first, 56);
  EXPECT_EQ(r->second, 56);
}

TEST(SmartResize, RefusesExtremeAspectAndEmpty) {
  auto r = qwen_smart_resize(1, 201, 28, 56 * 56, 28 * 28 * 1280);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().kind(), ErrorKind::kInvalidArgument);
  EXPECT_NE(r.status().message().find("aspect ratio"), std::string::npos);
  EXPECT_NE(r.status().message().find("201x1"), std::string::npos) << r.status().message();
  EXPECT_TRUE(qwen_smart_resize(1, 200, 28, 56 * 56, 28 * 28 * 1280).ok());  // exactly 200 is allowed
  EXPECT_EQ(qwen_smart_resize(0, 5, 28, 1, 2).status().kind(), ErrorKind::kInvalidArgument);
  EXPECT_EQ(qwen_smart_resize(5, 5, 0, 1, 2).status().kind(), ErrorKind::kInvalidArgument);
}

TEST(Patchify, RefusesSizesOffTheFactor) {
  Qwen2VLImageConfig cfg;  // factor 28
  Tensor t = Tensor::empty(DType::kF32, {3, 28, 30});
  EXPECT_EQ(qwen_patchify(t, cfg).status().kind(), ErrorKind::kInvalidArgument);
  Tensor ok = Tensor::empty(DType::kF32, {3, 28, 56});
  auto p = qwen_patchify(ok, cfg);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->grid.t, 1);
  EXPECT_EQ(p->grid.h, 2);
  EXPECT_EQ(p->grid.w, 4);
  EXPECT_EQ(p->patches.shape(), (Shape{8, 3 * 2 * 14 * 14}));
  EXPECT_EQ(qwen_image_tokens(p->grid, 2), 2);
}

TEST(Mrope, RefusesMismatchedImageSpans) {
  const int32_t I = 151655;
  // Fewer image tokens than the grid needs.
  auto r = qwen_mrope_positions({1, I, I, 2}, I, {{1, 4, 4}}, 2);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().kind(), ErrorKind::kInvalidArgument);
  EXPECT_NE(r.status().message().find("needs 4"), std::string::npos) << r.status().message();
  // Image tokens left after the last grid.
  EXPECT_EQ(qwen_mrope_positions({1, I, 2}, I, {}, 2).status().kind(), ErrorKind::kInvalidArgument);
  // A grid without image tokens.
  EXPECT_EQ(qwen_mrope_positions({1, 2}, I, {{1, 2, 2}}, 2).status().kind(), ErrorKind::kInvalidArgument);
  // Grid not divisible by the merge size.
  EXPECT_EQ(qwen_mrope_positions({I}, I, {{1, 3, 2}}, 2).status().kind(), ErrorKind::kInvalidArgument);
  // Expansion: count mismatch.
  EXPECT_EQ(qwen_expand_image_tokens({1, I, I}, I, {{1, 2, 2}}, 2).status().kind(), ErrorKind::kInvalidArgument);
}

TEST(Mrope, TextOnlyHasZeroDelta) {
  auto r = qwen_mrope_positions({5, 6, 7}, 151655, {}, 2);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->rope_delta, 0);
  EXPECT_EQ(r->positions, (std::vector<int32_t>{0, 1, 2, 0, 1, 2, 0, 1, 2}));
}

}  // namespace
}  // namespace hlx::mm
