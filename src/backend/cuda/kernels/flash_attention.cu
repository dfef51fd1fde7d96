// fp32 flash-attention forward: one warp per query row, key/value blocks of kFlashKeyBlock (one key per lane) staged
// in shared memory, the online softmax of flash_attention_math.h (which the CPU tests check in this kernel's order:
// lane j's score as a left-to-right dot product, the block's weights summed in the warp's butterfly, each feature's
// accumulator over the block's keys in order). Each lane keeps up to 4 of the row's features (d <= 128) in
// registers. Not yet launched by anything: the CUDA Backend is a later part of issue 24, and nothing here has run on
// a GPU.
#include <math.h>

#include <cstdint>

#include "backend/cuda/kernels/flash_attention.h"
#include "backend/cuda/kernels/flash_attention_math.h"
#include "backend/cuda/kernels/warp_sum.h"

namespace vitpipe::cuda {
namespace {

constexpr int kRowsPerBlock = 4;  // 4 warps, 128 threads
constexpr int kFeaturesPerLane = kFlashMaxHeadDim / kWarpSize;

__device__ __forceinline__ float warp_max(float value) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    value = fmaxf(value, __shfl_xor_sync(0xffffffffu, value, offset));
  }
  return value;
}

__global__ void flash_attention_forward_f32(const float* __restrict__ qkv, float* __restrict__ out,
                                            float* __restrict__ lse, int64_t tokens, int64_t heads, int64_t head_dim,
                                            float scale) {
  __shared__ float keys[kFlashKeyBlock][kFlashSharedRow];
  __shared__ float values[kFlashKeyBlock][kFlashSharedRow];
  __shared__ float queries[kRowsPerBlock][kFlashSharedRow];

  const int lane = static_cast<int>(threadIdx.x % kWarpSize);
  const int warp = static_cast<int>(threadIdx.x / kWarpSize);
  const int64_t b = blockIdx.z, h = blockIdx.y;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + warp;
  const bool active = row < tokens;  // idle warps still meet every __syncthreads
  const int64_t hidden = heads * head_dim, stride = 3 * hidden;
  const float* q_base = qkv + b * tokens * stride + h * head_dim;
  const float* k_base = q_base + hidden;
  const float* v_base = q_base + 2 * hidden;

  for (int64_t e = lane; e < head_dim; e += kWarpSize) queries[warp][e] = active ? q_base[row * stride + e] : 0.0f;

  OnlineSoftmaxRow state = online_softmax_start();
  float acc[kFeaturesPerLane] = {};
  for (int64_t j0 = 0; j0 < tokens; j0 += kFlashKeyBlock) {
    const int n = static_cast<int>(tokens - j0 < kFlashKeyBlock ? tokens - j0 : kFlashKeyBlock);
    __syncthreads();  // the previous block's keys and values are no longer read
    for (int64_t x = threadIdx.x; x < n * head_dim; x += blockDim.x) {
      const int64_t j = x / head_dim, e = x % head_dim;
      keys[j][e] = k_base[(j0 + j) * stride + e];
      values[j][e] = v_base[(j0 + j) * stride + e];
    }
    __syncthreads();

    float score = -INFINITY;
    if (lane < n) {
      float dot = 0.0f;
      for (int64_t e = 0; e < head_dim; ++e) dot += queries[warp][e] * keys[lane][e];
      score = dot * scale;
    }
    const float new_max = online_softmax_new_max(state, warp_max(score));
    const float rescale = online_softmax_rescale(state.max, new_max);
    const float weight = lane < n ? online_softmax_weight(score, new_max) : 0.0f;
    state = online_softmax_fold(state, new_max, rescale, warp_sum(weight));
    for (int r = 0; r < kFeaturesPerLane; ++r) {
      const int64_t e = lane + r * kWarpSize;
      float a = flash_output_rescaled(acc[r], rescale);
      for (int j = 0; j < n; ++j) {
        const float p = __shfl_sync(0xffffffffu, weight, j);
        if (e < head_dim) a += p * values[j][e];
      }
      acc[r] = a;
    }
  }
  if (!active) return;
  float* o = out + (b * tokens + row) * hidden + h * head_dim;
  for (int r = 0; r < kFeaturesPerLane; ++r) {
    const int64_t e = lane + r * kWarpSize;
    if (e < head_dim) o[e] = flash_output_final(acc[r], state);
  }
  if (lane == 0) lse[(b * heads + h) * tokens + row] = flash_log_sum_exp(state);
}

}  // namespace

cudaError_t launch_flash_attention_forward_f32(const float* qkv, float* out, float* lse, int64_t batch, int64_t tokens,
                                               int64_t heads, int64_t head_dim, cudaStream_t stream) {
  if (head_dim <= 0 || head_dim > kFlashMaxHeadDim || heads <= 0 || heads > 65535 || batch > 65535) {
    return cudaErrorInvalidValue;
  }
  if (batch == 0 || tokens == 0) return cudaSuccess;
  const dim3 grid(static_cast<unsigned int>((tokens + kRowsPerBlock - 1) / kRowsPerBlock),
                  static_cast<unsigned int>(heads), static_cast<unsigned int>(batch));
  const float scale = 1.0f / sqrtf(static_cast<float>(head_dim));
  flash_attention_forward_f32<<<grid, kRowsPerBlock * kWarpSize, 0, stream>>>(qkv, out, lse, tokens, heads, head_dim,
                                                                              scale);
  return cudaGetLastError();
}

}  // namespace vitpipe::cuda
