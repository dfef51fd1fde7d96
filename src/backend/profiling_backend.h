// A Backend that forwards every call to another one and adds up, per operation, its wall time, its calls and the
// work it must do at least (FLOPs, and bytes: every tensor it reads or writes, once), for the breakdown `vitpipe
// bench` prints: by kind, and op by op against the time the op would take at the GEMM peak or the memory bandwidth.
// Calls are synchronous on CPU, so timing around them is exact.
#pragma once

#include <array>
#include <chrono>
#include <initializer_list>
#include <map>
#include <string>

#include "backend/backend.h"

namespace vitpipe {

// gemm_gelu: GEMMs with GELU applied to their output in the same call (fc1), kept apart so that the plain GEMMs'
// rate is their own.
enum class OpKind { gemm, gemm_gelu, attention, layernorm, gelu, embedding, loss, other, count };
const char* op_kind_name(OpKind kind);

struct OperationRecord {
  OpKind kind = OpKind::other;
  int64_t calls = 0;
  double seconds = 0.0;
  double flops = 0.0;  // multiply-adds count 2; elementwise work is not counted (those ops are bound by bytes)
  double bytes = 0.0;  // each tensor read or written once (accumulated outputs: read and written)
};

class ProfilingBackend final : public Backend {
 public:
  explicit ProfilingBackend(Backend& inner) : inner_(inner) {}
  std::string name() const override { return inner_.name(); }
  Tensor allocate(const Shape& shape, DType dtype) override { return inner_.allocate(shape, dtype); }
  bool host_accessible() const override { return inner_.host_accessible(); }
  double seconds(OpKind kind) const { return seconds_[static_cast<size_t>(kind)]; }
  // By operation name ("linear forward", "attention backward", ...).
  const std::map<std::string, OperationRecord>& operations() const { return operations_; }
  void reset() {
    seconds_.fill(0.0);
    operations_.clear();
  }

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
  // The model families' kernels (profiling_backend_families.cpp).
  void scale(const Tensor& in, double factor, const Tensor& out) override;
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
  // Optimizer steps, norms, zeroing, host copies: kind "other", bytes only (profiling_backend_families.cpp).
  void adamw_update(const OptimizerStep& step, const OptimizerScalars& s) override;
  void lamb_moments(const OptimizerStep& step, const OptimizerScalars& s, std::span<double> squares) override;
  void lamb_update(const OptimizerStep& step, const OptimizerScalars& s) override;
  void sgd_update(const OptimizerStep& step, const OptimizerScalars& s) override;
  double sum_of_squares(const Tensor& x, std::span<const int64_t> bounds) override;
  void zero(const Tensor& t) override;
  void copy_to_host(const Tensor& device, const Tensor& host) override;
  void copy_from_host(const Tensor& host, const Tensor& device) override;

 private:
  template <class F>
  auto timed(const char* operation, OpKind kind, double flops, double bytes, F&& call) {
    const auto start = std::chrono::steady_clock::now();
    struct Stop {
      ProfilingBackend* self;
      const char* operation;
      OpKind kind;
      double flops, bytes;
      std::chrono::steady_clock::time_point start;
      ~Stop() {
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        self->seconds_[static_cast<size_t>(kind)] += s;
        OperationRecord& r = self->operations_[operation];
        r.kind = kind;
        r.calls += 1;
        r.seconds += s;
        r.flops += flops;
        r.bytes += bytes;
      }
    } stop{this, operation, kind, flops, bytes, start};
    return call();
  }
  // The bytes of the given tensors (null or empty ones count nothing).
  static double bytes_of(std::initializer_list<const Tensor*> tensors);
  Backend& inner_;
  std::array<double, static_cast<size_t>(OpKind::count)> seconds_{};
  std::map<std::string, OperationRecord> operations_;
};

}  // namespace vitpipe
