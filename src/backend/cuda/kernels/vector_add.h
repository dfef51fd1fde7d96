// sum += addend over f32 vectors, asynchronous on `stream`: the VectorAdd of calls/linear_gemm_calls.h, which adds
// the bias gradient cuBLASLt's _BGRADB epilogue wrote into scratch (that epilogue overwrites; gradients add).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace vitpipe::cuda {

cudaError_t launch_vector_add(const float* addend, float* sum, int64_t count, cudaStream_t stream);

}  // namespace vitpipe::cuda
