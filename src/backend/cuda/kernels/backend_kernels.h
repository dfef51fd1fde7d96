// Launchers of the CUDA Backend's own kernels (kernels/backend_kernels.cu): everything that is not a GEMM or
// attention. Plain pointers, `bf16` flags for tensors that may be f32 or bf16 (bf16 held as uint16_t bits), all
// asynchronous on `stream`, each returning cudaGetLastError(). Column sums and loss sums are deterministic two-pass
// reductions (backend_math.h) through caller-given scratch: `partials` of column_partials_floats(rows, cols) floats,
// and `losses` of one double per loss element. NOT YET RUN ON A GPU; their arithmetic is backend_math.h, which the
// CPU suite checks against the CPU backend.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/kernels/backend_math.h"

namespace vitpipe::cuda {

// Host code shared by the kernels' launchers and the CPU tests' host launchers (tests/cuda/fakes): inline here, so
// both use one definition.
inline int64_t column_partials_floats(int64_t rows, int64_t cols) { return column_chunks(rows) * cols; }

// A matrix of `rows` rows of `cols` elements read with an address in two levels: row r sits at
// data + (r / group) * group_stride + (r % group) * row_stride (elements). A plain matrix has group = rows.
struct StridedRows {
  const void* data = nullptr;
  bool bf16 = false;
  int64_t rows = 0, cols = 0, row_stride = 0, group = 1, group_stride = 0;
};
inline StridedRows plain_rows(const void* data, bool bf16, int64_t rows, int64_t cols) {
  StridedRows m;
  m.data = data;
  m.bf16 = bf16;
  m.rows = rows;
  m.cols = cols;
  m.row_stride = cols;
  m.group = rows > 0 ? rows : 1;
  m.group_stride = 0;
  return m;
}

// out[c] += sum over rows of m[r, c].
cudaError_t launch_column_sums(const StridedRows& m, float* out, float* partials, cudaStream_t stream);

cudaError_t launch_convert(const void* src, bool src_bf16, void* dst, bool dst_bf16, int64_t count,
                           cudaStream_t stream);
cudaError_t launch_scale(const void* in, void* out, bool bf16, float factor, int64_t count, cudaStream_t stream);

// GELU (exact erf). Backward: all f32 or all bf16, grad_in may be grad_out (in place); grad_bias (nullable) +=
// column sums of the unrounded gradient, taken before grad_in is written.
cudaError_t launch_gelu_forward_any(const void* in, bool in_bf16, void* out, bool out_bf16, int64_t count,
                                    cudaStream_t stream);
// GELU of x in place (inference's MLP: the GEMM wrote its output, bias included, into x; no scratch).
cudaError_t launch_gelu_in_place(void* x, bool bf16, int64_t count, cudaStream_t stream);
cudaError_t launch_gelu_backward_any(const void* grad_out, const void* in, void* grad_in, bool bf16, int64_t rows,
                                     int64_t cols, float* grad_bias, float* partials, cudaStream_t stream);

// LayerNorm forward with an f32 or bf16 output; mean, rstd [rows] f32.
cudaError_t launch_layernorm_forward_any(const float* in, const float* weight, const float* bias, float eps, void* out,
                                         bool out_bf16, float* mean, float* rstd, int64_t rows, int64_t d,
                                         cudaStream_t stream);
// The whole LayerNormBackwardArgs: grad_in = grad_residual (nullable, may alias grad_in) + dLN/din; grad_in_copy
// (nullable); grad_weight += colsum(g xhat), grad_bias += colsum(g); grad_in_colsum (nullable) += colsum(grad_in).
struct LayerNormBackwardLaunch {
  const void* grad_out = nullptr;
  bool grad_out_bf16 = false;
  const float *in = nullptr, *weight = nullptr, *mean = nullptr, *rstd = nullptr;
  const float* grad_residual = nullptr;
  float* grad_in = nullptr;
  float *grad_weight = nullptr, *grad_bias = nullptr;
  void* grad_in_copy = nullptr;
  bool grad_in_copy_bf16 = false;
  float* grad_in_colsum = nullptr;
  int64_t rows = 0, d = 0;
};
cudaError_t launch_layernorm_backward_any(const LayerNormBackwardLaunch& a, float* partials, cudaStream_t stream);

// images [B, C, H, W] f32 -> patches [B * Np, C * P * P].
cudaError_t launch_patchify(const float* images, int64_t batch, int64_t channels, int64_t height, int64_t width,
                            int64_t patch, void* patches, bool bf16, cudaStream_t stream);

// x[b, t] = prefix[t] (+ pos[t] for t < positioned) for t < P; x[b, P + p] = patch_proj[b Np + p] + pos[Q + p].
// (embeddings_forward is P = Q = 1.)
cudaError_t launch_token_embeddings_forward(const void* patch_proj, bool patch_bf16, const float* prefix,
                                            int64_t prefix_count, int64_t positioned, const float* pos, float* x,
                                            int64_t batch, int64_t patches, int64_t d, cudaStream_t stream);
// grad_patch_proj = grad_x[:, P:] (f32 or bf16).
cudaError_t launch_copy_patch_tokens(const float* grad_x, int64_t batch, int64_t tokens, int64_t prefix_count,
                                     int64_t d, void* grad_patch_proj, bool bf16, cudaStream_t stream);

// out[k, b] = x[b, k] (x [B, T, D], out [K, B, D]); scatter: grad_x[b, k] = grad[k, b] for k < K, zero elsewhere.
cudaError_t launch_gather_tokens(const float* x, int64_t batch, int64_t tokens, int64_t d, int64_t count, float* out,
                                 cudaStream_t stream);
cudaError_t launch_scatter_tokens(const float* grad, int64_t batch, int64_t tokens, int64_t d, int64_t count,
                                  float* grad_x, cudaStream_t stream);
cudaError_t launch_cls_and_mean_forward(const float* x, int64_t batch, int64_t tokens, int64_t d, int64_t skip,
                                        float* out, cudaStream_t stream);
cudaError_t launch_cls_and_mean_backward(const float* grad, int64_t batch, int64_t tokens, int64_t d, int64_t skip,
                                         float* grad_x, cudaStream_t stream);

// Losses: grad written, each element's (BCE) or row's (CE) loss into `losses`, then their sum in index order into
// *sum (device). targets: BCE f32 [B, L], CE int64 [B].
cudaError_t launch_bce_with_logits(const float* logits, const float* targets, const float* pos_weight,
                                   const float* weight, double grad_scale, float* grad, int64_t rows, int64_t labels,
                                   double* losses, double* sum, cudaStream_t stream);
// *invalid (device): the first row whose class id is outside [0, classes), or -1.
cudaError_t launch_cross_entropy(const float* logits, const int64_t* targets, double grad_scale, float* grad,
                                 int64_t rows, int64_t classes, double* losses, double* sum, int64_t* invalid,
                                 cudaStream_t stream);

// LayerScale: out = residual + scale * branch (out may alias residual). Backward: branch_grad = scale grad;
// grad_scale (nullable) += colsum(grad branch); grad_bias (nullable) += colsum(scale grad).
cudaError_t launch_layer_scale_forward(const void* branch, bool branch_bf16, const float* scale, const float* residual,
                                       float* out, int64_t rows, int64_t d, cudaStream_t stream);
cudaError_t launch_layer_scale_backward(const float* grad, const void* branch, bool branch_bf16, const float* scale,
                                        void* branch_grad, bool branch_grad_bf16, float* grad_scale, float* grad_bias,
                                        int64_t rows, int64_t d, float* partials, cudaStream_t stream);

// SwiGLU: in [M, 2h] -> out [M, h]. Backward all one dtype; grad_bias (nullable) += colsum(grad_in, unrounded).
cudaError_t launch_swiglu_forward(const void* in, bool in_bf16, void* out, bool out_bf16, int64_t rows, int64_t h,
                                  cudaStream_t stream);
cudaError_t launch_swiglu_backward(const void* grad_out, const void* in, void* grad_in, bool bf16, int64_t rows,
                                   int64_t h, float* grad_bias, float* partials, cudaStream_t stream);

// Position resampling (all f32): forward overwrites out (rows [0, kept) copied); backward adds into grad_pos.
cudaError_t launch_resample_positions_forward(const float* pos, int64_t kept, const float* wy, const float* wx,
                                              int64_t hd, int64_t hs, int64_t wd, int64_t ws, int64_t d, float* out,
                                              cudaStream_t stream);
cudaError_t launch_resample_positions_backward(const float* grad_out, int64_t kept, const float* wy, const float* wx,
                                               int64_t hd, int64_t hs, int64_t wd, int64_t ws, int64_t d,
                                               float* grad_pos, cudaStream_t stream);

// The classifier-token attention on the full kernels: a [B, T, D] output gradient and output that are the given
// [B, D] rows at token 0 and zero elsewhere (either may be null: not written), and a [B, H, T] log-sum-exp that is
// the given [B, H] at token 0 and +inf elsewhere (so those rows' probabilities are exactly 0).
cudaError_t launch_cls_attention_expand(const float* grad_out, const float* out, const float* lse, int64_t batch,
                                        int64_t tokens, int64_t d, int64_t heads, float* grad_full, float* out_full,
                                        float* lse_full, cudaStream_t stream);
// dst[i] = src[i * stride] for i < count (f32).
cudaError_t launch_strided_copy(const float* src, int64_t stride, float* dst, int64_t count, cudaStream_t stream);

// dst[i] += src[i] (f32).
cudaError_t launch_add_into(const float* src, float* dst, int64_t count, cudaStream_t stream);

}  // namespace vitpipe::cuda
