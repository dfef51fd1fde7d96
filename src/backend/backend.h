// The kernel set a ViT needs, behind one narrow interface (the ggml idea): the model calls these and nothing else,
// so a CUDA backend is a new folder next to cpu/, not an edit of the model.
//
// Conventions (llm.c): kernels that produce PARAMETER gradients ADD into them (micro-batches accumulate for free);
// kernels that produce ACTIVATION gradients OVERWRITE them, except where a header says "adds" for the residual
// stream. Activations are row-major [rows, features]; "M" rows = micro-batch x tokens.
// Dtypes: the residual stream, LayerNorm statistics, softmax and losses are fp32; tensors that only feed GEMMs may
// be bf16 (precision bf16). Each kernel accepts the combinations listed at its declaration.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "tensor/tensor.h"

namespace vitpipe {

struct LayerNormBackwardArgs {
  Tensor grad_out;        // [M, D] f32 or bf16
  Tensor in;              // [M, D] f32: the forward input
  Tensor weight;          // [D] f32
  Tensor mean, rstd;      // [M] f32 saved by the forward pass
  Tensor grad_in;         // [M, D] f32: OVERWRITTEN with grad_residual + d(LayerNorm)/d(in)
  Tensor grad_residual;   // optional [M, D] f32 added into grad_in; may alias grad_in (in-place)
  Tensor grad_weight;     // [D] f32, adds
  Tensor grad_bias;       // [D] f32, adds
  Tensor grad_in_copy;    // optional [M, D] f32 or bf16: a second copy of grad_in (bf16 GEMM input)
  Tensor grad_in_colsum;  // optional [D] f32, adds the column sums of grad_in (the bias gradient of the linear layer
                          // whose output joined the residual stream here)
};

// ---- optimizer updates (train/optimizer.h states the update rules, optimizer_plan.h the run structure) ----
// One optimizer step covers one flat f32 range of n elements: a stage's (or an optimizer shard's) parameters, their
// gradients and the moment buffers, each a 1-D f32 tensor of n elements. The range is cut into RUNS: contiguous
// element ranges inside one parameter tensor that share the per-run scalars below (a run never spans two
// parameters; runs are ordered, disjoint, and together cover [0, n) or part of it: elements outside every run are
// left untouched). The caller computes every per-step scalar in double and rounds it to float once, as the
// optimizers always did; the kernels do only the per-element fp32 arithmetic written at each op, in that order.
// The CPU backend's bits are the reference (its build, GCC -O3 for x86-64-v3, may contract a * b + c into fused
// multiply-adds); another backend may differ from it in the last place where its compiler contracts differently,
// but must itself be deterministic: the same inputs give the same bits on every run.
struct OptimizerRun {
  int64_t begin = 0;  // element offsets into the range's tensors
  int64_t end = 0;
  float decay = 0.0f;  // adamw: 1 - lr_run * wd_run (1 where the parameter does not decay); lamb and sgd: wd_run
                       // (0 where the parameter does not decay)
  float step = 0.0f;   // adamw: lr_run / bias_correction1; lamb (update): lr_run * trust_ratio; sgd: lr_run;
                       // lamb (moments): unused
};

// The tensors and runs of one step. `work_items` (optional, may be empty) groups runs for a CPU's threads: runs
// [work_items[k], work_items[k + 1]) are one item (the optimizers' fixed 8192-element chunks on the model's offset
// grid, optimizer_plan.h), the last entry is runs.size(). It only decides who computes what (elementwise updates
// give the same bits under any split); an implementation may ignore it.
struct OptimizerStep {
  Tensor params;      // [n] f32, updated in place
  Tensor grads;       // [n] f32, read only
  Tensor exp_avg;     // [n] f32, updated in place: adamw/lamb m; sgd with momentum: the momentum buffer
  Tensor exp_avg_sq;  // [n] f32, updated in place: adamw/lamb v; undefined for sgd
  std::span<const OptimizerRun> runs;
  std::span<const int64_t> work_items;
};

// Scalars shared by every run of a step, each computed in double by the caller and rounded to float once.
struct OptimizerScalars {
  float beta1 = 0.0f, one_minus_beta1 = 0.0f;  // adamw, lamb
  float beta2 = 0.0f, one_minus_beta2 = 0.0f;
  float bias_correction1 = 1.0f;       // lamb: 1 - beta1^t (1 without bias correction)
  float bias_correction2 = 1.0f;       // lamb: 1 - beta2^t
  float bias_correction2_sqrt = 1.0f;  // adamw: sqrt(1 - beta2^t) computed in double
  float eps = 0.0f;
  float momentum = 0.0f;  // sgd
  float one_minus_dampening = 1.0f;
  bool first_step = false;  // sgd: the momentum buffer is set to d (not blended) on step 1
  bool nesterov = false;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;

