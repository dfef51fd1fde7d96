#include "backend/cuda_module_backend.h"

#include "backend/backend_call.h"
#include "util/error.h"

namespace vitpipe {
namespace {

class CudaModuleBackend final : public Backend {
 public:
  CudaModuleBackend(const VitpipeCudaModule& module, int device, bool allow_tf32) : module_(module) {
    VP_REQUIRE(module.has_backend != 0 && module.backend_create != nullptr && module.backend_call != nullptr &&
                   module.backend_destroy != nullptr,
               "the CUDA module has no backend");
    VP_REQUIRE(module.backend_allocate != nullptr && module.backend_free != nullptr,
               "the CUDA module has no device memory entries");
    char error[512] = {};
    void* instance = nullptr;
    if (module.backend_create(device, allow_tf32 ? 1 : 0, &instance, error, sizeof error) != 0 || instance == nullptr) {
      fail("the CUDA backend could not start on GPU ", device, ": ", error);
    }
    // Shared with every tensor allocate() hands out: the module's backend lives until the last of them is freed.
    const VitpipeCudaModule* m = &module;
    instance_ = std::shared_ptr<void>(instance, [m](void* p) { m->backend_destroy(p); });
  }
  CudaModuleBackend(const CudaModuleBackend&) = delete;
  CudaModuleBackend& operator=(const CudaModuleBackend&) = delete;

  std::string name() const override { return "cuda"; }

  Tensor allocate(const Shape& shape, DType dtype) override {
    const size_t bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
    void* memory = nullptr;
    char error[512] = {};
    if (module_.backend_allocate(instance_.get(), bytes, &memory, error, sizeof error) != 0) {
      fail("CUDA backend: cannot allocate ", bytes, " bytes for a tensor of shape ", shape_string(shape), ": ", error);
    }
    const VitpipeCudaModule* m = &module_;
    std::shared_ptr<void> instance = instance_;
    auto owner = std::shared_ptr<void>(memory, [m, instance](void* p) { m->backend_free(instance.get(), p); });
    return Tensor::wrap_device(memory, shape, dtype, Device::cuda, std::move(owner));
  }
  bool host_accessible() const override { return false; }
  CudaModuleInstance instance() const { return {&module_, instance_}; }

