// Launcher of the bf16 flash-attention backward on tensor cores (kernels/flash_attention_backward_bf16.cu) on the
// Backend's packed layout: qkv [B, T, 3D] bf16, out and grad_out [B, T, D] bf16, lse [B, H, T] f32. The fallback of
// bf16 attention's backward pass where cuDNN refuses it: no f32 copies, mma.sync on bf16 operands. Asynchronous on
// `stream`. NOT YET RUN ON A GPU: compiled for sm_80 and sm_90; its arithmetic and tiling are proven on the CPU through
// the host model (flash_attention_bf16_math.h).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace vitpipe::cuda {

// Whether the kernels can read these tensors: 16-byte aligned (tiles are staged 16 bytes per thread).
inline bool flash_bf16_pointers_aligned(const void* qkv, const void* out, const void* grad_out, const void* grad_qkv) {
  for (const void* p : {qkv, out, grad_out, grad_qkv}) {
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  }
  return true;
}

// grad_qkv [B, T, 3D] bf16 overwritten (dQ, dK, dV) from grad_out, the forward's out and lse; row_dot [B, H, T] f32
// is scratch (D = rowsum(dO * O)). cudaErrorInvalidValue for a head dimension flash_bf16_head_dim_supported refuses
// (the caller then takes the fp32 kernels), pointers flash_bf16_pointers_aligned refuses, or a grid past CUDA's limits.
// No atomics: two runs, the same bits.
cudaError_t launch_flash_attention_backward_bf16(const void* qkv, const void* out, const void* grad_out,
                                                 const float* lse, float* row_dot, void* grad_qkv, int64_t batch,
                                                 int64_t tokens, int64_t heads, int64_t head_dim, cudaStream_t stream);

}  // namespace vitpipe::cuda
