// The launchers of kernels/backend_kernels.h, kernels/flash_attention.h and kernels/flash_attention_bf16.h on the host,
// for CudaBackend on fakes (tests/cuda/fakes): each loops over the kernel's index space calling the same backend_math.h
// / layernorm_math.h / flash_attention_math.h functions the kernel calls, in the kernel's summation order (the column
// sums' chunks, the warp butterflies as emulated there). What this cannot prove is the kernels' own indexing and launch
// configuration: only a GPU does (test_cuda_gpu).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cuda/kernels/backend_kernels.h"
#include "backend/cuda/kernels/backend_math.h"
#include "backend/cuda/kernels/flash_attention.h"
#include "backend/cuda/kernels/flash_attention_bf16.h"
#include "backend/cuda/kernels/flash_attention_bf16_math.h"
#include "backend/cuda/kernels/flash_attention_math.h"
#include "backend/cuda/kernels/layernorm_math.h"

namespace vitpipe::cuda {
namespace {

const uint16_t* bits(const void* p) { return static_cast<const uint16_t*>(p); }
uint16_t* bits(void* p) { return static_cast<uint16_t*>(p); }
const float* floats(const void* p) { return static_cast<const float*>(p); }
float* floats(void* p) { return static_cast<float*>(p); }

template <class Value>
void column_sums(const Value& value, int64_t rows, int64_t cols, float* out, float* partials) {
  if (cols == 0) return;
  column_sums_two_pass(value, rows, cols, partials, out);
}

template <class T>
float strided(const T* data, const StridedRows& m, int64_t r, int64_t c) {
  return load_value(data, (r / m.group) * m.group_stride + (r % m.group) * m.row_stride + c);
}

}  // namespace

cudaError_t launch_column_sums(const StridedRows& m, float* out, float* partials, cudaStream_t) {
  if (m.bf16) {
    column_sums([&](int64_t r, int64_t c) { return strided(bits(m.data), m, r, c); }, m.rows, m.cols, out, partials);
  } else {
    column_sums([&](int64_t r, int64_t c) { return strided(floats(m.data), m, r, c); }, m.rows, m.cols, out, partials);
  }
  return cudaSuccess;
}

cudaError_t launch_convert(const void* src, bool src_bf16, void* dst, bool dst_bf16, int64_t count, cudaStream_t) {
  for (int64_t i = 0; i < count; ++i) {
    const float v = src_bf16 ? load_value(bits(src), i) : load_value(floats(src), i);
    if (dst_bf16) {
      store_value(bits(dst), i, v);
    } else {
      store_value(floats(dst), i, v);
    }
  }
  return cudaSuccess;
}

cudaError_t launch_scale(const void* in, void* out, bool bf16, float factor, int64_t count, cudaStream_t) {
  for (int64_t i = 0; i < count; ++i) {
    if (bf16) {
      store_value(bits(out), i, factor * load_value(bits(in), i));
    } else {
      store_value(floats(out), i, factor * load_value(floats(in), i));
    }
  }
  return cudaSuccess;
}

namespace {
float load_any(const void* p, bool bf16, int64_t i) { return bf16 ? load_value(bits(p), i) : load_value(floats(p), i); }
void store_any(void* p, bool bf16, int64_t i, float v) {
  if (bf16) {
    store_value(bits(p), i, v);
  } else {
    store_value(floats(p), i, v);
  }
}
}  // namespace

cudaError_t launch_gelu_forward_any(const void* in, bool in_bf16, void* out, bool out_bf16, int64_t count,
                                    cudaStream_t) {
  for (int64_t i = 0; i < count; ++i) store_any(out, out_bf16, i, gelu(load_any(in, in_bf16, i)));
  return cudaSuccess;
}

cudaError_t launch_gelu_in_place(void* x, bool bf16, int64_t count, cudaStream_t) {
  for (int64_t i = 0; i < count; ++i) store_any(x, bf16, i, gelu(load_any(x, bf16, i)));
  return cudaSuccess;
}

cudaError_t launch_gelu_backward_any(const void* grad_out, const void* in, void* grad_in, bool bf16, int64_t rows,
                                     int64_t cols, float* grad_bias, float* partials, cudaStream_t) {
  auto value = [&](int64_t r, int64_t c) {
    const int64_t i = r * cols + c;
    return load_any(grad_out, bf16, i) * gelu_derivative(load_any(in, bf16, i));
  };
  // The kernels' order: the column sums first (grad_in may be grad_out itself).
  if (grad_bias != nullptr) column_sums(value, rows, cols, grad_bias, partials);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) store_any(grad_in, bf16, r * cols + c, value(r, c));
  }
  return cudaSuccess;
}

