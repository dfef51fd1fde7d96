// fp32 flash-attention backward from the forward's output and log-sum-exp, without atomics (two runs, the same
// bits): one kernel gives each query row a warp (dQ_i = scale sum_j dS_ij k_j, and D_i = dO_i . O_i saved for the
// other kernel), the other gives each key row a warp (dK_j = scale sum_i dS_ij q_i, dV_j = sum_i p_ij dO_i), each
// walking the other side in 32-row blocks staged in shared memory. The arithmetic is flash_attention_math.h's, which
// the CPU tests hold to float64 and to the CPU Backend through the host model of these kernels
// (flash_backward_head, summing in this order; nvcc's fused multiply-adds aside). Not yet launched by anything, and
// nothing here has run on a GPU.
#include <math.h>

#include <cstdint>

#include "backend/cuda/kernels/flash_attention.h"
#include "backend/cuda/kernels/flash_attention_math.h"
#include "backend/cuda/kernels/warp_sum.h"

namespace vitpipe::cuda {
namespace {

constexpr int kRowsPerBlock = 4;  // 4 warps, 128 threads
constexpr int kFeaturesPerLane = kFlashMaxHeadDim / kWarpSize;

// Where one (batch, head)'s rows live in the packed layout.
struct HeadView {
  const float* q;
  const float* k;
  const float* v;
  const float* o;
  const float* d_o;
  int64_t qkv_stride, o_stride;  // elements between tokens
};

__device__ HeadView head_view(const float* qkv, const float* out, const float* grad_out, int64_t b, int64_t h,
                              int64_t tokens, int64_t heads, int64_t head_dim) {
  const int64_t hidden = heads * head_dim;
  const float* q = qkv + b * tokens * 3 * hidden + h * head_dim;
  const int64_t o_offset = b * tokens * hidden + h * head_dim;
  return {q, q + hidden, q + 2 * hidden, out + o_offset, grad_out + o_offset, 3 * hidden, hidden};
}

// dQ (written into grad_qkv's query part) and D = rowsum(dO * O) per query row.
__global__ void flash_attention_backward_query_f32(const float* __restrict__ qkv, const float* __restrict__ out,
                                                   const float* __restrict__ grad_out, const float* __restrict__ lse,
                                                   float* __restrict__ row_dot, float* __restrict__ grad_qkv,
                                                   int64_t tokens, int64_t heads, int64_t head_dim, float scale) {
  __shared__ float keys[kFlashKeyBlock][kFlashSharedRow];
  __shared__ float values[kFlashKeyBlock][kFlashSharedRow];
  __shared__ float rows_q[kRowsPerBlock][kFlashSharedRow];
  __shared__ float rows_do[kRowsPerBlock][kFlashSharedRow];

  const int lane = static_cast<int>(threadIdx.x % kWarpSize);
  const int warp = static_cast<int>(threadIdx.x / kWarpSize);
  const int64_t b = blockIdx.z, h = blockIdx.y;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + warp;
  const bool active = i < tokens;
  const HeadView view = head_view(qkv, out, grad_out, b, h, tokens, heads, head_dim);
  const int64_t stat = (b * heads + h) * tokens + i;

  float partial = 0.0f;
  for (int64_t e = lane; e < head_dim; e += kWarpSize) {
    rows_q[warp][e] = active ? view.q[i * view.qkv_stride + e] : 0.0f;
    const float d_o = active ? view.d_o[i * view.o_stride + e] : 0.0f;
    rows_do[warp][e] = d_o;
    partial += d_o * (active ? view.o[i * view.o_stride + e] : 0.0f);
  }
  const float dot = warp_sum(partial);  // D_i
  const float row_lse = active ? lse[stat] : 0.0f;
  if (active && lane == 0) row_dot[stat] = dot;

  float acc[kFeaturesPerLane] = {};
  for (int64_t j0 = 0; j0 < tokens; j0 += kFlashKeyBlock) {
    const int n = static_cast<int>(tokens - j0 < kFlashKeyBlock ? tokens - j0 : kFlashKeyBlock);
    __syncthreads();
    for (int64_t x = threadIdx.x; x < n * head_dim; x += blockDim.x) {
      const int64_t j = x / head_dim, e = x % head_dim;
      keys[j][e] = view.k[(j0 + j) * view.qkv_stride + e];
      values[j][e] = view.v[(j0 + j) * view.qkv_stride + e];
    }
    __syncthreads();
    float ds = 0.0f;
    if (lane < n) {
      float s = 0.0f, dp = 0.0f;
      for (int64_t e = 0; e < head_dim; ++e) {
        s += rows_q[warp][e] * keys[lane][e];
        dp += rows_do[warp][e] * values[lane][e];
      }
      ds = flash_score_gradient(flash_probability(s * scale, row_lse), dp, dot) * scale;
    }
    for (int r = 0; r < kFeaturesPerLane; ++r) {
      const int64_t e = lane + r * kWarpSize;
      for (int j = 0; j < n; ++j) {
        const float d = __shfl_sync(0xffffffffu, ds, j);
        if (e < head_dim) acc[r] += d * keys[j][e];
      }
    }
  }
  if (!active) return;
  float* dq = grad_qkv + (b * tokens + i) * view.qkv_stride + h * head_dim;
  for (int r = 0; r < kFeaturesPerLane; ++r) {
    const int64_t e = lane + r * kWarpSize;
    if (e < head_dim) dq[e] = acc[r];
  }
}

// dK and dV (written into grad_qkv's key and value parts) per key row, from the query kernel's D.
__global__ void flash_attention_backward_key_f32(const float* __restrict__ qkv, const float* __restrict__ out,
                                                 const float* __restrict__ grad_out, const float* __restrict__ lse,
                                                 const float* __restrict__ row_dot, float* __restrict__ grad_qkv,
                                                 int64_t tokens, int64_t heads, int64_t head_dim, float scale) {
  __shared__ float queries[kFlashKeyBlock][kFlashSharedRow];
  __shared__ float grads[kFlashKeyBlock][kFlashSharedRow];
  __shared__ float rows_k[kRowsPerBlock][kFlashSharedRow];
  __shared__ float rows_v[kRowsPerBlock][kFlashSharedRow];

  const int lane = static_cast<int>(threadIdx.x % kWarpSize);
  const int warp = static_cast<int>(threadIdx.x / kWarpSize);
  const int64_t b = blockIdx.z, h = blockIdx.y;
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + warp;
  const bool active = j < tokens;
  const HeadView view = head_view(qkv, out, grad_out, b, h, tokens, heads, head_dim);
  const int64_t stats = (b * heads + h) * tokens;

  for (int64_t e = lane; e < head_dim; e += kWarpSize) {
    rows_k[warp][e] = active ? view.k[j * view.qkv_stride + e] : 0.0f;
    rows_v[warp][e] = active ? view.v[j * view.qkv_stride + e] : 0.0f;
  }
  float dk[kFeaturesPerLane] = {}, dv[kFeaturesPerLane] = {};
  for (int64_t i0 = 0; i0 < tokens; i0 += kFlashKeyBlock) {
    const int n = static_cast<int>(tokens - i0 < kFlashKeyBlock ? tokens - i0 : kFlashKeyBlock);
    __syncthreads();
    for (int64_t x = threadIdx.x; x < n * head_dim; x += blockDim.x) {
      const int64_t i = x / head_dim, e = x % head_dim;
      queries[i][e] = view.q[(i0 + i) * view.qkv_stride + e];
      grads[i][e] = view.d_o[(i0 + i) * view.o_stride + e];
    }
    __syncthreads();
    float p = 0.0f, ds = 0.0f;
    if (lane < n) {
      float s = 0.0f, dp = 0.0f;
      for (int64_t e = 0; e < head_dim; ++e) {
        s += queries[lane][e] * rows_k[warp][e];
        dp += grads[lane][e] * rows_v[warp][e];
      }
      p = flash_probability(s * scale, lse[stats + i0 + lane]);
      ds = flash_score_gradient(p, dp, row_dot[stats + i0 + lane]) * scale;
    }
    for (int r = 0; r < kFeaturesPerLane; ++r) {
      const int64_t e = lane + r * kWarpSize;
      for (int i = 0; i < n; ++i) {
        const float pi = __shfl_sync(0xffffffffu, p, i), dsi = __shfl_sync(0xffffffffu, ds, i);
        if (e < head_dim) {
          dv[r] += pi * grads[i][e];
          dk[r] += dsi * queries[i][e];
        }
      }
    }
  }
  if (!active) return;
  float* g = grad_qkv + (b * tokens + j) * view.qkv_stride + h * head_dim;
  const int64_t hidden = heads * head_dim;
  for (int r = 0; r < kFeaturesPerLane; ++r) {
    const int64_t e = lane + r * kWarpSize;
    if (e < head_dim) {
      g[hidden + e] = dk[r];
      g[2 * hidden + e] = dv[r];
    }
  }
}

}  // namespace

cudaError_t launch_flash_attention_backward_f32(const float* qkv, const float* out, const float* grad_out,
                                                const float* lse, float* row_dot, float* grad_qkv, int64_t batch,
                                                int64_t tokens, int64_t heads, int64_t head_dim, cudaStream_t stream) {
  if (head_dim <= 0 || head_dim > kFlashMaxHeadDim || heads <= 0 || heads > 65535 || batch > 65535) {
    return cudaErrorInvalidValue;
  }
  if (batch == 0 || tokens == 0) return cudaSuccess;
  const dim3 grid(static_cast<unsigned int>((tokens + kRowsPerBlock - 1) / kRowsPerBlock),
                  static_cast<unsigned int>(heads), static_cast<unsigned int>(batch));
  const float scale = 1.0f / sqrtf(static_cast<float>(head_dim));
  // The key kernel reads the query kernel's D: stream order serialises them.
  flash_attention_backward_query_f32<<<grid, kRowsPerBlock * kWarpSize, 0, stream>>>(
      qkv, out, grad_out, lse, row_dot, grad_qkv, tokens, heads, head_dim, scale);
  const cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) return status;
  flash_attention_backward_key_f32<<<grid, kRowsPerBlock * kWarpSize, 0, stream>>>(
      qkv, out, grad_out, lse, row_dot, grad_qkv, tokens, heads, head_dim, scale);
  return cudaGetLastError();
}

}  // namespace vitpipe::cuda
