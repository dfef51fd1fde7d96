#include "plan/gpu_memory_budget.h"

#include <algorithm>

#include "backend/cuda_driver.h"
#include "util/error.h"
#include "util/progress.h"

namespace vitpipe {

std::string GpuMemoryBudget::describe() const {
  std::string gpus;
  for (int d : devices) {
    if (!gpus.empty()) gpus += ',';
    gpus += std::to_string(d);
  }
  return concat(format_bytes(free_bytes), " free of ", format_bytes(total_bytes), " on GPU ",
                gpus.empty() ? std::string("?") : gpus, devices.size() > 1 ? " (the least free)" : "",
                ", less a margin of ", format_bytes(margin_bytes), " (",
                static_cast<int>(kGpuMemoryMarginFraction * 100), "%, at least ",
                format_bytes(kGpuMemoryMarginMinBytes), ")");
}

GpuMemoryBudget gpu_memory_budget_of(double free_bytes, double total_bytes) {
  GpuMemoryBudget b;
  b.free_bytes = free_bytes;
  b.total_bytes = total_bytes;
  b.margin_bytes = std::max(kGpuMemoryMarginMinBytes, kGpuMemoryMarginFraction * total_bytes);
  return b;
}

GpuMemoryBudget query_gpu_memory_budget(const std::vector<int>& devices) {
  VP_REQUIRE(!devices.empty(), "--device cuda: no GPU to plan for");
  GpuMemoryBudget least;
  bool first = true;
  for (int d : devices) {
    const CudaMemoryInfo info = query_cuda_memory(d);
    VP_REQUIRE(info.error.empty(), "--device cuda: the free memory of GPU ", d, " is unknown (", info.error,
               "); give --memory-per-process");
    const GpuMemoryBudget b =
        gpu_memory_budget_of(static_cast<double>(info.free_bytes), static_cast<double>(info.total_bytes));
    if (first || b.budget() < least.budget()) least = b;
    first = false;
  }
  least.devices = devices;
  return least;
}

}  // namespace vitpipe