  // ---- memory ----
  // Fresh, uninitialised memory that this backend's ops work on: device memory on a GPU (a Device::cuda tensor that
  // the host reaches only through copy_to_host / copy_from_host), host memory on the CPU. Taken when a stage, an
  // optimizer or an executor is built, never inside a step; freed when the last view goes. The backend must outlive
  // its tensors.
  virtual Tensor allocate(const Shape& shape, DType dtype) = 0;
  // Whether the host may read and write allocate()'s tensors directly (the CPU backend's memory): callers then hand
  // them to MPI and memcpy without staging through host buffers.
  virtual bool host_accessible() const = 0;

  // ---- linear layers, weights [out, in] as torch.nn.Linear (matmul) ----
  // out[M,N] = in[M,K] . weight[N,K]^T (+ bias[N]) (+ residual[M,N]). in/weight both f32 or both bf16;
  // out f32 or bf16; bias and residual f32; residual is not out (no in-place add).
  virtual void linear_forward(const Tensor& in, const Tensor& weight, const Tensor* bias, const Tensor* residual,
                              const Tensor& out) = 0;
  // out[M,N] = GELU(in . weight^T + bias), exact erf GELU, fused with the GEMM. pre_activation (optional, [M,N]):
  // also keeps x = in . weight^T + bias there for the backward pass (training); out = GELU(x as stored). in/weight
  // both f32 or both bf16; bias f32; pre_activation f32 or bf16; out f32 or bf16 (bf16 when pre_activation is).
  virtual void linear_gelu_forward(const Tensor& in, const Tensor& weight, const Tensor& bias,
                                   const Tensor* pre_activation, const Tensor& out) = 0;
  // grad_in[M,K] = grad_out[M,N] . weight[N,K] (overwrites). grad_out/weight same dtype; grad_in f32 or bf16.
  virtual void linear_backward_input(const Tensor& grad_out, const Tensor& weight, const Tensor& grad_in) = 0;
  // grad_weight[N,K] += grad_out[M,N]^T . in[M,K]. grad_out/in same dtype; grad_weight f32.
  virtual void linear_backward_weight(const Tensor& grad_out, const Tensor& in, const Tensor& grad_weight) = 0;
  // grad_bias[N] += column sums of grad[M,N] (f32 or bf16).
  virtual void bias_backward(const Tensor& grad, const Tensor& grad_bias) = 0;

  // ---- layernorm ----
  // out = (in - mean) * rstd * weight + bias over the last dimension (biased variance); in f32; out f32 or bf16;
  // mean, rstd [M] f32 are saved for the backward pass.
  virtual void layernorm_forward(const Tensor& in, const Tensor& weight, const Tensor& bias, double eps,
                                 const Tensor& out, const Tensor& mean, const Tensor& rstd) = 0;
  virtual void layernorm_backward(const LayerNormBackwardArgs& args) = 0;

  // ---- attention (softmax(Q K^T / sqrt(d)) V per head, no mask), FlashAttention-2's interface ----
  // The probabilities are never stored: the forward pass saves each query row's log-sum-exp, defined as cuDNN's SDPA
  // stats are (fp32, natural log, of the scaled scores): lse[b, h, i] = log sum_j exp(q_i . k_j / sqrt(d)). The
  // backward pass recomputes P = exp(S / sqrt(d) - lse) and needs the forward's output for D = rowsum(dO * O).
  // qkv [B, T, 3D] = q | k | v, each [H, d] per token; lse [B, H, T] f32; out [B, T, D].
  // qkv and out share a dtype (f32 or bf16). Scores, softmax and the log-sum-exp are computed in f32.
  virtual void attention_forward(const Tensor& qkv, int64_t heads, const Tensor& lse, const Tensor& out) = 0;
  // out and lse as the forward pass wrote them; grad_qkv [B, T, 3D] overwritten (f32 or bf16); grad_qkv_bias [3D]
  // (optional, f32) adds the column sums of the query and value parts in f32 (the key bias gradient is exactly zero
  // and is left untouched).
  virtual void attention_backward(const Tensor& grad_out, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                                  int64_t heads, const Tensor& grad_qkv, const Tensor* grad_qkv_bias) = 0;

