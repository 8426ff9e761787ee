// Schema tests of the text-decoder entries: every argument, result and KV dimension follows the
// spec, the capacity, the slot count and the rows; modules verify and round-trip through text; no
// dimension is tied to an unthreaded constant.
#include <gtest/gtest.h>

#include <map>
#include <regex>

#include "models/text_entries.h"
#include "stablehlo/parser.h"
#include "stablehlo/printer.h"
#include "stablehlo/verifier.h"

namespace hlx::models {
namespace {

using shlo::Attr;
using shlo::TensorType;

// Small configs whose sizes collide with no capacity, bucket or 256 (so a stray constant shows).
const char* kLlama = R"({"model_type": "llama", "hidden_size": 72, "intermediate_size": 120,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 300,
    "torch_dtype": "bfloat16", "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
    "high_freq_factor": 4.0, "original_max_position_embeddings": 64}})";
const char* kQwen2 = R"({"model_type": "qwen2", "hidden_size": 72, "intermediate_size": 120,
    "num_hidden_layers": 2, "num_attention_heads": 6, "num_key_value_heads": 2, "vocab_size": 300,
    "tie_word_embeddings": true, "torch_dtype": "float32"})";
const char* kQwen3 = R"({"model_type": "qwen3", "hidden_size": 96, "intermediate_size": 160,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 24,
    "vocab_size": 300, "tie_word_embeddings": true, "torch_dtype": "bfloat16"})";
const char* kGemma3 = R"({"model_type": "gemma3_text", "hidden_size": 80, "intermediate_size": 144,
    "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 20,
    "query_pre_attn_scalar": 20, "vocab_size": 310, "sliding_window": 100, "torch_dtype": "bfloat16",
    "layer_types": ["sliding_attention", "full_attention", "sliding_attention"],
    "rope_scaling": {"rope_type": "linear", "factor": 8.0}, "final_logit_softcapping": 30.0,
    "attn_logit_softcapping": 50.0})";
const char* kGemma3Wrapped = R"({"model_type": "gemma3", "architectures": ["Gemma3ForConditionalGeneration"],
    "torch_dtype": "float32", "text_config": {"model_type": "gemma3_text", "hidden_size": 80,
    "intermediate_size": 144, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 1,
    "head_dim": 20, "query_pre_attn_scalar": 20, "vocab_size": 310, "sliding_window": 100,
    "sliding_window_pattern": 2}})";

TextModelSpec spec_of(const char* json) {
  Result<HfConfig> c = HfConfig::parse(json);
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  Result<TextModelSpec> s = text_spec_from_config(*c);
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return *s;
}

constexpr TextEntry kEntries[] = {TextEntry::kPrefill, TextEntry::kPrefillEmbeddings, TextEntry::kPrefillAllLogits,
                                  TextEntry::kDecode};

const std::string* str_attr(const shlo::AttrDict& d, const char* key) {
  const Attr* a = shlo::find_attr(d, key);
  return a && a->kind == Attr::Kind::kString ? &a->str : nullptr;
}

