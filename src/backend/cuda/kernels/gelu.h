// Launchers of the GELU kernels (kernels/gelu.cu) on device pointers, asynchronous on `stream`.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace vitpipe::cuda {

cudaError_t launch_gelu_forward(const float* in, float* out, int64_t count, cudaStream_t stream);
cudaError_t launch_gelu_backward(const float* grad_out, const float* in, float* grad_in, int64_t count,
                                 cudaStream_t stream);

}  // namespace vitpipe::cuda
