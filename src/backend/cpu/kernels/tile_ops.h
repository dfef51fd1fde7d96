// The matrix-tile unit the tile attention kernels (attention_tiles.cpp) are written against, in two forms:
// AmxTiles, Intel AMX itself (only in the amx level's copy of the kernels), and EmulatedTiles, the same operations in
// plain C++ with AMX's documented semantics, so the kernels' layouts (K^T and V in the VNNI pair layout, padded
// tails, transposed operands) are proven on every CPU: VITPIPE_ATTENTION_TILES=emulated runs them there.
//
// Every tile is configured as AMX's largest: 16 rows of 64 bytes (16 x 16 f32 results; 16 x 32 bf16 operands).
// dot<c, a, b>() is TDPBF16PS: C[m][n] += sum_k A[m][2k] * B[k][2n] + A[m][2k + 1] * B[k][2n + 1] (bf16 pairs
// multiplied into f32), so B holds two consecutive rows of the logical [32, 16] operand interleaved in each of its
// 16 rows. Tile numbers are template arguments because AMX encodes them in the instruction.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "tensor/dtype.h"

namespace vitpipe::cpu::VITPIPE_CPU_LEVEL_NS {

inline constexpr int kTileRows = 16;   // rows of every tile
inline constexpr int kTileBytes = 64;  // bytes per row: 16 f32 or 32 bf16

struct EmulatedTiles {
  alignas(64) unsigned char tile[8][kTileRows * kTileBytes];

  void configure() {}
  void release() {}
  template <int t>
  void zero() {
    std::memset(tile[t], 0, sizeof tile[t]);
  }
  template <int t>
  void load(const void* rows, int64_t stride_bytes) {
    for (int r = 0; r < kTileRows; ++r) {
      std::memcpy(tile[t] + r * kTileBytes, static_cast<const unsigned char*>(rows) + r * stride_bytes, kTileBytes);
    }
  }
  template <int t>
  void store(void* rows, int64_t stride_bytes) const {
    for (int r = 0; r < kTileRows; ++r) {
      std::memcpy(static_cast<unsigned char*>(rows) + r * stride_bytes, tile[t] + r * kTileBytes, kTileBytes);
    }
  }
  template <int c, int a, int b>
  void dot() {
    static_assert(c != a && c != b, "TDPBF16PS needs a result tile distinct from its operands");
    float result[kTileRows * 16];
    std::memcpy(result, tile[c], sizeof result);
    uint16_t left[kTileRows * 32], right[kTileRows * 32];
    std::memcpy(left, tile[a], sizeof left);
    std::memcpy(right, tile[b], sizeof right);
    for (int m = 0; m < kTileRows; ++m) {
      for (int n = 0; n < 16; ++n) {
        float sum = result[m * 16 + n];
        for (int k = 0; k < 16; ++k) {
          sum += bf16_to_float(left[m * 32 + 2 * k]) * bf16_to_float(right[k * 32 + 2 * n]);
          sum += bf16_to_float(left[m * 32 + 2 * k + 1]) * bf16_to_float(right[k * 32 + 2 * n + 1]);
        }
        result[m * 16 + n] = sum;
      }
    }
    std::memcpy(tile[c], result, sizeof result);
  }
};

// No products at all (stores write zeros): VITPIPE_ATTENTION_TILES=no-products times what the kernels do besides the
// tile products (packing, softmax, writing gradients) on a CPU without AMX, where that is what AMX leaves. Its
// results are wrong by design.
struct NoProductTiles {
  void configure() {}
  void release() {}
  template <int t>
  void zero() {}
  template <int t>
  void load(const void*, int64_t) {}
  template <int t>
  void store(void* rows, int64_t stride_bytes) const {
    for (int r = 0; r < kTileRows; ++r)
      std::memset(static_cast<unsigned char*>(rows) + r * stride_bytes, 0, kTileBytes);
  }
  template <int c, int a, int b>
  void dot() {}
};

#if VITPIPE_LEVEL_AMX
// The process asked Linux for the tile state before any backend of this level exists (cpu_features.cpp,
// request_amx_tile_state); the configuration is loaded at every kernel entry because oneDNN loads its own on the same
// threads between our calls.
struct AmxTiles {
  // LDTILECFG's 64-byte operand (palette 1: colsb in bytes, rows per tile).
  struct Config {
    uint8_t palette = 1, start_row = 0, reserved[14] = {};
    uint16_t colsb[16] = {};
    uint8_t rows[16] = {};
  };
  static_assert(sizeof(Config) == 64 && offsetof(Config, colsb) == 16 && offsetof(Config, rows) == 48);

  void configure() {
    alignas(64) Config config;
    for (int t = 0; t < 8; ++t) {
      config.colsb[t] = kTileBytes;
      config.rows[t] = kTileRows;
    }
    // Not GCC 12's _tile_loadconfig: its asm names only the first 8 bytes as read, so the compiler may drop the
    // colsb and rows stores as dead (every tile unconfigured, SIGILL at the first tile instruction). Here the operand
    // is the whole 64-byte struct.
    __asm__ volatile("ldtilecfg %0" ::"m"(config) : "memory");
  }
  void release() { _tile_release(); }
  // GCC's _tile_* macros paste their tile number into the instruction text, which a template argument cannot be;
  // these are the same instructions with the number as an immediate operand (%c), and a memory clobber so that the
  // compiler orders them with the plain loads and stores around them.
  template <int t>
  void zero() {
    __asm__ volatile("tilezero %%tmm%c0" ::"i"(t));
  }
  template <int t>
  void load(const void* rows, int64_t stride_bytes) {
    __asm__ volatile("tileloadd (%0,%1,1), %%tmm%c2" ::"r"(rows), "r"(stride_bytes), "i"(t) : "memory");
  }
  template <int t>
  void store(void* rows, int64_t stride_bytes) const {
    __asm__ volatile("tilestored %%tmm%c2, (%0,%1,1)" ::"r"(rows), "r"(stride_bytes), "i"(t) : "memory");
  }
  template <int c, int a, int b>
  void dot() {
    static_assert(c != a && c != b, "TDPBF16PS needs a result tile distinct from its operands");
    __asm__ volatile("tdpbf16ps %%tmm%c2, %%tmm%c1, %%tmm%c0" ::"i"(c), "i"(a), "i"(b));
  }
};
#endif

}  // namespace vitpipe::cpu::VITPIPE_CPU_LEVEL_NS
