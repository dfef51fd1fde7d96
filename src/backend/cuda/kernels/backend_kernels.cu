// The CUDA Backend's own kernels (launchers in backend_kernels.h): element-wise maps in grid-stride loops, LayerNorm
// one warp per row (warp_sum.h's fixed order), column sums and loss sums in two deterministic passes
// (backend_math.h). Memory behaviour: each kernel streams its inputs once; column sums write
// column_partials_floats(rows, cols) floats of scratch and read them once. NOT YET RUN ON A GPU.
#include <cstdint>

#include "backend/cuda/kernels/backend_kernels.h"
#include "backend/cuda/kernels/backend_math.h"
#include "backend/cuda/kernels/gelu_math.h"
#include "backend/cuda/kernels/layernorm_math.h"
#include "backend/cuda/kernels/warp_sum.h"

namespace vitpipe::cuda {
namespace {

constexpr unsigned int kBlock = 256;

unsigned int grid_for(int64_t count) {
  const int64_t blocks = (count + kBlock - 1) / kBlock;
  return static_cast<unsigned int>(blocks < 8192 ? (blocks > 0 ? blocks : 1) : 8192);
}

#define VITPIPE_GRID_STRIDE(i, count)                                                        \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (count); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

// ---- column sums ----
template <class T>
struct StridedValue {
  const T* data;
  int64_t row_stride, group, group_stride;
  __device__ float operator()(int64_t r, int64_t c) const {
    return load_value(data, (r / group) * group_stride + (r % group) * row_stride + c);
  }
};

template <class Value>
__global__ void column_partials_kernel(Value value, int64_t rows, int64_t cols, float* __restrict__ partials) {
  const int64_t chunks = column_chunks(rows);
  VITPIPE_GRID_STRIDE(i, chunks * cols) {
    const int64_t chunk = i / cols, c = i % cols;
    partials[i] = column_chunk_sum(value, c, chunk, rows);
  }
}

__global__ void column_finish_kernel(const float* __restrict__ partials, int64_t chunks, int64_t cols,
                                     float* __restrict__ out) {
  VITPIPE_GRID_STRIDE(c, cols) { out[c] += column_total(partials, c, chunks, cols); }
}

template <class Value>
cudaError_t column_sums(const Value& value, int64_t rows, int64_t cols, float* out, float* partials,
                        cudaStream_t stream) {
  if (cols == 0) return cudaSuccess;
  const int64_t chunks = column_chunks(rows);
  if (chunks > 0) column_partials_kernel<<<grid_for(chunks * cols), kBlock, 0, stream>>>(value, rows, cols, partials);
  column_finish_kernel<<<grid_for(cols), kBlock, 0, stream>>>(partials, chunks, cols, out);
  return cudaGetLastError();
}

// ---- element-wise ----
template <class S, class D>
__global__ void convert_kernel(const S* __restrict__ src, D* __restrict__ dst, int64_t count) {
  VITPIPE_GRID_STRIDE(i, count) { store_value(dst, i, load_value(src, i)); }
}

template <class T>
__global__ void scale_kernel(const T* in, T* out, float factor, int64_t count) {  // in may alias out
  VITPIPE_GRID_STRIDE(i, count) { store_value(out, i, factor * load_value(in, i)); }
}

template <class S, class D>
__global__ void gelu_forward_kernel(const S* __restrict__ in, D* __restrict__ out, int64_t count) {
  VITPIPE_GRID_STRIDE(i, count) { store_value(out, i, gelu(load_value(in, i))); }
}

template <class T>
__global__ void gelu_in_place_kernel(T* x, int64_t count) {  // no __restrict__: reads and writes x
  VITPIPE_GRID_STRIDE(i, count) { store_value(x, i, gelu(load_value(x, i))); }
}

template <class T>
__global__ void gelu_backward_kernel(const T* grad_out, const T* in, T* grad_in, int64_t count) {  // may alias
  VITPIPE_GRID_STRIDE(i, count) {
    store_value(grad_in, i, load_value(grad_out, i) * gelu_derivative(load_value(in, i)));
  }
}

template <class T>
struct GeluGradientValue {
  const T *grad_out, *in;
  int64_t cols;
  __device__ float operator()(int64_t r, int64_t c) const {
    const int64_t i = r * cols + c;
    return load_value(grad_out, i) * gelu_derivative(load_value(in, i));
  }
};

// ---- LayerNorm ----
constexpr unsigned int kRowsPerBlock = 8;  // one warp per row

template <class Out>
__global__ void layernorm_forward_kernel(const float* __restrict__ in, const float* __restrict__ weight,
                                         const float* __restrict__ bias, float eps, Out* __restrict__ out,
                                         float* __restrict__ mean_out, float* __restrict__ rstd_out, int64_t rows,
                                         int64_t d) {
  const int lane = static_cast<int>(threadIdx.x % kWarpSize);
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarpSize;
  if (row >= rows) return;
  const float* x = in + row * d;
  const float mean = warp_sum(lane_partial_sum([x](int64_t j) { return x[j]; }, lane, d)) / static_cast<float>(d);
  const float variance =
      warp_sum(lane_partial_sum([x, mean](int64_t j) { return centered_square(x[j], mean); }, lane, d)) /
      static_cast<float>(d);
  const float rstd = layernorm_rstd(variance, eps);
  for (int64_t j = lane; j < d; j += kWarpSize) {
    store_value(out, row * d + j, layernorm_output(x[j], mean, rstd, weight[j], bias[j]));
  }
  if (lane == 0) {
    mean_out[row] = mean;
    rstd_out[row] = rstd;
  }
}

template <class G, class C>
__global__ void layernorm_backward_kernel(const G* grad_out, const float* in, const float* weight, const float* mean,
                                          const float* rstd, const float* grad_residual, float* grad_in,
                                          C* grad_in_copy, int64_t rows, int64_t d) {
  const int lane = static_cast<int>(threadIdx.x % kWarpSize);
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarpSize;
  if (row >= rows) return;
  const float* x = in + row * d;
  const G* g = grad_out + row * d;
  const float mu = mean[row], rs = rstd[row];
  const auto xhat = [x, mu, rs](int64_t j) { return (x[j] - mu) * rs; };
  const float mean_gw = warp_sum(lane_partial_sum([&](int64_t j) { return load_value(g, j) * weight[j]; }, lane, d)) /
                        static_cast<float>(d);
  const float mean_gw_xhat =
      warp_sum(lane_partial_sum([&](int64_t j) { return load_value(g, j) * weight[j] * xhat(j); }, lane, d)) /
      static_cast<float>(d);
  for (int64_t j = lane; j < d; j += kWarpSize) {
    const int64_t i = row * d + j;
    // grad_residual may be grad_in itself: read before the write of the same element.
    const float residual = grad_residual != nullptr ? grad_residual[i] : 0.0f;
    const float v =
        residual + layernorm_input_gradient(load_value(g, j), weight[j], xhat(j), rs, mean_gw, mean_gw_xhat);
    grad_in[i] = v;
    if (grad_in_copy != nullptr) store_value(grad_in_copy, i, v);
  }
}

template <class G>
struct LayerNormWeightGradient {
  const G* grad_out;
  const float *in, *mean, *rstd;
  int64_t d;
  __device__ float operator()(int64_t r, int64_t c) const {
    return layernorm_weight_gradient_term(load_value(grad_out, r * d + c), in[r * d + c], mean[r], rstd[r]);
  }
};

// ---- embeddings and tokens ----
template <class T>
__global__ void patchify_kernel(const float* __restrict__ images, int64_t batch, int64_t channels, int64_t height,
                                int64_t width, int64_t patch, T* __restrict__ patches) {
  const int64_t count = batch * (height / patch) * (width / patch) * channels * patch * patch;
  VITPIPE_GRID_STRIDE(i, count) { store_value(patches, i, images[patchify_source(i, channels, height, width, patch)]); }
}

template <class T>
__global__ void token_embeddings_kernel(const T* __restrict__ patch_proj, const float* __restrict__ prefix,
                                        int64_t prefix_count, int64_t positioned, const float* __restrict__ pos,
                                        float* __restrict__ x, int64_t batch, int64_t patches, int64_t d) {
  VITPIPE_GRID_STRIDE(i, batch * (prefix_count + patches) * d) {
    x[i] = token_embedding_value(i, patch_proj, prefix, prefix_count, positioned, pos, patches, d);
  }
}

template <class T>
__global__ void copy_patch_tokens_kernel(const float* __restrict__ grad_x, int64_t batch, int64_t tokens,
                                         int64_t prefix_count, int64_t d, T* __restrict__ out) {
  VITPIPE_GRID_STRIDE(i, batch * (tokens - prefix_count) * d) {
    store_value(out, i, grad_x[patch_token_source(i, tokens, prefix_count, d)]);
  }
}

__global__ void gather_tokens_kernel(const float* __restrict__ x, int64_t batch, int64_t tokens, int64_t d,
                                     int64_t count, float* __restrict__ out) {
  VITPIPE_GRID_STRIDE(i, count * batch * d) { out[i] = x[gathered_token_source(i, batch, tokens, d)]; }
}

__global__ void scatter_tokens_kernel(const float* __restrict__ grad, int64_t batch, int64_t tokens, int64_t d,
                                      int64_t count, float* __restrict__ grad_x) {
  VITPIPE_GRID_STRIDE(i, batch * tokens * d) {
    const int64_t source = scattered_token_source(i, batch, tokens, d, count);
    grad_x[i] = source >= 0 ? grad[source] : 0.0f;
  }
}

__global__ void cls_and_mean_forward_kernel(const float* __restrict__ x, int64_t batch, int64_t tokens, int64_t d,
                                            int64_t skip, float* __restrict__ out) {
  VITPIPE_GRID_STRIDE(i, batch * d) {
    const int64_t c = i % d, b = i / d;
    const float* xb = x + b * tokens * d;
    out[b * 2 * d + c] = xb[c];
    out[b * 2 * d + d + c] = token_mean(xb, tokens, d, skip, c);
  }
}

__global__ void cls_and_mean_backward_kernel(const float* __restrict__ grad, int64_t batch, int64_t tokens, int64_t d,
                                             int64_t skip, float* __restrict__ grad_x) {
  VITPIPE_GRID_STRIDE(i, batch * tokens * d) {
    const int64_t c = i % d, t = (i / d) % tokens, b = i / (d * tokens);
    grad_x[i] = cls_and_mean_gradient(grad + b * 2 * d, tokens, d, skip, t, c);
  }
}

// ---- losses ----
__global__ void bce_kernel(const float* __restrict__ logits, const float* __restrict__ targets,
                           const float* __restrict__ pos_weight, const float* __restrict__ weight, double grad_scale,
                           float* __restrict__ grad, int64_t rows, int64_t labels, double* __restrict__ losses) {
  VITPIPE_GRID_STRIDE(i, rows * labels) {
    const double pw = pos_weight != nullptr ? pos_weight[i % labels] : 1.0;
    const double w = weight != nullptr ? weight[i] : 1.0;
    losses[i] = bce_element(logits[i], targets[i], pw, w, grad_scale, grad + i);
  }
}

__global__ void cross_entropy_kernel(const float* __restrict__ logits, const int64_t* __restrict__ targets,
                                     double grad_scale, float* __restrict__ grad, int64_t rows, int64_t classes,
                                     double* __restrict__ losses) {
  VITPIPE_GRID_STRIDE(r, rows) {
    losses[r] = cross_entropy_row(logits + r * classes, classes, targets[r], grad_scale, grad + r * classes);
  }
}

__global__ void cross_entropy_sum_kernel(const double* __restrict__ losses, const int64_t* __restrict__ targets,
                                         int64_t rows, int64_t classes, double* __restrict__ sum,
                                         int64_t* __restrict__ invalid) {
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    *sum = sum_in_order(losses, rows);
    *invalid = first_invalid_target(targets, rows, classes);
  }
}

// The second pass: one thread, index order (the losses have B x L elements: microseconds).
__global__ void sum_in_order_kernel(const double* __restrict__ values, int64_t count, double* __restrict__ sum) {
  if (blockIdx.x == 0 && threadIdx.x == 0) *sum = sum_in_order(values, count);
}

// ---- LayerScale, SwiGLU ----
template <class B>
__global__ void layer_scale_forward_kernel(const B* branch, const float* scale, const float* residual, float* out,
                                           int64_t rows, int64_t d) {  // out may alias residual
  VITPIPE_GRID_STRIDE(i, rows * d) { out[i] = layer_scale_value(residual[i], scale[i % d], load_value(branch, i)); }
}

template <class G>
__global__ void layer_scale_backward_kernel(const float* grad, const float* scale, G* branch_grad, int64_t rows,
                                            int64_t d) {  // branch_grad may alias grad
  VITPIPE_GRID_STRIDE(i, rows * d) { store_value(branch_grad, i, scale[i % d] * grad[i]); }
}

template <class B>
struct LayerScaleScaleGradient {
  const float* grad;
  const B* branch;
  int64_t d;
  __device__ float operator()(int64_t r, int64_t c) const { return grad[r * d + c] * load_value(branch, r * d + c); }
};

struct LayerScaleBiasGradient {
  const float *grad, *scale;
  int64_t d;
  __device__ float operator()(int64_t r, int64_t c) const { return scale[c] * grad[r * d + c]; }
};

template <class S, class D>
__global__ void swiglu_forward_kernel(const S* __restrict__ in, D* __restrict__ out, int64_t rows, int64_t h) {
  VITPIPE_GRID_STRIDE(i, rows * h) {
    const int64_t r = i / h, j = i % h;
    store_value(out, i, swiglu_value(load_value(in, r * 2 * h + j), load_value(in, r * 2 * h + h + j)));
  }
}

template <class T>
__global__ void swiglu_backward_kernel(const T* __restrict__ grad_out, const T* __restrict__ in,
                                       T* __restrict__ grad_in, int64_t rows, int64_t h) {
  VITPIPE_GRID_STRIDE(i, rows * h) {
    const int64_t r = i / h, j = i % h;
    float d1, d2;
    swiglu_gradients(load_value(grad_out, i), load_value(in, r * 2 * h + j), load_value(in, r * 2 * h + h + j), &d1,
                     &d2);
    store_value(grad_in, r * 2 * h + j, d1);
    store_value(grad_in, r * 2 * h + h + j, d2);
  }
}

template <class T>
struct SwigluGradient {
  const T *grad_out, *in;
  int64_t h;
  __device__ float operator()(int64_t r, int64_t c) const {
    const int64_t j = c < h ? c : c - h;
    float d1, d2;
    swiglu_gradients(load_value(grad_out, r * h + j), load_value(in, r * 2 * h + j), load_value(in, r * 2 * h + h + j),
                     &d1, &d2);
    return c < h ? d1 : d2;
  }
};

// ---- position resampling ----
__global__ void resample_forward_kernel(const float* __restrict__ pos, int64_t kept, const float* __restrict__ wy,
                                        const float* __restrict__ wx, int64_t hd, int64_t hs, int64_t wd, int64_t ws,
                                        int64_t d, float* __restrict__ out) {
  VITPIPE_GRID_STRIDE(i, (kept + hd * wd) * d) {
    const int64_t row = i / d, c = i % d;
    if (row < kept) {
      out[i] = pos[i];
    } else {
      const int64_t g = row - kept;
      out[i] = resample_forward_value(pos, kept, wy, wx, hs, ws, d, g / wd, g % wd, c);
    }
  }
}

__global__ void resample_backward_kernel(const float* __restrict__ grad, int64_t kept, const float* __restrict__ wy,
                                         const float* __restrict__ wx, int64_t hd, int64_t hs, int64_t wd, int64_t ws,
                                         int64_t d, float* __restrict__ grad_pos) {
  VITPIPE_GRID_STRIDE(i, (kept + hs * ws) * d) {
    const int64_t row = i / d, c = i % d;
    if (row < kept) {
      grad_pos[i] += grad[i];
    } else {
      const int64_t g = row - kept;
      grad_pos[i] += resample_backward_value(grad, kept, wy, wx, hd, hs, wd, ws, d, g / ws, g % ws, c);
    }
  }
}

__global__ void add_into_kernel(const float* __restrict__ src, float* __restrict__ dst, int64_t count) {
  VITPIPE_GRID_STRIDE(i, count) { dst[i] += src[i]; }
}

__global__ void cls_expand_kernel(const float* __restrict__ grad_out, const float* __restrict__ out,
                                  const float* __restrict__ lse, int64_t batch, int64_t tokens, int64_t d,
                                  int64_t heads, float* __restrict__ grad_full, float* __restrict__ out_full,
                                  float* __restrict__ lse_full) {
  VITPIPE_GRID_STRIDE(i, batch * tokens * d) {
    const int64_t c = i % d, t = (i / d) % tokens, b = i / (d * tokens);
    if (grad_full != nullptr) grad_full[i] = t == 0 ? grad_out[b * d + c] : 0.0f;
    if (out_full != nullptr) out_full[i] = t == 0 ? out[b * d + c] : 0.0f;
  }
  VITPIPE_GRID_STRIDE(i, batch * heads * tokens) {
    const int64_t t = i % tokens, bh = i / tokens;
    lse_full[i] = t == 0 ? lse[bh] : INFINITY;
  }
}

__global__ void strided_copy_kernel(const float* __restrict__ src, int64_t stride, float* __restrict__ dst,
                                    int64_t count) {
  VITPIPE_GRID_STRIDE(i, count) { dst[i] = src[i * stride]; }
}

const uint16_t* bits(const void* p) { return static_cast<const uint16_t*>(p); }
uint16_t* bits(void* p) { return static_cast<uint16_t*>(p); }
const float* floats(const void* p) { return static_cast<const float*>(p); }
float* floats(void* p) { return static_cast<float*>(p); }

}  // namespace

