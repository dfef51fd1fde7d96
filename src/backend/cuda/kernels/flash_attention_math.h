// The fp32 flash-attention arithmetic (FlashAttention-2's online softmax) as the CUDA kernel computes it
// (kernels/flash_attention.cu): per element and per row, shared by host and device, plus host models of the kernel's
// rows in its exact order (key blocks of kFlashKeyBlock, block sums in the warp's butterfly) that the CPU suite holds
// to the float64 reference and to the CPU Backend (tests/cuda/test_flash_attention_math.cpp).
//
// Forward, per query row i over key blocks: s_j = scale * q_i . k_j; m' = max(m, max_j s_j); c = exp(m - m') (0 on
// the first block); p_j = exp(s_j - m'); l = l c + sum_j p_j; o = o c + sum_j p_j v_j; m = m'. At the end
// out_i = o / l and lse_i = m + log l (natural log of the scaled scores' exp-sum: cuDNN's stats).
// Backward from lse: p_ij = exp(s_ij - lse_i); D_i = dO_i . O_i; dP_ij = dO_i . v_j; dS_ij = p_ij (dP_ij - D_i);
// dQ_i = scale sum_j dS_ij k_j; dK_j = scale sum_i dS_ij q_i; dV_j = sum_i p_ij dO_i.
#pragma once

#include <math.h>

#include <cstdint>

#include "backend/cuda/kernels/host_device.h"
#include "backend/cuda/kernels/warp_sum.h"

