// The memory a rank may plan on with --device cuda: its GPU's free memory when the plan is made (the driver's
// cuMemGetInfo with a context on the GPU, so the context's own memory is already taken), less a margin for what the
// planner does not count (the libraries' handles and lazily loaded kernels, allocation rounding). The smallest of
// the GPUs the node's ranks would use, as the planner assumes the nodes alike.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace vitpipe {

// The margin: 5% of the GPU's memory, at least 1 GiB.
constexpr double kGpuMemoryMarginFraction = 0.05;
constexpr double kGpuMemoryMarginMinBytes = 1024.0 * 1024 * 1024;

struct GpuMemoryBudget {
  double free_bytes = 0, total_bytes = 0, margin_bytes = 0;
  std::vector<int> devices;  // the GPUs asked
  double budget() const { return free_bytes > margin_bytes ? free_bytes - margin_bytes : 0.0; }
  // "71.2 GiB free of 79.6 GiB on GPU 0, less a margin of 4.0 GiB (5%, at least 1 GiB)"
  std::string describe() const;
};

// The budget of a GPU with this free and total memory.
GpuMemoryBudget gpu_memory_budget_of(double free_bytes, double total_bytes);

// Asks the driver for each of `devices` and keeps the one with the least free memory. Throws one line naming the
// GPU and the driver's answer when it cannot tell.
GpuMemoryBudget query_gpu_memory_budget(const std::vector<int>& devices);

}  // namespace vitpipe