cudaError_t launch_column_sums(const StridedRows& m, float* out, float* partials, cudaStream_t stream) {
  if (m.bf16) {
    return column_sums(StridedValue<uint16_t>{bits(m.data), m.row_stride, m.group, m.group_stride}, m.rows, m.cols, out,
                       partials, stream);
  }
  return column_sums(StridedValue<float>{floats(m.data), m.row_stride, m.group, m.group_stride}, m.rows, m.cols, out,
                     partials, stream);
}

cudaError_t launch_convert(const void* src, bool src_bf16, void* dst, bool dst_bf16, int64_t count,
                           cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  if (src_bf16 == dst_bf16) {
    return cudaMemcpyAsync(dst, src, static_cast<size_t>(count) * (src_bf16 ? 2 : 4), cudaMemcpyDeviceToDevice, stream);
  }
  if (src_bf16) {
    convert_kernel<<<grid_for(count), kBlock, 0, stream>>>(bits(src), floats(dst), count);
  } else {
    convert_kernel<<<grid_for(count), kBlock, 0, stream>>>(floats(src), bits(dst), count);
  }
  return cudaGetLastError();
}

cudaError_t launch_scale(const void* in, void* out, bool bf16, float factor, int64_t count, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  if (bf16) {
    scale_kernel<<<grid_for(count), kBlock, 0, stream>>>(bits(in), bits(out), factor, count);
  } else {
    scale_kernel<<<grid_for(count), kBlock, 0, stream>>>(floats(in), floats(out), factor, count);
  }
  return cudaGetLastError();
}

