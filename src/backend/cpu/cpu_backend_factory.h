// The CPU backend at a chosen level. make_cpu_backend() (backend.h) takes selected_cpu_level(); tests and
// benchmarks ask for each runnable level by name.
#pragma once

#include <memory>

#include "backend/backend.h"
#include "backend/cpu/cpu_level.h"

namespace vitpipe::cpu {

// Throws when this CPU cannot run `level` or the build lacks its kernels.
std::unique_ptr<Backend> make_cpu_backend_at(CpuLevel level);
// What runs bf16 attention at `level` (kernels/attention_tiles.h): "amx-tiles" at the amx level, "emulated-tiles" or
// "tiles-without-products" when VITPIPE_ATTENTION_TILES asks, else "onednn" (oneDNN's small GEMMs per tile).
const char* attention_unit_at(CpuLevel level);

}  // namespace vitpipe::cpu