// Checks one emitted entry against the contract in text_entries.h.
void check_schema(const TextModelSpec& spec, const EngineShape& shape, const EntryRequest& req) {
  SCOPED_TRACE(str_cat(spec.model_type, " ", entry_name(req.entry), " capacity ", shape.context_capacity, " slots ",
                       shape.slots, " rows ", req.rows));
  Result<shlo::Module> r = emit_text_entry(spec, shape, req);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const shlo::Module& m = *r;
  ASSERT_TRUE(shlo::verify_module(m).ok());
  const shlo::Function* fn = m.find_function(entry_name(req.entry));
  ASSERT_NE(fn, nullptr);
  EXPECT_TRUE(fn->is_public);
  int public_fns = 0;
  for (const shlo::Function& f : m.functions) public_fns += f.is_public;
  EXPECT_EQ(public_fns, 1);

  const std::vector<TensorInfo> layout = text_checkpoint_layout(spec);
  const int64_t L = spec.num_layers, S = shape.context_capacity, N = shape.slots, T = req.rows;
  const bool decode = req.entry == TextEntry::kDecode;
  std::vector<std::pair<std::string, TensorType>> inputs;
  if (decode) {
    inputs = {{"tokens", {DType::kI32, {T}}}, {"positions", {DType::kI32, {T}}}, {"slots", {DType::kI32, {T}}}};
  } else {
    if (req.entry == TextEntry::kPrefillEmbeddings)
      inputs.push_back({"embeddings", {DType::kF32, {T, spec.hidden_size}}});
    else
      inputs.push_back({"tokens", {DType::kI32, {T}}});
    inputs.push_back({"length", {DType::kI32, {}}});
    inputs.push_back({"start", {DType::kI32, {}}});
    inputs.push_back({"slot", {DType::kI32, {}}});
  }
  ASSERT_EQ(fn->args.size(), layout.size() + inputs.size() + size_t((shape.kv_dtype == DType::kI8 ? 4 : 2) * L));
  size_t a = 0;
  for (const TensorInfo& w : layout) {
    EXPECT_EQ(fn->type_of(fn->args[a]), (TensorType{spec.weight_dtype, w.shape})) << w.name;
    const std::string* name = str_attr(fn->arg_attrs[a], shlo::kWeightAttr);
    ASSERT_NE(name, nullptr) << "argument " << a;
    EXPECT_EQ(*name, w.name);
    ++a;
  }
  for (const auto& [name, type] : inputs) {
    EXPECT_EQ(fn->type_of(fn->args[a]), type) << name;
    const std::string* n = str_attr(fn->arg_attrs[a], shlo::kArgNameAttr);
    ASSERT_NE(n, nullptr);
    EXPECT_EQ(*n, name);
    EXPECT_EQ(shlo::find_attr(fn->arg_attrs[a], shlo::kWeightAttr), nullptr);
    ++a;
  }
  // Per layer k_cache, v_cache (and, int8 KV, f32 k_scale, v_scale [N, S, Hkv]).
  const bool i8 = shape.kv_dtype == DType::kI8;
  const int64_t per_layer = i8 ? 4 : 2;
  const char* const names[] = {"k_cache.", "v_cache.", "k_scale.", "v_scale."};
  const TensorType cache_only{shape.kv_dtype, {N, S, spec.num_kv_heads, spec.head_dim}};
  const TensorType scale{DType::kF32, {N, S, spec.num_kv_heads}};
  auto cache_type = [&](int64_t i) { return i % per_layer < 2 ? cache_only : scale; };
  for (int64_t i = 0; i < per_layer * L; ++i, ++a) {
    EXPECT_EQ(fn->type_of(fn->args[a]), cache_type(i)) << "cache " << i;
    const Attr* alias = shlo::find_attr(fn->arg_attrs[a], shlo::kAliasAttr);
    ASSERT_NE(alias, nullptr) << "cache " << i << " is not donated";
    EXPECT_EQ(alias->i, 1 + i);
    const std::string* n = str_attr(fn->arg_attrs[a], shlo::kArgNameAttr);
    ASSERT_NE(n, nullptr);
    EXPECT_EQ(*n, str_cat(names[i % per_layer], i / per_layer));
  }
  ASSERT_EQ(fn->result_types.size(), size_t(1 + per_layer * L));
  const TensorType logits = req.entry == TextEntry::kPrefill || req.entry == TextEntry::kPrefillEmbeddings
                                ? TensorType{DType::kF32, {spec.vocab_size}}
                                : TensorType{DType::kF32, {T, spec.vocab_size}};
  EXPECT_EQ(fn->result_types[0], logits);
  for (int64_t i = 0; i < per_layer * L; ++i) EXPECT_EQ(fn->result_types[size_t(1 + i)], cache_type(i));

  // Module attributes a loader checks.
  const Attr* cap = shlo::find_attr(m.attrs, "hlx.context_capacity");
  ASSERT_NE(cap, nullptr);
  EXPECT_EQ(cap->i, S);
  EXPECT_EQ(shlo::find_attr(m.attrs, "hlx.slots")->i, N);
  EXPECT_EQ(shlo::find_attr(m.attrs, "hlx.rows")->i, T);
  EXPECT_EQ(*str_attr(m.attrs, "hlx.entry"), entry_name(req.entry));
  EXPECT_EQ(*str_attr(m.attrs, "hlx.kv_dtype"), dtype_name(shape.kv_dtype));
  const std::string* id = str_attr(m.attrs, shlo::kIdentityAttr);
  ASSERT_NE(id, nullptr);
  EXPECT_EQ(id->size(), 64u);

  // Text round trip: parses, verifies, prints identically.
  const std::string text = shlo::print_module(m);
  Result<shlo::Module> back = shlo::parse_module(text);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_TRUE(shlo::verify_module(*back).ok());
  EXPECT_EQ(shlo::print_module(*back), text);
}

