// Decode error paths and basic resize/crop properties. Pixel parity with PIL lives in
// test_image_pil.py; these tests need no reference and use images built in memory with libpng.
#include <gtest/gtest.h>

#include <png.h>

#include <random>
#include <string>

#include "multimodal/image.h"
#include "multimodal/preprocess.h"

namespace hlx::mm {
namespace {

// Encodes an 8-bit RGB PNG with libpng's simplified writer.
std::string encode_png(int w, int h, uint8_t seed = 1) {
  png_image img{};
  img.version = PNG_IMAGE_VERSION;
  img.width = w;
  img.height = h;
  img.format = PNG_FORMAT_RGB;
  std::vector<uint8_t> px(size_t(w) * h * 3);
  for (size_t i = 0; i < px.size(); ++i) px[i] = uint8_t(i * 7 + seed);
  png_alloc_size_t size = 0;
  EXPECT_TRUE(png_image_write_to_memory(&img, nullptr, &size, 0, px.data(), 0, nullptr));
  std::string out(size, '\0');
  EXPECT_TRUE(png_image_write_to_memory(&img, out.data(), &size, 0, px.data(), 0, nullptr));
  out.resize(size);
  return out;
}

// A baseline JPEG from libjpeg is not needed: a minimal JPEG header is enough for error tests.
const char kJpegStart[] = "\xFF\xD8\xFF\xE0\x00\x10JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00";

TEST(DecodeImage, PngRoundTrip) {
  std::string png = encode_png(5, 3);
  auto img = decode_image(png);
  ASSERT_TRUE(img.ok()) << img.status().to_string();
  EXPECT_EQ(img->width, 5);
  EXPECT_EQ(img->height, 3);
  for (size_t i = 0; i < img->pixels.size(); ++i) ASSERT_EQ(img->pixels[i], uint8_t(i * 7 + 1)) << i;
}

TEST(DecodeImage, TruncatedPngIsIoError) {
  std::string png = encode_png(40, 30);
  for (size_t cut : {size_t(8), size_t(20), size_t(40), png.size() / 2, png.size() - 13}) {
    auto img = decode_image(std::string_view(png).substr(0, cut), {}, "cut.png");
    ASSERT_FALSE(img.ok()) << "cut at " << cut;
    EXPECT_EQ(img.status().kind(), ErrorKind::kIo) << img.status().to_string();
    EXPECT_NE(img.status().message().find("cut.png"), std::string::npos);
  }
}

TEST(DecodeImage, CorruptPngIsIoError) {
  std::string png = encode_png(16, 16);
  png[png.size() / 2] ^= 0x55;  // breaks a CRC or the deflate stream
  auto img = decode_image(png);
  ASSERT_FALSE(img.ok());
  EXPECT_EQ(img.status().kind(), ErrorKind::kIo);
}

TEST(DecodeImage, TruncatedJpegIsIoError) {
  std::string jpeg(kJpegStart, sizeof(kJpegStart) - 1);
  auto img = decode_image(jpeg, {}, "cut.jpg");
  ASSERT_FALSE(img.ok());
  EXPECT_EQ(img.status().kind(), ErrorKind::kIo) << img.status().to_string();
}

TEST(DecodeImage, RandomBytesAreRejected) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 50; ++trial) {
    std::string bytes(size_t(rng() % 4096), '\0');
    for (char& c : bytes) c = char(rng());
    // Half the trials get a valid signature so the decoders themselves see garbage.
    if (trial % 3 == 1 && bytes.size() > 8) bytes.replace(0, 8, "\x89PNG\r\n\x1a\n");
    if (trial % 3 == 2 && bytes.size() > 3) bytes.replace(0, 3, "\xFF\xD8\xFF");
    auto img = decode_image(bytes);
    EXPECT_FALSE(img.ok()) << trial;
  }
  auto empty = decode_image("");
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.status().kind(), ErrorKind::kUnsupported);
}

