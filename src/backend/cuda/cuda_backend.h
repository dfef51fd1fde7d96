// CudaBackend: backend.h on one GPU. Every Tensor it is handed holds device memory (raw() is a device pointer); it
// never reads one on the host. One stream; one cuBLASLt workspace (32 MiB, Hopper's size), one cuDNN workspace and
// one scratch arena (device_arena.h) taken at construction. The arena and the cuDNN workspace grow where an op needs
// more (regrow, take_scratch): stream-ordered (cudaMallocAsync / cudaFreeAsync on the stream), so growth inside a
// step neither waits on the host nor synchronises the device under NCCL reductions in flight; on a GPU without memory
// pools (cudaDevAttrMemoryPoolsSupported 0) through cudaMalloc, and cudaFree after draining the stream.
//   GEMMs: the call builders of calls/ (linear_gemm_calls.h, lora_gemm_calls.h) through GemmExecutor; TF32 only when
//     asked. A matrix whose rows are not whole 16-byte units (14 f32 logits, LoRA's rank 4 in bf16) or that starts
//     off 16-byte alignment (a slice of a larger weight, as DeiT's two heads) is staged into a
//     padded copy in the arena (cudaMemcpy2DAsync) and back, as cuBLASLt's rules want (calls/padded_rows.h).
//   linear_gelu_forward: the GEMM with its bias into the kept pre-activation in training, else into the output, then
//     vitpipe's exact-erf GELU kernel, in place without one (cuBLASLt's GELU epilogue is the tanh approximation).
//   Attention: bf16 through cuDNN's SDPA (SdpaExecutor); where cuDNN refuses a pass at a shape (kept per pass and
//     shape), the backward pass of the full attention runs the bf16 tensor-core flash kernels
//     (kernels/flash_attention_bf16.h) at head dimensions 16, 32 and 64; otherwise the fallback (and with
//     VITPIPE_CUDA_SDPA=0) converts to f32 and runs the fp32 flash kernels
//     (kernels/flash_attention.h), which fp32 always uses. The classifier-token variants in fp32 run the full kernels
//     on a one-query view (other rows' log-sum-exp +inf, their output gradients 0, so they contribute nothing).
//   Optimizer steps and sums of squares: kernels/optimizer_kernels.h (a step's runs copied into the arena, one launch
//     over all of them; the 16-lane sums of squares in backend.h's fixed order, bit for bit the CPU backend's).
//     zero: cudaMemsetAsync; copy_to_host: cudaMemcpyAsync and a stream synchronisation; copy_from_host: through
//     two pinned buffers in turn, each refilled after its last copy's event (no stream synchronisation); the
//     losses' sums come back through pinned memory, waiting for that copy's event, or deferred to take_losses.
//   Everything else: kernels/backend_kernels.h (deterministic two-pass column sums and loss sums).
// Limits known now: LoRA with f32 operands and a bf16 output or input gradient is refused (cuBLASLt wants an f32
// result from f32 operands; linear_forward and linear_backward_input go through f32 scratch there instead). The
// arena starts at 256 MiB and grows where an op needs more (padded copies, the bf16-attention fallback's f32 copies,
// f32 results of large batches); the memory plan does not count that growth yet.
// Errors: every CUDA, cuBLASLt and cuDNN status is checked; a failure throws std::runtime_error naming the op and the
// status. NOT YET RUN ON A GPU: compiled warning-free for sm_80, sm_90 and PTX; its kernels' arithmetic and the
// library calls' descriptions are what the CPU suite proves.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <compare>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/calls/row_major_matrix.h"
#include "backend/cuda/device_arena.h"
#include "backend/cuda/workspace_sizes.h"

namespace vitpipe::cuda {

class GemmExecutor;
class SdpaExecutor;
struct OptimizerRunTable;  // kernels/optimizer_kernels.h

class CudaBackend final : public Backend {
 public:
  // Shared with the planner's memory model (workspace_sizes.h).
  static constexpr size_t kCublasWorkspaceBytes = cuda::kCublasLtWorkspaceBytes;
  static constexpr size_t kCudnnWorkspaceBytes = cuda::kCudnnWorkspaceBytes;
  static constexpr size_t kArenaBytes = cuda::kArenaBytes;

  // Pinned host memory for uploads: two buffers of this size, used in turn (copy_from_host).
  static constexpr size_t kUploadChunkBytes = 16u << 20;
  // Pinned slots for the losses' sums and target checks on their way back: one per loss call of a deferred step.
  static constexpr size_t kReadbackSlots = 4096;
  static constexpr size_t kReadbackSlotBytes = 16;  // the sum (double), then the target check (int64)

