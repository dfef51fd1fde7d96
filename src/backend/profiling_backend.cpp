#include "backend/profiling_backend.h"

namespace vitpipe {

const char* op_kind_name(OpKind kind) {
  switch (kind) {
    case OpKind::gemm:
      return "GEMM";
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

void ProfilingBackend::linear_forward(const Tensor& in, const Tensor& weight, const Tensor* bias,
                                      const Tensor* residual, const Tensor& out) {
  timed(OpKind::gemm, [&] { inner_.linear_forward(in, weight, bias, residual, out); });
}
void ProfilingBackend::linear_gelu_forward(const Tensor& in, const Tensor& weight, const Tensor& bias,
                                           const Tensor& out) {
  timed(OpKind::gemm, [&] { inner_.linear_gelu_forward(in, weight, bias, out); });
}
void ProfilingBackend::linear_backward_input(const Tensor& grad_out, const Tensor& weight, const Tensor& grad_in) {
  timed(OpKind::gemm, [&] { inner_.linear_backward_input(grad_out, weight, grad_in); });
}
void ProfilingBackend::linear_backward_weight(const Tensor& grad_out, const Tensor& in, const Tensor& grad_weight) {
  timed(OpKind::gemm, [&] { inner_.linear_backward_weight(grad_out, in, grad_weight); });
}
void ProfilingBackend::bias_backward(const Tensor& grad, const Tensor& grad_bias) {
  timed(OpKind::other, [&] { inner_.bias_backward(grad, grad_bias); });
}
void ProfilingBackend::layernorm_forward(const Tensor& in, const Tensor& weight, const Tensor& bias, double eps,
                                         const Tensor& out, const Tensor& mean, const Tensor& rstd) {
  timed(OpKind::layernorm, [&] { inner_.layernorm_forward(in, weight, bias, eps, out, mean, rstd); });
}
void ProfilingBackend::layernorm_backward(const LayerNormBackwardArgs& args) {
  timed(OpKind::layernorm, [&] { inner_.layernorm_backward(args); });
}
void ProfilingBackend::attention_forward(const Tensor& qkv, int64_t heads, const Tensor& lse, const Tensor& out) {
  timed(OpKind::attention, [&] { inner_.attention_forward(qkv, heads, lse, out); });
}
void ProfilingBackend::attention_backward(const Tensor& grad_out, const Tensor& qkv, const Tensor& out,
                                          const Tensor& lse, int64_t heads, const Tensor& grad_qkv,
                                          const Tensor* grad_qkv_bias) {
  timed(OpKind::attention, [&] { inner_.attention_backward(grad_out, qkv, out, lse, heads, grad_qkv, grad_qkv_bias); });
}
void ProfilingBackend::cls_attention_forward(const Tensor& qkv, int64_t heads, const Tensor& lse, const Tensor& out) {
  timed(OpKind::attention, [&] { inner_.cls_attention_forward(qkv, heads, lse, out); });
}
void ProfilingBackend::cls_attention_backward(const Tensor& grad_out, const Tensor& qkv, const Tensor& out,
                                              const Tensor& lse, int64_t heads, const Tensor& grad_qkv,
                                              const Tensor* grad_qkv_bias) {
  timed(OpKind::attention,
        [&] { inner_.cls_attention_backward(grad_out, qkv, out, lse, heads, grad_qkv, grad_qkv_bias); });
}
void ProfilingBackend::gelu_forward(const Tensor& in, const Tensor& out) {
  timed(OpKind::gelu, [&] { inner_.gelu_forward(in, out); });
}
void ProfilingBackend::gelu_backward(const Tensor& grad_out, const Tensor& in, const Tensor& grad_in,
                                     const Tensor* grad_bias) {
  timed(OpKind::gelu, [&] { inner_.gelu_backward(grad_out, in, grad_in, grad_bias); });
}
void ProfilingBackend::patchify(const Tensor& images, int64_t patch, const Tensor& patches) {
  timed(OpKind::embedding, [&] { inner_.patchify(images, patch, patches); });
}
void ProfilingBackend::embeddings_forward(const Tensor& patch_proj, const Tensor& cls, const Tensor& pos,
                                          const Tensor& x) {
  timed(OpKind::embedding, [&] { inner_.embeddings_forward(patch_proj, cls, pos, x); });
}
void ProfilingBackend::embeddings_backward(const Tensor& grad_x, const Tensor& grad_cls, const Tensor& grad_pos,
                                           const Tensor& grad_patch_proj, const Tensor* grad_patch_bias) {
  timed(OpKind::embedding,
        [&] { inner_.embeddings_backward(grad_x, grad_cls, grad_pos, grad_patch_proj, grad_patch_bias); });
}
void ProfilingBackend::gather_cls(const Tensor& x, const Tensor& out) {
  timed(OpKind::other, [&] { inner_.gather_cls(x, out); });
}
void ProfilingBackend::scatter_cls(const Tensor& grad, const Tensor& grad_x) {
  timed(OpKind::other, [&] { inner_.scatter_cls(grad, grad_x); });
}
double ProfilingBackend::bce_with_logits(const Tensor& logits, const Tensor& targets, const Tensor* pos_weight,
                                         const Tensor* weight, double grad_scale, const Tensor& grad_logits) {
  return timed(OpKind::loss,
               [&] { return inner_.bce_with_logits(logits, targets, pos_weight, weight, grad_scale, grad_logits); });
}
double ProfilingBackend::cross_entropy(const Tensor& logits, const Tensor& targets, double grad_scale,
                                       const Tensor& grad_logits) {
  return timed(OpKind::loss, [&] { return inner_.cross_entropy(logits, targets, grad_scale, grad_logits); });
}
void ProfilingBackend::convert(const Tensor& src, const Tensor& dst) {
  timed(OpKind::other, [&] { inner_.convert(src, dst); });
}

}  // namespace vitpipe