cudaError_t launch_gelu_in_place(void* x, bool bf16, int64_t count, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  if (bf16) {
    gelu_in_place_kernel<<<grid_for(count), kBlock, 0, stream>>>(bits(x), count);
  } else {
    gelu_in_place_kernel<<<grid_for(count), kBlock, 0, stream>>>(floats(x), count);
  }
  return cudaGetLastError();
}

cudaError_t launch_gelu_forward_any(const void* in, bool in_bf16, void* out, bool out_bf16, int64_t count,
                                    cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  const unsigned int grid = grid_for(count);
  if (in_bf16 && out_bf16) {
    gelu_forward_kernel<<<grid, kBlock, 0, stream>>>(bits(in), bits(out), count);
  } else if (in_bf16) {
    gelu_forward_kernel<<<grid, kBlock, 0, stream>>>(bits(in), floats(out), count);
  } else if (out_bf16) {
    gelu_forward_kernel<<<grid, kBlock, 0, stream>>>(floats(in), bits(out), count);
  } else {
    gelu_forward_kernel<<<grid, kBlock, 0, stream>>>(floats(in), floats(out), count);
  }
  return cudaGetLastError();
}

cudaError_t launch_gelu_backward_any(const void* grad_out, const void* in, void* grad_in, bool bf16, int64_t rows,
                                     int64_t cols, float* grad_bias, float* partials, cudaStream_t stream) {
  // The column sums first: grad_in may be grad_out itself (the model's in-place backward), and the sums are of the
  // unrounded gradient.
  if (grad_bias != nullptr) {
    const cudaError_t e = bf16 ? column_sums(GeluGradientValue<uint16_t>{bits(grad_out), bits(in), cols}, rows, cols,
                                             grad_bias, partials, stream)
                               : column_sums(GeluGradientValue<float>{floats(grad_out), floats(in), cols}, rows, cols,
                                             grad_bias, partials, stream);
    if (e != cudaSuccess) return e;
  }
  const int64_t count = rows * cols;
  if (count == 0) return cudaSuccess;
  if (bf16) {
    gelu_backward_kernel<<<grid_for(count), kBlock, 0, stream>>>(bits(grad_out), bits(in), bits(grad_in), count);
  } else {
    gelu_backward_kernel<<<grid_for(count), kBlock, 0, stream>>>(floats(grad_out), floats(in), floats(grad_in), count);
  }
  return cudaGetLastError();
}