cudaError_t launch_layernorm_forward_any(const float* in, const float* weight, const float* bias, float eps, void* out,
                                         bool out_bf16, float* mean, float* rstd, int64_t rows, int64_t d,
                                         cudaStream_t) {
  std::vector<float> row(static_cast<size_t>(d));
  for (int64_t r = 0; r < rows; ++r) {
    const RowStatistics s = layernorm_forward_row(in + r * d, weight, bias, d, eps, row.data());
    for (int64_t j = 0; j < d; ++j) store_any(out, out_bf16, r * d + j, row[j]);
    mean[r] = s.mean;
    rstd[r] = s.rstd;
  }
  return cudaSuccess;
}

cudaError_t launch_layernorm_backward_any(const LayerNormBackwardLaunch& a, float* partials, cudaStream_t) {
  const int64_t d = a.d;
  auto go = [&](int64_t r, int64_t c) { return load_any(a.grad_out, a.grad_out_bf16, r * d + c); };
  column_sums(
      [&](int64_t r, int64_t c) {
        return layernorm_weight_gradient_term(go(r, c), a.in[r * d + c], a.mean[r], a.rstd[r]);
      },
      a.rows, d, a.grad_weight, partials);
  column_sums(go, a.rows, d, a.grad_bias, partials);
  std::vector<float> g(static_cast<size_t>(d)), row(static_cast<size_t>(d));
  for (int64_t r = 0; r < a.rows; ++r) {
    for (int64_t j = 0; j < d; ++j) g[j] = load_any(a.grad_out, a.grad_out_bf16, r * d + j);
    layernorm_backward_row(g.data(), a.in + r * d, a.weight, RowStatistics{a.mean[r], a.rstd[r]}, d, row.data());
    for (int64_t j = 0; j < d; ++j) {
      const int64_t i = r * d + j;
      const float v = (a.grad_residual != nullptr ? a.grad_residual[i] : 0.0f) + row[j];
      a.grad_in[i] = v;
      if (a.grad_in_copy != nullptr) store_any(a.grad_in_copy, a.grad_in_copy_bf16, i, v);
    }
  }
  if (a.grad_in_colsum != nullptr) {
    column_sums([&](int64_t r, int64_t c) { return a.grad_in[r * d + c]; }, a.rows, d, a.grad_in_colsum, partials);
  }
  return cudaSuccess;
}

cudaError_t launch_patchify(const float* images, int64_t batch, int64_t channels, int64_t height, int64_t width,
                            int64_t patch, void* patches, bool bf16, cudaStream_t) {
  const int64_t count = batch * (height / patch) * (width / patch) * channels * patch * patch;
  for (int64_t i = 0; i < count; ++i) {
    store_any(patches, bf16, i, images[patchify_source(i, channels, height, width, patch)]);
  }
  return cudaSuccess;
}

cudaError_t launch_token_embeddings_forward(const void* patch_proj, bool patch_bf16, const float* prefix,
                                            int64_t prefix_count, int64_t positioned, const float* pos, float* x,
                                            int64_t batch, int64_t patches, int64_t d, cudaStream_t) {
  for (int64_t i = 0; i < batch * (prefix_count + patches) * d; ++i) {
    x[i] = patch_bf16 ? token_embedding_value(i, bits(patch_proj), prefix, prefix_count, positioned, pos, patches, d)
                      : token_embedding_value(i, floats(patch_proj), prefix, prefix_count, positioned, pos, patches, d);
  }
  return cudaSuccess;
}

cudaError_t launch_copy_patch_tokens(const float* grad_x, int64_t batch, int64_t tokens, int64_t prefix_count,
                                     int64_t d, void* grad_patch_proj, bool bf16, cudaStream_t) {
  for (int64_t i = 0; i < batch * (tokens - prefix_count) * d; ++i) {
    store_any(grad_patch_proj, bf16, i, grad_x[patch_token_source(i, tokens, prefix_count, d)]);
  }
  return cudaSuccess;
}

