// The per-element and per-row arithmetic of the CUDA Backend's kernels (kernels/backend_kernels.cu), shared by host
// and device: bf16 rounding, SwiGLU, LayerScale, the losses, position resampling, and the deterministic column-sum
// decomposition (fixed chunks of rows, summed in order, then the chunks in order: no atomics). The CPU suite runs
// these very functions against the CPU backend (tests/cuda/test_backend_math.cpp), with the kernels' chunk size.
#pragma once

#include <math.h>
#include <string.h>

#include <cstdint>

#include "backend/cuda/kernels/gelu_math.h"
#include "backend/cuda/kernels/host_device.h"

namespace vitpipe::cuda {

// ---- bf16 storage: round to nearest even (NaN stays NaN), as tensor/dtype.h's float_to_bf16 ----
VITPIPE_HOST_DEVICE uint32_t float_bits(float v) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(v);
#else
  uint32_t b;
  memcpy(&b, &v, sizeof b);
  return b;
#endif
}

VITPIPE_HOST_DEVICE float bits_float(uint32_t b) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(b);
#else
  float v;
  memcpy(&v, &b, sizeof v);
  return v;
#endif
}

VITPIPE_HOST_DEVICE uint16_t round_to_bf16(float value) {
  uint32_t bits = float_bits(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

VITPIPE_HOST_DEVICE float widen_bf16(uint16_t value) { return bits_float(static_cast<uint32_t>(value) << 16); }

// Loads and stores of the two activation types: float, and bf16 held as uint16_t bits.
VITPIPE_HOST_DEVICE float load_value(const float* p, int64_t i) { return p[i]; }
VITPIPE_HOST_DEVICE float load_value(const uint16_t* p, int64_t i) { return widen_bf16(p[i]); }
VITPIPE_HOST_DEVICE void store_value(float* p, int64_t i, float v) { p[i] = v; }
VITPIPE_HOST_DEVICE void store_value(uint16_t* p, int64_t i, float v) { p[i] = round_to_bf16(v); }

// ---- SwiGLU: silu(x1) * x2 and its gradients (exact logistic function) ----
VITPIPE_HOST_DEVICE float logistic(float z) { return 1.0f / (1.0f + expf(-z)); }

VITPIPE_HOST_DEVICE float swiglu_value(float x1, float x2) { return x1 * logistic(x1) * x2; }

// d x1 = g x2 silu'(x1) with silu'(z) = s (1 + z (1 - s)); d x2 = g silu(x1).
VITPIPE_HOST_DEVICE void swiglu_gradients(float g, float x1, float x2, float* d1, float* d2) {
  const float s = logistic(x1);
  *d1 = g * x2 * s * (1.0f + x1 * (1.0f - s));
  *d2 = g * x1 * s;
}

// ---- LayerScale: out = residual + scale * branch ----
VITPIPE_HOST_DEVICE float layer_scale_value(float residual, float scale, float branch) {
  return residual + scale * branch;
}

// ---- LayerNorm's weight gradient term: g * xhat (the bias gradient's is g itself) ----
VITPIPE_HOST_DEVICE float layernorm_weight_gradient_term(float grad_out, float x, float mean, float rstd) {
  return grad_out * ((x - mean) * rstd);
}

// ---- embeddings and tokens: where each output element comes from ----
// patches[i] of [B * Np, C * P * P] (channel, ky, kx order) is images[patchify_source(i)] of [B, C, H, W].
VITPIPE_HOST_DEVICE int64_t patchify_source(int64_t i, int64_t channels, int64_t height, int64_t width, int64_t patch) {
  const int64_t gw = width / patch, np = (height / patch) * gw, k = channels * patch * patch;
  const int64_t col = i % k, row = i / k;
  const int64_t b = row / np, p = row % np, py = p / gw, px = p % gw;
  const int64_t c = col / (patch * patch), ky = (col / patch) % patch, kx = col % patch;
  return ((b * channels + c) * height + py * patch + ky) * width + px * patch + kx;
}

// x[i] of [B, P + Np, D]: prefix[t] (+ pos[t] for t < Q) for t < P, else patch_proj[b Np + p] + pos[Q + p].
template <class T>
VITPIPE_HOST_DEVICE float token_embedding_value(int64_t i, const T* patch_proj, const float* prefix,
                                                int64_t prefix_count, int64_t positioned, const float* pos,
                                                int64_t patches, int64_t d) {
  const int64_t tokens = prefix_count + patches;
  const int64_t c = i % d, t = (i / d) % tokens, b = i / (d * tokens);
  if (t < prefix_count) return t < positioned ? prefix[t * d + c] + pos[t * d + c] : prefix[t * d + c];
  const int64_t p = t - prefix_count;
  return load_value(patch_proj, (b * patches + p) * d + c) + pos[(positioned + p) * d + c];
}

// grad_patch_proj[i] of [B, Np, D] is grad_x[patch_token_source(i)] of [B, P + Np, D].
VITPIPE_HOST_DEVICE int64_t patch_token_source(int64_t i, int64_t tokens, int64_t prefix_count, int64_t d) {
  const int64_t patches = tokens - prefix_count;
  const int64_t c = i % d, p = (i / d) % patches, b = i / (d * patches);
  return (b * tokens + prefix_count + p) * d + c;
}

// gather_tokens: out[i] of [K, B, D] is x[gathered_token_source(i)] of [B, T, D].
VITPIPE_HOST_DEVICE int64_t gathered_token_source(int64_t i, int64_t batch, int64_t tokens, int64_t d) {
  const int64_t c = i % d, b = (i / d) % batch, k = i / (d * batch);
  return (b * tokens + k) * d + c;
}

// scatter_tokens: grad_x[i] of [B, T, D] is grad[scattered_token_source(i)] of [K, B, D], or 0 where that is -1.
VITPIPE_HOST_DEVICE int64_t scattered_token_source(int64_t i, int64_t batch, int64_t tokens, int64_t d, int64_t count) {
  const int64_t c = i % d, t = (i / d) % tokens, b = i / (d * tokens);
  return t < count ? (t * batch + b) * d + c : -1;
}

// DINOv2's classifier input: the mean part of out[b, D + c] = (sum over t >= skip of x[b, t, c]) * 1 / (T - skip).
VITPIPE_HOST_DEVICE float token_mean(const float* x_b, int64_t tokens, int64_t d, int64_t skip, int64_t c) {
  const float inv = 1.0f / static_cast<float>(tokens - skip);
  float sum = 0.0f;
  for (int64_t t = skip; t < tokens; ++t) sum += x_b[t * d + c];
  return sum * inv;
}

// Its gradient at grad_x[b, t, c] from grad [B, 2D].
VITPIPE_HOST_DEVICE float cls_and_mean_gradient(const float* grad_b, int64_t tokens, int64_t d, int64_t skip, int64_t t,
                                                int64_t c) {
  const float inv = 1.0f / static_cast<float>(tokens - skip);
  const float mean_part = t >= skip ? grad_b[d + c] * inv : 0.0f;
  return t == 0 ? grad_b[c] + (skip == 0 ? mean_part : 0.0f) : mean_part;
}

// ---- losses, in double as the CPU backend's (they are tiny) ----
// One element of BCEWithLogits (torch's pos_weight and weight); returns the loss, writes grad_scale * d/dx.
VITPIPE_HOST_DEVICE double bce_element(double x, double y, double pos_weight, double weight, double grad_scale,
                                       float* grad) {
  const double log_weight = 1.0 + (pos_weight - 1.0) * y;
  const double softplus_neg = log1p(exp(-fabs(x))) + fmax(-x, 0.0);
  const double sigmoid_neg = 1.0 / (1.0 + exp(x));
  *grad = static_cast<float>(grad_scale * weight * ((1.0 - y) - log_weight * sigmoid_neg));
  return weight * ((1.0 - y) * x + log_weight * softplus_neg);
}

// One row of softmax cross-entropy over `classes` logits with class `target`; returns the loss, writes the gradient.
VITPIPE_HOST_DEVICE double cross_entropy_row(const float* row, int64_t classes, int64_t target, double grad_scale,
                                             float* grad) {
  if (target < 0 || target >= classes) {  // refused by the host afterwards (first_invalid_target); read nothing
    for (int64_t j = 0; j < classes; ++j) grad[j] = 0.0f;
    return 0.0;
  }
  double max = row[0];
  for (int64_t j = 1; j < classes; ++j) max = fmax(max, static_cast<double>(row[j]));
  double sum = 0.0;
  for (int64_t j = 0; j < classes; ++j) sum += exp(row[j] - max);
  const double log_sum = log(sum) + max;
  for (int64_t j = 0; j < classes; ++j) {
    const double p = exp(row[j] - log_sum);
    grad[j] = static_cast<float>(grad_scale * (p - (j == target ? 1.0 : 0.0)));
  }
  return log_sum - row[target];
}

// The first row whose class id is outside [0, classes), or -1: the CPU backend refuses such a target, and so does the
// CUDA backend once the loss's second pass has found it.
VITPIPE_HOST_DEVICE int64_t first_invalid_target(const int64_t* targets, int64_t rows, int64_t classes) {
  for (int64_t r = 0; r < rows; ++r) {
    if (targets[r] < 0 || targets[r] >= classes) return r;
  }
  return -1;
}

// The loss's second pass: the per-element (BCE) or per-row (CE) losses summed in index order, the CPU backend's.
VITPIPE_HOST_DEVICE double sum_in_order(const double* values, int64_t count) {
  double total = 0.0;
  for (int64_t i = 0; i < count; ++i) total += values[i];
  return total;
}

// ---- position resampling (separable: the x weights first, then the y weights; the CPU backend's order) ----
// out[kept + y * wd + x, c] for the grid part. pos rows d apart; wy [hd, hs], wx [wd, ws].
VITPIPE_HOST_DEVICE float resample_forward_value(const float* pos, int64_t kept, const float* wy, const float* wx,
                                                 int64_t hs, int64_t ws, int64_t d, int64_t y, int64_t x, int64_t c) {
  float out = 0.0f;
  for (int64_t i = 0; i < hs; ++i) {
    const float wi = wy[y * hs + i];
    if (wi == 0.0f) continue;
    float row = 0.0f;
    for (int64_t j = 0; j < ws; ++j) {
      const float wj = wx[x * ws + j];
      if (wj != 0.0f) row += wj * pos[(kept + i * ws + j) * d + c];
    }
    out += wi * row;
  }
  return out;
}

// The adjoint at pos[kept + i * ws + j, c]: sum_x wx[x, j] sum_y wy[y, i] grad[kept + y * wd + x, c].
VITPIPE_HOST_DEVICE float resample_backward_value(const float* grad, int64_t kept, const float* wy, const float* wx,
                                                  int64_t hd, int64_t hs, int64_t wd, int64_t ws, int64_t d, int64_t i,
                                                  int64_t j, int64_t c) {
  float out = 0.0f;
  for (int64_t x = 0; x < wd; ++x) {
    const float wj = wx[x * ws + j];
    if (wj == 0.0f) continue;
    float column = 0.0f;
    for (int64_t y = 0; y < hd; ++y) {
      const float wi = wy[y * hs + i];
      if (wi != 0.0f) column += wi * grad[(kept + y * wd + x) * d + c];
    }
    out += wj * column;
  }
  return out;
}

// ---- deterministic column sums over [rows, cols] ----
// Pass 1: one thread per (column, chunk of kColumnChunkRows rows) sums its rows in ascending order into
// partials[chunk * cols + column]. Pass 2: one thread per column adds the chunks' partials in ascending order, then
// adds that total into the output (parameter gradients add). The same bits on every run: no atomics.
constexpr int64_t kColumnChunkRows = 128;

VITPIPE_HOST_DEVICE int64_t column_chunks(int64_t rows) { return (rows + kColumnChunkRows - 1) / kColumnChunkRows; }

template <class Value>
VITPIPE_HOST_DEVICE float column_chunk_sum(const Value& value, int64_t column, int64_t chunk, int64_t rows) {
  const int64_t begin = chunk * kColumnChunkRows;
  const int64_t end = begin + kColumnChunkRows < rows ? begin + kColumnChunkRows : rows;
  float sum = 0.0f;
  for (int64_t r = begin; r < end; ++r) sum += value(r, column);
  return sum;
}

VITPIPE_HOST_DEVICE float column_total(const float* partials, int64_t column, int64_t chunks, int64_t cols) {
  float sum = 0.0f;
  for (int64_t k = 0; k < chunks; ++k) sum += partials[k * cols + column];
  return sum;
}

#ifndef __CUDACC__
// The two passes on the host, in the kernels' order: out[c] += column c's sum.
template <class Value>
inline void column_sums_two_pass(const Value& value, int64_t rows, int64_t cols, float* partials, float* out) {
  const int64_t chunks = column_chunks(rows);
  for (int64_t k = 0; k < chunks; ++k) {
    for (int64_t c = 0; c < cols; ++c) partials[k * cols + c] = column_chunk_sum(value, c, k, rows);
  }
  for (int64_t c = 0; c < cols; ++c) out[c] += column_total(partials, c, chunks, cols);
}
#endif

}  // namespace vitpipe::cuda