  // ---- attention for the classifier token only (the final block, whose other outputs nothing reads) ----
  // qkv [B, T, 3D] as above; lse [B, H] f32: token 0's log-sum-exp; out [B, D] (qkv dtype): token 0's output.
  virtual void cls_attention_forward(const Tensor& qkv, int64_t heads, const Tensor& lse, const Tensor& out) = 0;
  // grad_out [B, D]; grad_qkv [B, T, 3D] overwritten (f32 or bf16): the query gradient at token 0 (zero at every
  // other token), key and value gradients at every token; grad_qkv_bias as attention_backward's.
  virtual void cls_attention_backward(const Tensor& grad_out, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                                      int64_t heads, const Tensor& grad_qkv, const Tensor* grad_qkv_bias) = 0;

  // ---- GELU (exact erf form) ----
  virtual void gelu_forward(const Tensor& in, const Tensor& out) = 0;  // in f32 or bf16; out f32 or bf16
  // grad_in = grad_out * gelu'(in) (overwrites): all f32 or all bf16; grad_bias [N] (optional, f32) adds the
  // column sums of grad_in, summed before rounding.
  virtual void gelu_backward(const Tensor& grad_out, const Tensor& in, const Tensor& grad_in,
                             const Tensor* grad_bias) = 0;

  // ---- embeddings ----
  // images [B, C, H, W] f32 -> patches [B * Np, C * P * P] (channel, ky, kx order), f32 or bf16.
  virtual void patchify(const Tensor& images, int64_t patch, const Tensor& patches) = 0;
  // x[b, 0] = cls + pos[0]; x[b, 1 + p] = patch_proj[b * Np + p] + pos[1 + p]. x [B, T, D] f32.
  virtual void embeddings_forward(const Tensor& patch_proj, const Tensor& cls, const Tensor& pos, const Tensor& x) = 0;
  // grad_cls += sum_b grad_x[b, 0]; grad_pos += sum_b grad_x[b]; grad_patch_proj = grad_x[:, 1:] (overwrites,
  // f32 or bf16); grad_patch_bias (optional) adds its column sums.
  virtual void embeddings_backward(const Tensor& grad_x, const Tensor& grad_cls, const Tensor& grad_pos,
                                   const Tensor& grad_patch_proj, const Tensor* grad_patch_bias) = 0;

  // ---- classifier token ----
  // out[b] = x[b, 0] for x [B, T, D]; scatter writes grad_x[b, 0] = grad[b] and zeros every other token.
  virtual void gather_cls(const Tensor& x, const Tensor& out) = 0;
  virtual void scatter_cls(const Tensor& grad, const Tensor& grad_x) = 0;

  // ---- losses: return the SUM over elements; grad_logits = grad_scale * d(sum)/d(logits) (overwrites) ----
  // Multi-label: binary cross-entropy with logits, optional pos_weight [L] (as torch's BCEWithLogitsLoss) and
  // optional per-element weight [B, L] f32 (torch's `weight`; 0 = a masked label, out of the loss and its gradient).
  virtual double bce_with_logits(const Tensor& logits, const Tensor& targets, const Tensor* pos_weight,
                                 const Tensor* weight, double grad_scale, const Tensor& grad_logits) = 0;
  // Single-label: cross-entropy over L classes; targets [B] int64 class ids.
  virtual double cross_entropy(const Tensor& logits, const Tensor& targets, double grad_scale,
                               const Tensor& grad_logits) = 0;

  // ---- elementwise ----
  virtual void convert(const Tensor& src, const Tensor& dst) = 0;  // f32 <-> bf16, same element count
  // out = factor * in (overwrites; in and out f32 or bf16, same element count; may alias).
  virtual void scale(const Tensor& in, double factor, const Tensor& out) = 0;

