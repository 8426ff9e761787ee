// `prefill_embeddings` fed embed(tokens) · scale must equal token `prefill` exactly: same logits
// bits and same cache bytes. Runs both entries of real fixtures on the runtime.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "io/checkpoint.h"
#include "io/hf_config.h"
#include "models/fixture.h"
#include "models/text_entries.h"
#include "runtime/program.h"

namespace hlx {
namespace {

using models::EngineShape;
using models::EntryRequest;
using models::TextEntry;

struct Run {
  std::vector<Tensor> outputs;
};

Tensor scalar_i32(int32_t v) {
  Tensor t = Tensor::empty(DType::kI32, {});
  *t.data<int32_t>() = v;
  return t;
}

Result<std::vector<Tensor>> run_entry(const models::TextModelSpec& spec, const EngineShape& shape, TextEntry entry,
                                      const Checkpoint& ckpt, Tensor first_input, int32_t length) {
  HLX_ASSIGN_OR_RETURN(shlo::Module module, models::emit_text_entry(spec, shape, EntryRequest{entry, 32}));
  HLX_ASSIGN_OR_RETURN(auto program, rt::Program::compile(std::make_shared<shlo::Module>(std::move(module))));
  for (const auto& info : models::text_checkpoint_layout(spec)) {
    HLX_ASSIGN_OR_RETURN(Tensor w, ckpt.tensor(info.name));
    HLX_RETURN_IF_ERROR(program->bind_weight(info.name, w));
  }
  std::vector<Tensor> args = {std::move(first_input), scalar_i32(length), scalar_i32(0), scalar_i32(0)};
  for (int64_t i = 0; i < 2 * spec.num_layers; ++i)
    args.push_back(
        Tensor::zeros(shape.kv_dtype, {shape.slots, shape.context_capacity, spec.num_kv_heads, spec.head_dim}));
  return program->run(models::entry_name(entry), std::move(args));
}

void expect_identical(const std::string& family, DType dtype) {
  SCOPED_TRACE(family);
  std::string dir =
      (std::filesystem::temp_directory_path() / ("hlx_embed_" + family + std::string(dtype_name(dtype)))).string();
  models::FixtureOptions fo;
  fo.family = family;
  fo.dtype = dtype;
  fo.seed = 3;
  ASSERT_TRUE(models::write_text_fixture(dir, fo).ok());
  auto config = HfConfig::load(dir);
  ASSERT_TRUE(config.ok()) << config.status().to_string();
  auto spec = models::text_spec_from_config(*config);
  ASSERT_TRUE(spec.ok()) << spec.status().to_string();
  auto ckpt = Checkpoint::open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().to_string();

  const int32_t length = 11;
  Tensor tokens = Tensor::zeros(DType::kI32, {32});
  for (int32_t i = 0; i < length; ++i) tokens.data<int32_t>()[i] = (i * 37 + 5) % int32_t(spec->vocab_size);

  // The embeddings the model itself would compute: embedding rows in f32, times the spec's scale.
  auto embed = ckpt->tensor(spec->weight_prefix + "embed_tokens.weight");
  ASSERT_TRUE(embed.ok());
  const int64_t hidden = spec->hidden_size;
  Tensor embeddings = Tensor::zeros(DType::kF32, {32, hidden});
  for (int64_t r = 0; r < 32; ++r) {
    int64_t tok = tokens.data<int32_t>()[r];
    for (int64_t c = 0; c < hidden; ++c) {
      int64_t i = tok * hidden + c;
      float v;
      if (embed->dtype() == DType::kBF16) {
        bf16 b;
        std::memcpy(&b, static_cast<const char*>(embed->raw()) + 2 * i, 2);
        v = bf16_to_f32(b);
      } else {
        std::memcpy(&v, static_cast<const char*>(embed->raw()) + 4 * i, 4);
      }
      if (spec->embedding_scale != 1.0) v *= float(spec->embedding_scale);
      embeddings.data<float>()[r * hidden + c] = v;
    }
  }

  EngineShape shape{64, 1, DType::kBF16};
  auto by_tokens = run_entry(*spec, shape, TextEntry::kPrefill, *ckpt, tokens, length);
  ASSERT_TRUE(by_tokens.ok()) << by_tokens.status().to_string();
  auto by_embeddings = run_entry(*spec, shape, TextEntry::kPrefillEmbeddings, *ckpt, embeddings, length);
  ASSERT_TRUE(by_embeddings.ok()) << by_embeddings.status().to_string();
  ASSERT_EQ(by_tokens->size(), by_embeddings->size());
  for (size_t i = 0; i < by_tokens->size(); ++i) {
    const Tensor& a = (*by_tokens)[i];
    const Tensor& b = (*by_embeddings)[i];
    ASSERT_EQ(a.nbytes(), b.nbytes());
    EXPECT_EQ(std::memcmp(a.raw(), b.raw(), a.nbytes()), 0) << "output " << i << " differs";
  }
  // Not a vacuous comparison: the caches hold the prompt's keys.
  const Tensor& k0 = (*by_tokens)[1];
  bool nonzero = false;
  for (size_t i = 0; i < k0.nbytes() && !nonzero; ++i) nonzero = static_cast<const uint8_t*>(k0.raw())[i] != 0;
  EXPECT_TRUE(nonzero);
  std::filesystem::remove_all(dir);
}

TEST(PrefillEmbeddings, EqualsTokenPrefillExactly) {
  expect_identical("qwen3", DType::kBF16);
  expect_identical("gemma3_text", DType::kF32);  // embedding scale sqrt(hidden)
  expect_identical("gemma3_text", DType::kBF16);
}

}  // namespace
}  // namespace hlx
