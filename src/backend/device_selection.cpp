#include "backend/device_selection.h"

#include <algorithm>
#include <cstdlib>

#include "backend/cuda_module_backend.h"
#include "parallel/launch_environment.h"
#include "util/error.h"
#include "util/log.h"

namespace vitpipe {
namespace {

// The oldest GPUs the module has machine code or PTX for: sm_80 (cmake/cuda_module.cmake).
constexpr int kOldestComputeCapability = 80;

std::string version_triple(size_t v, size_t major_unit, size_t minor_unit) {
  return std::to_string(v / major_unit) + "." + std::to_string(v % major_unit / minor_unit) + "." +
         std::to_string(v % minor_unit);
}

std::string device_text(const CudaDevice& d) {
  return "GPU " + std::to_string(d.index) + ": " + d.name + " (sm_" + std::to_string(d.major) +
         std::to_string(d.minor) + ", " + std::to_string(d.memory_bytes >> 30) + " GiB)";
}

// Why the CUDA backend cannot run, from what the driver and the module said; empty when it can.
std::string cuda_blocker(const CudaStatus& s) {
  std::string missing;
  const auto add = [&missing](const std::string& clause) { missing += (missing.empty() ? "" : "; ") + clause; };
  if (!s.driver.usable()) add(s.driver.error);
  if (!s.module.loaded()) {
    add(!s.built && !s.module.named && s.module.path.empty()
            ? "this vitpipe was built without its CUDA module (VITPIPE_CUDA=off, or no CUDA 13 with cuBLASLt, cuDNN 9 "
              "and NCCL at build time)"
            : s.module.error);
  }
  if (!missing.empty()) return missing;
  if (s.driver.version < s.module.libraries.cuda_runtime) {
    return "the NVIDIA driver " + cuda_version_text(s.driver.version) + " is older than the module's CUDA runtime " +
           cuda_version_text(s.module.libraries.cuda_runtime);
  }
  bool supported = false;
  for (const CudaDevice& d : s.driver.devices) supported |= d.major * 10 + d.minor >= kOldestComputeCapability;
  if (!supported) {
    return device_text(s.driver.devices.front()) + " is older than sm_80, the oldest GPU this build runs on";
  }
  if (s.runtime_devices == 0) {
    return "the module's CUDA runtime sees no GPU although the driver does (" +
           (s.runtime_error.empty() ? std::string("it counts 0") : s.runtime_error) + ")";
  }
  if (s.module.module->has_backend == 0) {
    return "the CUDA backend is not built into the module " + s.module.path + " (driver " +
           cuda_version_text(s.driver.version) + ", " + device_text(s.driver.devices.front()) + ")";
  }
  return "";
}

}  // namespace

DeviceChoice parse_device_choice(const std::string& text) {
  if (text == "cpu") return DeviceChoice::cpu;
  if (text == "cuda") return DeviceChoice::cuda;
  if (text == "auto") return DeviceChoice::automatic;
  fail("--device must be cpu, cuda or auto (got '", text, "')");
}

CudaStatus probe_cuda(const std::string& driver_library, const CudaModuleLoad& module) {
  CudaStatus s;
  s.built = cuda_module_built();
  s.driver = probe_cuda_driver(driver_library);  // first: the runtime's own error misleads when there is no driver
  s.module = module;
  if (s.driver.usable() && s.module.loaded()) {
    char message[256] = {};
    if (s.module.module->device_count(&s.runtime_devices, message, sizeof message) != 0) {
      s.runtime_devices = 0;
      s.runtime_error = message;
    }
  }
  s.error = cuda_blocker(s);
  return s;
}

const CudaStatus& cuda_status() {
  static const CudaStatus status = probe_cuda("libcuda.so.1", cuda_module());
  return status;
}

nlohmann::json CudaStatus::to_json() const {
  nlohmann::json devices = nlohmann::json::array();
  for (const CudaDevice& d : driver.devices) {
    devices.push_back({{"index", d.index},
                       {"name", d.name},
                       {"compute_capability", std::to_string(d.major) + "." + std::to_string(d.minor)},
                       {"memory_bytes", d.memory_bytes}});
  }
  nlohmann::json libraries = nullptr;
  if (module.loaded()) {
    const VitpipeCudaLibraryVersions& v = module.libraries;
    libraries = {{"cuda_runtime", cuda_version_text(v.cuda_runtime)},
                 {"cublaslt", version_triple(v.cublaslt, 10000, 100)},
                 {"cudnn", version_triple(v.cudnn, 10000, 100)},
                 {"nccl", version_triple(static_cast<size_t>(v.nccl), 10000, 100)}};
  }
  return {{"built", built},
          {"module", module.path.empty() ? nlohmann::json(nullptr) : nlohmann::json(module.path)},
          {"loaded", module.loaded()},
          {"built_with", module.loaded() ? nlohmann::json(module.module->built_with) : nlohmann::json(nullptr)},
          {"libraries", libraries},
          {"driver", driver.version > 0 ? nlohmann::json(cuda_version_text(driver.version)) : nlohmann::json(nullptr)},
          {"devices", devices},
          {"backend", module.loaded() && module.module->has_backend != 0},
          {"usable", usable()},
          {"error", error.empty() ? nlohmann::json(nullptr) : nlohmann::json(error)}};
}

Device select_device(DeviceChoice choice) {
  if (choice == DeviceChoice::cpu) return Device::cpu;
  const CudaStatus& status = cuda_status();
  if (status.usable()) return Device::cuda;
  if (choice == DeviceChoice::cuda) fail("--device cuda cannot run: ", status.error, "; use --device cpu");
  info("--device auto: running on the CPU (", status.error, ")");
  return Device::cpu;
}

int gpu_for_local_rank(int local_rank, int local_size, int gpus) {
  gpus = std::max(gpus, 1);
  if (local_size > gpus) {
    fail("--device cuda: ", local_size, " ranks on this node for ", gpus,
         " GPU(s): two ranks would share a GPU, and NCCL refuses two ranks of one communicator on one GPU; start at "
         "most ",
         gpus, " rank(s) per node (mpirun --map-by ppr:", gpus, ":node, or srun --ntasks-per-node=", gpus, ")");
  }
  return std::max(local_rank, 0) % gpus;
}

int local_gpu_index() {
  const LaunchEnvironment& launch = launch_environment();  // mpirun's, else srun's (SLURM_LOCALID)
  return gpu_for_local_rank(launch.local_rank, launch.local_ranks, cuda_status().runtime_devices);
}

std::unique_ptr<Backend> make_backend(Device device, bool allow_tf32) {
  if (device == Device::cpu) return make_cpu_backend();
  const CudaStatus& status = cuda_status();
  if (!status.usable()) fail("--device cuda cannot run: ", status.error, "; use --device cpu");
  return make_cuda_module_backend(*status.module.module, local_gpu_index(), allow_tf32);
}

}  // namespace vitpipe
