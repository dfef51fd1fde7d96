// --device cpu|cuda|auto: which backend a command runs on. cpu never touches CUDA. cuda and auto ask the driver
// first (backend/cuda_driver.h), then open the CUDA module (backend/cuda_module.h) and ask it for GPUs. cuda
// refuses with one sentence naming what is missing (the module, the driver, a GPU, or the CUDA backend itself);
// auto falls back to the CPU and says why at info level.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "backend/backend.h"
#include "backend/cuda_driver.h"
#include "backend/cuda_module.h"
#include "tensor/tensor.h"  // Device

namespace vitpipe {

enum class DeviceChoice { cpu, cuda, automatic };

// "cpu", "cuda", "auto"; anything else is a vitpipe::Error naming the flag.
DeviceChoice parse_device_choice(const std::string& text);

// What this process can do with CUDA: the driver's answer, then the module's.
struct CudaStatus {
  bool built = false;  // this build made the module
  CudaDriverProbe driver;
  CudaModuleLoad module;
  int runtime_devices = 0;    // GPUs the module's CUDA runtime sees (asked only when the driver answered)
  std::string runtime_error;  // the runtime's message when it sees none
  std::string error;          // what stops --device cuda, as a clause; empty when a CUDA Backend can run
  bool usable() const { return error.empty(); }
  // The "cuda" object of `vitpipe info --json`.
  nlohmann::json to_json() const;
};

// Probes the driver (`driver_library`), then the module found by cuda_module_candidates() or at `module_path`.
// Not cached: tests give their own driver and module.
CudaStatus probe_cuda(const std::string& driver_library, const CudaModuleLoad& module);

// The process's answer (libcuda.so.1, the module of cuda_module()), probed on first use.
const CudaStatus& cuda_status();

// The device to run on; --device cuda without a usable CUDA backend is a vitpipe::Error of one sentence.
Device select_device(DeviceChoice choice);

// A backend for `device`: the CPU's (make_cpu_backend), or the CUDA module's on this process's GPU: the node-local
// rank's (OMPI_COMM_WORLD_LOCAL_RANK, else SLURM_LOCALID under srun; GPU 0 outside mpirun). More ranks on the node
// than GPUs the runtime sees is refused in one line (gpu_for_local_rank). TF32 GEMMs only with allow_tf32 (fp32 runs
// keep full fp32 products by default).
std::unique_ptr<Backend> make_backend(Device device, bool allow_tf32 = false);
// The GPU make_backend(Device::cuda) takes in this process.
int local_gpu_index();
// The GPU of node-local rank `local_rank` of `local_size` on a node with `gpus` GPUs: its own. More ranks than GPUs
// would put two ranks (replicas of one NCCL communicator among them) on one GPU, which NCCL refuses ("duplicate
// GPU") only once training starts: a vitpipe::Error of one line saying how many ranks the node can take.
int gpu_for_local_rank(int local_rank, int local_size, int gpus);

}  // namespace vitpipe
