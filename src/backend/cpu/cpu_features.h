// What the CPU this process runs on can execute, read once from CPUID and XGETBV (the operating system must also
// save the wider register state: AVX-512's and AMX's). Used to pick the kernel level and for `vitpipe info`.
#pragma once

#include <string>

namespace vitpipe::cpu {

struct CpuFeatures {
  std::string model;  // the brand string, e.g. "AMD EPYC 7B13 64-Core Processor"
  bool avx2 = false, fma = false, f16c = false, bmi1 = false, bmi2 = false, lzcnt = false, movbe = false;
  bool os_avx = false;  // XCR0: SSE and AVX state
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false, avx512cd = false;
  bool os_avx512 = false;  // XCR0: opmask and ZMM state
  bool avx512_bf16 = false;
  bool amx_tile = false, amx_bf16 = false;
  bool os_amx = false;  // XCR0: tile configuration and tile data
  // Linux granted this process the tile data state (arch_prctl ARCH_REQ_XCOMP_PERM, asked once at detection when the
  // CPU and XCR0 have AMX): without it the first tile instruction dies of SIGILL.
  bool amx_permitted = false;
};

const CpuFeatures& cpu_features();  // detected on first call

}  // namespace vitpipe::cpu