TEST(DecodeImage, PixelLimitRefusesBeforeDecoding) {
  std::string png = encode_png(100, 50);
  DecodeOptions opt;
  opt.max_pixels = 4999;
  auto img = decode_image(png, opt, "big.png");
  ASSERT_FALSE(img.ok());
  EXPECT_EQ(img.status().kind(), ErrorKind::kInvalidArgument);
  EXPECT_NE(img.status().message().find("100x50"), std::string::npos) << img.status().message();
  EXPECT_NE(img.status().message().find("4999"), std::string::npos);
  opt.max_pixels = 5000;
  EXPECT_TRUE(decode_image(png, opt).ok());
}

TEST(DecodeImage, HugeDeclaredDimensionsAreRefused) {
  // A PNG header claiming 100000 x 100000 followed by nothing: refused by the limit, not by OOM.
  std::string png = encode_png(1, 1);
  auto put32 = [&](size_t off, uint32_t v) {
    png[off] = char(v >> 24);
    png[off + 1] = char(v >> 16);
    png[off + 2] = char(v >> 8);
    png[off + 3] = char(v);
  };
  put32(16, 100000);
  put32(20, 100000);
  uint32_t crc = 0xFFFFFFFFu;  // PNG chunk CRC over type + data
  for (size_t i = 12; i < 12 + 17; ++i) {
    crc ^= uint8_t(png[i]);
    for (int b = 0; b < 8; ++b) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
  }
  crc ^= 0xFFFFFFFFu;
  put32(29, crc);
  auto img = decode_image(png);
  ASSERT_FALSE(img.ok());
  EXPECT_EQ(img.status().kind(), ErrorKind::kInvalidArgument) << img.status().to_string();
}

TEST(Resize, IdentityAndConstant) {
  Image img;
  img.width = 7;
  img.height = 3;
  img.pixels.assign(7 * 3 * 3, 77);
  for (Resample r : {Resample::kBilinear, Resample::kBicubic, Resample::kLanczos}) {
    auto out = resize(img, 13, 2, r);
    ASSERT_TRUE(out.ok());
    EXPECT_EQ(out->width, 13);
    EXPECT_EQ(out->height, 2);
    for (uint8_t v : out->pixels) ASSERT_EQ(v, 77);  // weights sum to one
  }
  EXPECT_FALSE(resize(img, 0, 3, Resample::kBicubic).ok());
}

TEST(Preprocess, ClipShortestEdgeAndCrop) {
  PreprocessConfig cfg;
  cfg.shortest_edge = 4;
  cfg.do_center_crop = true;
  cfg.crop_height = cfg.crop_width = 4;
  auto hw = resize_output_size(cfg, 10, 25);
  ASSERT_TRUE(hw.ok());
  EXPECT_EQ(hw->first, 4);
  EXPECT_EQ(hw->second, 10);
  Image img;
  img.width = 25;
  img.height = 10;
  img.pixels.assign(25 * 10 * 3, 255);
  auto t = preprocess(img, cfg);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->shape(), (Shape{3, 4, 4}));
  EXPECT_FLOAT_EQ(t->data<float>()[0], (1.0f - 0.48145466f) / 0.26862954f);
}

TEST(Preprocess, CenterCropPadsLikeHf) {
  Image img;
  img.width = 2;
  img.height = 1;
  img.pixels = {1, 1, 1, 2, 2, 2};
  Image out = center_crop(img, 3, 4);  // canvas 3x4, image at top_pad 1, left_pad 1
  ASSERT_EQ(out.height, 3);
  ASSERT_EQ(out.width, 4);
  EXPECT_EQ(out.row(1)[3], 1);
  EXPECT_EQ(out.row(1)[6], 2);
  EXPECT_EQ(out.row(0)[3], 0);
  EXPECT_EQ(out.row(1)[0], 0);
}

Image noise_image(int64_t w, int64_t h, uint32_t seed) {
  std::mt19937 g(seed);
  Image img;
  img.width = w;
  img.height = h;
  img.pixels.resize(size_t(w * h * 3));
  for (auto& v : img.pixels) v = uint8_t(g());
  return img;
}