cudaError_t launch_layernorm_forward_any(const float* in, const float* weight, const float* bias, float eps, void* out,
                                         bool out_bf16, float* mean, float* rstd, int64_t rows, int64_t d,
                                         cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  const unsigned int blocks = static_cast<unsigned int>((rows + kRowsPerBlock - 1) / kRowsPerBlock);
  if (out_bf16) {
    layernorm_forward_kernel<<<blocks, kRowsPerBlock * kWarpSize, 0, stream>>>(in, weight, bias, eps, bits(out), mean,
                                                                               rstd, rows, d);
  } else {
    layernorm_forward_kernel<<<blocks, kRowsPerBlock * kWarpSize, 0, stream>>>(in, weight, bias, eps, floats(out), mean,
                                                                               rstd, rows, d);
  }
  return cudaGetLastError();
}

namespace {

template <class G, class C>
void layernorm_backward_rows(const LayerNormBackwardLaunch& a, const G* g, C* copy, cudaStream_t stream) {
  const unsigned int blocks = static_cast<unsigned int>((a.rows + kRowsPerBlock - 1) / kRowsPerBlock);
  layernorm_backward_kernel<<<blocks, kRowsPerBlock * kWarpSize, 0, stream>>>(
      g, a.in, a.weight, a.mean, a.rstd, a.grad_residual, a.grad_in, copy, a.rows, a.d);
}

template <class G>
cudaError_t layernorm_backward_typed(const LayerNormBackwardLaunch& a, const G* g, float* partials,
                                     cudaStream_t stream) {
  // The weight and bias sums first (grad_in may be grad_out itself); they run one after another on the stream, so
  // they share the partials.
  cudaError_t e = column_sums(LayerNormWeightGradient<G>{g, a.in, a.mean, a.rstd, a.d}, a.rows, a.d, a.grad_weight,
                              partials, stream);
  if (e != cudaSuccess) return e;
  e = column_sums(StridedValue<G>{g, a.d, a.rows > 0 ? a.rows : 1, 0}, a.rows, a.d, a.grad_bias, partials, stream);
  if (e != cudaSuccess) return e;
  if (a.rows > 0) {
    if (a.grad_in_copy == nullptr) {
      layernorm_backward_rows(a, g, static_cast<float*>(nullptr), stream);
    } else if (a.grad_in_copy_bf16) {
      layernorm_backward_rows(a, g, bits(a.grad_in_copy), stream);
    } else {
      layernorm_backward_rows(a, g, floats(a.grad_in_copy), stream);
    }
    e = cudaGetLastError();
    if (e != cudaSuccess) return e;
  }
  if (a.grad_in_colsum == nullptr) return cudaSuccess;
  return column_sums(StridedValue<float>{a.grad_in, a.d, a.rows > 0 ? a.rows : 1, 0}, a.rows, a.d, a.grad_in_colsum,
                     partials, stream);
}

}  // namespace

