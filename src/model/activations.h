// The memory plan: every activation a micro-batch needs is a named tensor allocated once, at the largest
// micro-batch, and viewed at the current size (no allocation during a step). `rows` below = micro-batch x tokens.
// "act" = the compute dtype (bf16 tensors only ever feed GEMMs). Tensors a configuration does not use (LayerScale
// branches without LayerScale, LoRA without LoRA) are left empty.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "model/parameter_layout.h"
#include "model/precision.h"
#include "model/vit_config.h"
#include "tensor/tensor.h"

namespace vitpipe {

// What the backward pass of one encoder block reads (besides the block's input, kept in the residual stream).
struct BlockActivations {
  Tensor ln1, mean1, rstd1;        // [rows, D] act; [rows] f32
  Tensor qkv;                      // [b, T, 3D] act
  Tensor lse;                      // [b, H, T] f32: each query row's log-sum-exp (no probabilities are kept)
  Tensor attention;                // [rows, D] act: attention output before the projection
  Tensor attn_out;                 // [rows, D] act: the projection's output before LayerScale (LayerScale only)
  Tensor mid;                      // [rows, D] f32: residual stream after attention
  Tensor ln2, mean2, rstd2;        // [rows, D] act
  Tensor pre_gelu;                 // [rows, fc1_out] act (fc1 output, before the activation)
  Tensor gelu;                     // [rows, I] act: GELU or SwiGLU output
  Tensor mlp_out;                  // [rows, D] act: fc2's output before LayerScale (LayerScale only)
  Tensor cls_input;                // [b, D] f32: token 0 of the block input (classifier-token blocks only)
  std::array<Tensor, 6> lora_low;  // by LinearSite: [rows, r] act, scale * x A^T (LoRA only)

  static BlockActivations allocate(Backend& backend, const ViTConfig& config, const LoraSettings& lora, int64_t batch,
                                   DType act);
  BlockActivations rows_for(const ViTConfig& config, int64_t batch) const;  // views for a smaller micro-batch
  // Views for a classifier-token block (model/classifier_token_block.h): ln1, qkv and the q/k/v LoRA keep every
  // token; lse is [b, H]; everything after the attention holds token 0 only ([b, D] / [b, I]).
  BlockActivations classifier_token_rows(const ViTConfig& config, int64_t batch) const;
  size_t bytes() const;
};

struct EmbeddingActivations {
  Tensor patches;     // [b * Np, C*P*P] act: the patch-projection GEMM input
  Tensor projection;  // [b * Np, D] f32 (temporary)
  Tensor positions;   // [Q + Np, D] f32: position embeddings resampled to the input's grid (DINOv2 off its grid)

  static EmbeddingActivations allocate(Backend& backend, const ViTConfig& config, int64_t batch, DType act);
  EmbeddingActivations rows_for(const ViTConfig& config, int64_t batch) const;
  size_t bytes() const;
};

// The head stays fp32 (it is tiny). Its input: K = 1 token (CLS) or 2 (CLS, distillation), token-major; or, for the
// [CLS, patch mean] head, every token (the stage's last hidden state, not held here).
struct HeadActivations {
  Tensor tokens;              // [K * b, D] f32 (empty for the patch-mean head)
  Tensor normed, mean, rstd;  // the final LayerNorm: [K * b, D] / [K * b], or [b * T, D] / [b * T]
  Tensor features;            // [b, 2D]: [CLS, patch mean] (patch-mean head)
  Tensor logits;              // [b, L]
  Tensor half_logits;         // [b, L]: the cls classifier's logits, then scratch (distillation head)
  Tensor grad_logits;         // [b, L]
  Tensor grad_features;       // [b, 2D] (patch-mean head)
  Tensor grad_normed;         // like normed
  Tensor grad_tokens;         // like tokens

  static HeadActivations allocate(Backend& backend, const ViTConfig& config, int64_t batch);
  HeadActivations rows_for(const ViTConfig& config, int64_t batch) const;
  size_t bytes() const;
};

// Gradient buffers of one stage, shared by all micro-batches (a backward pass uses them one at a time).
struct GradientWorkspace {
  Tensor residual_low;  // [rows, D] act copy of the residual-stream gradient (bf16 only; empty in fp32)
  Tensor ln;            // [rows, D] act: gradient at a LayerNorm output
  Tensor attention;     // [rows, D] act
  Tensor qkv;           // [b, T, 3D] act
  Tensor mlp;           // [rows, fc1_out] act: gradient at the activation's input (GELU: also at its output)
  Tensor gated;         // [rows, I] act: gradient at the SwiGLU output (SwiGLU only)
  Tensor branch;        // [rows, D] act: LayerScale's branch gradient (LayerScale only)
  Tensor patches;       // [b * Np, D] act (stage 0 only)
  Tensor positions;     // [Q + Np, D] f32: gradient at the resampled positions (stage 0, DINOv2 off its grid)
  Tensor scratch;       // [3D] f32: where gradients of frozen LayerNorms go (the kernel always writes some)

  static GradientWorkspace allocate(Backend& backend, const ViTConfig& config, int64_t batch, DType act,
                                    bool embeddings);
  GradientWorkspace rows_for(const ViTConfig& config, int64_t batch) const;
  size_t bytes() const;
};

}  // namespace vitpipe
