#include "backend/cpu/cpu_level.h"

#include <cstdlib>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>

#include "backend/cpu/cpu_features.h"
#include "util/error.h"
#include "util/log.h"

namespace vitpipe::cpu {
namespace {

constexpr const char* kNames[kCpuLevelCount] = {"avx2", "avx512", "avx512_bf16", "amx"};

bool supports(const CpuFeatures& f, CpuLevel level) {
  const bool avx2 = f.os_avx && f.avx2 && f.fma && f.f16c;
  const bool avx512 = avx2 && f.os_avx512 && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && f.avx512cd;
  switch (level) {
    case CpuLevel::avx2:
      return avx2;
    case CpuLevel::avx512:
      return avx512;
    case CpuLevel::avx512_bf16:
      return avx512 && f.avx512_bf16;
    case CpuLevel::amx:
      return avx512 && f.avx512_bf16 && f.os_amx && f.amx_tile && f.amx_bf16 && f.amx_permitted;
  }
  return false;
}

dnnl::cpu_isa onednn_isa(CpuLevel level) {
  switch (level) {
    case CpuLevel::avx2:
      return dnnl::cpu_isa::avx2;
    case CpuLevel::avx512:
      return dnnl::cpu_isa::avx512_core;
    case CpuLevel::avx512_bf16:
      return dnnl::cpu_isa::avx512_core_bf16;
    case CpuLevel::amx:
      return dnnl::cpu_isa::avx512_core_amx;
  }
  return dnnl::cpu_isa::all;
}

bool env_set(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0';
}

CpuLevel choose() {
  CpuLevel level = best_cpu_level();
  while (!cpu_level_compiled(level)) level = static_cast<CpuLevel>(static_cast<int>(level) - 1);
  if (!env_set("VITPIPE_CPU")) return level;
  const std::string requested = std::getenv("VITPIPE_CPU");
  CpuLevel cap{};
  if (!parse_cpu_level(requested, &cap)) {
    fail("VITPIPE_CPU: expected avx2, avx512, avx512_bf16 or amx, got \"", requested, "\"");
  }
  if (cap > level) {
    warn("note: VITPIPE_CPU=", requested, " is above what this ", best_cpu_level() == level ? "CPU" : "build",
         " offers; running ", cpu_level_name(level));
  } else {
    level = cap;
  }
  if (!env_set("ONEDNN_MAX_CPU_ISA") && !env_set("DNNL_MAX_CPU_ISA")) {
    try {
      dnnl::set_max_cpu_isa(onednn_isa(level));
    } catch (const dnnl::error& e) {
      warn("note: could not cap oneDNN to ", cpu_level_name(level), " (", e.what(), "); set ONEDNN_MAX_CPU_ISA");
    }
  }
  return level;
}

}  // namespace

const char* cpu_level_name(CpuLevel level) { return kNames[static_cast<int>(level)]; }

bool parse_cpu_level(const std::string& name, CpuLevel* out) {
  for (int i = 0; i < kCpuLevelCount; ++i) {
    if (name == kNames[i]) {
      *out = static_cast<CpuLevel>(i);
      return true;
    }
  }
  return false;
}

CpuLevel best_cpu_level() {
  const CpuFeatures& f = cpu_features();
  CpuLevel best = CpuLevel::avx2;
  for (int i = 1; i < kCpuLevelCount; ++i) {
    if (supports(f, static_cast<CpuLevel>(i))) best = static_cast<CpuLevel>(i);
  }
  return best;
}

bool cpu_level_compiled(CpuLevel level) {
  switch (level) {
    case CpuLevel::avx2:
      return true;
    case CpuLevel::avx512:
#ifdef VITPIPE_HAVE_CPU_LEVEL_avx512
      return true;
#else
      return false;
#endif
    case CpuLevel::avx512_bf16:
#ifdef VITPIPE_HAVE_CPU_LEVEL_avx512_bf16
      return true;
#else
      return false;
#endif
    case CpuLevel::amx:
#ifdef VITPIPE_HAVE_CPU_LEVEL_amx
      return true;
#else
      return false;
#endif
  }
  return false;
}

std::vector<CpuLevel> runnable_cpu_levels() {
  std::vector<CpuLevel> levels;
  const CpuFeatures& f = cpu_features();
  for (int i = 0; i < kCpuLevelCount; ++i) {
    const auto level = static_cast<CpuLevel>(i);
    if (supports(f, level) && cpu_level_compiled(level)) levels.push_back(level);
  }
  return levels;
}

CpuLevel selected_cpu_level() {
  static std::once_flag once;
  static CpuLevel level = CpuLevel::avx2;
  static std::string error;
  std::call_once(once, [] {
    try {
      level = choose();
    } catch (const Error& e) {
      error = e.what();
    }
  });
  if (!error.empty()) throw Error(error);
  return level;
}

std::string onednn_isa_name() {
  selected_cpu_level();  // first: reading oneDNN's ISA fixes it, so any cap must be applied before
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::sse41:
      return "sse41";
    case dnnl::cpu_isa::avx:
      return "avx";
    case dnnl::cpu_isa::avx2:
      return "avx2";
    case dnnl::cpu_isa::avx2_vnni:
      return "avx2_vnni";
    case dnnl::cpu_isa::avx512_core:
      return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni:
      return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx:
      return "avx512_core_amx";
    default:
      return "other";
  }
}

}  // namespace vitpipe::cpu
