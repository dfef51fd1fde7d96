// GELU forward and backward over a contiguous f32 tensor, one element per thread (grid-stride). The arithmetic is
// kernels/gelu_math.h, shared with the CPU tests. Not yet called: the CUDA Backend that launches these is a later
// part of issue 24; the module compiles them now so that sm_80, sm_90 and the PTX build warning-free in CI.
#include <cstdint>

#include "backend/cuda/kernels/gelu.h"
#include "backend/cuda/kernels/gelu_math.h"

namespace vitpipe::cuda {
namespace {

__global__ void gelu_forward_f32(const float* __restrict__ in, float* __restrict__ out, int64_t count) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = gelu(in[i]);
  }
}

__global__ void gelu_backward_f32(const float* __restrict__ grad_out, const float* __restrict__ in,
                                  float* __restrict__ grad_in, int64_t count) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    grad_in[i] = grad_out[i] * gelu_derivative(in[i]);
  }
}

// Enough blocks to fill an H200 (132 SMs) several times; the grid-stride loop covers the rest.
unsigned int grid_for(int64_t count, unsigned int block) {
  const int64_t blocks = (count + block - 1) / block;
  return static_cast<unsigned int>(blocks < 4096 ? (blocks > 0 ? blocks : 1) : 4096);
}

}  // namespace

cudaError_t launch_gelu_forward(const float* in, float* out, int64_t count, cudaStream_t stream) {
  constexpr unsigned int kBlock = 256;
  gelu_forward_f32<<<grid_for(count, kBlock), kBlock, 0, stream>>>(in, out, count);
  return cudaGetLastError();
}

cudaError_t launch_gelu_backward(const float* grad_out, const float* in, float* grad_in, int64_t count,
                                 cudaStream_t stream) {
  constexpr unsigned int kBlock = 256;
  gelu_backward_f32<<<grid_for(count, kBlock), kBlock, 0, stream>>>(grad_out, in, grad_in, count);
  return cudaGetLastError();
}

}  // namespace vitpipe::cuda