cudaError_t launch_layernorm_backward_any(const LayerNormBackwardLaunch& a, float* partials, cudaStream_t stream) {
  if (a.grad_out_bf16) return layernorm_backward_typed(a, bits(a.grad_out), partials, stream);
  return layernorm_backward_typed(a, floats(a.grad_out), partials, stream);
}

cudaError_t launch_patchify(const float* images, int64_t batch, int64_t channels, int64_t height, int64_t width,
                            int64_t patch, void* patches, bool bf16, cudaStream_t stream) {
  const int64_t count = batch * channels * (height / patch) * patch * (width / patch) * patch;
  if (count == 0) return cudaSuccess;
  if (bf16) {
    patchify_kernel<<<grid_for(count), kBlock, 0, stream>>>(images, batch, channels, height, width, patch,
                                                            bits(patches));
  } else {
    patchify_kernel<<<grid_for(count), kBlock, 0, stream>>>(images, batch, channels, height, width, patch,
                                                            floats(patches));
  }
  return cudaGetLastError();
}

cudaError_t launch_token_embeddings_forward(const void* patch_proj, bool patch_bf16, const float* prefix,
                                            int64_t prefix_count, int64_t positioned, const float* pos, float* x,
                                            int64_t batch, int64_t patches, int64_t d, cudaStream_t stream) {
  const int64_t count = batch * (prefix_count + patches) * d;
  if (count == 0) return cudaSuccess;
  if (patch_bf16) {
    token_embeddings_kernel<<<grid_for(count), kBlock, 0, stream>>>(bits(patch_proj), prefix, prefix_count, positioned,
                                                                    pos, x, batch, patches, d);
  } else {
    token_embeddings_kernel<<<grid_for(count), kBlock, 0, stream>>>(floats(patch_proj), prefix, prefix_count,
                                                                    positioned, pos, x, batch, patches, d);
  }
  return cudaGetLastError();
}

