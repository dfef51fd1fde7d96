// The CPU backend: oneDNN for every GEMM, OpenMP + vectorised loops for the rest. One instance per thread of
// execution (a pipeline stage): it caches primitives and scratch memory and is not thread-safe itself.
#pragma once

#include "backend/backend.h"
#include "backend/cpu/onednn_matmul.h"
#include "backend/cpu/thread_partials.h"

namespace vitpipe::cpu {

class CpuBackend final : public Backend {
 public:
  std::string name() const override { return "cpu (oneDNN + OpenMP)"; }

  void linear_forward(const Tensor& in, const Tensor& weight, const Tensor* bias, const Tensor* residual,
                      const Tensor& out) override;
  void linear_backward_input(const Tensor& grad_out, const Tensor& weight, const Tensor& grad_in) override;
  void linear_backward_weight(const Tensor& grad_out, const Tensor& in, const Tensor& grad_weight) override;
  void bias_backward(const Tensor& grad, const Tensor& grad_bias) override;

  void layernorm_forward(const Tensor& in, const Tensor& weight, const Tensor& bias, double eps, const Tensor& out,
                         const Tensor& mean, const Tensor& rstd) override;
  void layernorm_backward(const LayerNormBackwardArgs& args) override;

  void attention_forward(const Tensor& qkv, int64_t heads, const Tensor& probs, const Tensor& out) override;
  void attention_backward(const Tensor& grad_out, const Tensor& qkv, const Tensor& probs, int64_t heads,
                          const Tensor& grad_qkv, const Tensor* grad_qkv_bias) override;

  void cls_attention_forward(const Tensor& qkv, int64_t heads, const Tensor& probs, const Tensor& out) override;
  void cls_attention_backward(const Tensor& grad_out, const Tensor& qkv, const Tensor& probs, int64_t heads,
                              const Tensor& grad_qkv, const Tensor* grad_qkv_bias) override;
  void gelu_forward(const Tensor& in, const Tensor& out) override;
  void gelu_backward(const Tensor& grad_out, const Tensor& in, const Tensor& grad_in, const Tensor* grad_bias) override;

  void patchify(const Tensor& images, int64_t patch, const Tensor& patches) override;
  void embeddings_forward(const Tensor& patch_proj, const Tensor& cls, const Tensor& pos, const Tensor& x) override;
  void embeddings_backward(const Tensor& grad_x, const Tensor& grad_cls, const Tensor& grad_pos,
                           const Tensor& grad_patch_proj, const Tensor* grad_patch_bias) override;

  void gather_cls(const Tensor& x, const Tensor& out) override;
  void scatter_cls(const Tensor& grad, const Tensor& grad_x) override;

  double bce_with_logits(const Tensor& logits, const Tensor& targets, const Tensor* pos_weight, const Tensor* weight,
                         double grad_scale, const Tensor& grad_logits) override;
  double cross_entropy(const Tensor& logits, const Tensor& targets, double grad_scale,
                       const Tensor& grad_logits) override;

  void convert(const Tensor& src, const Tensor& dst) override;

 private:
  MatmulCache matmuls_;
  ThreadPartials partials_;
  ThreadPartials partials2_;
  ThreadPartials partials3_;
  std::vector<float> attention_scratch_;
};

}  // namespace vitpipe::cpu