TEST(TextEmitter, SchemaFollowsCapacitySlotsAndRows) {
  for (const char* json : {kLlama, kQwen2, kQwen3, kGemma3, kGemma3Wrapped}) {
    const TextModelSpec spec = spec_of(json);
    for (int64_t capacity : {256, 1024, 1000}) {
      EngineShape shape{capacity, 3, DType::kBF16};
      for (TextEntry e : kEntries) {
        if (e == TextEntry::kDecode) {
          check_schema(spec, shape, {e, 3});
          check_schema(spec, shape, {e, 1});
        } else {
          // The smallest and the largest default bucket.
          std::vector<int64_t> buckets = default_prefill_buckets(capacity);
          check_schema(spec, shape, {e, buckets.front()});
          if (e == TextEntry::kPrefill) check_schema(spec, shape, {e, buckets.back()});
        }
      }
    }
  }
}

TEST(TextEmitter, F32KvCacheAndSingleSlot) {
  const TextModelSpec spec = spec_of(kQwen3);
  check_schema(spec, {1000, 1, DType::kF32}, {TextEntry::kPrefill, 128});
  check_schema(spec, {1000, 1, DType::kF32}, {TextEntry::kDecode, 1});
}

// int8 KV: scale arguments after each layer's caches, donated; the kv write quantizes (a
// round_nearest_even and i8 scatters appear) and hlx.attention takes the scales.
TEST(TextEmitter, Int8KvCacheTakesScales) {
  for (const char* json : {kQwen3, kGemma3}) {
    const TextModelSpec spec = spec_of(json);
    for (TextEntry e : {TextEntry::kPrefill, TextEntry::kDecode}) {
      check_schema(spec, {1000, 2, DType::kI8}, {e, e == TextEntry::kDecode ? 2 : 128});
      auto m = emit_text_entry(spec, {1000, 2, DType::kI8}, {e, e == TextEntry::kDecode ? 2 : 128});
      ASSERT_TRUE(m.ok()) << m.status().to_string();
      const std::string text = shlo::print_module(*m);
      EXPECT_NE(text.find("stablehlo.round_nearest_even"), std::string::npos);
      EXPECT_NE(text.find("xi8>"), std::string::npos);
    }
  }
}

TEST(TextEmitter, DefaultPrefillBuckets) {
  EXPECT_EQ(default_prefill_buckets(1000), (std::vector<int64_t>{32, 128, 512, 1000}));
  EXPECT_EQ(default_prefill_buckets(1024), (std::vector<int64_t>{32, 128, 512, 1024}));
  EXPECT_EQ(default_prefill_buckets(256), (std::vector<int64_t>{32, 128, 256}));
  EXPECT_EQ(default_prefill_buckets(512), (std::vector<int64_t>{32, 128, 512}));
  EXPECT_EQ(default_prefill_buckets(33), (std::vector<int64_t>{32, 33}));
  EXPECT_EQ(default_prefill_buckets(32), (std::vector<int64_t>{32}));
  EXPECT_EQ(default_prefill_buckets(20), (std::vector<int64_t>{20}));
  EXPECT_TRUE(default_prefill_buckets(0).empty());
  EXPECT_EQ(default_prefill_buckets(40960).back(), 40960);
}