namespace vitpipe::cuda {

constexpr int kFlashKeyBlock = 32;     // keys per block: one per lane of a warp
constexpr int kFlashMaxHeadDim = 128;  // features per head the kernel holds in registers (4 per lane)
// A row of keys, values, queries or gradients in shared memory: one float longer than a head, so that the 32 lanes
// reading feature e of 32 different rows hit 32 different banks (at 128 floats a row they all hit one).
constexpr int kFlashSharedRow = kFlashMaxHeadDim + 1;

// A query row's running statistics: the largest scaled score so far and the exp-sum relative to it.
struct OnlineSoftmaxRow {
  float max;
  float sum;
};

VITPIPE_HOST_DEVICE OnlineSoftmaxRow online_softmax_start() { return {-INFINITY, 0.0f}; }

// exp(m_old - m_new), the factor the sum and the output accumulator are rescaled by; 0 before the first block
// (exp(-inf - x) would be 0 too, but -inf - -inf is NaN when a whole block is -inf).
VITPIPE_HOST_DEVICE float online_softmax_rescale(float old_max, float new_max) {
  return old_max == -INFINITY ? 0.0f : expf(old_max - new_max);
}

// p = exp(s - m): a score's weight relative to the running max (never above 1).
VITPIPE_HOST_DEVICE float online_softmax_weight(float scaled_score, float max) { return expf(scaled_score - max); }

// Folds one block, given its largest scaled score and, later, the sum of its weights relative to the new max.
VITPIPE_HOST_DEVICE float online_softmax_new_max(const OnlineSoftmaxRow& row, float block_max) {
  return fmaxf(row.max, block_max);
}
VITPIPE_HOST_DEVICE OnlineSoftmaxRow online_softmax_fold(const OnlineSoftmaxRow& row, float new_max, float rescale,
                                                         float block_weight_sum) {
  return {new_max, row.sum * rescale + block_weight_sum};
}

// One output feature's accumulator across a block: o c + sum_j p_j v_j, the sum added in key order.
VITPIPE_HOST_DEVICE float flash_output_rescaled(float accumulator, float rescale) { return accumulator * rescale; }

VITPIPE_HOST_DEVICE float flash_output_final(float accumulator, const OnlineSoftmaxRow& row) {
  return accumulator / row.sum;
}

VITPIPE_HOST_DEVICE float flash_log_sum_exp(const OnlineSoftmaxRow& row) { return row.max + logf(row.sum); }

// Backward: the probability recomputed from the saved log-sum-exp, and the score gradient (the scale applied once,
// on dQ and dK).
VITPIPE_HOST_DEVICE float flash_probability(float scaled_score, float lse) { return expf(scaled_score - lse); }
VITPIPE_HOST_DEVICE float flash_score_gradient(float probability, float dp, float row_dot) {
  return probability * (dp - row_dot);
}

#ifndef __CUDACC__
// The kernel's forward row on the host, in its order: per key block, lane j's score (a left-to-right dot product),
// the block max, the weights, their sum in the warp's butterfly, then each feature's accumulator over the block's
// keys in order. q [d]; k, v rows `ld` apart; out [d].
inline float flash_forward_row(const float* q, const float* k, const float* v, int64_t keys, int64_t d, int64_t ld,
                               float scale, float* out) {
  OnlineSoftmaxRow row = online_softmax_start();
  float acc[kFlashMaxHeadDim] = {};
  float scores[kFlashKeyBlock], weights[kFlashKeyBlock];
  for (int64_t j0 = 0; j0 < keys; j0 += kFlashKeyBlock) {
    const int n = static_cast<int>(keys - j0 < kFlashKeyBlock ? keys - j0 : kFlashKeyBlock);
    float block_max = -INFINITY;
    for (int j = 0; j < n; ++j) {
      float dot = 0.0f;
      for (int64_t e = 0; e < d; ++e) dot += q[e] * k[(j0 + j) * ld + e];
      scores[j] = dot * scale;
      block_max = fmaxf(block_max, scores[j]);
    }
    const float new_max = online_softmax_new_max(row, block_max);
    const float rescale = online_softmax_rescale(row.max, new_max);
    for (int j = 0; j < n; ++j) weights[j] = online_softmax_weight(scores[j], new_max);
    const float block_sum = warp_sum_emulated([&](int64_t j) { return weights[j]; }, n);
    row = online_softmax_fold(row, new_max, rescale, block_sum);
    for (int64_t e = 0; e < d; ++e) {
      float a = flash_output_rescaled(acc[e], rescale);
      for (int j = 0; j < n; ++j) a += weights[j] * v[(j0 + j) * ld + e];
      acc[e] = a;
    }
  }
  for (int64_t e = 0; e < d; ++e) out[e] = flash_output_final(acc[e], row);
  return flash_log_sum_exp(row);
}

// One head's backward on the host as kernels/flash_attention_backward.cu computes it, from the forward's output and
// log-sum-exp, with the helpers above: q, k, v rows
// `ld` apart (the packed layout), o and d_o rows `ld_o` apart; dq, dk, dv [T, d] contiguous, overwritten.
inline void flash_backward_head(const float* q, const float* k, const float* v, const float* o, const float* d_o,
                                const float* lse, int64_t tokens, int64_t d, int64_t ld, int64_t ld_o, float scale,
                                float* dq, float* dk, float* dv) {
  for (int64_t x = 0; x < tokens * d; ++x) dq[x] = dk[x] = dv[x] = 0.0f;
  for (int64_t i = 0; i < tokens; ++i) {
    // D_i in the warp's butterfly order, as the kernel sums it; every other sum below runs in the kernel's order
    // too (dot products over features left to right, dQ over keys and dK, dV over queries in ascending order).
    const float row_dot = warp_sum_emulated([&](int64_t e) { return d_o[i * ld_o + e] * o[i * ld_o + e]; }, d);
    for (int64_t j = 0; j < tokens; ++j) {
      float s = 0.0f, dp = 0.0f;
      for (int64_t e = 0; e < d; ++e) {
        s += q[i * ld + e] * k[j * ld + e];
        dp += d_o[i * ld_o + e] * v[j * ld + e];
      }
      const float p = flash_probability(s * scale, lse[i]);
      const float ds = flash_score_gradient(p, dp, row_dot) * scale;
      for (int64_t e = 0; e < d; ++e) {
        dv[j * d + e] += p * d_o[i * ld_o + e];
        dq[i * d + e] += ds * k[j * ld + e];
        dk[j * d + e] += ds * q[i * ld + e];
      }
    }
  }
}
#endif

}  // namespace vitpipe::cuda
