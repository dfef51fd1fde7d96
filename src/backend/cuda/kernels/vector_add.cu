// One element per thread; each element is its own sum (no reduction), so the result is the same on every run. Not
// yet launched by anything, and not run on a GPU.
#include "backend/cuda/kernels/vector_add.h"

namespace vitpipe::cuda {
namespace {

constexpr unsigned int kThreads = 256;

__global__ void vector_add_f32(const float* __restrict__ addend, float* __restrict__ sum, int64_t count) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i < count) sum[i] += addend[i];
}

}  // namespace

cudaError_t launch_vector_add(const float* addend, float* sum, int64_t count, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  const unsigned int blocks = static_cast<unsigned int>((count + kThreads - 1) / kThreads);
  vector_add_f32<<<blocks, kThreads, 0, stream>>>(addend, sum, count);
  return cudaGetLastError();
}

}  // namespace vitpipe::cuda