TEST(TextEmitter, EntryNames) {
  EXPECT_STREQ(entry_name(TextEntry::kPrefill), "prefill");
  EXPECT_STREQ(entry_name(TextEntry::kPrefillEmbeddings), "prefill_embeddings");
  EXPECT_STREQ(entry_name(TextEntry::kPrefillAllLogits), "prefill_all_logits");
  EXPECT_STREQ(entry_name(TextEntry::kDecode), "decode");
}

TEST(TextEmitter, RejectsBadShapesWithTheirValues) {
  const TextModelSpec spec = spec_of(kQwen3);
  auto err = [&](EngineShape shape, EntryRequest req) {
    Result<shlo::Module> r = emit_text_entry(spec, shape, req);
    EXPECT_FALSE(r.ok());
    EXPECT_EQ(r.status().kind(), ErrorKind::kInvalidArgument);
    return r.status().message();
  };
  EXPECT_NE(err({1000, 1, DType::kBF16}, {TextEntry::kPrefill, 1001}).find("1001"), std::string::npos);
  EXPECT_NE(err({0, 1, DType::kBF16}, {TextEntry::kPrefill, 32}).find("context_capacity 0"), std::string::npos);
  EXPECT_NE(err({64, 0, DType::kBF16}, {TextEntry::kDecode, 1}).find("slots 0"), std::string::npos);
  EXPECT_NE(err({64, 1, DType::kF16}, {TextEntry::kDecode, 1}).find("f16"), std::string::npos);
  EXPECT_NE(err({64, 1, DType::kBF16}, {TextEntry::kDecode, 0}).find("rows 0"), std::string::npos);
  TextModelSpec broken = spec;
  broken.layer_is_sliding.pop_back();
  Result<shlo::Module> r = emit_text_entry(broken, {64, 1, DType::kBF16}, {TextEntry::kDecode, 1});
  EXPECT_FALSE(r.ok());
}

// Every dimension of every value (arguments, ops, region bodies, decompositions) of a module.
std::vector<int64_t> all_dims(const shlo::Module& m) {
  std::vector<int64_t> dims;
  for (const shlo::Function& f : m.functions) {
    for (const TensorType& t : f.value_types) dims.insert(dims.end(), t.shape.begin(), t.shape.end());
    for (const TensorType& t : f.result_types) dims.insert(dims.end(), t.shape.begin(), t.shape.end());
  }
  return dims;
}

// Acceptance: qwen3 and gemma3_text modules at capacity 1024 have no dimension tied to 256.
TEST(TextEmitter, NoDimensionTiedTo256AtCapacity1024) {
  std::regex dim256("[<x]256x");
  for (const char* json : {kQwen3, kGemma3}) {
    const TextModelSpec spec = spec_of(json);
    const EngineShape shape{1024, 4, DType::kBF16};
    for (TextEntry e : kEntries) {
      for (int64_t rows : e == TextEntry::kDecode ? std::vector<int64_t>{4} : default_prefill_buckets(1024)) {
        SCOPED_TRACE(str_cat(spec.model_type, " ", entry_name(e), " rows ", rows));
        Result<shlo::Module> m = emit_text_entry(spec, shape, {e, rows});
        ASSERT_TRUE(m.ok()) << m.status().to_string();
        std::vector<int64_t> dims = all_dims(*m);
        EXPECT_EQ(std::count(dims.begin(), dims.end(), 256), 0);
        EXPECT_GT(std::count(dims.begin(), dims.end(), 1024), 0);  // the scan sees the capacity
        const std::string text = shlo::print_module(*m);
        EXPECT_FALSE(std::regex_search(text, dim256));
        EXPECT_TRUE(text.find("x1024x") != std::string::npos);
      }
    }
  }
}

