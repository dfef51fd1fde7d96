// The CPU backend: oneDNN for every GEMM, OpenMP + vectorised loops for the rest. One instance per thread of
// execution (a pipeline stage): it caches primitives and scratch memory and is not thread-safe itself.
// This class is compiled once per CPU level (every file under kernels/, CMakeLists.txt), each copy in its own
// namespace (VITPIPE_CPU_LEVEL_NS = avx2, avx512, avx512_bf16, amx): its vtable is the level's kernel table, and
// make_cpu_backend() picks one at run time.
#pragma once

#include <memory>

#include "backend/backend.h"
#include "backend/cpu/cpu_level.h"
#include "backend/cpu/onednn_matmul.h"
#include "backend/cpu/thread_partials.h"

#ifndef VITPIPE_CPU_LEVEL_NS
#error "kernels/cpu_backend.h is compiled once per CPU level with VITPIPE_CPU_LEVEL_NS set"
#endif

namespace vitpipe::cpu::VITPIPE_CPU_LEVEL_NS {

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(CpuLevel level) : level_(level) {}
  std::string name() const override;
  Tensor allocate(const Shape& shape, DType dtype) override { return Tensor::empty(shape, dtype); }
  bool host_accessible() const override { return true; }

  void linear_forward(const Tensor& in, const Tensor& weight, const Tensor* bias, const Tensor* residual,
                      const Tensor& out) override;
  void linear_gelu_forward(const Tensor& in, const Tensor& weight, const Tensor& bias, const Tensor* pre_activation,
                           const Tensor& out) override;
  void linear_backward_input(const Tensor& grad_out, const Tensor& weight, const Tensor& grad_in) override;
  void linear_backward_weight(const Tensor& grad_out, const Tensor& in, const Tensor& grad_weight) override;
  void bias_backward(const Tensor& grad, const Tensor& grad_bias) override;

  void layernorm_forward(const Tensor& in, const Tensor& weight, const Tensor& bias, double eps, const Tensor& out,
                         const Tensor& mean, const Tensor& rstd) override;
  void layernorm_backward(const LayerNormBackwardArgs& args) override;

  void attention_forward(const Tensor& qkv, int64_t heads, const Tensor& lse, const Tensor& out) override;
  void attention_backward(const Tensor& grad_out, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                          int64_t heads, const Tensor& grad_qkv, const Tensor* grad_qkv_bias) override;

  void cls_attention_forward(const Tensor& qkv, int64_t heads, const Tensor& lse, const Tensor& out) override;
  void cls_attention_backward(const Tensor& grad_out, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                              int64_t heads, const Tensor& grad_qkv, const Tensor* grad_qkv_bias) override;
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
  void scale(const Tensor& in, double factor, const Tensor& out) override;

  // Optimizer steps, norms, zeroing, host copies (kernels/optimizer.cpp: the baseline loops of
  // backend/cpu/optimizer_kernels.h).
  void adamw_update(const OptimizerStep& step, const OptimizerScalars& s) override;
  void lamb_moments(const OptimizerStep& step, const OptimizerScalars& s, std::span<double> squares) override;
  void lamb_update(const OptimizerStep& step, const OptimizerScalars& s) override;
  void sgd_update(const OptimizerStep& step, const OptimizerScalars& s) override;
  double sum_of_squares(const Tensor& x, std::span<const int64_t> bounds) override;
  void zero(const Tensor& t) override;
  void copy_to_host(const Tensor& device, const Tensor& host) override;
  void copy_from_host(const Tensor& host, const Tensor& device) override;

  void token_embeddings_forward(const Tensor& patch_proj, const Tensor& prefix, int64_t positioned, const Tensor& pos,
                                const Tensor& x) override;
  void token_embeddings_backward(const Tensor& grad_x, const Tensor* grad_prefix, int64_t positioned,
                                 const Tensor* grad_pos, const Tensor& grad_patch_proj,
                                 const Tensor* grad_patch_bias) override;
  void resample_positions_forward(const Tensor& pos, int64_t kept, const Tensor& wy, const Tensor& wx,
                                  const Tensor& out) override;
  void resample_positions_backward(const Tensor& grad_out, int64_t kept, const Tensor& wy, const Tensor& wx,
                                   const Tensor& grad_pos) override;
  void layer_scale_forward(const Tensor& branch, const Tensor& scale, const Tensor& residual,
                           const Tensor& out) override;
  void layer_scale_backward(const Tensor& grad, const Tensor& branch, const Tensor& scale, const Tensor& branch_grad,
                            const Tensor* grad_scale, const Tensor* grad_bias) override;
  void swiglu_forward(const Tensor& in, const Tensor& out) override;
  void swiglu_backward(const Tensor& grad_out, const Tensor& in, const Tensor& grad_in,
                       const Tensor* grad_bias) override;
  void gather_tokens(const Tensor& x, int64_t count, const Tensor& out) override;
  void scatter_tokens(const Tensor& grad, const Tensor& grad_x) override;
  void cls_and_mean_forward(const Tensor& x, int64_t skip, const Tensor& out) override;
  void cls_and_mean_backward(const Tensor& grad, int64_t skip, const Tensor& grad_x) override;
  void lora_forward(const Tensor& in, const Tensor& a, const Tensor& b, double scale, const Tensor& low,
                    const Tensor& out, int64_t column) override;
  void lora_backward(const Tensor& grad_out, int64_t column, const Tensor& in, const Tensor& a, const Tensor& b,
                     double scale, const Tensor& low, const Tensor* grad_in, const Tensor* grad_a,
                     const Tensor* grad_b) override;

 private:
  CpuLevel level_;
  MatmulCache matmuls_;
  ThreadPartials partials_;
  ThreadPartials partials2_;
  ThreadPartials partials3_;
  std::vector<float> attention_scratch_;
  std::vector<float> weight_partials_;  // linear_backward_weight's per-thread partial gradients
};

// This level's backend; `level` is what it reports.
std::unique_ptr<Backend> make_backend(CpuLevel level);
// What runs this level's bf16 attention: "amx-tiles", "emulated-tiles", "tiles-without-products" or "onednn".
const char* attention_unit();

}  // namespace vitpipe::cpu::VITPIPE_CPU_LEVEL_NS