  // `arena_bytes`: the scratch arena's first size (tests make it small to see it grow).
  CudaBackend(int device, bool allow_tf32, size_t arena_bytes = kArenaBytes);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  // Waits for the stream; throws the error of an earlier asynchronous failure.
  void synchronize();
  // Why cuDNN's SDPA is not used for some pass of bf16 attention (the first refusal), or empty while it is used for
  // all of them.
  const std::string& sdpa_refusal() const { return sdpa_refusal_; }
  // Which path bf16 attention took: "cudnn" while cuDNN ran every call, else "fallback" with every refused shape and
  // why (on one line, "; " between them), for bench --json and the GPU check; then, once cuDNN ran a backward pass,
  // "; backward: " and which graph ran it (the native SDPA_BWD, or cudnn-frontend's composite graph and why the
  // native one was refused).
  std::string attention_path() const;
  // Makes this backend's GPU the calling thread's current device (every op through the module table does this
  // first: pipeline stages may call from threads of their own).
  void make_current();
  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }  // every op's stream (the NCCL executor's compute stream)

  std::string name() const override { return "cuda"; }
  // Device memory on this backend's GPU (cudaMalloc: taken when stages and optimizers are built, not in a step).
  void* allocate_bytes(size_t bytes);
  void free_bytes(void* memory);
  size_t allocated_bytes();  // held by allocate_bytes now (the memory model)
  Tensor allocate(const Shape& shape, DType dtype) override;
  bool host_accessible() const override { return false; }
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
  // Optimizer steps (kernels/optimizer_kernels.h): the step's runs are copied into the arena (one table, one
  // cudaMemcpyAsync) and one launch covers them; work items are ignored (backend.h allows it). lamb_moments and
  // sum_of_squares copy their sums back and synchronise. zero is cudaMemsetAsync; copy_to_host is cudaMemcpyAsync
  // then a stream synchronisation, copy_from_host pinned and asynchronous (the class comment).
  void adamw_update(const OptimizerStep& step, const OptimizerScalars& s) override;
  void lamb_moments(const OptimizerStep& step, const OptimizerScalars& s, std::span<double> squares) override;
  void lamb_update(const OptimizerStep& step, const OptimizerScalars& s) override;
  void sgd_update(const OptimizerStep& step, const OptimizerScalars& s) override;
  double sum_of_squares(const Tensor& x, std::span<const int64_t> bounds) override;
  void zero(const Tensor& t) override;
  void copy_to_host(const Tensor& device, const Tensor& host) override;
  void copy_from_host(const Tensor& host, const Tensor& device) override;
  // Losses read later (module_abi.h version 8): after defer_losses() the losses enqueue their sum's copy into a pinned
  // slot and return 0; take_losses() waits for the last copy's event, returns the sums added in call order from 0.0
  // (what the caller's += of each gave) and ends the deferral. A deferred cross_entropy's bad target throws there.
  void defer_losses();
  double take_losses();

 private:
  // Pinned host memory and the event recorded after its last copy (pending: that copy may still be running).
  struct PinnedBuffer {
    void* memory = nullptr;
    cudaEvent_t copied = nullptr;
    bool pending = false;
  };
  struct LossReadback {
    double sum = 0.0;
    int64_t invalid = -1;
  };
  // The losses' device sum (and cross_entropy's target check, `classes` its class count; -1 for none) through pinned
  // memory: waiting for that copy only, or, deferred, into the next slot without waiting (a sum of 0 returned).
  LossReadback read_back(const double* sum, const int64_t* invalid, int64_t classes, const char* op);
  // Deferred: waits for the slots' copies, adds them into deferred_partial_ and checks their targets; empties them.
  void fold_deferred_losses();

  // A matrix as cuBLASLt may take it: the tensor itself, or a padded copy in the arena (copied in when the call
  // reads it, back after the calls when it writes it).
  struct Staging {
    void* original;
    RowMajorMatrix padded;
  };
  RowMajorMatrix matrix(const Tensor& t, int64_t rows, int64_t cols, bool read, bool write);
  void finish_staging();
  // Empties the staged results when a GEMM op starts and when it ends, however it ends: a cuBLASLt throw between
  // matrix() and finish_staging() must not leave entries that the next op's finish_staging copies back.
  class StagingScope {
   public:
    explicit StagingScope(std::vector<Staging>& staged) : staged_(staged) { staged_.clear(); }
    ~StagingScope() { staged_.clear(); }
    StagingScope(const StagingScope&) = delete;
    StagingScope& operator=(const StagingScope&) = delete;