// Every output pixel of Pillow's resampler has its own filter window, so a window of the resize
// must equal the same window cropped from the full resize, bit for bit, for every filter.
TEST(Resize, WindowEqualsCropOfTheFullResize) {
  std::mt19937 g(7);
  for (int trial = 0; trial < 60; ++trial) {
    const int64_t w = 1 + int64_t(g() % 40), h = 1 + int64_t(g() % 40);
    const int64_t ow = 1 + int64_t(g() % 60), oh = 1 + int64_t(g() % 60);
    const Image img = noise_image(w, h, uint32_t(trial));
    for (Resample r : {Resample::kNearest, Resample::kBilinear, Resample::kBicubic, Resample::kLanczos}) {
      auto full = resize(img, ow, oh, r);
      ASSERT_TRUE(full.ok());
      ResizeWindow win;
      win.top = int64_t(g() % uint32_t(oh));
      win.left = int64_t(g() % uint32_t(ow));
      win.height = 1 + int64_t(g() % uint32_t(oh - win.top));
      win.width = 1 + int64_t(g() % uint32_t(ow - win.left));
      auto part = resize_window(img, ow, oh, r, win);
      ASSERT_TRUE(part.ok()) << part.status().to_string();
      const Image want = crop_or_pad(*full, win.top, win.left, win.height, win.width);
      ASSERT_EQ(part->pixels, want.pixels) << w << "x" << h << " -> " << ow << "x" << oh << " filter " << int(r);
    }
  }
  ResizeWindow outside{0, 0, 5, 5};
  EXPECT_EQ(resize_window(noise_image(3, 3, 1), 4, 4, Resample::kBicubic, outside).status().kind(),
            ErrorKind::kInvalidArgument);
}

// Qwen's processors refuse an aspect ratio above 200; so does ours, before resizing, with the
// size and the ratio in the message. (A 1x201 image used to be resized to 224x45024 first.)
TEST(Preprocess, AspectRatioAbove200IsRefused) {
  PreprocessConfig cfg;
  cfg.shortest_edge = 224;
  cfg.do_center_crop = true;
  cfg.crop_height = cfg.crop_width = 224;
  auto tall = preprocess(noise_image(1, 201, 3), cfg);
  ASSERT_FALSE(tall.ok());
  EXPECT_EQ(tall.status().kind(), ErrorKind::kInvalidArgument);
  EXPECT_NE(tall.status().message().find("1x201"), std::string::npos) << tall.status().message();
  EXPECT_NE(tall.status().message().find("aspect ratio of 201"), std::string::npos) << tall.status().message();
  EXPECT_NE(tall.status().message().find("limit of 200"), std::string::npos) << tall.status().message();
  auto wide = preprocess(noise_image(1000, 4, 3), cfg);
  ASSERT_FALSE(wide.ok());
  EXPECT_NE(wide.status().message().find("aspect ratio of 250"), std::string::npos) << wide.status().message();
  EXPECT_TRUE(preprocess(noise_image(1, 200, 3), cfg).ok());
  EXPECT_TRUE(preprocess(noise_image(800, 4, 3), cfg).ok());
}