cudaError_t launch_copy_patch_tokens(const float* grad_x, int64_t batch, int64_t tokens, int64_t prefix_count,
                                     int64_t d, void* grad_patch_proj, bool bf16, cudaStream_t stream) {
  const int64_t count = batch * (tokens - prefix_count) * d;
  if (count <= 0) return cudaSuccess;
  if (bf16) {
    copy_patch_tokens_kernel<<<grid_for(count), kBlock, 0, stream>>>(grad_x, batch, tokens, prefix_count, d,
                                                                     bits(grad_patch_proj));
  } else {
    copy_patch_tokens_kernel<<<grid_for(count), kBlock, 0, stream>>>(grad_x, batch, tokens, prefix_count, d,
                                                                     floats(grad_patch_proj));
  }
  return cudaGetLastError();
}

cudaError_t launch_gather_tokens(const float* x, int64_t batch, int64_t tokens, int64_t d, int64_t count, float* out,
                                 cudaStream_t stream) {
  if (count * batch * d == 0) return cudaSuccess;
  gather_tokens_kernel<<<grid_for(count * batch * d), kBlock, 0, stream>>>(x, batch, tokens, d, count, out);
  return cudaGetLastError();
}

cudaError_t launch_scatter_tokens(const float* grad, int64_t batch, int64_t tokens, int64_t d, int64_t count,
                                  float* grad_x, cudaStream_t stream) {
  if (batch * tokens * d == 0) return cudaSuccess;
  scatter_tokens_kernel<<<grid_for(batch * tokens * d), kBlock, 0, stream>>>(grad, batch, tokens, d, count, grad_x);
  return cudaGetLastError();
}

