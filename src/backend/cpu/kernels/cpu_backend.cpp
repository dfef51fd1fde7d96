// This level's entry point: the factory (backend/cpu/cpu_backend_factory.cpp) calls it when the level is chosen.
#include "backend/cpu/kernels/cpu_backend.h"

#include "backend/cpu/kernels/attention_tiles.h"

// Last: everything below is compiled for this copy's CPU level (level_target.h).
#include "backend/cpu/kernels/level_target.h"

namespace vitpipe::cpu::VITPIPE_CPU_LEVEL_NS {

std::string CpuBackend::name() const {
  const TileUnit tiles = tile_unit();
  const char* attention = tiles == TileUnit::amx           ? ", AMX tile attention"
                          : tiles == TileUnit::emulated    ? ", emulated tile attention"
                          : tiles == TileUnit::no_products ? ", tile attention without its products (timing only)"
                                                           : "";
  return std::string("cpu ") + cpu_level_name(level_) + " (oneDNN + OpenMP" + attention + ")";
}

std::unique_ptr<Backend> make_backend(CpuLevel level) { return std::make_unique<CpuBackend>(level); }

}  // namespace vitpipe::cpu::VITPIPE_CPU_LEVEL_NS
