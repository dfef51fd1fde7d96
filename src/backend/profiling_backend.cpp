#include "backend/profiling_backend.h"

namespace vitpipe {

const char* op_kind_name(OpKind kind) {
  switch (kind) {
    case OpKind::gemm:
      return "GEMM";
    case OpKind::gemm_gelu:
      return "GEMM+GELU";
    case OpKind::attention:
      return "attention";
    case OpKind::layernorm:
      return "LayerNorm";
    case OpKind::gelu:
      return "GELU";
    case OpKind::embedding:
      return "embedding";
    case OpKind::loss:
      return "loss";
    case OpKind::other:
      return "other";
    case OpKind::count:
      break;
  }
  return "?";
}

double ProfilingBackend::bytes_of(std::initializer_list<const Tensor*> tensors) {
  double total = 0.0;
  for (const Tensor* t : tensors) {
    if (t && t->defined()) total += static_cast<double>(t->nbytes());
  }
  return total;
}

namespace {

// 2 M N K for out[M, N] = a[M, K] . b[N, K]^T, read off the operands' shapes.
double gemm_flops(const Tensor& rows_by_k, const Tensor& n_by_k) {
  const double k = static_cast<double>(rows_by_k.dim(-1));
  return 2.0 * static_cast<double>(rows_by_k.numel()) / k * static_cast<double>(n_by_k.dim(0)) * k;
}

// Attention's products: the forward computes Q K^T and P V (2 x 2 B H T T d = 4 B T^2 D); the backward recomputes
// Q K^T and computes dV, dP, dQ and dK (10 B T^2 D). qkv [B, T, 3D].
double attention_flops(const Tensor& qkv, double products) {
  const double b = static_cast<double>(qkv.dim(0)), t = static_cast<double>(qkv.dim(1));
  const double d = static_cast<double>(qkv.dim(2)) / 3.0;
  return products * b * t * t * d;
}
// The classifier token's query only: T instead of T^2.
double cls_attention_flops(const Tensor& qkv, double products) {
  const double b = static_cast<double>(qkv.dim(0)), t = static_cast<double>(qkv.dim(1));
  return products * b * t * static_cast<double>(qkv.dim(2)) / 3.0;
}

}  // namespace

void ProfilingBackend::linear_forward(const Tensor& in, const Tensor& weight, const Tensor* bias,
                                      const Tensor* residual, const Tensor& out) {
  timed("linear forward", OpKind::gemm, gemm_flops(in, weight), bytes_of({&in, &weight, bias, residual, &out}),
        [&] { inner_.linear_forward(in, weight, bias, residual, out); });
}
void ProfilingBackend::linear_gelu_forward(const Tensor& in, const Tensor& weight, const Tensor& bias,
                                           const Tensor* pre_activation, const Tensor& out) {
  timed("linear+GELU forward", OpKind::gemm_gelu, gemm_flops(in, weight),
        bytes_of({&in, &weight, &bias, pre_activation, &out}),
        [&] { inner_.linear_gelu_forward(in, weight, bias, pre_activation, out); });
}
void ProfilingBackend::linear_backward_input(const Tensor& grad_out, const Tensor& weight, const Tensor& grad_in) {
  timed("linear backward (input)", OpKind::gemm, gemm_flops(grad_in, weight), bytes_of({&grad_out, &weight, &grad_in}),
        [&] { inner_.linear_backward_input(grad_out, weight, grad_in); });
}
void ProfilingBackend::linear_backward_weight(const Tensor& grad_out, const Tensor& in, const Tensor& grad_weight) {
  timed("linear backward (weight)", OpKind::gemm, gemm_flops(in, grad_weight),
        bytes_of({&grad_out, &in, &grad_weight, &grad_weight}),
        [&] { inner_.linear_backward_weight(grad_out, in, grad_weight); });
}
void ProfilingBackend::bias_backward(const Tensor& grad, const Tensor& grad_bias) {
  timed("bias backward", OpKind::other, 0.0, bytes_of({&grad, &grad_bias, &grad_bias}),
        [&] { inner_.bias_backward(grad, grad_bias); });
}
void ProfilingBackend::layernorm_forward(const Tensor& in, const Tensor& weight, const Tensor& bias, double eps,
                                         const Tensor& out, const Tensor& mean, const Tensor& rstd) {
  timed("LayerNorm forward", OpKind::layernorm, 0.0, bytes_of({&in, &weight, &bias, &out, &mean, &rstd}),
        [&] { inner_.layernorm_forward(in, weight, bias, eps, out, mean, rstd); });
}
void ProfilingBackend::layernorm_backward(const LayerNormBackwardArgs& a) {
  const bool residual_apart = a.grad_residual.defined() && a.grad_residual.raw() != a.grad_in.raw();
  timed("LayerNorm backward", OpKind::layernorm, 0.0,
        bytes_of({&a.grad_out, &a.in, &a.weight, &a.mean, &a.rstd, &a.grad_in,
                  residual_apart ? &a.grad_residual : nullptr,
                  a.grad_residual.defined() && !residual_apart ? &a.grad_in : nullptr, &a.grad_in_copy}),
        [&] { inner_.layernorm_backward(a); });
}
void ProfilingBackend::attention_forward(const Tensor& qkv, int64_t heads, const Tensor& lse, const Tensor& out) {
  timed("attention forward", OpKind::attention, attention_flops(qkv, 4.0), bytes_of({&qkv, &lse, &out}),
        [&] { inner_.attention_forward(qkv, heads, lse, out); });
}
void ProfilingBackend::attention_backward(const Tensor& grad_out, const Tensor& qkv, const Tensor& out,
                                          const Tensor& lse, int64_t heads, const Tensor& grad_qkv,
                                          const Tensor* grad_qkv_bias) {
  timed("attention backward", OpKind::attention, attention_flops(qkv, 10.0),
        bytes_of({&grad_out, &qkv, &out, &lse, &grad_qkv}),
        [&] { inner_.attention_backward(grad_out, qkv, out, lse, heads, grad_qkv, grad_qkv_bias); });
}
void ProfilingBackend::cls_attention_forward(const Tensor& qkv, int64_t heads, const Tensor& lse, const Tensor& out) {
  timed("classifier-token attention forward", OpKind::attention, cls_attention_flops(qkv, 4.0),
        bytes_of({&qkv, &lse, &out}), [&] { inner_.cls_attention_forward(qkv, heads, lse, out); });
}
void ProfilingBackend::cls_attention_backward(const Tensor& grad_out, const Tensor& qkv, const Tensor& out,
                                              const Tensor& lse, int64_t heads, const Tensor& grad_qkv,
                                              const Tensor* grad_qkv_bias) {
  timed("classifier-token attention backward", OpKind::attention, cls_attention_flops(qkv, 10.0),
        bytes_of({&grad_out, &qkv, &out, &lse, &grad_qkv}),
        [&] { inner_.cls_attention_backward(grad_out, qkv, out, lse, heads, grad_qkv, grad_qkv_bias); });
}
void ProfilingBackend::gelu_forward(const Tensor& in, const Tensor& out) {
  timed("GELU forward", OpKind::gelu, 0.0, bytes_of({&in, &out}), [&] { inner_.gelu_forward(in, out); });
}
void ProfilingBackend::gelu_backward(const Tensor& grad_out, const Tensor& in, const Tensor& grad_in,
                                     const Tensor* grad_bias) {
  timed("GELU backward", OpKind::gelu, 0.0, bytes_of({&grad_out, &in, &grad_in}),
        [&] { inner_.gelu_backward(grad_out, in, grad_in, grad_bias); });
}
void ProfilingBackend::patchify(const Tensor& images, int64_t patch, const Tensor& patches) {
  timed("patchify", OpKind::embedding, 0.0, bytes_of({&images, &patches}),
        [&] { inner_.patchify(images, patch, patches); });
}
void ProfilingBackend::embeddings_forward(const Tensor& patch_proj, const Tensor& cls, const Tensor& pos,
                                          const Tensor& x) {
  timed("embeddings forward", OpKind::embedding, 0.0, bytes_of({&patch_proj, &cls, &pos, &x}),
        [&] { inner_.embeddings_forward(patch_proj, cls, pos, x); });
}
void ProfilingBackend::embeddings_backward(const Tensor& grad_x, const Tensor& grad_cls, const Tensor& grad_pos,
                                           const Tensor& grad_patch_proj, const Tensor* grad_patch_bias) {
  timed("embeddings backward", OpKind::embedding, 0.0, bytes_of({&grad_x, &grad_cls, &grad_pos, &grad_patch_proj}),
        [&] { inner_.embeddings_backward(grad_x, grad_cls, grad_pos, grad_patch_proj, grad_patch_bias); });
}
void ProfilingBackend::gather_cls(const Tensor& x, const Tensor& out) {
  timed("gather classifier token", OpKind::other, 0.0, 2.0 * bytes_of({&out}), [&] { inner_.gather_cls(x, out); });
}
void ProfilingBackend::scatter_cls(const Tensor& grad, const Tensor& grad_x) {
  timed("scatter classifier token", OpKind::other, 0.0, bytes_of({&grad, &grad_x}),
        [&] { inner_.scatter_cls(grad, grad_x); });
}
double ProfilingBackend::bce_with_logits(const Tensor& logits, const Tensor& targets, const Tensor* pos_weight,
                                         const Tensor* weight, double grad_scale, const Tensor& grad_logits) {
  return timed("loss", OpKind::loss, 0.0, bytes_of({&logits, &targets, pos_weight, weight, &grad_logits}),
               [&] { return inner_.bce_with_logits(logits, targets, pos_weight, weight, grad_scale, grad_logits); });
}
double ProfilingBackend::cross_entropy(const Tensor& logits, const Tensor& targets, double grad_scale,
                                       const Tensor& grad_logits) {
  return timed("loss", OpKind::loss, 0.0, bytes_of({&logits, &targets, &grad_logits}),
               [&] { return inner_.cross_entropy(logits, targets, grad_scale, grad_logits); });
}
void ProfilingBackend::convert(const Tensor& src, const Tensor& dst) {
  timed("convert", OpKind::other, 0.0, bytes_of({&src, &dst}), [&] { inner_.convert(src, dst); });
}

}  // namespace vitpipe
