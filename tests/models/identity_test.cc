// Module identity: the SHA-256 of a canonical description that names the schema, every spec field,
// the engine shape, the entry and its rows. Stable for equal inputs, different when any changes.
#include <gtest/gtest.h>

#include <functional>
#include <set>

#include "core/sha256.h"
#include "models/text_entries.h"

namespace hlx::models {
namespace {

TextModelSpec gemma_spec() {
  Result<HfConfig> c = HfConfig::parse(R"({"model_type": "gemma3_text", "hidden_size": 80,
      "intermediate_size": 144, "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2,
      "head_dim": 20, "query_pre_attn_scalar": 20, "vocab_size": 310, "sliding_window": 100,
      "torch_dtype": "bfloat16", "sliding_window_pattern": 2, "eos_token_id": [1, 106]})");
  EXPECT_TRUE(c.ok());
  Result<TextModelSpec> s = text_spec_from_config(*c);
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return *s;
}

std::string identity_of(const TextModelSpec& spec, const EngineShape& shape, const EntryRequest& req) {
  Result<shlo::Module> m = emit_text_entry(spec, shape, req);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  if (!m.ok()) return "";
  const shlo::Attr* a = shlo::find_attr(m->attrs, shlo::kIdentityAttr);
  EXPECT_NE(a, nullptr);
  return a ? a->str : "";
}

TEST(Identity, IsTheSha256OfTheDescriptionAndStable) {
  const TextModelSpec spec = gemma_spec();
  const EngineShape shape{1000, 2, DType::kBF16};
  const EntryRequest req{TextEntry::kPrefill, 128};
  const std::string id = identity_of(spec, shape, req);
  EXPECT_EQ(id, sha256_hex(text_entry_description(spec, shape, req)));
  EXPECT_EQ(id, identity_of(spec, shape, req));
  EXPECT_EQ(id, identity_of(gemma_spec(), EngineShape{1000, 2, DType::kBF16}, EntryRequest{TextEntry::kPrefill, 128}));
}

TEST(Identity, DescriptionNamesSchemaSpecShapeEntryAndRows) {
  const std::string d = text_entry_description(gemma_spec(), {1000, 2, DType::kF32}, {TextEntry::kDecode, 2});
  for (const char* needle : {"schema=hlx.text_decoder/",
                             "family=gemma3",
                             "model_type=gemma3_text",
                             "weight_prefix=model.",
                             "lm_head_name=model.embed_tokens.weight",
                             "vocab_size=310",
                             "hidden_size=80",
                             "intermediate_size=144",
                             "num_layers=3",
                             "num_heads=4",
                             "num_kv_heads=2",
                             "head_dim=20",
                             "rms_norm_eps=",
                             "norm_weight_offset=1",
                             "activation=gelu_tanh",
                             "attention_bias=0",
                             "qk_norm=1",
                             "sandwich_norms=1",
                             "tie_word_embeddings=1",
                             "embedding_scale=8.9375",  // sqrt(80) = 8.944 rounded to bf16
                             "attention_scale=",
                             "attn_logit_softcap=0",
                             "final_logit_softcap=0",
                             "rope=default theta=1000000",
                             "rope_local=default theta=10000",
                             "sliding_window=100",
                             "layer_is_sliding=101",
                             "max_position_embeddings=131072",
                             "weight_dtype=bf16",
                             "eos_token_ids=1,106",
                             "context_capacity=1000",
                             "slots=2",
                             "kv_dtype=f32",
                             "entry=decode",
                             "rows=2"}) {
    EXPECT_NE(d.find(needle), std::string::npos) << needle << "\n" << d;
  }
}

TEST(Identity, ChangesWithEveryInput) {
  const TextModelSpec base = gemma_spec();
  const EngineShape shape{1024, 2, DType::kBF16};
  const EntryRequest req{TextEntry::kPrefill, 128};
  std::set<std::string> ids = {identity_of(base, shape, req)};
  size_t variants = 1;
  auto expect_new = [&](const std::string& what, const std::string& id) {
    ++variants;
    EXPECT_TRUE(ids.insert(id).second) << what << " did not change the identity";
  };
  // Engine shape, entry and rows.
  for (int64_t capacity : {256, 1000, 1025})
    expect_new(str_cat("capacity ", capacity), identity_of(base, {capacity, 2, DType::kBF16}, req));
  expect_new("slots", identity_of(base, {1024, 3, DType::kBF16}, req));
  expect_new("kv dtype", identity_of(base, {1024, 2, DType::kF32}, req));
  expect_new("kv dtype int8", identity_of(base, {1024, 2, DType::kI8}, req));
  expect_new("rows", identity_of(base, shape, {TextEntry::kPrefill, 512}));
  expect_new("entry embeddings", identity_of(base, shape, {TextEntry::kPrefillEmbeddings, 128}));
  expect_new("entry all logits", identity_of(base, shape, {TextEntry::kPrefillAllLogits, 128}));
  expect_new("entry decode", identity_of(base, shape, {TextEntry::kDecode, 128}));
  // Spec fields.
  std::vector<std::pair<std::string, std::function<void(TextModelSpec&)>>> edits = {
      {"rms_norm_eps", [](TextModelSpec& s) { s.rms_norm_eps = 1e-5; }},
      {"sliding_window", [](TextModelSpec& s) { s.sliding_window = 99; }},
      {"layer_is_sliding", [](TextModelSpec& s) { s.layer_is_sliding[1] = true; }},
      {"rope theta", [](TextModelSpec& s) { s.rope.theta = 5e5; }},
      {"rope_local theta", [](TextModelSpec& s) { s.rope_local.theta = 2e4; }},
      {"rope factor",
       [](TextModelSpec& s) {
         s.rope.type = "linear";
         s.rope.factor = 8;
       }},
      {"attention_scale", [](TextModelSpec& s) { s.attention_scale = 0.5; }},
      {"embedding_scale", [](TextModelSpec& s) { s.embedding_scale = 9.0; }},
      {"final softcap", [](TextModelSpec& s) { s.final_logit_softcap = 30; }},
      {"attn softcap", [](TextModelSpec& s) { s.attn_logit_softcap = 50; }},
      {"weight dtype", [](TextModelSpec& s) { s.weight_dtype = DType::kF32; }},
      {"weight prefix",
       [](TextModelSpec& s) {
         s.weight_prefix = "model.language_model.";
         s.lm_head_name = "model.language_model.embed_tokens.weight";
       }},
      {"tie",
       [](TextModelSpec& s) {
         s.tie_word_embeddings = false;
         s.lm_head_name = "lm_head.weight";
       }},
      {"eos", [](TextModelSpec& s) { s.eos_token_ids = {1}; }},
      {"norm offset", [](TextModelSpec& s) { s.norm_weight_offset = 0; }},
      {"max positions", [](TextModelSpec& s) { s.max_position_embeddings = 4096; }},
  };
  for (auto& [what, edit] : edits) {
    TextModelSpec s = base;
    edit(s);
    expect_new(what, identity_of(s, shape, req));
  }
  EXPECT_EQ(ids.size(), variants);
}

}  // namespace
}  // namespace hlx::models

namespace hlx::models {
namespace {

// The matmul weight format the runtime quantizes to at load is part of identity: a module emitted
// for as-stored weights does not load for int4 (or int8), and as-stored descriptions carry no line.
TEST(Identity, CoversTheWeightFormat) {
  const TextModelSpec plain = gemma_spec();
  const EntryRequest req{TextEntry::kDecode, 2};
  const EngineShape shape{1000, 2, DType::kBF16};
  TextModelSpec i8 = plain, i4 = plain, awq = plain;
  i8.weight_format = "int8";
  i4.weight_format = "int4";
  awq.weight_format = "awq-int4-g128";
  EXPECT_EQ(text_entry_description(plain, shape, req).find("weight_format="), std::string::npos);
  EXPECT_NE(text_entry_description(i4, shape, req).find("weight_format=int4\n"), std::string::npos);
  const std::set<std::string> ids{identity_of(plain, shape, req), identity_of(i8, shape, req),
                                  identity_of(i4, shape, req), identity_of(awq, shape, req)};
  EXPECT_EQ(ids.size(), 4u);
}

}  // namespace
}  // namespace hlx::models
