// The official StableHLO programs for the structured ops (reduce, argmax/argmin, gather, scatter,
// dot_general, convolution), run through parse -> verify -> Program with the corpus' check
// custom_calls implemented as the reference interpreter defines them.
#include <cmath>
#include <filesystem>

#include "runtime/program.h"
#include "stablehlo/parser.h"
#include "stablehlo/verifier.h"
#include "structured_test_util.h"

namespace hlx {
namespace {

using namespace hlx::testing;

int64_t ordered_bits(const Tensor& t, int64_t i) {
  int64_t b = t.dtype() == DType::kF32 ? int64_t(t.data<uint32_t>()[i]) : int64_t(t.data<uint16_t>()[i]);
  int64_t sign = t.dtype() == DType::kF32 ? (int64_t(1) << 31) : (int64_t(1) << 15);
  return (b & sign) ? -(b & (sign - 1)) : b;  // monotone in the float value
}

Status compare(const std::vector<Tensor>& ops, const std::string& kind) {
  if (ops.size() != 2) return make_error(ErrorKind::kInternal, kind, ": expected 2 operands");
  const Tensor &a = ops[0], &b = ops[1];
  if (a.dtype() != b.dtype() || a.shape() != b.shape())
    return make_error(ErrorKind::kInternal, kind, ": ", a.type_string(), " vs ", b.type_string());
  for (int64_t i = 0; i < a.num_elements(); ++i) {
    bool ok;
    if (!is_float(a.dtype())) {
      ok = get_i(a, i) == get_i(b, i);
    } else {
      float x = get_f(a, i), y = get_f(b, i);
      if (std::isnan(x) || std::isnan(y))
        ok = std::isnan(x) && std::isnan(y);
      else if (kind == "check.expect_almost_eq")
        ok = std::fabs(x - y) <= 1e-3f || x == y;
      else if (kind == "check.expect_close")
        ok = x == y || std::llabs(ordered_bits(a, i) - ordered_bits(b, i)) <= 3;
      else
        ok = ordered_bits(a, i) == ordered_bits(b, i);
    }
    if (!ok)
      return make_error(ErrorKind::kInternal, kind, " failed at element ", i, ": got ", get_f(a, i), " want ",
                        get_f(b, i));
  }
  return ok_status();
}

TEST(Exec, OfficialStructuredPrograms) {
  namespace fs = std::filesystem;
  if (!fs::exists(HLX_TESTDATA_DIR)) GTEST_SKIP() << "corpus missing";
  rt::ProgramOptions options;
  int checks = 0;
  for (const char* k : {"check.expect_eq", "check.expect_close", "check.expect_almost_eq", "check.eq"}) {
    std::string kind = k;
    options.custom_calls.push_back({kind, [kind, &checks](const std::vector<Tensor>& ops) {
                                      ++checks;
                                      return compare(ops, kind);
                                    }});
  }
  int passed = 0, unsupported = 0;
  std::vector<std::string> failed;
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(HLX_TESTDATA_DIR)) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const auto& path : files) {
    std::string name = path.filename().string();
    bool mine = false;
    for (const char* pre : {"argmax_", "argmin_", "conv_", "dot_general_", "gather_", "reduce_", "scatter_"})
      mine |= name.rfind(pre, 0) == 0;
    if (!mine || path.extension() != ".mlir") continue;
    auto m = shlo::parse_module_file(path.string());
    if (!m.ok()) {
      failed.push_back(name + ": " + m.status().to_string());
      continue;
    }
    if (Status v = shlo::verify_module(*m); !v.ok()) {
      failed.push_back(name + ": " + v.to_string());
      continue;
    }
    auto module = std::make_shared<const shlo::Module>(std::move(*m));
    auto p = rt::Program::compile(module, options);
    if (!p.ok()) {
      if (p.status().kind() == ErrorKind::kUnsupported) {
        ++unsupported;
        continue;
      }
      failed.push_back(name + ": " + p.status().to_string());
      continue;
    }
    auto out = (*p)->run("main", {});
    if (!out.ok())
      failed.push_back(name + ": " + out.status().to_string());
    else
      ++passed;
  }
  for (size_t i = 0; i < failed.size() && i < 20; ++i) ADD_FAILURE() << failed[i];
  std::printf("structured corpus: %d passed, %zu failed, %d unsupported\n", passed, failed.size(), unsupported);
  EXPECT_TRUE(failed.empty());
  EXPECT_GE(checks, passed);  // every passing program ran its check
  EXPECT_GT(passed, 700);
}

}  // namespace
}  // namespace hlx
