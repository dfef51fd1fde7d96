// Launchers of the LayerNorm kernels (kernels/layernorm.cu) on device pointers, asynchronous on `stream`; f32 rows
// [rows, d], statistics [rows].
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace vitpipe::cuda {

cudaError_t launch_layernorm_forward(const float* in, const float* weight, const float* bias, float eps, float* out,
                                     float* mean, float* rstd, int64_t rows, int64_t d, cudaStream_t stream);
// grad_in = d(LayerNorm)/d(in) applied to grad_out (overwrites), from the forward's mean and rstd.
cudaError_t launch_layernorm_backward_input(const float* grad_out, const float* in, const float* weight,
                                            const float* mean, const float* rstd, float* grad_in, int64_t rows,
                                            int64_t d, cudaStream_t stream);

}  // namespace vitpipe::cuda