// The scan above would notice a 256: the same model at capacity 256 has it.
TEST(TextEmitter, DimensionScanDetectsTheCapacity) {
  Result<shlo::Module> m = emit_text_entry(spec_of(kQwen3), {256, 4, DType::kBF16}, {TextEntry::kDecode, 4});
  ASSERT_TRUE(m.ok());
  std::vector<int64_t> dims = all_dims(*m);
  EXPECT_GT(std::count(dims.begin(), dims.end(), 256), 0);
  EXPECT_TRUE(std::regex_search(shlo::print_module(*m), std::regex("[<x]256x")));
}

}  // namespace
}  // namespace hlx::models

namespace hlx::models {
namespace {

const char* kQwen3VL = R"({"model_type": "qwen3_vl", "architectures": ["Qwen3VLForConditionalGeneration"],
    "torch_dtype": "bfloat16", "vision_config": {"deepstack_visual_indexes": [1, 3]},
    "text_config": {"model_type": "qwen3_vl_text", "hidden_size": 96, "intermediate_size": 160,
    "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 24, "vocab_size": 300,
    "rope_scaling": {"rope_type": "default", "mrope_section": [6, 3, 3], "mrope_interleaved": true}}})";

std::vector<std::string> arg_names(const shlo::Module& m, const char* entry) {
  std::vector<std::string> out;
  const shlo::Function* fn = m.find_function(entry);
  if (!fn) return out;
  for (size_t i = 0; i < fn->arg_attrs.size(); ++i)
    if (const std::string* n = str_attr(fn->arg_attrs[i], shlo::kArgNameAttr)) out.push_back(*n);
  return out;
}

TEST(TextEmitter, MropeAndDeepstackEntries) {
  const TextModelSpec spec = spec_of(kQwen3VL);
  const EngineShape shape{48, 2, DType::kBF16};
  std::string ids[3];
  int i = 0;
  for (TextEntry e :
       {TextEntry::kPrefillEmbeddingsMrope, TextEntry::kPrefillEmbeddingsDeepstack, TextEntry::kDecodeMrope}) {
    EntryRequest req{e, e == TextEntry::kDecodeMrope ? 2 : 16, e == TextEntry::kPrefillEmbeddingsDeepstack ? 10 : 0};
    Result<shlo::Module> m = emit_text_entry(spec, shape, req);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    ASSERT_TRUE(shlo::verify_module(*m).ok()) << entry_name(e);
    std::vector<std::string> names = arg_names(*m, entry_name(e));
    std::vector<std::string> want;
    if (e == TextEntry::kDecodeMrope) {
      want = {"tokens", "positions", "rope_positions", "slots"};
    } else {
      want = {"embeddings", "rope_positions"};
      if (e == TextEntry::kPrefillEmbeddingsDeepstack)
        want.insert(want.end(), {"visual_positions", "layer_features", "visual_count"});
      want.insert(want.end(), {"length", "start", "slot"});
    }
    for (int64_t l = 0; l < spec.num_layers; ++l) {
      want.push_back(str_cat("k_cache.", l));
      want.push_back(str_cat("v_cache.", l));
    }
    EXPECT_EQ(names, want) << entry_name(e);
    const std::string* id = str_attr(m->attrs, shlo::kIdentityAttr);
    ASSERT_NE(id, nullptr);
    ids[i++] = *id;
  }
  EXPECT_NE(ids[0], ids[1]);
  // Layer features are [K, Nv, hidden] with K = number of vision taps; target layers in the identity.
  EXPECT_NE(text_entry_description(spec, shape, {TextEntry::kPrefillEmbeddingsDeepstack, 16, 10})
                .find("deepstack_layers=0,1\n"),
            std::string::npos);
  TextModelSpec shifted = spec;
  shifted.deepstack_layers = {1, 2};
  EXPECT_NE(text_entry_description(spec, shape, {TextEntry::kPrefillEmbeddingsDeepstack, 16, 10}),
            text_entry_description(shifted, shape, {TextEntry::kPrefillEmbeddingsDeepstack, 16, 10}));
}

