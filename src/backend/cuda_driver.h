// The NVIDIA driver, asked directly: libcuda.so.1 opened with dlopen (never linked) and cuDriverGetVersion called
// before anything else, so that "no driver" is reported as such. Without this the CUDA runtime's first error is
// "CUDA driver version is insufficient for CUDA runtime version", which misleads when there is no driver at all.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace vitpipe {

struct CudaDevice {
  int index = 0;
  std::string name;           // "NVIDIA H200"
  int major = 0, minor = 0;   // compute capability (9.0 = sm_90)
  uint64_t memory_bytes = 0;  // total device memory
};

struct CudaDriverProbe {
  std::string library;  // what was opened ("libcuda.so.1", or a path in tests)
  bool found = false;   // the library opened and exports cuDriverGetVersion
  int version = 0;      // cuDriverGetVersion: 13000 = 13.0; 0 when it did not answer
  std::vector<CudaDevice> devices;
  std::string error;  // empty when the driver answered and cuInit succeeded; else what is wrong, as a clause
  bool usable() const { return found && version > 0 && error.empty(); }
};

// Opens `library` (kept open: the CUDA runtime opens the same one later) and asks it for its version, then cuInit
// and the devices. No exception: every failure is described in `error`.
CudaDriverProbe probe_cuda_driver(const std::string& library = "libcuda.so.1");

// A GPU's free and total memory as the driver reports it (cuMemGetInfo) with this process's context on it: the
// primary context is retained for the question (created if none exists, so its own memory is already taken) and
// released after. No exception: `error` says what failed.
struct CudaMemoryInfo {
  uint64_t free_bytes = 0, total_bytes = 0;
  std::string error;  // empty when answered
};
CudaMemoryInfo query_cuda_memory(int device, const std::string& library = "libcuda.so.1");

// 13000 -> "13.0", 12080 -> "12.8".
std::string cuda_version_text(int version);

// CUresult codes to their names ("CUDA_ERROR_NO_DEVICE"), with what each means for a user where it is not obvious.
std::string cuda_driver_error_text(int code);

}  // namespace vitpipe