cudaError_t launch_gather_tokens(const float* x, int64_t batch, int64_t tokens, int64_t d, int64_t count, float* out,
                                 cudaStream_t) {
  for (int64_t i = 0; i < count * batch * d; ++i) out[i] = x[gathered_token_source(i, batch, tokens, d)];
  return cudaSuccess;
}

cudaError_t launch_scatter_tokens(const float* grad, int64_t batch, int64_t tokens, int64_t d, int64_t count,
                                  float* grad_x, cudaStream_t) {
  for (int64_t i = 0; i < batch * tokens * d; ++i) {
    const int64_t source = scattered_token_source(i, batch, tokens, d, count);
    grad_x[i] = source >= 0 ? grad[source] : 0.0f;
  }
  return cudaSuccess;
}

cudaError_t launch_cls_and_mean_forward(const float* x, int64_t batch, int64_t tokens, int64_t d, int64_t skip,
                                        float* out, cudaStream_t) {
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t c = 0; c < d; ++c) {
      out[b * 2 * d + c] = x[b * tokens * d + c];
      out[b * 2 * d + d + c] = token_mean(x + b * tokens * d, tokens, d, skip, c);
    }
  }
  return cudaSuccess;
}

cudaError_t launch_cls_and_mean_backward(const float* grad, int64_t batch, int64_t tokens, int64_t d, int64_t skip,
                                         float* grad_x, cudaStream_t) {
  for (int64_t i = 0; i < batch * tokens * d; ++i) {
    const int64_t c = i % d, t = (i / d) % tokens, b = i / (d * tokens);
    grad_x[i] = cls_and_mean_gradient(grad + b * 2 * d, tokens, d, skip, t, c);
  }
  return cudaSuccess;
}

cudaError_t launch_bce_with_logits(const float* logits, const float* targets, const float* pos_weight,
                                   const float* weight, double grad_scale, float* grad, int64_t rows, int64_t labels,
                                   double* losses, double* sum, cudaStream_t) {
  for (int64_t i = 0; i < rows * labels; ++i) {
    losses[i] = bce_element(logits[i], targets[i], pos_weight != nullptr ? pos_weight[i % labels] : 1.0,
                            weight != nullptr ? weight[i] : 1.0, grad_scale, grad + i);
  }
  *sum = sum_in_order(losses, rows * labels);
  return cudaSuccess;
}

cudaError_t launch_cross_entropy(const float* logits, const int64_t* targets, double grad_scale, float* grad,
                                 int64_t rows, int64_t classes, double* losses, double* sum, int64_t* invalid,
                                 cudaStream_t) {
  for (int64_t r = 0; r < rows; ++r) {
    losses[r] = cross_entropy_row(logits + r * classes, classes, targets[r], grad_scale, grad + r * classes);
  }
  *sum = sum_in_order(losses, rows);
  *invalid = first_invalid_target(targets, rows, classes);
  return cudaSuccess;
}

cudaError_t launch_layer_scale_forward(const void* branch, bool branch_bf16, const float* scale, const float* residual,
                                       float* out, int64_t rows, int64_t d, cudaStream_t) {
  for (int64_t i = 0; i < rows * d; ++i)
    out[i] = layer_scale_value(residual[i], scale[i % d], load_any(branch, branch_bf16, i));
  return cudaSuccess;
}

cudaError_t launch_layer_scale_backward(const float* grad, const void* branch, bool branch_bf16, const float* scale,
                                        void* branch_grad, bool branch_grad_bf16, float* grad_scale, float* grad_bias,
                                        int64_t rows, int64_t d, float* partials, cudaStream_t) {
  if (grad_scale != nullptr) {
    column_sums([&](int64_t r, int64_t c) { return grad[r * d + c] * load_any(branch, branch_bf16, r * d + c); }, rows,
                d, grad_scale, partials);
  }
  if (grad_bias != nullptr) {
    column_sums([&](int64_t r, int64_t c) { return scale[c] * grad[r * d + c]; }, rows, d, grad_bias, partials);
  }
  for (int64_t i = 0; i < rows * d; ++i) store_any(branch_grad, branch_grad_bf16, i, scale[i % d] * grad[i]);
  return cudaSuccess;
}

cudaError_t launch_swiglu_forward(const void* in, bool in_bf16, void* out, bool out_bf16, int64_t rows, int64_t h,
                                  cudaStream_t) {
  for (int64_t i = 0; i < rows * h; ++i) {
    const int64_t r = i / h, j = i % h;
    store_any(out, out_bf16, i,
              swiglu_value(load_any(in, in_bf16, r * 2 * h + j), load_any(in, in_bf16, r * 2 * h + h + j)));
  }
  return cudaSuccess;
}

