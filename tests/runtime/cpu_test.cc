// CPU feature detection against /proc/cpuinfo, and HLX_CPU=baseline: this binary re-runs its own
// kernel tests with the portable paths forced, so both code paths are checked on this machine.
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <vector>
#include <string>

#include "runtime/kernels/cpu.h"

extern char** environ;

namespace hlx {
namespace {

bool cpu_forced(const char* value) {
  const char* e = std::getenv("HLX_CPU");
  return e && std::strcmp(e, value) == 0;
}
bool baseline_forced() { return cpu_forced("baseline"); }

std::set<std::string> cpuinfo_flags() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  std::set<std::string> flags;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream ss(line.substr(line.find(':') + 1));
    std::string f;
    while (ss >> f) flags.insert(f);
    break;
  }
  return flags;
}

TEST(Cpu, MatchesKernelReportedFlags) {
  const auto& f = kernels::cpu_features();
  EXPECT_FALSE(f.model_name.empty());
  if (baseline_forced()) {
    EXPECT_FALSE(f.avx2 || f.avx512f || f.avx512bf16 || f.avx512vnni || f.amx_tile || f.amx_bf16);
    return;
  }
  auto flags = cpuinfo_flags();
  if (flags.empty()) GTEST_SKIP() << "no /proc/cpuinfo flags";
  // The kernel lists a flag only when the OS also enables its register state, as we check.
  EXPECT_EQ(f.avx2, flags.count("avx2") == 1);
  EXPECT_EQ(f.fma, flags.count("fma") == 1);
  EXPECT_EQ(f.f16c, flags.count("f16c") == 1);
  EXPECT_EQ(f.avx512f, flags.count("avx512f") == 1);
  EXPECT_EQ(f.avx512bw, flags.count("avx512bw") == 1);
  EXPECT_EQ(f.avx512vl, flags.count("avx512vl") == 1);
  EXPECT_EQ(f.avx512bf16, flags.count("avx512_bf16") == 1);
  EXPECT_EQ(f.avx512vnni, flags.count("avx512_vnni") == 1);
  EXPECT_EQ(f.avx512fp16, flags.count("avx512_fp16") == 1);
  // HLX_CPU=noamx: everything as detected but the AMX tiles.
  const bool amx = !cpu_forced("noamx");
  EXPECT_EQ(f.amx_tile, amx && flags.count("amx_tile") == 1);
  EXPECT_EQ(f.amx_bf16, amx && flags.count("amx_bf16") == 1);
  EXPECT_EQ(f.amx_int8, amx && flags.count("amx_int8") == 1);
}

TEST(Cpu, FeatureImplications) {
  const auto& f = kernels::cpu_features();
  if (f.avx512bw || f.avx512vl || f.avx512bf16 || f.avx512vnni || f.avx512fp16) {
    EXPECT_TRUE(f.avx512f);
  }
  if (f.amx_bf16 || f.amx_int8) {
    EXPECT_TRUE(f.amx_tile);
  }
}

// Re-runs this binary's kernel tests with HLX_CPU=baseline (portable attention, oneDNN-only
// matmul with f32->bf16 conversion in plain C++).
TEST(Cpu, KernelTestsPassWithBaselinePaths) {
  if (baseline_forced()) GTEST_SKIP() << "already the baseline run";
  std::string filter = "--gtest_filter=Matmul*:PackedWeight*:Attention*:Norms*:Rotary*:Native*:Cpu.*";
  std::string self = "/proc/self/exe";
  char* argv[] = {self.data(), filter.data(), nullptr};
  std::vector<std::string> env_s;
  for (char** e = environ; *e; ++e)
    if (std::strncmp(*e, "HLX_CPU=", 8) != 0) env_s.push_back(*e);
  env_s.push_back("HLX_CPU=baseline");
  env_s.push_back("ONEDNN_MAX_CPU_ISA=AVX2");  // and oneDNN as on a CPU without AVX-512
  std::vector<char*> envp;
  for (auto& s : env_s) envp.push_back(s.data());
  envp.push_back(nullptr);
  pid_t pid;
  ASSERT_EQ(posix_spawn(&pid, self.c_str(), nullptr, nullptr, argv, envp.data()), 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "kernel tests failed under HLX_CPU=baseline (see output above)";
}

}  // namespace
}  // namespace hlx
