// The planner's memory per rank: parameters, gradients, optimizer moments (1/replicas of them when sharded), the
// bf16 GEMM copy, the activation memory plan of the rank's stage (the same tensors ViTStage allocates, counted
// without allocating them), the loader's batches on the first stage, and a fixed process overhead.
#pragma once

#include <cstdint>
#include <vector>

#include "model/parameter_layout.h"
#include "model/precision.h"

namespace vitpipe {

// Bytes ViTStage allocates for activations and gradient workspace (ViTStage::activation_bytes) for a training stage
// holding segments [first, last] with this many slots, computed from the shapes alone.
size_t planned_activation_bytes(const ViTConfig& config, int first_segment, int last_segment, Precision precision,
                                bool recompute, bool split_backward, int64_t micro_batch, int slots);

// Resident memory outside the planned tensors: the binary, oneDNN and MPI buffers, allocator slack. Measured on a
// vit-micro training run (max RSS minus its planned tensors), rounded up.
constexpr double kProcessOverheadBytes = 300.0 * 1024 * 1024;

// On --device cuda, the device memory the CUDA backend takes beside the tensors (backend/cuda/workspace_sizes.h,
// the sizes it allocates): cuBLASLt's and cuDNN's workspaces, the scratch arena, and NCCL's buffers for the peers
// the rank exchanges with. All 0 on the CPU.
struct CudaWorkspaces {
  double cublaslt = 0, cudnn = 0, arena = 0, nccl = 0;
  double total() const { return cublaslt + cudnn + arena + nccl; }
};

// The peers one rank of `stage` talks to over NCCL: its pipeline neighbours (with virtual stages the last stage
// feeds the first, so every stage has both) and its data-parallel ring's two neighbours (one when 2 replicas).
int nccl_peers(int stages, int virtual_stages, int replicas, int stage);

// The workspaces of a rank of `stage` in a layout of stages x replicas.
CudaWorkspaces cuda_workspaces(int stages, int virtual_stages, int replicas, int stage);

struct RankMemory {
  double parameters = 0, gradients = 0, optimizer = 0, gemm_copy = 0, activations = 0, loader = 0;
  double overhead = kProcessOverheadBytes;
  CudaWorkspaces cuda;
  double total() const {
    return parameters + gradients + optimizer + gemm_copy + activations + loader + overhead + cuda.total();
  }
};

}  // namespace vitpipe
