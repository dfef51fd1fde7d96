// Attention on a matrix-tile unit (AMX, or its emulation: tile_ops.h), for bf16 heads of up to kTileHeadTokens tokens
// whose head dimension is a multiple of 64 (ViT, DeiT and DINOv2 at 224 px: 197 or 257 tokens, 64 per head). The
// same contract as CpuBackend::attention_forward / attention_backward (the log-sum-exp of the scaled scores saved,
// the probabilities never written out), each head a whole tile grid: tokens are padded to a multiple of 32 with zero
// rows, and the padded keys get probability 0.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/cpu/kernels/attention_dims.h"
#include "backend/cpu/thread_partials.h"
#include "tensor/dtype.h"

namespace vitpipe::cpu::VITPIPE_CPU_LEVEL_NS {

inline constexpr int64_t kTileHeadTokens = 320;

enum class TileUnit {
  none,         // the tile kernels are off: attention runs on oneDNN's small GEMMs
  amx,          // this is the amx level's copy, on a CPU with AMX (the backend factory makes it only there)
  emulated,     // VITPIPE_ATTENTION_TILES=emulated: the kernels on EmulatedTiles, at any level (tests)
  no_products,  // VITPIPE_ATTENTION_TILES=no-products: everything but the products (timing only; wrong results)
};
// This process's choice, read once: VITPIPE_ATTENTION_TILES=off|emulated|no-products overrides; otherwise amx at the
// amx level.
TileUnit tile_unit();
// Whether `unit` computes one fixed pair of test heads (forward and backward) as the emulated unit does, within bf16's
// tolerance: the amx level runs it once before choosing AMX; tests run it on the emulation and on a wrong unit.
bool tile_unit_agrees_with_emulation(TileUnit unit);
// Whether the tile kernels take an attention of this type and shape.
bool tile_attention_takes(DType type, int64_t tokens, int64_t head_dim);

// Both as CpuBackend's (qkv [B, T, 3D], lse [B, H, T], out / grad_out [B, T, D], grad_qkv [B, T, 3D] of grad_type,
// the q and v bias gradients summed into `bias_partials`' rows when it is given); `scratch` grows as needed.
void tile_attention_forward(TileUnit unit, const AttentionDims& a, const uint16_t* qkv, float* lse, uint16_t* out,
                            std::vector<float>& scratch);
void tile_attention_backward(TileUnit unit, const AttentionDims& a, const uint16_t* grad_out, const uint16_t* qkv,
                             const uint16_t* out, const float* lse, void* grad_qkv, DType grad_type,
                             ThreadPartials* bias_partials, std::vector<float>& scratch);

}  // namespace vitpipe::cpu::VITPIPE_CPU_LEVEL_NS