TEST(TextEmitter, MropeEntriesRefusedWithoutMrope) {
  const TextModelSpec plain = spec_of(kQwen3);
  const EngineShape shape{48, 1, DType::kBF16};
  for (TextEntry e :
       {TextEntry::kPrefillEmbeddingsMrope, TextEntry::kPrefillEmbeddingsDeepstack, TextEntry::kDecodeMrope}) {
    Result<shlo::Module> m = emit_text_entry(plain, shape, {e, 8, 0});
    ASSERT_FALSE(m.ok()) << entry_name(e);
    EXPECT_EQ(m.status().kind(), ErrorKind::kInvalidArgument);
  }
  const TextModelSpec vl = spec_of(kQwen3VL);
  // visual_rows above the rows, and visual_rows on an entry that takes none.
  EXPECT_EQ(emit_text_entry(vl, shape, {TextEntry::kPrefillEmbeddingsDeepstack, 8, 9}).status().kind(),
            ErrorKind::kInvalidArgument);
  EXPECT_EQ(emit_text_entry(vl, shape, {TextEntry::kPrefill, 8, 4}).status().kind(), ErrorKind::kInvalidArgument);
}

// Attention's Q follows the cache (docs/COMPOSITES.md): over a bf16 cache every entry converts the
// rotated Q to bf16 right before hlx.attention, so the kernels and the decomposition see the same
// bf16 Q; over f32 and i8 caches Q stays the f32 rotary result.
TEST(TextEmitter, AttentionQueryIsBf16ExactlyOverABf16Cache) {
  const TextEntry all[] = {
      TextEntry::kPrefill,     TextEntry::kPrefillEmbeddings,       TextEntry::kPrefillAllLogits,
      TextEntry::kDecode,      TextEntry::kPrefillEmbeddingsMrope,  TextEntry::kPrefillEmbeddingsDeepstack,
      TextEntry::kDecodeMrope, TextEntry::kPrefillEmbeddingsMasked, TextEntry::kPrefillEmbeddingsMaskedAllLogits};
  int modules = 0;
  for (const char* json : {kLlama, kQwen2, kQwen3, kGemma3, kGemma3Wrapped, kQwen3VL}) {
    const TextModelSpec spec = spec_of(json);
    for (DType kv : {DType::kBF16, DType::kF32, DType::kI8})
      for (TextEntry e : all) {
        const bool decode = e == TextEntry::kDecode || e == TextEntry::kDecodeMrope;
        Result<shlo::Module> m = emit_text_entry(spec, {48, 2, kv}, {e, decode ? 2 : 16});
        if (!m.ok()) continue;  // an entry this family refuses
        ++modules;
        SCOPED_TRACE(str_cat(spec.model_type, " ", entry_name(e), " kv ", dtype_name(kv)));
        const shlo::Function* fn = m->find_function(entry_name(e));
        ASSERT_NE(fn, nullptr);
        std::map<shlo::ValueId, const shlo::Op*> producer;
        for (const shlo::Op& op : fn->body)
          for (shlo::ValueId r : op.results) producer[r] = &op;
        auto composite_name = [](const shlo::Op* op) {
          const std::string* n = op && op->name == "stablehlo.composite" ? str_attr(op->attrs, "name") : nullptr;
          return n ? *n : std::string();
        };
        int attentions = 0;
        for (const shlo::Op& op : fn->body) {
          if (composite_name(&op) != "hlx.attention") continue;
          ++attentions;
          const shlo::ValueId q = op.operands[0];
          const shlo::Op* p = producer[q];
          ASSERT_NE(p, nullptr);
          if (kv == DType::kBF16) {
            EXPECT_EQ(fn->type_of(q).dtype, DType::kBF16);
            ASSERT_EQ(p->name, "stablehlo.convert");
            EXPECT_EQ(fn->type_of(p->operands[0]).dtype, DType::kF32);
            p = producer[p->operands[0]];
          } else {
            EXPECT_EQ(fn->type_of(q).dtype, DType::kF32);
          }
          ASSERT_NE(p, nullptr);
          ASSERT_EQ(p->name, "stablehlo.reshape");  // [T, Hq, Dh] -> [B, T, Hq, Dh] of the rotary result
          EXPECT_EQ(composite_name(producer[p->operands[0]]), "hlx.rotary");
        }
        EXPECT_EQ(attentions, spec.num_layers);
      }
  }
  EXPECT_GE(modules, 3 * 6 * 4);
}

