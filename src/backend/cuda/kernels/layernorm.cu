// LayerNorm forward and input gradient, one warp per row: the row sums in the fixed order of warp_sum.h (so two runs
// give the same bits), the per-element arithmetic from layernorm_math.h, which the CPU tests check. Not yet called:
// the CUDA Backend is a later part of issue 24.
#include <cstdint>

#include "backend/cuda/kernels/layernorm.h"
#include "backend/cuda/kernels/layernorm_math.h"
#include "backend/cuda/kernels/warp_sum.h"

namespace vitpipe::cuda {
namespace {

constexpr unsigned int kRowsPerBlock = 8;  // 8 warps, 256 threads

__global__ void layernorm_forward_f32(const float* __restrict__ in, const float* __restrict__ weight,
                                      const float* __restrict__ bias, float eps, float* __restrict__ out,
                                      float* __restrict__ mean_out, float* __restrict__ rstd_out, int64_t rows,
                                      int64_t d) {
  const int lane = static_cast<int>(threadIdx.x % kWarpSize);
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarpSize;
  if (row >= rows) return;  // the whole warp leaves together: no shuffle misses a lane
  const float* x = in + row * d;
  const float mean = warp_sum(lane_partial_sum([x](int64_t j) { return x[j]; }, lane, d)) / static_cast<float>(d);
  const float variance =
      warp_sum(lane_partial_sum([x, mean](int64_t j) { return centered_square(x[j], mean); }, lane, d)) /
      static_cast<float>(d);
  const float rstd = layernorm_rstd(variance, eps);
  for (int64_t j = lane; j < d; j += kWarpSize)
    out[row * d + j] = layernorm_output(x[j], mean, rstd, weight[j], bias[j]);
  if (lane == 0) {
    mean_out[row] = mean;
    rstd_out[row] = rstd;
  }
}

__global__ void layernorm_backward_input_f32(const float* __restrict__ grad_out, const float* __restrict__ in,
                                             const float* __restrict__ weight, const float* __restrict__ mean,
                                             const float* __restrict__ rstd, float* __restrict__ grad_in, int64_t rows,
                                             int64_t d) {
  const int lane = static_cast<int>(threadIdx.x % kWarpSize);
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarpSize;
  if (row >= rows) return;
  const float* x = in + row * d;
  const float* g = grad_out + row * d;
  const float mu = mean[row], rs = rstd[row];
  const auto xhat = [x, mu, rs](int64_t j) { return (x[j] - mu) * rs; };
  const float mean_gw =
      warp_sum(lane_partial_sum([&](int64_t j) { return g[j] * weight[j]; }, lane, d)) / static_cast<float>(d);
  const float mean_gw_xhat =
      warp_sum(lane_partial_sum([&](int64_t j) { return g[j] * weight[j] * xhat(j); }, lane, d)) /
      static_cast<float>(d);
  for (int64_t j = lane; j < d; j += kWarpSize) {
    grad_in[row * d + j] = layernorm_input_gradient(g[j], weight[j], xhat(j), rs, mean_gw, mean_gw_xhat);
  }
}

unsigned int blocks_for(int64_t rows) { return static_cast<unsigned int>((rows + kRowsPerBlock - 1) / kRowsPerBlock); }

}  // namespace

cudaError_t launch_layernorm_forward(const float* in, const float* weight, const float* bias, float eps, float* out,
                                     float* mean, float* rstd, int64_t rows, int64_t d, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  layernorm_forward_f32<<<blocks_for(rows), kRowsPerBlock * kWarpSize, 0, stream>>>(in, weight, bias, eps, out, mean,
                                                                                    rstd, rows, d);
  return cudaGetLastError();
}

cudaError_t launch_layernorm_backward_input(const float* grad_out, const float* in, const float* weight,
                                            const float* mean, const float* rstd, float* grad_in, int64_t rows,
                                            int64_t d, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  layernorm_backward_input_f32<<<blocks_for(rows), kRowsPerBlock * kWarpSize, 0, stream>>>(grad_out, in, weight, mean,
                                                                                           rstd, grad_in, rows, d);
  return cudaGetLastError();
}

}  // namespace vitpipe::cuda