cudaError_t launch_swiglu_backward(const void* grad_out, const void* in, void* grad_in, bool bf16, int64_t rows,
                                   int64_t h, float* grad_bias, float* partials, cudaStream_t) {
  auto grads = [&](int64_t r, int64_t j, float* d1, float* d2) {
    swiglu_gradients(load_any(grad_out, bf16, r * h + j), load_any(in, bf16, r * 2 * h + j),
                     load_any(in, bf16, r * 2 * h + h + j), d1, d2);
  };
  for (int64_t i = 0; i < rows * h; ++i) {
    const int64_t r = i / h, j = i % h;
    float d1, d2;
    grads(r, j, &d1, &d2);
    store_any(grad_in, bf16, r * 2 * h + j, d1);
    store_any(grad_in, bf16, r * 2 * h + h + j, d2);
  }
  if (grad_bias != nullptr) {
    column_sums(
        [&](int64_t r, int64_t c) {
          float d1, d2;
          grads(r, c < h ? c : c - h, &d1, &d2);
          return c < h ? d1 : d2;
        },
        rows, 2 * h, grad_bias, partials);
  }
  return cudaSuccess;
}

cudaError_t launch_resample_positions_forward(const float* pos, int64_t kept, const float* wy, const float* wx,
                                              int64_t hd, int64_t hs, int64_t wd, int64_t ws, int64_t d, float* out,
                                              cudaStream_t) {
  for (int64_t i = 0; i < (kept + hd * wd) * d; ++i) {
    const int64_t row = i / d, c = i % d;
    out[i] = row < kept ? pos[i]
                        : resample_forward_value(pos, kept, wy, wx, hs, ws, d, (row - kept) / wd, (row - kept) % wd, c);
  }
  return cudaSuccess;
}

cudaError_t launch_resample_positions_backward(const float* grad_out, int64_t kept, const float* wy, const float* wx,
                                               int64_t hd, int64_t hs, int64_t wd, int64_t ws, int64_t d,
                                               float* grad_pos, cudaStream_t) {
  for (int64_t i = 0; i < (kept + hs * ws) * d; ++i) {
    const int64_t row = i / d, c = i % d;
    grad_pos[i] += row < kept ? grad_out[i]
                              : resample_backward_value(grad_out, kept, wy, wx, hd, hs, wd, ws, d, (row - kept) / ws,
                                                        (row - kept) % ws, c);
  }
  return cudaSuccess;
}

cudaError_t launch_cls_attention_expand(const float* grad_out, const float* out, const float* lse, int64_t batch,
                                        int64_t tokens, int64_t d, int64_t heads, float* grad_full, float* out_full,
                                        float* lse_full, cudaStream_t) {
  for (int64_t i = 0; i < batch * tokens * d; ++i) {
    const int64_t c = i % d, t = (i / d) % tokens, b = i / (d * tokens);
    if (grad_full != nullptr) grad_full[i] = t == 0 ? grad_out[b * d + c] : 0.0f;
    if (out_full != nullptr) out_full[i] = t == 0 ? out[b * d + c] : 0.0f;
  }
  for (int64_t i = 0; i < batch * heads * tokens; ++i) lse_full[i] = i % tokens == 0 ? lse[i / tokens] : INFINITY;
  return cudaSuccess;
}

cudaError_t launch_strided_copy(const float* src, int64_t stride, float* dst, int64_t count, cudaStream_t) {
  for (int64_t i = 0; i < count; ++i) dst[i] = src[i * stride];
  return cudaSuccess;
}

cudaError_t launch_add_into(const float* src, float* dst, int64_t count, cudaStream_t) {
  for (int64_t i = 0; i < count; ++i) dst[i] += src[i];
  return cudaSuccess;
}

// ---- the fp32 flash kernels, as flash_attention_math.h models their rows ----
cudaError_t launch_flash_attention_forward_f32(const float* qkv, float* out, float* lse, int64_t batch, int64_t tokens,
                                               int64_t heads, int64_t head_dim, cudaStream_t) {
  if (head_dim > kFlashMaxHeadDim) return cudaErrorInvalidValue;
  const int64_t hidden = heads * head_dim, stride = 3 * hidden;
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < heads; ++h) {
      const float* q = qkv + b * tokens * stride + h * head_dim;
      for (int64_t i = 0; i < tokens; ++i) {
        lse[(b * heads + h) * tokens + i] =
            flash_forward_row(q + i * stride, q + hidden, q + 2 * hidden, tokens, head_dim, stride, scale,
                              out + (b * tokens + i) * hidden + h * head_dim);
      }
    }
  }
  return cudaSuccess;
}

