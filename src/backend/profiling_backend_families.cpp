// ProfilingBackend for the model families' kernels (LoRA counts as GEMM work, SwiGLU as the activation).
#include "backend/profiling_backend.h"

namespace vitpipe {

void ProfilingBackend::scale(const Tensor& in, double factor, const Tensor& out) {
  timed("scale", OpKind::other, 0.0, bytes_of({&in, &out}), [&] { inner_.scale(in, factor, out); });
}
void ProfilingBackend::token_embeddings_forward(const Tensor& patch_proj, const Tensor& prefix, int64_t positioned,
                                                const Tensor& pos, const Tensor& x) {
  timed("embeddings forward", OpKind::embedding, 0.0, bytes_of({&patch_proj, &prefix, &pos, &x}),
        [&] { inner_.token_embeddings_forward(patch_proj, prefix, positioned, pos, x); });
}
void ProfilingBackend::token_embeddings_backward(const Tensor& grad_x, const Tensor* grad_prefix, int64_t positioned,
                                                 const Tensor* grad_pos, const Tensor& grad_patch_proj,
                                                 const Tensor* grad_patch_bias) {
  timed("embeddings backward", OpKind::embedding, 0.0, bytes_of({&grad_x, grad_prefix, grad_pos, &grad_patch_proj}),
        [&] {
          inner_.token_embeddings_backward(grad_x, grad_prefix, positioned, grad_pos, grad_patch_proj, grad_patch_bias);
        });
}
void ProfilingBackend::resample_positions_forward(const Tensor& pos, int64_t kept, const Tensor& wy, const Tensor& wx,
                                                  const Tensor& out) {
  timed("position resampling forward", OpKind::embedding, 0.0, bytes_of({&pos, &out}),
        [&] { inner_.resample_positions_forward(pos, kept, wy, wx, out); });
}
void ProfilingBackend::resample_positions_backward(const Tensor& grad_out, int64_t kept, const Tensor& wy,
                                                   const Tensor& wx, const Tensor& grad_pos) {
  timed("position resampling backward", OpKind::embedding, 0.0, bytes_of({&grad_out, &grad_pos, &grad_pos}),
        [&] { inner_.resample_positions_backward(grad_out, kept, wy, wx, grad_pos); });
}
void ProfilingBackend::layer_scale_forward(const Tensor& branch, const Tensor& scale, const Tensor& residual,
                                           const Tensor& out) {
  timed("LayerScale forward", OpKind::other, 0.0, bytes_of({&branch, &residual, &out}),
        [&] { inner_.layer_scale_forward(branch, scale, residual, out); });
}
void ProfilingBackend::layer_scale_backward(const Tensor& grad, const Tensor& branch, const Tensor& scale,
                                            const Tensor& branch_grad, const Tensor* grad_scale,
                                            const Tensor* grad_bias) {
  timed("LayerScale backward", OpKind::other, 0.0, bytes_of({&grad, &branch, &branch_grad}),
        [&] { inner_.layer_scale_backward(grad, branch, scale, branch_grad, grad_scale, grad_bias); });
}
void ProfilingBackend::swiglu_forward(const Tensor& in, const Tensor& out) {
  timed("SwiGLU forward", OpKind::gelu, 0.0, bytes_of({&in, &out}), [&] { inner_.swiglu_forward(in, out); });
}
void ProfilingBackend::swiglu_backward(const Tensor& grad_out, const Tensor& in, const Tensor& grad_in,
                                       const Tensor* grad_bias) {
  timed("SwiGLU backward", OpKind::gelu, 0.0, bytes_of({&grad_out, &in, &grad_in}),
        [&] { inner_.swiglu_backward(grad_out, in, grad_in, grad_bias); });
}
void ProfilingBackend::gather_tokens(const Tensor& x, int64_t count, const Tensor& out) {
  timed("gather tokens", OpKind::other, 0.0, 2.0 * bytes_of({&out}), [&] { inner_.gather_tokens(x, count, out); });
}
void ProfilingBackend::scatter_tokens(const Tensor& grad, const Tensor& grad_x) {
  timed("scatter tokens", OpKind::other, 0.0, bytes_of({&grad, &grad_x}), [&] { inner_.scatter_tokens(grad, grad_x); });
}
void ProfilingBackend::cls_and_mean_forward(const Tensor& x, int64_t skip, const Tensor& out) {
  timed("classifier token and mean forward", OpKind::other, 0.0, bytes_of({&x, &out}),
        [&] { inner_.cls_and_mean_forward(x, skip, out); });
}
void ProfilingBackend::cls_and_mean_backward(const Tensor& grad, int64_t skip, const Tensor& grad_x) {
  timed("classifier token and mean backward", OpKind::other, 0.0, bytes_of({&grad, &grad_x}),
        [&] { inner_.cls_and_mean_backward(grad, skip, grad_x); });
}
// LoRA: low = in . a^T (2 M r K), out[:, c] += low . b^T (2 M N r); the backward does each product twice more.
void ProfilingBackend::lora_forward(const Tensor& in, const Tensor& a, const Tensor& b, double scale, const Tensor& low,
                                    const Tensor& out, int64_t column) {
  const double m = static_cast<double>(low.dim(0)), r = static_cast<double>(a.dim(0));
  const double flops = 2.0 * m * r * (static_cast<double>(a.dim(1)) + static_cast<double>(b.dim(0)));
  timed("LoRA forward", OpKind::gemm, flops, bytes_of({&in, &a, &b, &low, &out, &out}),
        [&] { inner_.lora_forward(in, a, b, scale, low, out, column); });
}
void ProfilingBackend::lora_backward(const Tensor& grad_out, int64_t column, const Tensor& in, const Tensor& a,
                                     const Tensor& b, double scale, const Tensor& low, const Tensor* grad_in,
                                     const Tensor* grad_a, const Tensor* grad_b) {
  const double m = static_cast<double>(low.dim(0)), r = static_cast<double>(a.dim(0));
  const double flops = 4.0 * m * r * (static_cast<double>(a.dim(1)) + static_cast<double>(b.dim(0)));
  timed("LoRA backward", OpKind::gemm, flops,
        bytes_of({&grad_out, &in, &a, &b, &low, grad_in, grad_in, grad_a, grad_b}),
        [&] { inner_.lora_backward(grad_out, column, in, a, b, scale, low, grad_in, grad_a, grad_b); });
}

void ProfilingBackend::adamw_update(const OptimizerStep& step, const OptimizerScalars& s) {
  timed("adamw update", OpKind::other, 0.0, bytes_of({&step.params, &step.grads, &step.exp_avg, &step.exp_avg_sq}),
        [&] { inner_.adamw_update(step, s); });
}
void ProfilingBackend::lamb_moments(const OptimizerStep& step, const OptimizerScalars& s, std::span<double> squares) {
  timed("lamb moments", OpKind::other, 0.0, bytes_of({&step.params, &step.grads, &step.exp_avg, &step.exp_avg_sq}),
        [&] { inner_.lamb_moments(step, s, squares); });
}
void ProfilingBackend::lamb_update(const OptimizerStep& step, const OptimizerScalars& s) {
  timed("lamb update", OpKind::other, 0.0, bytes_of({&step.params, &step.exp_avg, &step.exp_avg_sq}),
        [&] { inner_.lamb_update(step, s); });
}
void ProfilingBackend::sgd_update(const OptimizerStep& step, const OptimizerScalars& s) {
  timed("sgd update", OpKind::other, 0.0, bytes_of({&step.params, &step.grads, &step.exp_avg}),
        [&] { inner_.sgd_update(step, s); });
}
double ProfilingBackend::sum_of_squares(const Tensor& x, std::span<const int64_t> bounds) {
  return timed("sum of squares", OpKind::other, 0.0, bytes_of({&x}), [&] { return inner_.sum_of_squares(x, bounds); });
}
void ProfilingBackend::zero(const Tensor& t) {
  timed("zero", OpKind::other, 0.0, bytes_of({&t}), [&] { inner_.zero(t); });
}
void ProfilingBackend::copy_to_host(const Tensor& device, const Tensor& host) {
  timed("copy to host", OpKind::other, 0.0, bytes_of({&device, &host}), [&] { inner_.copy_to_host(device, host); });
}
void ProfilingBackend::copy_from_host(const Tensor& host, const Tensor& device) {
  timed("copy from host", OpKind::other, 0.0, bytes_of({&host, &device}), [&] { inner_.copy_from_host(host, device); });
}

}  // namespace vitpipe
