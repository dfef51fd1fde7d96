// Row sums the way one warp computes them: lane l adds elements l, l + 32, l + 64, ... in order, then the 32 partial
// sums meet in the xor butterfly of __shfl_xor_sync (offsets 16, 8, 4, 2, 1), after which every lane holds the same
// total. The order is fixed, so a row sums to the same bits on every run (no atomics). On the host the 32 lanes are
// an array and the butterfly is emulated step by step: a + b equals b + a in IEEE arithmetic, so the emulation adds
// in exactly the device's order.
#pragma once

#include <cstdint>

#include "backend/cuda/kernels/host_device.h"

namespace vitpipe::cuda {

constexpr int kWarpSize = 32;

// Lane `lane`'s partial sum of value(j) over its strided share of [0, count).
template <class Value>
VITPIPE_HOST_DEVICE float lane_partial_sum(const Value& value, int lane, int64_t count) {
  float sum = 0.0f;
  for (int64_t j = lane; j < count; j += kWarpSize) sum += value(j);
  return sum;
}

#ifdef __CUDACC__
// The butterfly on the device: every lane returns the warp's total.
__device__ __forceinline__ float warp_sum(float partial) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) partial += __shfl_xor_sync(0xffffffffu, partial, offset);
  return partial;
}
#endif

#ifndef __CUDACC__
// The same butterfly on the host, over the 32 lanes' partial sums of value(j) for j in [0, count). Host only: nvcc
// refuses host lambdas inside the __host__ __device__ lane_partial_sum.
template <class Value>
inline float warp_sum_emulated(const Value& value, int64_t count) {
  float lanes[kWarpSize];
  for (int lane = 0; lane < kWarpSize; ++lane) lanes[lane] = lane_partial_sum(value, lane, count);
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    float next[kWarpSize];
    for (int lane = 0; lane < kWarpSize; ++lane) next[lane] = lanes[lane] + lanes[lane ^ offset];
    for (int lane = 0; lane < kWarpSize; ++lane) lanes[lane] = next[lane];
  }
  return lanes[0];
}
#endif

}  // namespace vitpipe::cuda
