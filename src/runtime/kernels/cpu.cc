// CPU feature detection: cpuid for what the core implements, xgetbv for what the OS saves and
// restores (a feature whose register state the OS does not enable is unusable), and on Linux a
// one-time arch_prctl request for the AMX tile-data state.
#include "runtime/kernels/cpu.h"

#include <cpuid.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace hlx::kernels {
namespace {

struct Regs {
  unsigned a = 0, b = 0, c = 0, d = 0;
};

Regs cpuid(unsigned leaf, unsigned sub) {
  Regs r;
  __cpuid_count(leaf, sub, r.a, r.b, r.c, r.d);
  return r;
}

// XCR0 via xgetbv, written as inline asm so this file needs no -mxsave.
uint64_t xgetbv0() {
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (uint64_t(hi) << 32) | lo;
}

bool bit(unsigned v, int i) { return (v >> i) & 1u; }

std::string read_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      auto p = line.find(':');
      if (p == std::string::npos) return "";
      std::string s = line.substr(p + 1);
      size_t b = s.find_first_not_of(" \t");
      return b == std::string::npos ? "" : s.substr(b);
    }
  }
  return "";
}

// Linux >= 5.16 keeps AMX tile data disabled per process until requested.
bool request_amx_permission() {
#if defined(__linux__)
  constexpr long kArchReqXcompPerm = 0x1023;
  constexpr long kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;
#endif
}

CpuFeatures detect() {
  CpuFeatures f;
  f.model_name = read_model_name();
  const char* env = std::getenv("HLX_CPU");
  if (env && std::strcmp(env, "baseline") == 0) return f;

  unsigned max_leaf = __get_cpuid_max(0, nullptr);
  if (max_leaf < 1) return f;
  Regs l0 = cpuid(0, 0);  // vendor string in ebx, edx, ecx: "Genu" "ineI" "ntel"
  f.intel = l0.b == 0x756e6547 && l0.d == 0x49656e69 && l0.c == 0x6c65746e;
  Regs l1 = cpuid(1, 0);
  bool osxsave = bit(l1.c, 27);
  uint64_t xcr0 = osxsave ? xgetbv0() : 0;
  bool os_avx = (xcr0 & 0x6) == 0x6;                 // XMM + YMM state
  bool os_avx512 = os_avx && (xcr0 & 0xe0) == 0xe0;  // opmask, ZMM_Hi256, Hi16_ZMM
  bool os_amx = (xcr0 & 0x60000) == 0x60000;         // XTILECFG + XTILEDATA

  bool avx = bit(l1.c, 28) && os_avx;
  f.fma = avx && bit(l1.c, 12);
  f.f16c = avx && bit(l1.c, 29);
  if (max_leaf < 7) return f;
  Regs l7 = cpuid(7, 0);
  Regs l71 = cpuid(7, 1);
  f.avx2 = avx && bit(l7.b, 5);
  f.avx512f = os_avx512 && bit(l7.b, 16);
  f.avx512bw = f.avx512f && bit(l7.b, 30);
  f.avx512vl = f.avx512f && bit(l7.b, 31);
  f.avx512bf16 = f.avx512f && bit(l71.a, 5);
  f.avx512fp16 = f.avx512f && bit(l7.d, 23);
  f.avx512vnni = f.avx512f && bit(l7.c, 11);
  // HLX_CPU=noamx: as detected, but no AMX tiles (A/B measurements of the AMX kernels).
  bool amx_tile = os_amx && bit(l7.d, 24) && !(env && std::strcmp(env, "noamx") == 0);
  if (amx_tile && request_amx_permission()) {
    f.amx_tile = true;
    f.amx_bf16 = bit(l7.d, 22);
    f.amx_int8 = bit(l7.d, 25);
  }
  return f;
}

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = detect();
  return features;
}

}  // namespace hlx::kernels
