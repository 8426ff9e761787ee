// docs/ADD_A_MODEL.md's checklist, enforced: every fixture family (text and vision-language) has
// a fixture the production parser reads back, a spec whose identity description names it, and a
// numpy oracle test under tests/models/ that runs it. A family registered without one of these
// fails here, naming the family and the missing place.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "io/checkpoint.h"
#include "io/hf_config.h"
#include "models/fixture.h"
#include "models/text_entries.h"
#include "models/vision_spec.h"

namespace hlx::models {
namespace {

namespace fs = std::filesystem;

// Every family `hlx fixture --family` accepts.
std::vector<std::string> all_families() {
  std::vector<std::string> out = fixture_families();
  for (const char* f : {"llava-clip", "llava-siglip", "gemma3-vlm"}) {
    EXPECT_TRUE(is_vlm_fixture_family(f)) << f;
    out.push_back(f);
  }
  return out;
}

std::string oracle_sources() {
  std::string all;
  for (const auto& e : fs::directory_iterator(fs::path(HLX_SOURCE_DIR) / "tests" / "models")) {
    const std::string name = e.path().filename().string();
    if (name.rfind("test_", 0) != 0 || e.path().extension() != ".py") continue;
    std::ifstream f(e.path());
    std::stringstream ss;
    ss << f.rdbuf();
    all += ss.str();
  }
  return all;
}

TEST(AddAModel, EveryFamilyHasFixtureSpecIdentityAndOracle) {
  const std::string oracles = oracle_sources();
  ASSERT_FALSE(oracles.empty());
  for (const std::string& family : all_families()) {
    SCOPED_TRACE(family);
    const fs::path dir = fs::temp_directory_path() / str_cat("hlx_add_a_model_", family, "_", ::getpid());
    FixtureOptions o;
    o.family = family;
    Status st =
        is_vlm_fixture_family(family) ? write_vlm_fixture(dir.string(), o) : write_text_fixture(dir.string(), o);
    ASSERT_TRUE(st.ok()) << "fixture: " << st.to_string();
    Result<HfConfig> cfg = HfConfig::load(dir.string());
    ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
    Result<Checkpoint> ck = Checkpoint::open(dir.string());
    ASSERT_TRUE(ck.ok()) << ck.status().to_string();
    const std::vector<std::string> names = ck->names();
    const bool vlm = is_vision_language(*cfg) || is_gemma3_vlm(*cfg, names);
    EXPECT_EQ(vlm, is_vlm_fixture_family(family)) << "the loaders must tell this family's kind from its checkpoint";
    TextModelSpec text;
    if (vlm) {
      Result<VlmSpec> v = vlm_spec_from_config(*cfg, names);
      ASSERT_TRUE(v.ok()) << "spec: " << v.status().to_string();
      text = v->text;
      // The vision entry's identity names the tower (and, past LLaVA, the VLM family).
      const std::string d = vision_entry_description(*v);
      EXPECT_NE(d.find(str_cat("vision_family=", vision_family_name(v->vision.family))), std::string::npos);
      if (v->family != VlmFamily::kLlava) {
        EXPECT_NE(d.find(str_cat("vlm_family=", vlm_family_name(v->family))), std::string::npos);
      }
      // Every tensor the entries read is in the checkpoint.
      for (const TensorInfo& t : vision_checkpoint_layout(*v)) EXPECT_TRUE(ck->has(t.name)) << t.name;
    } else {
      Result<TextModelSpec> t = text_spec_from_config(*cfg);
      ASSERT_TRUE(t.ok()) << "spec: " << t.status().to_string();
      text = *t;
    }
    for (const TensorInfo& t : text_checkpoint_layout(text)) EXPECT_TRUE(ck->has(t.name)) << t.name;
    const std::string d = text_entry_description(text, {64, 1, DType::kBF16}, {TextEntry::kPrefill, 32});
    EXPECT_NE(d.find(str_cat("family=", family_name(text.family))), std::string::npos) << "identity";
    EXPECT_NE(oracles.find(str_cat("\"", family, "\"")), std::string::npos)
        << "no numpy oracle test in tests/models/test_*.py runs family \"" << family << "\"";
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
}

}  // namespace
}  // namespace hlx::models
