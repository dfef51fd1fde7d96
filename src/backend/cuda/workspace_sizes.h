// The device memory the CUDA backend takes for the libraries beside the model's tensors, in one plain header (no
// CUDA includes) so that the planner (plan/memory_model.h) counts the very sizes the backend allocates.
#pragma once

#include <cstddef>

namespace vitpipe::cuda {

// cuBLASLt's workspace: one cudaMalloc at construction, the most any GEMM heuristic may use.
inline constexpr size_t kCublasLtWorkspaceBytes = 32u << 20;
// cuDNN's SDPA workspace: its first size (it grows when an engine asks for more, up to SdpaExecutor's cap).
inline constexpr size_t kCudnnWorkspaceBytes = 64u << 20;
// The scratch arena (device_arena.h): its first size.
inline constexpr size_t kArenaBytes = 256u << 20;
// NCCL's staging buffer per peer connection and direction: NCCL_BUFFSIZE's documented default (4 MiB). NCCL sizes
// it, not the backend; the planner counts one each way per peer a rank talks to.
inline constexpr size_t kNcclBufferBytesPerPeer = 4u << 20;

}  // namespace vitpipe::cuda
