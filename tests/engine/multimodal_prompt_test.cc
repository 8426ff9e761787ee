// Image-row location, checking, id-level expansion and the embedding merge, against hand-built
// expectations.
#include "engine/multimodal_prompt.h"

#include <gtest/gtest.h>

namespace hlx::engine {
namespace {

constexpr int64_t kImg = 900;

ImagePromptLimits limits(int64_t max_images = 2) { return {true, kImg, max_images}; }

bool has(const Status& s, const std::string& part) { return s.message().find(part) != std::string::npos; }

TEST(MultimodalPrompt, CountsOnlyTheImageTokenId) {
  std::vector<int64_t> p = {1, kImg, 5, kImg, kImg + 1, 899};
  EXPECT_EQ(count_image_tokens(p, kImg), 2);
  EXPECT_EQ(count_image_tokens(p, 7), 0);
  EXPECT_EQ(count_image_tokens({}, kImg), 0);
}

TEST(MultimodalPrompt, LocatesEachImagesRunInOrder) {
  // Image 0 (3 rows) after id 1, image 1 (2 rows) at the end; images of different sizes (Qwen3-VL).
  std::vector<int64_t> p = {1, kImg, kImg, kImg, 2, 3, kImg, kImg};
  const std::vector<int64_t> counts = {3, 2};
  auto e = locate_image_rows(p, counts, limits());
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  EXPECT_EQ(e->ids, p);
  EXPECT_EQ(e->image_rows, (std::vector<int64_t>{1, 6}));
  EXPECT_EQ(e->image_tokens, counts);
  EXPECT_EQ(e->text_ids(), (std::vector<int64_t>{1, 2, 3}));

  // Adjacent images share one run (LLaVA "<image><image>"), split by the counts.
  std::vector<int64_t> q = {kImg, kImg, kImg, kImg, 7};
  const std::vector<int64_t> two = {2, 2};
  auto f = locate_image_rows(q, two, limits());
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->image_rows, (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(f->text_ids(), (std::vector<int64_t>{7}));

  // No images: unchanged.
  std::vector<int64_t> r = {4, 5};
  auto g = locate_image_rows(r, {}, limits());
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->ids, r);
  EXPECT_TRUE(g->image_rows.empty());
  EXPECT_EQ(g->text_ids(), r);
}

TEST(MultimodalPrompt, TypedErrorsNameTheCounts) {
  std::vector<int64_t> p = {1, kImg, kImg, 2, kImg, kImg, 3};
  const std::vector<int64_t> two = {2, 2};
  EXPECT_TRUE(locate_image_rows(p, two, limits()).ok());

  const std::vector<int64_t> one = {2};
  Status s = locate_image_rows(p, one, limits()).status();  // unexpanded or extra image tokens
  EXPECT_EQ(s.kind(), ErrorKind::kInvalidArgument);
  EXPECT_TRUE(has(s, "4 image token(s)") && has(s, "900") && has(s, "1 image(s) need 2")) << s.to_string();

  s = locate_image_rows(p, {}, limits()).status();  // image tokens without images
  EXPECT_EQ(s.kind(), ErrorKind::kInvalidArgument);
  EXPECT_TRUE(has(s, "4 image token(s)") && has(s, "0 image(s) need 0")) << s.to_string();

  const std::vector<int64_t> uneven = {3, 1};  // same total, but image 0's run is 2 rows
  s = locate_image_rows(p, uneven, limits()).status();
  EXPECT_EQ(s.kind(), ErrorKind::kInvalidArgument);
  EXPECT_TRUE(has(s, "image 0 needs 3 consecutive") && has(s, "row 3 holds token 2")) << s.to_string();

  const std::vector<int64_t> three = {1, 1, 2};
  s = locate_image_rows(p, three, limits(2)).status();
  EXPECT_EQ(s.kind(), ErrorKind::kInvalidArgument);
  EXPECT_TRUE(has(s, "3 images") && has(s, "2 allowed")) << s.to_string();

  ImagePromptLimits text_only;  // accepts_images = false
  s = locate_image_rows(p, one, text_only).status();
  EXPECT_EQ(s.kind(), ErrorKind::kInvalidArgument);
  EXPECT_TRUE(has(s, "text-only")) << s.to_string();
  // A text-only model does not know an image token: ids are just ids there.
  EXPECT_TRUE(locate_image_rows(p, {}, text_only).ok());
}

TEST(MultimodalPrompt, ExpandsEachImageTokenToItsCount) {
  std::vector<int64_t> p = {1, kImg, 2, kImg};
  const std::vector<int64_t> counts = {3, 1};
  auto e = expand_image_tokens(p, kImg, counts);
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  EXPECT_EQ(*e, (std::vector<int64_t>{1, kImg, kImg, kImg, 2, kImg}));
  const std::vector<int64_t> one = {3};
  Status s = expand_image_tokens(p, kImg, one).status();
  EXPECT_EQ(s.kind(), ErrorKind::kInvalidArgument);
  EXPECT_TRUE(has(s, "2 image placeholder(s)") && has(s, "1 image(s)")) << s.to_string();
}

Tensor filled(int64_t rows, int64_t hidden, float base) {
  Tensor t = Tensor::empty(DType::kF32, {rows, hidden});
  for (int64_t i = 0; i < rows * hidden; ++i) t.data<float>()[i] = base + float(i);
  return t;
}

TEST(MultimodalPrompt, MergePutsFeaturesIntoTheirRowsInOrder) {
  const int64_t hidden = 2;
  std::vector<int64_t> p = {1, kImg, kImg, 2, kImg, kImg, 3};
  const std::vector<int64_t> counts = {2, 2};
  auto e = locate_image_rows(p, counts, limits());
  ASSERT_TRUE(e.ok());
  Tensor text = filled(3, hidden, 100);  // rows for ids 1, 2, 3
  std::vector<Tensor> feats = {filled(2, hidden, 200), filled(2, hidden, 300)};
  auto m = merge_embeddings(*e, text, feats);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  ASSERT_EQ(m->shape(), (Shape{7, hidden}));
  const std::vector<float> want = {100, 101,            // id 1
                                   200, 201, 202, 203,  // image 0
                                   102, 103,            // id 2
                                   300, 301, 302, 303,  // image 1
                                   104, 105};           // id 3
  EXPECT_EQ(std::vector<float>(m->data<float>(), m->data<float>() + 14), want);

  // Mismatches are typed and name the shapes.
  std::vector<Tensor> one = {feats[0]};
  auto a = merge_embeddings(*e, text, one);
  EXPECT_EQ(a.status().kind(), ErrorKind::kInvalidArgument);
  std::vector<Tensor> wrong = {feats[0], filled(3, hidden, 0)};
  auto b = merge_embeddings(*e, text, wrong);
  ASSERT_FALSE(b.ok());
  EXPECT_TRUE(has(b.status(), "image 1") && has(b.status(), "[2, 2]")) << b.status().to_string();
  auto c = merge_embeddings(*e, filled(4, hidden, 0), feats);
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(has(c.status(), "[3, hidden]")) << c.status().to_string();
}

}  // namespace
}  // namespace hlx::engine
