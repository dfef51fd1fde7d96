// The check the amx level runs once before it lets AMX tiles compute attention (tile_unit_agrees_with_emulation):
// here on the avx2 copy of the tile kernels, which every x86-64-v3 CPU runs. The emulation agrees with itself; a unit
// that leaves the products out, as a wrong tile layout or configuration would mangle them, is refused.
#include <gtest/gtest.h>

// The tile kernels are compiled once per CPU level, each copy in its own namespace: this test calls the avx2 copy.
#define VITPIPE_CPU_LEVEL_NS avx2
#include "backend/cpu/kernels/attention_tiles.h"

namespace vitpipe::cpu::avx2 {
namespace {

TEST(TileSelfCheck, TheEmulationAgreesWithItself) { EXPECT_TRUE(tile_unit_agrees_with_emulation(TileUnit::emulated)); }

TEST(TileSelfCheck, AUnitWithoutItsProductsIsRefused) {
  EXPECT_FALSE(tile_unit_agrees_with_emulation(TileUnit::no_products));
}

}  // namespace
}  // namespace vitpipe::cpu::avx2
