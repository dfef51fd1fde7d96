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

const char* attention_unit() {
  switch (tile_unit()) {
    case TileUnit::amx:
      return "amx-tiles";
    case TileUnit::emulated:
      return "emulated-tiles";
    case TileUnit::no_products:
      return "tiles-without-products";
    case TileUnit::none:
      break;
  }
  return "onednn";
}

}  // namespace vitpipe::cpu::VITPIPE_CPU_LEVEL_NS
