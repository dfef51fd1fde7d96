// CPU levels: the instruction sets the hand-written kernels are compiled for (kernels/, once per level) and the one
// this process runs, chosen once at start-up from the CPU's features and capped by VITPIPE_CPU. oneDNN dispatches
// its own GEMMs; VITPIPE_CPU caps it too unless ONEDNN_MAX_CPU_ISA says otherwise.
#pragma once

#include <string>
#include <vector>

namespace vitpipe::cpu {

// Ordered: each level includes the ones before it.
enum class CpuLevel : int {
  avx2 = 0,         // x86-64-v3: AVX2, FMA, F16C (the build's baseline)
  avx512 = 1,       // + AVX-512 F/BW/VL/DQ/CD
  avx512_bf16 = 2,  // + AVX512_BF16 (bf16 dot products and conversions in hardware)
  amx = 3,          // + AMX-BF16 tiles (oneDNN's GEMMs and vitpipe's tile attention)
};
constexpr int kCpuLevelCount = 4;

const char* cpu_level_name(CpuLevel level);
// "avx2" | "avx512" | "avx512_bf16" | "amx"; false for anything else.
bool parse_cpu_level(const std::string& name, CpuLevel* out);

CpuLevel best_cpu_level();                    // the highest level this CPU (and operating system) supports
bool cpu_level_compiled(CpuLevel level);      // whether this build has kernels for it (see CMakeLists.txt)
std::vector<CpuLevel> runnable_cpu_levels();  // supported by the CPU and compiled, lowest first

// The level this process runs: best_cpu_level() capped by VITPIPE_CPU (an error names a bad value). The first call
// also caps oneDNN's ISA to the same level when VITPIPE_CPU is set and ONEDNN_MAX_CPU_ISA is not; it must happen
// before oneDNN creates its first primitive (MatmulCache's constructor calls it).
CpuLevel selected_cpu_level();

// bf16 GEMMs in hardware at this level; below it, bf16 runs as fp32 GEMMs on bf16-rounded operands.
inline bool has_native_bf16(CpuLevel level) { return level >= CpuLevel::avx512_bf16; }

std::string onednn_isa_name();  // the ISA oneDNN dispatches to in this process, e.g. "avx2"

}  // namespace vitpipe::cpu
