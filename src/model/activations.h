// The memory plan: every activation a micro-batch needs is a named tensor allocated once, at the largest
// micro-batch, and viewed at the current size (no allocation during a step). `rows` below = micro-batch x tokens.
// "act" = the compute dtype (bf16 tensors only ever feed GEMMs).
#pragma once

#include <cstdint>
#include <vector>

#include "model/precision.h"
#include "model/vit_config.h"
#include "tensor/tensor.h"

namespace vitpipe {

// What the backward pass of one encoder block reads (besides the block's input, kept in the residual stream).
struct BlockActivations {
  Tensor ln1, mean1, rstd1;  // [rows, D] act; [rows] f32
  Tensor qkv;                // [b, T, 3D] act
  Tensor probs;              // [b, H, T, T] act
  Tensor attention;          // [rows, D] act: attention output before the projection
  Tensor mid;                // [rows, D] f32: residual stream after attention
  Tensor ln2, mean2, rstd2;  // [rows, D] act
  Tensor pre_gelu;           // [rows, I] act (fc1 output, before GELU)
  Tensor gelu;               // [rows, I] act
  Tensor cls_input;          // [b, D] f32: token 0 of the block input (classifier-token blocks only)

  static BlockActivations allocate(const ViTConfig& config, int64_t batch, DType act);
  BlockActivations rows_for(const ViTConfig& config, int64_t batch) const;  // views for a smaller micro-batch
  // Views for a classifier-token block (model/classifier_token_block.h): ln1 and qkv keep every token; probs are
  // [b, H, T]; everything after the attention holds token 0 only ([b, D] / [b, I]).
  BlockActivations classifier_token_rows(const ViTConfig& config, int64_t batch) const;
  size_t bytes() const;
};

struct EmbeddingActivations {
  Tensor patches;     // [b * Np, C*P*P] act: the patch-projection GEMM input
  Tensor projection;  // [b * Np, D] f32 (temporary)

  static EmbeddingActivations allocate(const ViTConfig& config, int64_t batch, DType act);
  EmbeddingActivations rows_for(const ViTConfig& config, int64_t batch) const;
  size_t bytes() const;
};

struct HeadActivations {
  Tensor cls, cls_norm, mean, rstd;  // [b, D] f32 (the head stays fp32: it is tiny)
  Tensor logits;                     // [b, L] f32
  Tensor grad_logits, grad_cls_norm, grad_cls;

  static HeadActivations allocate(const ViTConfig& config, int64_t batch);
  HeadActivations rows_for(const ViTConfig& config, int64_t batch) const;
  size_t bytes() const;
};

// Gradient buffers of one stage, shared by all micro-batches (a backward pass uses them one at a time).
struct GradientWorkspace {
  Tensor residual_low;  // [rows, D] act copy of the residual-stream gradient (bf16 only; empty in fp32)
  Tensor ln;            // [rows, D] act: gradient at a LayerNorm output
  Tensor attention;     // [rows, D] act
  Tensor qkv;           // [b, T, 3D] act
  Tensor mlp;           // [rows, I] act: gradient at the GELU output, then (in place) at its input
  Tensor patches;       // [b * Np, D] act (stage 0 only)

  static GradientWorkspace allocate(const ViTConfig& config, int64_t batch, DType act, bool embeddings);
  GradientWorkspace rows_for(const ViTConfig& config, int64_t batch) const;
  size_t bytes() const;
};

}  // namespace vitpipe
