// Run-time CPU feature detection: kernels pick AVX-512/AMX paths only where the CPU has them.
#pragma once

#include <string>

namespace hlx::kernels {

struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512bf16 = false, avx512fp16 = false;
  bool avx512vnni = false;  // vpdpwssd / vpdpbusd (int8 weights)
  bool amx_tile = false, amx_bf16 = false, amx_int8 = false;
  bool intel = false;      // vendor GenuineIntel: some stream tunings were measured per vendor
  std::string model_name;  // from /proc/cpuinfo
};

// Detected once (cpuid + OS support for the register state); HLX_CPU=baseline forces the portable
// path, HLX_CPU=noamx everything but AMX tiles.
const CpuFeatures& cpu_features();

}  // namespace hlx::kernels