   private:
    std::vector<Staging>& staged_;
  };
  // One shape of one pass of bf16 attention (cls_only: the classifier token's one query row). A refusal is kept per
  // shape: the classifier token's call refused must not send the full attention of every layer to the fallback.
  struct SdpaKey {
    bool backward, cls_only;
    int64_t batch, tokens, hidden, heads;
    auto operator<=>(const SdpaKey&) const = default;
  };
  bool sdpa_refused(const SdpaKey& key) const { return sdpa_disabled_ || sdpa_refused_.count(key) > 0; }
  void refuse_sdpa(const SdpaKey& key, const std::string& why);
  // Which of vitpipe's kernels a bf16 pass at `key` falls back to (for the messages).
  static std::string fallback_kernels(const SdpaKey& key);
  // `v`'s device pointer, or a copy in the arena where it is not 16-byte aligned (cuBLASLt's rule for the bias).
  const void* aligned_vector(const Tensor& v, const char* what);
  void release();
  // The step's runs (and their tile table) in the arena, copied from the host in one cudaMemcpyAsync.
  OptimizerRunTable upload_runs(std::span<const OptimizerRun> runs, bool tiles, const char* op);
  float* scratch_floats(int64_t count, const char* what);
  // `bytes` of the op's scratch. Past the arena's end (a padded GEMM operand, linear_forward's f32 result at a large
  // batch) the arena moves to a larger block; the op's earlier slices stay valid until the next reset_scratch.
  void* take_scratch(size_t bytes, const char* what);
  template <class T>
  T* take_scratch_array(int64_t count, const char* what) {
    return static_cast<T*>(take_scratch(static_cast<size_t>(count < 0 ? 0 : count) * sizeof(T), what));
  }
  // Each op's start: the arena empty again, outgrown blocks freed in stream order (cudaFreeAsync).
  void reset_scratch();
  // Grows the scratch arena (between ops, in stream order) to at least `bytes`: the attention
  // fallback's f32 copies grow with the batch past kArenaBytes.
  void reserve_scratch(size_t bytes);
  // The cuDNN workspace, grown (between ops, in stream order) to at least `bytes` for the SDPA plan
  // about to run: from kCudnnWorkspaceBytes up to SdpaExecutor::kMaxWorkspaceBytes.
  void* cudnn_workspace(size_t bytes);
  // The growing blocks (arena, cuDNN workspace): cudaMallocAsync / cudaFreeAsync on the stream where the GPU has
  // memory pools (cudaDevAttrMemoryPoolsSupported), else cudaMalloc, and cudaFree after draining the stream.
  cudaError_t allocate_block(void** memory, size_t bytes);
  cudaError_t free_block(void* memory);
  // Replaces `memory` (of `capacity` bytes) by a block of at least `bytes`, in 64 MiB steps: cudaFreeAsync and
  // cudaMallocAsync on the stream, so neither the host nor the device waits (free_block, allocate_block).
  void regrow(void*& memory, size_t& capacity, size_t bytes, const char* what);
  void check(cudaError_t status, const char* what);
  void attention_f32_forward(const float* qkv, float* out, float* lse, int64_t batch, int64_t tokens, int64_t heads,
                             int64_t head_dim);
  void attention_f32_backward(const float* grad_out, const float* qkv, const float* out, const float* lse,
                              float* grad_qkv, int64_t batch, int64_t tokens, int64_t heads, int64_t head_dim);
  void attention_any(const Tensor& qkv, int64_t heads, const Tensor& lse, const Tensor& out, bool cls_only);
  void attention_backward_any(const Tensor& grad_out, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                              int64_t heads, const Tensor& grad_qkv, const Tensor* grad_qkv_bias, bool cls_only);

  int device_;
  bool allow_tf32_;
  bool stream_ordered_ = false;  // the GPU has memory pools: the growing blocks are allocated in stream order
  cudaStream_t stream_ = nullptr;
  cublasLtHandle_t cublaslt_ = nullptr;
  cudnnHandle_t cudnn_ = nullptr;
  void* cublas_workspace_ = nullptr;
  void* cudnn_workspace_ = nullptr;
  size_t cudnn_workspace_bytes_ = 0;
  void* arena_memory_ = nullptr;
  DeviceArena arena_;
  std::vector<void*> retired_scratch_;  // blocks the arena outgrew during the current op
  std::unique_ptr<GemmExecutor> gemm_;
  std::unique_ptr<SdpaExecutor> sdpa_;
  // cuDNN refused a pass at a shape once: that pass at that shape takes the fp32 fallback from then on (the other
  // pass and other shapes keep cuDNN: both paths save and read the same log-sum-exp). sdpa_disabled_: no cuDNN
  // attention at all (VITPIPE_CUDA_SDPA=0).
  bool sdpa_disabled_ = false;
  std::map<SdpaKey, std::string> sdpa_refused_;
  // The cuDNN graph each backward shape ran (SdpaExecutor::backward_path), for attention_path.
  std::map<SdpaKey, std::string> sdpa_backward_paths_;
  std::string sdpa_refusal_;
  std::vector<Staging> staged_;
  PinnedBuffer uploads_[2];
  int next_upload_ = 0;
  PinnedBuffer readback_;
  bool deferring_losses_ = false;
  size_t deferred_slots_ = 0;              // slots of readback_ holding (or about to hold) a deferred loss
  std::vector<int64_t> deferred_classes_;  // per slot: cross_entropy's class count, -1 for bce_with_logits
  double deferred_partial_ = 0.0;          // the slots folded so far (a step of more than kReadbackSlots losses)
  std::vector<unsigned char> host_table_;  // the host side of upload_runs' copy (kept: no allocation per step)
  std::vector<double> host_sums_;          // sum_of_squares' parts on their way back
  std::mutex memory_mutex_;                // stages of one process may build (allocate) from threads of their own
  std::unordered_map<void*, size_t> memory_sizes_;
  size_t allocated_bytes_ = 0;
};

}  // namespace vitpipe::cuda
