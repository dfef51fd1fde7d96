#include "backend/cuda_driver.h"

#include <dlfcn.h>

namespace vitpipe {
namespace {

// The driver API's entry points, declared here so that vitpipe needs no CUDA header to build (cuda.h's values).
using CuResult = int;
using CuDevice = int;
constexpr CuResult kCudaSuccess = 0;
constexpr int kAttributeComputeCapabilityMajor = 75;
constexpr int kAttributeComputeCapabilityMinor = 76;
using CuDriverGetVersion = CuResult (*)(int*);
using CuInit = CuResult (*)(unsigned int);
using CuDeviceGetCount = CuResult (*)(int*);
using CuDeviceGet = CuResult (*)(CuDevice*, int);
using CuDeviceGetName = CuResult (*)(char*, int, CuDevice);
using CuDeviceGetAttribute = CuResult (*)(int*, int, CuDevice);
using CuDeviceTotalMem = CuResult (*)(size_t*, CuDevice);
using CuContext = void*;
using CuDevicePrimaryCtxRetain = CuResult (*)(CuContext*, CuDevice);
using CuDevicePrimaryCtxRelease = CuResult (*)(CuDevice);
using CuCtxPushCurrent = CuResult (*)(CuContext);
using CuCtxPopCurrent = CuResult (*)(CuContext*);
using CuMemGetInfo = CuResult (*)(size_t*, size_t*);

template <class Function>
Function symbol(void* handle, const char* name) {
  return reinterpret_cast<Function>(dlsym(handle, name));
}

}  // namespace

std::string cuda_version_text(int version) {
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

std::string cuda_driver_error_text(int code) {
  switch (code) {
    case 1:
      return "CUDA_ERROR_INVALID_VALUE";
    case 2:
      return "CUDA_ERROR_OUT_OF_MEMORY";
    case 3:
      return "CUDA_ERROR_NOT_INITIALIZED";
    case 4:
      return "CUDA_ERROR_DEINITIALIZED";
    case 34:
      return "CUDA_ERROR_STUB_LIBRARY: this libcuda.so.1 is the toolkit's stub, not a driver";
    case 35:
      return "CUDA_ERROR_INSUFFICIENT_DRIVER";
    case 46:
      return "CUDA_ERROR_DEVICES_UNAVAILABLE: every GPU is busy or in exclusive use";
    case 100:
      return "CUDA_ERROR_NO_DEVICE";
    case 101:
      return "CUDA_ERROR_INVALID_DEVICE";
    case 304:
      return "CUDA_ERROR_OPERATING_SYSTEM: the kernel module and the driver library do not match";
    case 999:
      return "CUDA_ERROR_UNKNOWN";
    default:
      return "CUresult " + std::to_string(code);
  }
}

CudaDriverProbe probe_cuda_driver(const std::string& library) {
  CudaDriverProbe probe;
  probe.library = library;
  dlerror();
  // Never closed: the CUDA runtime in the module opens the same library and keeps it.
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (handle == nullptr) {
    const char* why = dlerror();
    probe.error = "no NVIDIA driver: " + library + " could not be opened (" + (why ? why : "unknown reason") + ")";
    return probe;
  }
  const auto get_version = symbol<CuDriverGetVersion>(handle, "cuDriverGetVersion");
  const auto init = symbol<CuInit>(handle, "cuInit");
  const auto get_count = symbol<CuDeviceGetCount>(handle, "cuDeviceGetCount");
  if (get_version == nullptr || init == nullptr || get_count == nullptr) {
    probe.error = "no NVIDIA driver: " + library + " does not export cuDriverGetVersion, cuInit and cuDeviceGetCount";
    return probe;
  }
  probe.found = true;
  if (const CuResult r = get_version(&probe.version); r != kCudaSuccess) {
    probe.version = 0;
    probe.error = "the NVIDIA driver is not usable: cuDriverGetVersion failed with " + cuda_driver_error_text(r);
    return probe;
  }
  if (const CuResult r = init(0); r != kCudaSuccess) {
    probe.error = r == 100
                      ? "the NVIDIA driver " + cuda_version_text(probe.version) + " sees no GPU (CUDA_ERROR_NO_DEVICE)"
                      : "the NVIDIA driver " + cuda_version_text(probe.version) +
                            " is not usable: cuInit failed with " + cuda_driver_error_text(r);
    return probe;
  }
  int count = 0;
  if (const CuResult r = get_count(&count); r != kCudaSuccess) {
    probe.error = "the NVIDIA driver " + cuda_version_text(probe.version) +
                  " is not usable: cuDeviceGetCount failed with " + cuda_driver_error_text(r);
    return probe;
  }
  const auto get_device = symbol<CuDeviceGet>(handle, "cuDeviceGet");
  const auto get_name = symbol<CuDeviceGetName>(handle, "cuDeviceGetName");
  const auto get_attribute = symbol<CuDeviceGetAttribute>(handle, "cuDeviceGetAttribute");
  const auto total_memory = symbol<CuDeviceTotalMem>(handle, "cuDeviceTotalMem_v2");
  for (int i = 0; i < count; ++i) {
    CudaDevice device;
    device.index = i;
    CuDevice handle_of_device = 0;
    if (get_device == nullptr || get_device(&handle_of_device, i) != kCudaSuccess) continue;
    char name[256] = {};
    if (get_name != nullptr && get_name(name, sizeof name, handle_of_device) == kCudaSuccess) device.name = name;
    if (get_attribute != nullptr) {
      get_attribute(&device.major, kAttributeComputeCapabilityMajor, handle_of_device);
      get_attribute(&device.minor, kAttributeComputeCapabilityMinor, handle_of_device);
    }
    size_t bytes = 0;
    if (total_memory != nullptr && total_memory(&bytes, handle_of_device) == kCudaSuccess) device.memory_bytes = bytes;
    probe.devices.push_back(device);
  }
  if (probe.devices.empty()) {
    probe.error = "the NVIDIA driver " + cuda_version_text(probe.version) + " sees no GPU";
  }
  return probe;
}

CudaMemoryInfo query_cuda_memory(int device, const std::string& library) {
  CudaMemoryInfo info;
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (handle == nullptr) {
    info.error = library + " could not be opened";
    return info;
  }
  const auto get_device = symbol<CuDeviceGet>(handle, "cuDeviceGet");
  const auto retain = symbol<CuDevicePrimaryCtxRetain>(handle, "cuDevicePrimaryCtxRetain");
  const auto release = symbol<CuDevicePrimaryCtxRelease>(handle, "cuDevicePrimaryCtxRelease_v2");
  const auto push = symbol<CuCtxPushCurrent>(handle, "cuCtxPushCurrent_v2");
  const auto pop = symbol<CuCtxPopCurrent>(handle, "cuCtxPopCurrent_v2");
  const auto mem_info = symbol<CuMemGetInfo>(handle, "cuMemGetInfo_v2");
  if (!get_device || !retain || !release || !push || !pop || !mem_info) {
    info.error = library + " does not export cuDevicePrimaryCtxRetain, cuCtxPushCurrent_v2 and cuMemGetInfo_v2";
    return info;
  }
  CuDevice dev = 0;
  CuContext context = nullptr;
  if (const CuResult r = get_device(&dev, device); r != kCudaSuccess) {
    info.error = "cuDeviceGet(" + std::to_string(device) + ") failed with " + cuda_driver_error_text(r);
    return info;
  }
  if (const CuResult r = retain(&context, dev); r != kCudaSuccess) {
    info.error = "cuDevicePrimaryCtxRetain failed with " + cuda_driver_error_text(r);
    return info;
  }
  if (const CuResult r = push(context); r != kCudaSuccess) {
    info.error = "cuCtxPushCurrent failed with " + cuda_driver_error_text(r);
  } else {
    size_t free = 0, total = 0;
    if (const CuResult q = mem_info(&free, &total); q != kCudaSuccess) {
      info.error = "cuMemGetInfo failed with " + cuda_driver_error_text(q);
    } else {
      info.free_bytes = free;
      info.total_bytes = total;
    }
    CuContext popped = nullptr;
    pop(&popped);
  }
  release(dev);
  return info;
}

}  // namespace vitpipe
