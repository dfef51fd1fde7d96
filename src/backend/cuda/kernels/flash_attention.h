// Launchers of the fp32 flash-attention kernels (kernels/flash_attention.cu, flash_attention_backward.cu) on the
// Backend's packed layout: qkv [B, T, 3D] f32, out [B, T, D] f32, lse [B, H, T] f32 (natural-log log-sum-exp of the
// scaled scores, as cuDNN's SDPA stats). Asynchronous on `stream`. cuDNN's fused attention runs no fp32: this is
// vitpipe's own.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace vitpipe::cuda {

// cudaErrorInvalidValue for a head dimension past kFlashMaxHeadDim (128).
cudaError_t launch_flash_attention_forward_f32(const float* qkv, float* out, float* lse, int64_t batch, int64_t tokens,
                                               int64_t heads, int64_t head_dim, cudaStream_t stream);

// grad_qkv [B, T, 3D] f32 overwritten (dQ, dK, dV) from grad_out [B, T, D], the forward's out and lse; `row_dot`
// [B, H, T] f32 is scratch (D = rowsum(dO * O)). No atomics. grad_qkv's bias column sums are not here.
cudaError_t launch_flash_attention_backward_f32(const float* qkv, const float* out, const float* grad_out,
                                                const float* lse, float* row_dot, float* grad_qkv, int64_t batch,
                                                int64_t tokens, int64_t heads, int64_t head_dim, cudaStream_t stream);

}  // namespace vitpipe::cuda