// Plain entries of a non-M-RoPE model carry no M-RoPE / DeepStack lines in their identity (so
// every existing module keeps its identity).
TEST(TextEmitter, PlainIdentityHasNoMropeLines) {
  const std::string d =
      text_entry_description(spec_of(kQwen3), EngineShape{48, 1, DType::kBF16}, {TextEntry::kPrefill, 8});
  EXPECT_EQ(d.find("mrope"), std::string::npos);
  EXPECT_EQ(d.find("deepstack"), std::string::npos);
  EXPECT_EQ(d.find("visual_rows"), std::string::npos);
}

}  // namespace
}  // namespace hlx::models

namespace hlx::models {
namespace {

TEST(TextEmitter, DeepstackPayloadChecks) {
  const TextModelSpec spec = spec_of(kQwen3VL);  // K = 2, hidden 96
  const EntryRequest req{TextEntry::kPrefillEmbeddingsDeepstack, 16, 6};
  auto positions = [](std::vector<int32_t> v) {
    Tensor t = Tensor::zeros(DType::kI32, {6});
    std::copy(v.begin(), v.end(), t.data<int32_t>());
    return t;
  };
  const Tensor feats = Tensor::zeros(DType::kF32, {2, 6, 96});
  EXPECT_TRUE(check_deepstack_payload(spec, req, 12, positions({2, 3, 7, 11}), feats, 4).ok());
  EXPECT_TRUE(check_deepstack_payload(spec, req, 12, positions({}), feats, 0).ok());  // zero visual rows
  auto expect_bad = [&](const Status& s, const std::string& needle) {
    ASSERT_FALSE(s.ok()) << needle;
    EXPECT_EQ(s.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(s.message().find(needle), std::string::npos) << s.message();
  };
  expect_bad(check_deepstack_payload(spec, req, 12, positions({2, 2, 7}), feats, 3), "sorted and unique");
  expect_bad(check_deepstack_payload(spec, req, 12, positions({3, 2}), feats, 2), "sorted and unique");
  expect_bad(check_deepstack_payload(spec, req, 12, positions({2, 12}), feats, 2), "= 12 is not a real row");
  expect_bad(check_deepstack_payload(spec, req, 12, positions({-1}), feats, 1), "= -1");
  expect_bad(check_deepstack_payload(spec, req, 12, positions({1}), feats, 7), "count 7");
  expect_bad(check_deepstack_payload(spec, req, 12, positions({1}), Tensor::zeros(DType::kF32, {3, 6, 96}), 1),
             "f32 [2, 6, 96]");
  expect_bad(check_deepstack_payload(spec, req, 12, positions({1}), Tensor::zeros(DType::kBF16, {2, 6, 96}), 1),
             "f32 [2, 6, 96]");
  expect_bad(check_deepstack_payload(spec, req, 12, Tensor::zeros(DType::kI32, {5}), feats, 1), "i32 [6]");
  expect_bad(check_deepstack_payload(spec, req, 17, positions({1}), feats, 1), "length 17");
}

}  // namespace
}  // namespace hlx::models