cudaError_t launch_cls_and_mean_forward(const float* x, int64_t batch, int64_t tokens, int64_t d, int64_t skip,
                                        float* out, cudaStream_t stream) {
  if (batch * d == 0) return cudaSuccess;
  cls_and_mean_forward_kernel<<<grid_for(batch * d), kBlock, 0, stream>>>(x, batch, tokens, d, skip, out);
  return cudaGetLastError();
}

cudaError_t launch_cls_and_mean_backward(const float* grad, int64_t batch, int64_t tokens, int64_t d, int64_t skip,
                                         float* grad_x, cudaStream_t stream) {
  if (batch * tokens * d == 0) return cudaSuccess;
  cls_and_mean_backward_kernel<<<grid_for(batch * tokens * d), kBlock, 0, stream>>>(grad, batch, tokens, d, skip,
                                                                                    grad_x);
  return cudaGetLastError();
}

cudaError_t launch_bce_with_logits(const float* logits, const float* targets, const float* pos_weight,
                                   const float* weight, double grad_scale, float* grad, int64_t rows, int64_t labels,
                                   double* losses, double* sum, cudaStream_t stream) {
  const int64_t count = rows * labels;
  if (count > 0) {
    bce_kernel<<<grid_for(count), kBlock, 0, stream>>>(logits, targets, pos_weight, weight, grad_scale, grad, rows,
                                                       labels, losses);
  }
  sum_in_order_kernel<<<1, 1, 0, stream>>>(losses, count, sum);
  return cudaGetLastError();
}

cudaError_t launch_cross_entropy(const float* logits, const int64_t* targets, double grad_scale, float* grad,
                                 int64_t rows, int64_t classes, double* losses, double* sum, int64_t* invalid,
                                 cudaStream_t stream) {
  if (rows > 0) {
    cross_entropy_kernel<<<grid_for(rows), kBlock, 0, stream>>>(logits, targets, grad_scale, grad, rows, classes,
                                                                losses);
  }
  cross_entropy_sum_kernel<<<1, 1, 0, stream>>>(losses, targets, rows, classes, sum, invalid);
  return cudaGetLastError();
}

cudaError_t launch_layer_scale_forward(const void* branch, bool branch_bf16, const float* scale, const float* residual,
                                       float* out, int64_t rows, int64_t d, cudaStream_t stream) {
  if (rows * d == 0) return cudaSuccess;
  if (branch_bf16) {
    layer_scale_forward_kernel<<<grid_for(rows * d), kBlock, 0, stream>>>(bits(branch), scale, residual, out, rows, d);
  } else {
    layer_scale_forward_kernel<<<grid_for(rows * d), kBlock, 0, stream>>>(floats(branch), scale, residual, out, rows,
                                                                          d);
  }
  return cudaGetLastError();
}

cudaError_t launch_layer_scale_backward(const float* grad, const void* branch, bool branch_bf16, const float* scale,
                                        void* branch_grad, bool branch_grad_bf16, float* grad_scale, float* grad_bias,
                                        int64_t rows, int64_t d, float* partials, cudaStream_t stream) {
  // The column sums first: branch_grad may be grad itself.
  if (grad_scale != nullptr) {
    const cudaError_t e = branch_bf16 ? column_sums(LayerScaleScaleGradient<uint16_t>{grad, bits(branch), d}, rows, d,
                                                    grad_scale, partials, stream)
                                      : column_sums(LayerScaleScaleGradient<float>{grad, floats(branch), d}, rows, d,
                                                    grad_scale, partials, stream);
    if (e != cudaSuccess) return e;
  }
  if (grad_bias != nullptr) {
    const cudaError_t e = column_sums(LayerScaleBiasGradient{grad, scale, d}, rows, d, grad_bias, partials, stream);
    if (e != cudaSuccess) return e;
  }
  if (rows * d == 0) return cudaSuccess;
  if (branch_grad_bf16) {
    layer_scale_backward_kernel<<<grid_for(rows * d), kBlock, 0, stream>>>(grad, scale, bits(branch_grad), rows, d);
  } else {
    layer_scale_backward_kernel<<<grid_for(rows * d), kBlock, 0, stream>>>(grad, scale, floats(branch_grad), rows, d);
  }
  return cudaGetLastError();
}

