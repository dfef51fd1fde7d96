#include "plan/memory_model.h"

#include <algorithm>

#include "backend/backend.h"
#include "backend/cuda/workspace_sizes.h"
#include "model/activations.h"
#include "model/weight_gradients.h"

namespace vitpipe {

size_t planned_activation_bytes(const ViTConfig& c, int first, int last, Precision precision, bool recompute,
                                bool split, int64_t micro_batch, int slots) {
  // Mirrors ViTStage's constructor for full fine-tuning (tests/plan checks the two agree). Tensors are allocated for
  // the largest micro-batch and every size is linear in it: computed for one sample, then scaled.
  const int64_t b = 1;
  const DType act = compute_dtype(precision);
  const int layers = static_cast<int>(c.num_hidden_layers);
  const int head_segment = layers + 1;
  const bool has_embeddings = first == 0, has_head = last == head_segment;
  const int first_block = std::max(first, 1) - 1;
  const int last_block = std::min(last, layers) - 1;
  const int blocks = std::max(0, last_block - first_block + 1);
  const bool classifier_token = has_head && blocks > 0 && c.head_reads_token_zero_only();
  const LoraSettings no_lora;
  const size_t hidden = static_cast<size_t>(b * c.tokens() * c.hidden_size) * sizeof(float);
  size_t per_slot = 0;
  if (has_embeddings) {
    per_slot += static_cast<size_t>(b * c.num_channels * c.input_size() * c.input_size()) * sizeof(float);
  }
  per_slot += hidden * static_cast<size_t>(blocks + 1 - (classifier_token ? 1 : 0));  // the residual stream
  if (!recompute)
    per_slot += static_cast<size_t>(blocks) * BlockActivations::allocate(host_backend(), c, no_lora, b, act).bytes();
  if (has_head) per_slot += HeadActivations::allocate(host_backend(), c, b).bytes();
  per_slot += hidden;  // the gradient w.r.t. the input (or received from the next stage)
  if (split) {
    for (int i = 0; i < blocks; ++i) {
      per_slot +=
          BlockWeightGradientInputs::allocate(host_backend(), c, b, act, classifier_token && i == blocks - 1).bytes();
    }
    if (has_embeddings) per_slot += static_cast<size_t>(b * c.num_patches() * c.hidden_size) * dtype_size(act);
  }
  size_t shared = 0;
  if (blocks > 0 && recompute) shared += BlockActivations::allocate(host_backend(), c, no_lora, b, act).bytes();
  // Not linear in the micro-batch: the gradient workspace (scratch, resampled positions), at its real size.
  const size_t workspace = GradientWorkspace::allocate(host_backend(), c, micro_batch, act, has_embeddings).bytes();
  // Nor are the embeddings' activations (a resampled position table).
  const size_t embeddings =
      has_embeddings ? EmbeddingActivations::allocate(host_backend(), c, micro_batch, act).bytes() : 0;
  return (per_slot * static_cast<size_t>(slots) + shared) * static_cast<size_t>(micro_batch) + workspace +
         embeddings * static_cast<size_t>(slots);
}

int nccl_peers(int stages, int virtual_stages, int replicas, int stage) {
  int peers = 0;
  if (stages > 1) {
    if (virtual_stages > 1) {
      peers += stages == 2 ? 1 : 2;  // the chunks wrap around: both neighbours (the same rank when 2 stages)
    } else {
      peers += (stage > 0 ? 1 : 0) + (stage < stages - 1 ? 1 : 0);
    }
  }
  if (replicas > 1) peers += replicas == 2 ? 1 : 2;
  return peers;
}

CudaWorkspaces cuda_workspaces(int stages, int virtual_stages, int replicas, int stage) {
  CudaWorkspaces w;
  w.cublaslt = static_cast<double>(cuda::kCublasLtWorkspaceBytes);
  w.cudnn = static_cast<double>(cuda::kCudnnWorkspaceBytes);
  w.arena = static_cast<double>(cuda::kArenaBytes);
  // One buffer each way per peer.
  w.nccl =
      2.0 * nccl_peers(stages, virtual_stages, replicas, stage) * static_cast<double>(cuda::kNcclBufferBytesPerPeer);
  return w;
}

}  // namespace vitpipe