cudaError_t launch_flash_attention_backward_f32(const float* qkv, const float* out, const float* grad_out,
                                                const float* lse, float* row_dot, float* grad_qkv, int64_t batch,
                                                int64_t tokens, int64_t heads, int64_t head_dim, cudaStream_t) {
  (void)row_dot;
  if (head_dim > kFlashMaxHeadDim) return cudaErrorInvalidValue;
  const int64_t hidden = heads * head_dim, stride = 3 * hidden;
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  std::vector<float> dq(static_cast<size_t>(tokens * head_dim)), dk(dq.size()), dv(dq.size());
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < heads; ++h) {
      const float* q = qkv + b * tokens * stride + h * head_dim;
      const float* o = out + b * tokens * hidden + h * head_dim;
      const float* g = grad_out + b * tokens * hidden + h * head_dim;
      flash_backward_head(q, q + hidden, q + 2 * hidden, o, g, lse + (b * heads + h) * tokens, tokens, head_dim, stride,
                          hidden, scale, dq.data(), dk.data(), dv.data());
      for (int64_t i = 0; i < tokens; ++i) {
        float* row = grad_qkv + (b * tokens + i) * stride + h * head_dim;
        std::memcpy(row, &dq[i * head_dim], static_cast<size_t>(head_dim) * sizeof(float));
        std::memcpy(row + hidden, &dk[i * head_dim], static_cast<size_t>(head_dim) * sizeof(float));
        std::memcpy(row + 2 * hidden, &dv[i * head_dim], static_cast<size_t>(head_dim) * sizeof(float));
      }
    }
  }
  return cudaSuccess;
}

// ---- the bf16 tensor-core backward, as flash_attention_bf16_math.h models its two kernels ----
cudaError_t launch_flash_attention_backward_bf16(const void* qkv, const void* out, const void* grad_out,
                                                 const float* lse, float* row_dot, void* grad_qkv, int64_t batch,
                                                 int64_t tokens, int64_t heads, int64_t head_dim, cudaStream_t) {
  if (!flash_bf16_head_dim_supported(head_dim) || !flash_bf16_pointers_aligned(qkv, out, grad_out, grad_qkv)) {
    return cudaErrorInvalidValue;
  }
  const int64_t hidden = heads * head_dim, stride = 3 * hidden, d = head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  const auto widen = [&](const void* base, int64_t offset, int64_t ld, std::vector<float>& to) {
    to.resize(static_cast<size_t>(tokens * d));
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t e = 0; e < d; ++e) to[static_cast<size_t>(t * d + e)] = widen_bf16(bits(base)[offset + t * ld + e]);
    }
  };
  std::vector<float> q, k, v, o, g, dq(static_cast<size_t>(tokens * d)), dk(dq.size()), dv(dq.size());
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t at = b * tokens * stride + h * d, at_o = b * tokens * hidden + h * d;
      widen(qkv, at, stride, q);
      widen(qkv, at + hidden, stride, k);
      widen(qkv, at + 2 * hidden, stride, v);
      widen(out, at_o, hidden, o);
      widen(grad_out, at_o, hidden, g);
      const int64_t stats = (b * heads + h) * tokens;
      flash_backward_head_bf16(q.data(), k.data(), v.data(), o.data(), g.data(), lse + stats, tokens, d, d, d, scale,
                               row_dot + stats, dq.data(), dk.data(), dv.data());
      for (int64_t t = 0; t < tokens; ++t) {
        uint16_t* row = bits(grad_qkv) + at + t * stride;
        for (int64_t e = 0; e < d; ++e) {
          row[e] = round_to_bf16(dq[static_cast<size_t>(t * d + e)]);
          row[hidden + e] = round_to_bf16(dk[static_cast<size_t>(t * d + e)]);
          row[2 * hidden + e] = round_to_bf16(dv[static_cast<size_t>(t * d + e)]);
        }
      }
    }
  }
  return cudaSuccess;
}

}  // namespace vitpipe::cuda
