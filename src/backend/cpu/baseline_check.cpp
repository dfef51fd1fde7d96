// Runs before anything else in the executable and refuses, in one sentence, a CPU below the build's baseline
// (x86-64-v3: AVX2, FMA, F16C, BMI1/2, LZCNT, MOVBE), instead of letting the first AVX2 instruction kill the process
// with SIGILL. This file alone is compiled for plain x86-64 (CMakeLists.txt), and uses nothing but CPUID and libc.
#if defined(__x86_64__)
#include <cpuid.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

namespace {

bool bit(unsigned value, int index) { return (value >> index) & 1u; }

__attribute__((constructor(101))) void refuse_cpu_below_baseline() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(1, 0, &a, &b, &c, &d)) return;  // no CPUID leaf 1: nothing sensible to report
  const bool fma = bit(c, 12), movbe = bit(c, 22), osxsave = bit(c, 27), avx = bit(c, 28), f16c = bit(c, 29);
  bool os_avx = false;
  if (osxsave) {
    unsigned lo = 0, hi = 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    os_avx = (lo & 0x6) == 0x6;
  }
  bool avx2 = false, bmi1 = false, bmi2 = false, lzcnt = false;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) avx2 = bit(b, 5), bmi1 = bit(b, 3), bmi2 = bit(b, 8);
  if (__get_cpuid_count(0x80000001, 0, &a, &b, &c, &d)) lzcnt = bit(c, 5);
  char missing[96] = "";
  const struct {
    bool present;
    const char* name;
  } required[] = {{avx && os_avx, " AVX"}, {avx2, " AVX2"}, {fma, " FMA"},     {f16c, " F16C"},
                  {bmi1, " BMI1"},         {bmi2, " BMI2"}, {lzcnt, " LZCNT"}, {movbe, " MOVBE"}};
  for (const auto& r : required) {
    if (!r.present) std::strncat(missing, r.name, sizeof(missing) - std::strlen(missing) - 1);
  }
  if (missing[0] == '\0') return;
  std::fprintf(stderr,
               "error: vitpipe needs an x86-64-v3 CPU (AVX2 and FMA: Intel Haswell, AMD Excavator or Zen, or newer); "
               "this CPU lacks%s\n",
               missing);
  std::fflush(stderr);
  _exit(1);
}

}  // namespace
#endif
