#include "backend/cpu/cpu_features.h"

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>

#if defined(__x86_64__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace vitpipe::cpu {
namespace {

#if defined(__x86_64__)
struct Registers {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
};

Registers cpuid(unsigned leaf, unsigned subleaf = 0) {
  Registers r;
  if (!__get_cpuid_count(leaf, subleaf, &r.eax, &r.ebx, &r.ecx, &r.edx)) r = Registers{};
  return r;
}

uint64_t xgetbv0() {
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}

bool bit(unsigned value, int index) { return (value >> index) & 1u; }

// Linux (5.16 on) hands out AMX's 8 KiB tile data state only on request, per process; glibc has no wrapper.
bool request_amx_tile_state() {
  constexpr long kArchReqXcompPerm = 0x1023;
  constexpr long kXfeatureXtiledata = 18;
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0) return true;
  // Said once, at detection: otherwise an AMX CPU would run at avx512_bf16 with only `vitpipe info` to tell why.
  std::fprintf(stderr,
               "vitpipe: this CPU has AMX but Linux refused its tile state (arch_prctl ARCH_REQ_XCOMP_PERM: %s); "
               "running without AMX\n",
               std::strerror(errno));
  return false;
}

std::string brand_string() {
  if (cpuid(0x80000000).eax < 0x80000004) return "unknown x86-64 CPU";
  char text[49] = {};
  for (unsigned i = 0; i < 3; ++i) {
    const Registers r = cpuid(0x80000002 + i);
    std::memcpy(text + 16 * i, &r, 16);
  }
  std::string model(text);
  const size_t first = model.find_first_not_of(' ');
  const size_t last = model.find_last_not_of(' ');
  return first == std::string::npos ? "unknown x86-64 CPU" : model.substr(first, last - first + 1);
}

CpuFeatures detect() {
  CpuFeatures f;
  f.model = brand_string();
  const unsigned max_leaf = cpuid(0).eax;
  const Registers l1 = cpuid(1);
  const bool osxsave = bit(l1.ecx, 27);
  const uint64_t xcr0 = osxsave ? xgetbv0() : 0;
  f.os_avx = bit(l1.ecx, 28) && (xcr0 & 0x6) == 0x6;
  f.os_avx512 = f.os_avx && (xcr0 & 0xe0) == 0xe0;
  f.os_amx = (xcr0 & 0x60000) == 0x60000;
  f.fma = bit(l1.ecx, 12);
  f.movbe = bit(l1.ecx, 22);
  f.f16c = bit(l1.ecx, 29);
  f.lzcnt = bit(cpuid(0x80000001).ecx, 5);
  if (max_leaf >= 7) {
    const Registers l7 = cpuid(7, 0);
    f.bmi1 = bit(l7.ebx, 3);
    f.avx2 = bit(l7.ebx, 5);
    f.bmi2 = bit(l7.ebx, 8);
    f.avx512f = bit(l7.ebx, 16);
    f.avx512dq = bit(l7.ebx, 17);
    f.avx512cd = bit(l7.ebx, 28);
    f.avx512bw = bit(l7.ebx, 30);
    f.avx512vl = bit(l7.ebx, 31);
    f.amx_bf16 = bit(l7.edx, 22);
    f.amx_tile = bit(l7.edx, 24);
    if (l7.eax >= 1) f.avx512_bf16 = bit(cpuid(7, 1).eax, 5);
  }
  if (f.os_amx && f.amx_tile) f.amx_permitted = request_amx_tile_state();
  return f;
}
#else
CpuFeatures detect() {
  CpuFeatures f;
  f.model = "non-x86-64 CPU";
  return f;
}
#endif

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = detect();
  return features;
}

}  // namespace vitpipe::cpu