  // ---- optimizer steps, gradient norms, zeroing, host copies (the training state stays on the device) ----
  // AdamW, per element i of every run (fp32; s = scalars, r = the run):
  //   p' = p * r.decay;  m = s.beta1 * m + g * s.one_minus_beta1;  v = s.beta2 * v + s.one_minus_beta2 * g * g;
  //   p = p' - r.step * (m / (sqrt(v) / s.bias_correction2_sqrt + s.eps)).  Writes p, m, v; grads read only.
  virtual void adamw_update(const OptimizerStep& step, const OptimizerScalars& s) = 0;
  // LAMB pass 1 (moments, and the squares for the trust ratios), per element i of run r:
  //   m = s.beta1 * m + s.one_minus_beta1 * g;  v = s.beta2 * v + s.one_minus_beta2 * g * g;
  //   u = (m / s.bias_correction1) / (sqrt(v / s.bias_correction2) + s.eps) + r.decay * p   (fp32);
  // writes m and v (p is only read). squares [2 * runs.size()] is HOST memory, overwritten: squares[2r] = sum of
  // double(p)^2 and squares[2r + 1] = sum of double(u)^2 over run r, each in double with 16 fixed lanes relative to
  // the run's first element (lane k adds elements k, k + 16, ... in order; then lanes[k] += lanes[k + w] for
  // w = 8, 4, 2, 1; the result is lanes[0]): deterministic and independent of the implementation's parallelism.
  virtual void lamb_moments(const OptimizerStep& step, const OptimizerScalars& s, std::span<double> squares) = 0;
  // LAMB pass 2: p = p - r.step * u, u recomputed from p, the new m, v as in pass 1 (the same fp32 operations).
  virtual void lamb_update(const OptimizerStep& step, const OptimizerScalars& s) = 0;
  // SGD, per element of run r: d = r.decay != 0 ? g + r.decay * p : g. Without momentum (exp_avg undefined):
  // p = p - r.step * d. With it: b = s.first_step ? d : exp_avg * s.momentum + s.one_minus_dampening * d;
  // exp_avg = b; p = p - r.step * (s.nesterov ? d + s.momentum * b : b).
  virtual void sgd_update(const OptimizerStep& step, const OptimizerScalars& s) = 0;
  // The sum of x^2 over x [n] f32, returned to the host in double. `bounds` (host; ascending, first 0, last n) cuts x
  // into parts; each part is summed with the 16 fixed lanes of lamb_moments (relative to the part's first element)
  // and the parts are added in order starting from 0.0. Deterministic: the bits depend only on x and bounds.
  virtual double sum_of_squares(const Tensor& x, std::span<const int64_t> bounds) = 0;
  // Every byte of t set to zero (any dtype; gradient zeroing between steps).
  virtual void zero(const Tensor& t) = 0;
  // Synchronous copies between a backend tensor (device memory on a GPU) and host memory: same dtype and element
  // count; on return the destination holds the data. Tensors may be views (slices) of larger ones.
  virtual void copy_to_host(const Tensor& device, const Tensor& host) = 0;
  virtual void copy_from_host(const Tensor& host, const Tensor& device) = 0;

  // ---- model families (DeiT, DINOv2): prefix tokens, position resampling, LayerScale, SwiGLU, pooling ----
  // Embeddings with P prefix tokens (CLS, then distillation or register tokens) of which the first Q have position
  // embeddings: x[b, t] = prefix[t] (+ pos[t] for t < Q) for t < P; x[b, P + p] = patch_proj[b * Np + p] +
  // pos[Q + p]. prefix [P, D], pos [Q + Np, D], x [B, P + Np, D], all f32.
  virtual void token_embeddings_forward(const Tensor& patch_proj, const Tensor& prefix, int64_t positioned,
                                        const Tensor& pos, const Tensor& x) = 0;
  // grad_prefix (optional) += sum_b grad_x[b, :P]; grad_pos (optional) += the matching rows summed over the batch;
  // grad_patch_proj = grad_x[:, P:] (overwrites, f32 or bf16); grad_patch_bias (optional) adds its column sums.
  virtual void token_embeddings_backward(const Tensor& grad_x, const Tensor* grad_prefix, int64_t positioned,
                                         const Tensor* grad_pos, const Tensor& grad_patch_proj,
                                         const Tensor* grad_patch_bias) = 0;
  // Position embeddings on another patch grid: rows [0, Q) copied, the rest (an Hs x Ws grid, row-major) resampled
  // separably, out[Q + y * Wd + x] = sum_ij wy[y, i] wx[x, j] pos[Q + i * Ws + j]. pos [Q + Hs*Ws, D],
  // wy [Hd, Hs], wx [Wd, Ws], out [Q + Hd*Wd, D], all f32 (overwrites).
  virtual void resample_positions_forward(const Tensor& pos, int64_t kept, const Tensor& wy, const Tensor& wx,
                                          const Tensor& out) = 0;
  // The transpose: grad_pos += the adjoint of the map above applied to grad_out.
  virtual void resample_positions_backward(const Tensor& grad_out, int64_t kept, const Tensor& wy, const Tensor& wx,
                                           const Tensor& grad_pos) = 0;
  // LayerScale joining the residual stream: out = residual + scale[j] * branch (branch f32 or bf16; the rest f32;
  // out may alias residual).
  virtual void layer_scale_forward(const Tensor& branch, const Tensor& scale, const Tensor& residual,
                                   const Tensor& out) = 0;
  // branch_grad = scale[j] * grad (overwrites, f32 or bf16); grad_scale (optional) += column sums of grad * branch;
  // grad_bias (optional) += column sums of branch_grad (the bias of the linear layer that produced `branch`).
  virtual void layer_scale_backward(const Tensor& grad, const Tensor& branch, const Tensor& scale,
                                    const Tensor& branch_grad, const Tensor* grad_scale, const Tensor* grad_bias) = 0;
  // SwiGLU (DINOv2's Dinov2SwiGLUFFN): in [M, 2h] = x1 | x2, out [M, h] = silu(x1) * x2 (f32 or bf16 each).
  virtual void swiglu_forward(const Tensor& in, const Tensor& out) = 0;
  // grad_in [M, 2h] (overwrites; same dtype as grad_out and in); grad_bias [2h] (optional, f32) adds its column sums.
  virtual void swiglu_backward(const Tensor& grad_out, const Tensor& in, const Tensor& grad_in,
                               const Tensor* grad_bias) = 0;
  // The first K tokens, token-major: out[k, b] = x[b, k] (x [B, T, D], out [K, B, D], f32). scatter_tokens writes
  // grad_x[b, k] = grad[k, b] for k < K and zeros every other token (overwrites).
  virtual void gather_tokens(const Tensor& x, int64_t count, const Tensor& out) = 0;
  virtual void scatter_tokens(const Tensor& grad, const Tensor& grad_x) = 0;
  // DINOv2's classifier input: out[b] = [x[b, 0], mean over t >= skip of x[b, t]] (x [B, T, D], out [B, 2D], f32).
  virtual void cls_and_mean_forward(const Tensor& x, int64_t skip, const Tensor& out) = 0;
  // grad_x[b, 0] = grad[b, :D], grad_x[b, t] = grad[b, D:] / (T - skip) for t >= skip, 0 between (overwrites).
  virtual void cls_and_mean_backward(const Tensor& grad, int64_t skip, const Tensor& grad_x) = 0;