// The budget arithmetic, by hand for a CLIP pipeline (bicubic, shortest edge 224, crop 224) on a
// 448x448 image: the resize halves both sides (filter support 2 * 2 = 4 -> 9 taps).
TEST(Preprocess, MemoryBudgetArithmetic) {
  PreprocessConfig cfg;
  cfg.shortest_edge = 224;
  cfg.do_center_crop = true;
  cfg.crop_height = cfg.crop_width = 224;
  auto m = preprocess_memory(cfg, 448, 448);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(m->decoded, 448 * 448 * 3);
  const int64_t pass = 224 * (9 * 4 + 8) + 9 * 8;      // weights + (xmin, count) per output + scratch
  EXPECT_EQ(m->coefficients, 2 * pass + 224 * 3 * 4);  // + the vertical pass's row accumulators
  EXPECT_EQ(m->intermediate, 224 * 448 * 3);           // horizontal pass over every source row
  EXPECT_EQ(m->resized, 224 * 224 * 3);
  EXPECT_EQ(m->output, 3 * 224 * 224 * 4);
  EXPECT_EQ(m->total(), m->decoded + m->coefficients + m->intermediate + m->resized + m->output);

  // A long side costs nothing beyond the decoded input: 1x150 resized to 28x4200, cropped to
  // 28x28, reads 2 source rows (upscaling 150 -> 4200, the crop sits in the middle).
  cfg.shortest_edge = 28;
  cfg.crop_height = cfg.crop_width = 28;
  auto thin = preprocess_memory(cfg, 150, 1);
  ASSERT_TRUE(thin.ok());
  EXPECT_EQ(thin->resized, 28 * 28 * 3);
  EXPECT_LE(thin->intermediate, 28 * 4 * 3);
  EXPECT_LT(thin->total(), 20000);  // the full 28x4200 resize alone would be 352,800 bytes

  // The budget is checked before anything is allocated; exactly the total passes.
  const Image img = noise_image(448, 448, 5);
  cfg.shortest_edge = 224;
  cfg.crop_height = cfg.crop_width = 224;
  cfg.max_bytes = m->total();
  EXPECT_TRUE(preprocess(img, cfg).ok());
  cfg.max_bytes = m->total() - 1;
  auto over = preprocess(img, cfg);
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().kind(), ErrorKind::kInvalidArgument);
  EXPECT_NE(over.status().message().find("448x448 needs " + std::to_string(m->total()) + " bytes"), std::string::npos)
      << over.status().message();
  EXPECT_NE(over.status().message().find("budget of " + std::to_string(m->total() - 1)), std::string::npos);
}

// The windowed pipeline gives the same pixels as resize-then-crop, padding included.
TEST(Preprocess, WindowedPipelineEqualsResizeThenCrop) {
  std::mt19937 g(11);
  for (int trial = 0; trial < 40; ++trial) {
    PreprocessConfig cfg;
    cfg.shortest_edge = 1 + int64_t(g() % 30);
    cfg.do_center_crop = true;
    cfg.crop_height = 1 + int64_t(g() % 40);
    cfg.crop_width = 1 + int64_t(g() % 40);
    cfg.resample = Resample(g() % 4);
    const Image img = noise_image(1 + int64_t(g() % 50), 1 + int64_t(g() % 50), uint32_t(trial));
    auto hw = resize_output_size(cfg, img.height, img.width);
    ASSERT_TRUE(hw.ok());
    auto full = resize(img, hw->second, hw->first, cfg.resample);
    ASSERT_TRUE(full.ok());
    const Image want = center_crop(*full, cfg.crop_height, cfg.crop_width);
    auto got = preprocess_u8(img, cfg);
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    ASSERT_EQ(got->width, want.width);
    ASSERT_EQ(got->height, want.height);
    ASSERT_EQ(got->pixels, want.pixels) << "trial " << trial;
  }
}

}  // namespace
}  // namespace hlx::mm

namespace hlx::mm {
namespace {

Result<PreprocessConfig> parse_cfg(const std::string& text) {
  auto cfg = HfConfig::parse(text, "preprocessor_config.json");
  if (!cfg.ok()) return cfg.status();
  return PreprocessConfig::from_config(cfg->root());
}

TEST(PreprocessConfig, ClipAndSiglipKeys) {
  auto clip = parse_cfg(R"({"size": {"shortest_edge": 336}, "crop_size": {"height": 336, "width": 336},
      "do_center_crop": true, "resample": 3, "image_mean": [0.1, 0.2, 0.3], "image_std": [1, 2, 3]})");
  ASSERT_TRUE(clip.ok()) << clip.status().to_string();
  EXPECT_EQ(clip->shortest_edge, 336);
  EXPECT_EQ(clip->crop_height, 336);
  EXPECT_TRUE(clip->do_center_crop);
  EXPECT_EQ(clip->resample, Resample::kBicubic);
  EXPECT_DOUBLE_EQ(clip->image_mean[1], 0.2);

  auto siglip = parse_cfg(R"({"size": {"height": 384, "width": 384}, "resample": 2,
      "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5]})");
  ASSERT_TRUE(siglip.ok());
  EXPECT_EQ(siglip->shortest_edge, 0);
  EXPECT_EQ(siglip->height, 384);
  EXPECT_EQ(siglip->resample, Resample::kBilinear);
  EXPECT_FALSE(siglip->do_center_crop);

