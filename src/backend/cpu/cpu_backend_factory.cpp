#include "backend/cpu/cpu_backend_factory.h"

#include "util/error.h"

// Each compiled level's entry point (kernels/cpu_backend.cpp, built once per level).
#define VITPIPE_DECLARE_LEVEL(ns)                        \
  namespace vitpipe::cpu::ns {                           \
  std::unique_ptr<Backend> make_backend(CpuLevel level); \
  const char* attention_unit();                          \
  }
VITPIPE_DECLARE_LEVEL(avx2)
#ifdef VITPIPE_HAVE_CPU_LEVEL_avx512
VITPIPE_DECLARE_LEVEL(avx512)
#endif
#ifdef VITPIPE_HAVE_CPU_LEVEL_avx512_bf16
VITPIPE_DECLARE_LEVEL(avx512_bf16)
#endif
#ifdef VITPIPE_HAVE_CPU_LEVEL_amx
VITPIPE_DECLARE_LEVEL(amx)
#endif

namespace vitpipe::cpu {

std::unique_ptr<Backend> make_cpu_backend_at(CpuLevel level) {
  VP_REQUIRE(level <= best_cpu_level(), "the CPU backend's ", cpu_level_name(level),
             " level needs instructions this CPU lacks (it offers up to ", cpu_level_name(best_cpu_level()), ")");
  VP_REQUIRE(cpu_level_compiled(level), "this build has no ", cpu_level_name(level), " kernels");
  switch (level) {
    case CpuLevel::avx2:
      return avx2::make_backend(level);
#ifdef VITPIPE_HAVE_CPU_LEVEL_avx512
    case CpuLevel::avx512:
      return avx512::make_backend(level);
#endif
#ifdef VITPIPE_HAVE_CPU_LEVEL_avx512_bf16
    case CpuLevel::avx512_bf16:
      return avx512_bf16::make_backend(level);
#endif
#ifdef VITPIPE_HAVE_CPU_LEVEL_amx
    case CpuLevel::amx:
      return amx::make_backend(level);
#endif
    default:
      fail("this build has no ", cpu_level_name(level), " kernels");
  }
}

const char* attention_unit_at(CpuLevel level) {
  VP_REQUIRE(cpu_level_compiled(level), "this build has no ", cpu_level_name(level), " kernels");
  switch (level) {
    case CpuLevel::avx2:
      return avx2::attention_unit();
#ifdef VITPIPE_HAVE_CPU_LEVEL_avx512
    case CpuLevel::avx512:
      return avx512::attention_unit();
#endif
#ifdef VITPIPE_HAVE_CPU_LEVEL_avx512_bf16
    case CpuLevel::avx512_bf16:
      return avx512_bf16::attention_unit();
#endif
#ifdef VITPIPE_HAVE_CPU_LEVEL_amx
    case CpuLevel::amx:
      return amx::attention_unit();
#endif
    default:
      fail("this build has no ", cpu_level_name(level), " kernels");
  }
}

}  // namespace vitpipe::cpu

namespace vitpipe {
namespace {
BackendWrapper& backend_wrapper() {
  static BackendWrapper wrap;
  return wrap;
}
}  // namespace

std::unique_ptr<Backend> make_cpu_backend() {
  std::unique_ptr<Backend> backend = cpu::make_cpu_backend_at(cpu::selected_cpu_level());
  return backend_wrapper() ? backend_wrapper()(std::move(backend)) : std::move(backend);
}

void set_backend_wrapper(BackendWrapper wrap) { backend_wrapper() = std::move(wrap); }

Backend& host_backend() {
  static const std::unique_ptr<Backend> backend =  // never wrapped, never destroyed before exit
      cpu::make_cpu_backend_at(cpu::selected_cpu_level());
  return *backend;
}
}  // namespace vitpipe