cudaError_t launch_swiglu_forward(const void* in, bool in_bf16, void* out, bool out_bf16, int64_t rows, int64_t h,
                                  cudaStream_t stream) {
  const int64_t count = rows * h;
  if (count == 0) return cudaSuccess;
  const unsigned int grid = grid_for(count);
  if (in_bf16 && out_bf16) {
    swiglu_forward_kernel<<<grid, kBlock, 0, stream>>>(bits(in), bits(out), rows, h);
  } else if (in_bf16) {
    swiglu_forward_kernel<<<grid, kBlock, 0, stream>>>(bits(in), floats(out), rows, h);
  } else if (out_bf16) {
    swiglu_forward_kernel<<<grid, kBlock, 0, stream>>>(floats(in), bits(out), rows, h);
  } else {
    swiglu_forward_kernel<<<grid, kBlock, 0, stream>>>(floats(in), floats(out), rows, h);
  }
  return cudaGetLastError();
}

cudaError_t launch_swiglu_backward(const void* grad_out, const void* in, void* grad_in, bool bf16, int64_t rows,
                                   int64_t h, float* grad_bias, float* partials, cudaStream_t stream) {
  const int64_t count = rows * h;
  if (count > 0) {
    if (bf16) {
      swiglu_backward_kernel<<<grid_for(count), kBlock, 0, stream>>>(bits(grad_out), bits(in), bits(grad_in), rows, h);
    } else {
      swiglu_backward_kernel<<<grid_for(count), kBlock, 0, stream>>>(floats(grad_out), floats(in), floats(grad_in),
                                                                     rows, h);
    }
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
  }
  if (grad_bias == nullptr) return cudaSuccess;
  if (bf16) {
    return column_sums(SwigluGradient<uint16_t>{bits(grad_out), bits(in), h}, rows, 2 * h, grad_bias, partials, stream);
  }
  return column_sums(SwigluGradient<float>{floats(grad_out), floats(in), h}, rows, 2 * h, grad_bias, partials, stream);
}

cudaError_t launch_resample_positions_forward(const float* pos, int64_t kept, const float* wy, const float* wx,
                                              int64_t hd, int64_t hs, int64_t wd, int64_t ws, int64_t d, float* out,
                                              cudaStream_t stream) {
  const int64_t count = (kept + hd * wd) * d;
  if (count == 0) return cudaSuccess;
  resample_forward_kernel<<<grid_for(count), kBlock, 0, stream>>>(pos, kept, wy, wx, hd, hs, wd, ws, d, out);
  return cudaGetLastError();
}

cudaError_t launch_resample_positions_backward(const float* grad_out, int64_t kept, const float* wy, const float* wx,
                                               int64_t hd, int64_t hs, int64_t wd, int64_t ws, int64_t d,
                                               float* grad_pos, cudaStream_t stream) {
  const int64_t count = (kept + hs * ws) * d;
  if (count == 0) return cudaSuccess;
  resample_backward_kernel<<<grid_for(count), kBlock, 0, stream>>>(grad_out, kept, wy, wx, hd, hs, wd, ws, d, grad_pos);
  return cudaGetLastError();
}

cudaError_t launch_cls_attention_expand(const float* grad_out, const float* out, const float* lse, int64_t batch,
                                        int64_t tokens, int64_t d, int64_t heads, float* grad_full, float* out_full,
                                        float* lse_full, cudaStream_t stream) {
  const int64_t count = batch * tokens * (d > heads ? d : heads);
  if (count == 0) return cudaSuccess;
  cls_expand_kernel<<<grid_for(count), kBlock, 0, stream>>>(grad_out, out, lse, batch, tokens, d, heads, grad_full,
                                                            out_full, lse_full);
  return cudaGetLastError();
}

cudaError_t launch_strided_copy(const float* src, int64_t stride, float* dst, int64_t count, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  strided_copy_kernel<<<grid_for(count), kBlock, 0, stream>>>(src, stride, dst, count);
  return cudaGetLastError();
}

cudaError_t launch_add_into(const float* src, float* dst, int64_t count, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  add_into_kernel<<<grid_for(count), kBlock, 0, stream>>>(src, dst, count);
  return cudaGetLastError();
}

}  // namespace vitpipe::cuda