  auto legacy = parse_cfg(R"({"size": 224, "crop_size": 224, "do_center_crop": true})");
  ASSERT_TRUE(legacy.ok()) << legacy.status().to_string();
  EXPECT_EQ(legacy->shortest_edge, 224);
  EXPECT_EQ(legacy->crop_width, 224);
}

TEST(PreprocessConfig, BadValuesAreTypedErrors) {
  auto r = parse_cfg(R"({"resample": 7})");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().kind(), ErrorKind::kUnsupported);
  r = parse_cfg(R"({"image_mean": [0.5, 0.5]})");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().kind(), ErrorKind::kInvalidArgument);
  r = parse_cfg(R"({"image_std": [0.5, 0, 0.5]})");
  ASSERT_FALSE(r.ok());
  r = parse_cfg(R"({"do_center_crop": true, "crop_size": {"height": 0, "width": 4}})");
  ASSERT_FALSE(r.ok());
  r = parse_cfg(R"({"size": {"longest_edge": 4}})");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("longest_edge"), std::string::npos);
}

// Gemma3ImageProcessor's preprocessor_config.json: a fixed-size bilinear resize (aspect not kept);
// pan-and-scan (several crops per image) is not implemented and says so.
TEST(PreprocessConfig, Gemma3KeysAndPanAndScan) {
  auto g = parse_cfg(R"({"do_pan_and_scan": null, "image_processor_type": "Gemma3ImageProcessor", "resample": 2,
      "size": {"height": 896, "width": 896}, "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5]})");
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  EXPECT_EQ(g->height, 896);
  EXPECT_EQ(g->width, 896);
  EXPECT_EQ(g->resample, Resample::kBilinear);
  auto hw = resize_output_size(*g, 300, 1200);
  ASSERT_TRUE(hw.ok());
  EXPECT_EQ(*hw, std::make_pair(int64_t(896), int64_t(896)));
  EXPECT_TRUE(parse_cfg(R"({"do_pan_and_scan": false, "size": {"height": 8, "width": 8}})").ok());
  auto r = parse_cfg(R"({"do_pan_and_scan": true, "size": {"height": 896, "width": 896}})");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().kind(), ErrorKind::kUnsupported);
  EXPECT_NE(r.status().message().find("do_pan_and_scan"), std::string::npos);
}

TEST(Orientation, AllEightMatchTheirDefinitions) {
  // 3 wide, 2 high; pixel value = 10*y + x in every channel.
  Image img;
  img.width = 3;
  img.height = 2;
  for (int y = 0; y < 2; ++y)
    for (int x = 0; x < 3; ++x)
      for (int c = 0; c < 3; ++c) img.pixels.push_back(uint8_t(10 * y + x));
  auto at = [](const Image& im, int y, int x) { return int(im.row(y)[x * 3]); };
  EXPECT_EQ(at(apply_orientation(img, 2), 0, 0), 2);   // mirrored
  EXPECT_EQ(at(apply_orientation(img, 3), 0, 0), 12);  // rotated 180
  EXPECT_EQ(at(apply_orientation(img, 4), 0, 0), 10);  // flipped vertically
  Image t = apply_orientation(img, 6);                 // rotate 90 clockwise
  ASSERT_EQ(t.width, 2);
  ASSERT_EQ(t.height, 3);
  EXPECT_EQ(at(t, 0, 0), 10);
  EXPECT_EQ(at(t, 0, 1), 0);
  t = apply_orientation(img, 8);  // rotate 90 counter-clockwise
  EXPECT_EQ(at(t, 0, 0), 2);
  EXPECT_EQ(at(t, 2, 0), 0);
  EXPECT_EQ(at(apply_orientation(img, 5), 2, 1), 12);  // transpose
  EXPECT_EQ(at(apply_orientation(img, 7), 0, 0), 12);  // transverse
  EXPECT_EQ(apply_orientation(img, 1).pixels, img.pixels);
}

}  // namespace
}  // namespace hlx::mm
