// VITPIPE_HOST_DEVICE marks the arithmetic the CUDA kernels share with the CPU test suite: __host__ __device__ under
// nvcc, plain inline functions under g++ (tests/cuda compile these headers without CUDA).
#pragma once

#ifdef __CUDACC__
#define VITPIPE_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define VITPIPE_HOST_DEVICE inline
#endif