  // ---- LoRA (peft) on a linear layer ----
  // out[:, c0 : c0 + N] += low . b^T with low = scale * in . a^T (saved for the backward pass). in [M, K], a [r, K],
  // b [N, r] share a dtype (f32 or bf16); low [M, r] that dtype; out [M, ld] (ld >= c0 + N) f32 or bf16.
  virtual void lora_forward(const Tensor& in, const Tensor& a, const Tensor& b, double scale, const Tensor& low,
                            const Tensor& out, int64_t column) = 0;
  // With g = grad_out[:, c0 : c0 + N] (grad_out [M, ld], the GEMM dtype): grad_b (optional) += g^T . low;
  // t = scale * g . b; grad_a (optional) += t^T . in; grad_in (optional, f32 or bf16) += t . a. Gradients f32.
  virtual void lora_backward(const Tensor& grad_out, int64_t column, const Tensor& in, const Tensor& a, const Tensor& b,
                             double scale, const Tensor& low, const Tensor* grad_in, const Tensor* grad_a,
                             const Tensor* grad_b) = 0;
};

std::unique_ptr<Backend> make_cpu_backend();
// A test hook (proof 3 of issue 24: tools/train_seam_probe.cpp): when set, make_cpu_backend() passes every backend it
// makes through `wrap` (e.g. into tools/seam_backend.h's SeamBackend) before any tensor reaches it; host_backend() is
// never wrapped. Empty: none. Set it before any backend is made, from one thread.
using BackendWrapper = std::function<std::unique_ptr<Backend>(std::unique_ptr<Backend>)>;
void set_backend_wrapper(BackendWrapper wrap);
// One process-wide CPU backend for HOST-resident buffers where no stage backend is at hand (an optimizer or a
// gradient clip over host FlatParameters, as the tests and the layout profiler use them). Only its stateless ops
// (optimizer updates, sums of squares, zero, copies, scale) may be called from several threads at once.
Backend& host_backend();

// allocate() followed by zero(): zeroed backend memory.
Tensor allocate_zeros(Backend& backend, const Shape& shape, DType dtype = DType::f32);
// The host's copy of a backend tensor (a fresh host tensor), and a backend tensor holding a host tensor's values.
Tensor to_host(Backend& backend, const Tensor& device);
Tensor to_backend(Backend& backend, const Tensor& host);

}  // namespace vitpipe