  void linear_forward(const Tensor& in, const Tensor& weight, const Tensor* bias, const Tensor* residual,
                      const Tensor& out) override {
    run(BackendCallBuilder(VITPIPE_OP_LINEAR_FORWARD)
            .tensor(in)
            .tensor(weight)
            .optional(bias)
            .optional(residual)
            .tensor(out));
  }
  void linear_gelu_forward(const Tensor& in, const Tensor& weight, const Tensor& bias, const Tensor* pre_activation,
                           const Tensor& out) override {
    run(BackendCallBuilder(VITPIPE_OP_LINEAR_GELU_FORWARD)
            .tensor(in)
            .tensor(weight)
            .tensor(bias)
            .optional(pre_activation)
            .tensor(out));
  }
  void linear_backward_input(const Tensor& grad_out, const Tensor& weight, const Tensor& grad_in) override {
    run(BackendCallBuilder(VITPIPE_OP_LINEAR_BACKWARD_INPUT).tensor(grad_out).tensor(weight).tensor(grad_in));
  }
  void linear_backward_weight(const Tensor& grad_out, const Tensor& in, const Tensor& grad_weight) override {
    run(BackendCallBuilder(VITPIPE_OP_LINEAR_BACKWARD_WEIGHT).tensor(grad_out).tensor(in).tensor(grad_weight));
  }
  void bias_backward(const Tensor& grad, const Tensor& grad_bias) override {
    run(BackendCallBuilder(VITPIPE_OP_BIAS_BACKWARD).tensor(grad).tensor(grad_bias));
  }
  void layernorm_forward(const Tensor& in, const Tensor& weight, const Tensor& bias, double eps, const Tensor& out,
                         const Tensor& mean, const Tensor& rstd) override {
    run(BackendCallBuilder(VITPIPE_OP_LAYERNORM_FORWARD)
            .tensor(in)
            .tensor(weight)
            .tensor(bias)
            .tensor(out)
            .tensor(mean)
            .tensor(rstd)
            .scalar(eps));
  }
  void layernorm_backward(const LayerNormBackwardArgs& a) override {
    run(BackendCallBuilder(VITPIPE_OP_LAYERNORM_BACKWARD)
            .tensor(a.grad_out)
            .tensor(a.in)
            .tensor(a.weight)
            .tensor(a.mean)
            .tensor(a.rstd)
            .tensor(a.grad_in)
            .tensor(a.grad_residual)
            .tensor(a.grad_weight)
            .tensor(a.grad_bias)
            .tensor(a.grad_in_copy)
            .tensor(a.grad_in_colsum));
  }
  void attention_forward(const Tensor& qkv, int64_t heads, const Tensor& lse, const Tensor& out) override {
    run(BackendCallBuilder(VITPIPE_OP_ATTENTION_FORWARD).tensor(qkv).tensor(lse).tensor(out).integer(heads));
  }
  void attention_backward(const Tensor& grad_out, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                          int64_t heads, const Tensor& grad_qkv, const Tensor* grad_qkv_bias) override {
    run(BackendCallBuilder(VITPIPE_OP_ATTENTION_BACKWARD)
            .tensor(grad_out)
            .tensor(qkv)
            .tensor(out)
            .tensor(lse)
            .tensor(grad_qkv)
            .optional(grad_qkv_bias)
            .integer(heads));
  }
  void cls_attention_forward(const Tensor& qkv, int64_t heads, const Tensor& lse, const Tensor& out) override {
    run(BackendCallBuilder(VITPIPE_OP_CLS_ATTENTION_FORWARD).tensor(qkv).tensor(lse).tensor(out).integer(heads));
  }
  void cls_attention_backward(const Tensor& grad_out, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                              int64_t heads, const Tensor& grad_qkv, const Tensor* grad_qkv_bias) override {
    run(BackendCallBuilder(VITPIPE_OP_CLS_ATTENTION_BACKWARD)
            .tensor(grad_out)
            .tensor(qkv)
            .tensor(out)
            .tensor(lse)
            .tensor(grad_qkv)
            .optional(grad_qkv_bias)
            .integer(heads));
  }
  void gelu_forward(const Tensor& in, const Tensor& out) override {
    run(BackendCallBuilder(VITPIPE_OP_GELU_FORWARD).tensor(in).tensor(out));
  }
  void gelu_backward(const Tensor& grad_out, const Tensor& in, const Tensor& grad_in,
                     const Tensor* grad_bias) override {
    run(BackendCallBuilder(VITPIPE_OP_GELU_BACKWARD).tensor(grad_out).tensor(in).tensor(grad_in).optional(grad_bias));
  }
  void patchify(const Tensor& images, int64_t patch, const Tensor& patches) override {
    run(BackendCallBuilder(VITPIPE_OP_PATCHIFY).tensor(images).tensor(patches).integer(patch));
  }
  void embeddings_forward(const Tensor& patch_proj, const Tensor& cls, const Tensor& pos, const Tensor& x) override {
    run(BackendCallBuilder(VITPIPE_OP_EMBEDDINGS_FORWARD).tensor(patch_proj).tensor(cls).tensor(pos).tensor(x));
  }
  void embeddings_backward(const Tensor& grad_x, const Tensor& grad_cls, const Tensor& grad_pos,
                           const Tensor& grad_patch_proj, const Tensor* grad_patch_bias) override {
    run(BackendCallBuilder(VITPIPE_OP_EMBEDDINGS_BACKWARD)
            .tensor(grad_x)
            .tensor(grad_cls)
            .tensor(grad_pos)
            .tensor(grad_patch_proj)
            .optional(grad_patch_bias));
  }
  void gather_cls(const Tensor& x, const Tensor& out) override {
    run(BackendCallBuilder(VITPIPE_OP_GATHER_CLS).tensor(x).tensor(out));
  }
  void scatter_cls(const Tensor& grad, const Tensor& grad_x) override {
    run(BackendCallBuilder(VITPIPE_OP_SCATTER_CLS).tensor(grad).tensor(grad_x));
  }
  double bce_with_logits(const Tensor& logits, const Tensor& targets, const Tensor* pos_weight, const Tensor* weight,
                         double grad_scale, const Tensor& grad_logits) override {
    return run(BackendCallBuilder(VITPIPE_OP_BCE_WITH_LOGITS)
                   .tensor(logits)
                   .tensor(targets)
                   .optional(pos_weight)
                   .optional(weight)
                   .tensor(grad_logits)
                   .scalar(grad_scale));
  }
  double cross_entropy(const Tensor& logits, const Tensor& targets, double grad_scale,
                       const Tensor& grad_logits) override {
    return run(BackendCallBuilder(VITPIPE_OP_CROSS_ENTROPY)
                   .tensor(logits)
                   .tensor(targets)
                   .tensor(grad_logits)
                   .scalar(grad_scale));
  }
  void convert(const Tensor& src, const Tensor& dst) override {
    run(BackendCallBuilder(VITPIPE_OP_CONVERT).tensor(src).tensor(dst));
  }
  void scale(const Tensor& in, double factor, const Tensor& out) override {
    run(BackendCallBuilder(VITPIPE_OP_SCALE).tensor(in).tensor(out).scalar(factor));
  }
  void token_embeddings_forward(const Tensor& patch_proj, const Tensor& prefix, int64_t positioned, const Tensor& pos,
                                const Tensor& x) override {
    run(BackendCallBuilder(VITPIPE_OP_TOKEN_EMBEDDINGS_FORWARD)
            .tensor(patch_proj)
            .tensor(prefix)
            .tensor(pos)
            .tensor(x)
            .integer(positioned));
  }
  void token_embeddings_backward(const Tensor& grad_x, const Tensor* grad_prefix, int64_t positioned,
                                 const Tensor* grad_pos, const Tensor& grad_patch_proj,
                                 const Tensor* grad_patch_bias) override {
    run(BackendCallBuilder(VITPIPE_OP_TOKEN_EMBEDDINGS_BACKWARD)
            .tensor(grad_x)
            .optional(grad_prefix)
            .optional(grad_pos)
            .tensor(grad_patch_proj)
            .optional(grad_patch_bias)
            .integer(positioned));
  }
  void resample_positions_forward(const Tensor& pos, int64_t kept, const Tensor& wy, const Tensor& wx,
                                  const Tensor& out) override {
    run(BackendCallBuilder(VITPIPE_OP_RESAMPLE_POSITIONS_FORWARD)
            .tensor(pos)
            .tensor(wy)
            .tensor(wx)
            .tensor(out)
            .integer(kept));
  }
  void resample_positions_backward(const Tensor& grad_out, int64_t kept, const Tensor& wy, const Tensor& wx,
                                   const Tensor& grad_pos) override {
    run(BackendCallBuilder(VITPIPE_OP_RESAMPLE_POSITIONS_BACKWARD)
            .tensor(grad_out)
            .tensor(wy)
            .tensor(wx)
            .tensor(grad_pos)
            .integer(kept));
  }
  void layer_scale_forward(const Tensor& branch, const Tensor& scale, const Tensor& residual,
                           const Tensor& out) override {
    run(BackendCallBuilder(VITPIPE_OP_LAYER_SCALE_FORWARD).tensor(branch).tensor(scale).tensor(residual).tensor(out));
  }
  void layer_scale_backward(const Tensor& grad, const Tensor& branch, const Tensor& scale, const Tensor& branch_grad,
                            const Tensor* grad_scale, const Tensor* grad_bias) override {
    run(BackendCallBuilder(VITPIPE_OP_LAYER_SCALE_BACKWARD)
            .tensor(grad)
            .tensor(branch)
            .tensor(scale)
            .tensor(branch_grad)
            .optional(grad_scale)
            .optional(grad_bias));
  }
  void swiglu_forward(const Tensor& in, const Tensor& out) override {
    run(BackendCallBuilder(VITPIPE_OP_SWIGLU_FORWARD).tensor(in).tensor(out));
  }
  void swiglu_backward(const Tensor& grad_out, const Tensor& in, const Tensor& grad_in,
                       const Tensor* grad_bias) override {
    run(BackendCallBuilder(VITPIPE_OP_SWIGLU_BACKWARD).tensor(grad_out).tensor(in).tensor(grad_in).optional(grad_bias));
  }
  void gather_tokens(const Tensor& x, int64_t count, const Tensor& out) override {
    run(BackendCallBuilder(VITPIPE_OP_GATHER_TOKENS).tensor(x).tensor(out).integer(count));
  }
  void scatter_tokens(const Tensor& grad, const Tensor& grad_x) override {
    run(BackendCallBuilder(VITPIPE_OP_SCATTER_TOKENS).tensor(grad).tensor(grad_x));
  }
  void cls_and_mean_forward(const Tensor& x, int64_t skip, const Tensor& out) override {
    run(BackendCallBuilder(VITPIPE_OP_CLS_AND_MEAN_FORWARD).tensor(x).tensor(out).integer(skip));
  }
  void cls_and_mean_backward(const Tensor& grad, int64_t skip, const Tensor& grad_x) override {
    run(BackendCallBuilder(VITPIPE_OP_CLS_AND_MEAN_BACKWARD).tensor(grad).tensor(grad_x).integer(skip));
  }
  void lora_forward(const Tensor& in, const Tensor& a, const Tensor& b, double scale, const Tensor& low,
                    const Tensor& out, int64_t column) override {
    run(BackendCallBuilder(VITPIPE_OP_LORA_FORWARD)
            .tensor(in)
            .tensor(a)
            .tensor(b)
            .tensor(low)
            .tensor(out)
            .scalar(scale)
            .integer(column));
  }
  void lora_backward(const Tensor& grad_out, int64_t column, const Tensor& in, const Tensor& a, const Tensor& b,
                     double scale, const Tensor& low, const Tensor* grad_in, const Tensor* grad_a,
                     const Tensor* grad_b) override {
    run(BackendCallBuilder(VITPIPE_OP_LORA_BACKWARD)
            .tensor(grad_out)
            .tensor(in)
            .tensor(a)
            .tensor(b)
            .tensor(low)
            .optional(grad_in)
            .optional(grad_a)
            .optional(grad_b)
            .scalar(scale)
            .integer(column));
  }
  void adamw_update(const OptimizerStep& step, const OptimizerScalars& s) override {
    run(BackendCallBuilder(VITPIPE_OP_ADAMW_UPDATE).optimizer_step(step, s));
  }
  void lamb_moments(const OptimizerStep& step, const OptimizerScalars& s, std::span<double> squares) override {
    run(BackendCallBuilder(VITPIPE_OP_LAMB_MOMENTS).optimizer_step(step, s).squares(squares));
  }
  void lamb_update(const OptimizerStep& step, const OptimizerScalars& s) override {
    run(BackendCallBuilder(VITPIPE_OP_LAMB_UPDATE).optimizer_step(step, s));
  }
  void sgd_update(const OptimizerStep& step, const OptimizerScalars& s) override {
    run(BackendCallBuilder(VITPIPE_OP_SGD_UPDATE).optimizer_step(step, s));
  }
  double sum_of_squares(const Tensor& x, std::span<const int64_t> bounds) override {
    return run(BackendCallBuilder(VITPIPE_OP_SUM_OF_SQUARES).tensor(x).bounds(bounds));
  }
  void zero(const Tensor& t) override { run(BackendCallBuilder(VITPIPE_OP_ZERO).tensor(t)); }
  // The host end is described as host memory (module_abi.h): the module copies to or from it and nothing else.
  void copy_to_host(const Tensor& device, const Tensor& host) override {
    run(BackendCallBuilder(VITPIPE_OP_COPY_TO_HOST).tensor(device).host_tensor(host));
  }
  void copy_from_host(const Tensor& host, const Tensor& device) override {
    run(BackendCallBuilder(VITPIPE_OP_COPY_FROM_HOST).host_tensor(host).tensor(device));
  }

 private:
  double run(BackendCallBuilder& builder) {
    VitpipeBackendCall& call = builder.call();
    if (builder.first_host_tensor() >= 0) {
      fail("internal: CUDA backend: ", backend_op_name(call.op), "'s tensor ", builder.first_host_tensor() + 1,
           " is host memory where the GPU needs device memory (allocate it through the backend)");
    }
    char error[1024] = {};
    if (module_.backend_call(instance_.get(), &call, error, sizeof error) != 0) fail("CUDA backend: ", error);
    return call.result;
  }
  double run(BackendCallBuilder&& builder) { return run(builder); }

  const VitpipeCudaModule& module_;
  std::shared_ptr<void> instance_;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_module_backend(const VitpipeCudaModule& module, int device, bool allow_tf32) {
  return std::make_unique<CudaModuleBackend>(module, device, allow_tf32);
}

std::optional<CudaModuleInstance> cuda_module_instance(Backend& backend) {
  if (auto* b = dynamic_cast<CudaModuleBackend*>(&backend); b != nullptr) return b->instance();
  return std::nullopt;
}

namespace {

bool defers_losses(const std::optional<CudaModuleInstance>& m) {
  return m && m->module->abi_version >= 8 && m->module->backend_defer_losses != nullptr &&
         m->module->backend_take_losses != nullptr;
}

}  // namespace

bool defer_losses(Backend& backend) {
  const std::optional<CudaModuleInstance> m = cuda_module_instance(backend);
  if (!defers_losses(m)) return false;
  char error[1024] = {};
  if (m->module->backend_defer_losses(m->instance.get(), error, sizeof error) != 0) fail("CUDA backend: ", error);
  return true;
}

double take_losses(Backend& backend) {
  const std::optional<CudaModuleInstance> m = cuda_module_instance(backend);
  if (!defers_losses(m)) return 0.0;
  char error[1024] = {};
  double sum = 0.0;
  if (m->module->backend_take_losses(m->instance.get(), &sum, error, sizeof error) != 0) fail("CUDA backend: ", error);
  return sum;
}

std::string cuda_attention_path(Backend& backend) {
  const std::optional<CudaModuleInstance> m = cuda_module_instance(backend);
  if (!m || m->module->abi_version < 7 || m->module->backend_attention_path == nullptr) return "";
  char path[4096] = {};
  if (m->module->backend_attention_path(m->instance.get(), path, sizeof path) != 0) return "";
  return path;
}

}  // namespace vitpipe
