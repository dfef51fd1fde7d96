// A stand-in for the NVIDIA driver (libcuda.so.1) that reports one GPU, so that the path where everything is present
// (driver, GPU, module) is tested without one: --device cuda must then say that the CUDA backend is not built yet.
// FAKE_CUDA_CAPABILITY=MAJOR.MINOR in the environment sets the GPU's compute capability (default 9.0);
// FAKE_CUDA_TOTAL_MEMORY and FAKE_CUDA_FREE_MEMORY (bytes) its memory and what cuMemGetInfo says is free (default
// 80 GiB, and all of it less 512 MiB: a context's own).
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

int capability(int part) {
  const char* text = std::getenv("FAKE_CUDA_CAPABILITY");
  int major = 9, minor = 0;
  if (text != nullptr) std::sscanf(text, "%d.%d", &major, &minor);
  return part == 0 ? major : minor;
}

size_t memory_from(const char* name, size_t otherwise) {
  const char* text = std::getenv(name);
  return text != nullptr ? static_cast<size_t>(std::strtoull(text, nullptr, 10)) : otherwise;
}

size_t total_memory() { return memory_from("FAKE_CUDA_TOTAL_MEMORY", size_t{80} << 30); }

int context_token = 0;  // the primary context's handle: never dereferenced
int retained = 0;

}  // namespace

#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))

FAKE_EXPORT int cuDriverGetVersion(int* version) {
  *version = 13000;
  return 0;
}
FAKE_EXPORT int cuInit(unsigned int) { return 0; }
FAKE_EXPORT int cuDeviceGetCount(int* count) {
  *count = 1;
  return 0;
}
FAKE_EXPORT int cuDeviceGet(int* device, int ordinal) {
  *device = ordinal;
  return ordinal == 0 ? 0 : 101;
}
FAKE_EXPORT int cuDeviceGetName(char* name, int length, int) {
  std::snprintf(name, static_cast<size_t>(length), "Fake GPU");
  return 0;
}
FAKE_EXPORT int cuDeviceGetAttribute(int* value, int attribute, int) {
  *value = attribute == 75 ? capability(0) : attribute == 76 ? capability(1) : 0;
  return 0;
}
FAKE_EXPORT int cuDeviceTotalMem_v2(size_t* bytes, int) {
  *bytes = total_memory();
  return 0;
}
FAKE_EXPORT int cuDevicePrimaryCtxRetain(void** context, int device) {
  if (device != 0) return 101;
  *context = &context_token;
  ++retained;
  return 0;
}
FAKE_EXPORT int cuDevicePrimaryCtxRelease_v2(int device) {
  if (device != 0 || retained == 0) return 101;
  --retained;
  return 0;
}
FAKE_EXPORT int cuCtxPushCurrent_v2(void* context) { return context == &context_token ? 0 : 1; }
FAKE_EXPORT int cuCtxPopCurrent_v2(void** context) {
  if (context != nullptr) *context = &context_token;
  return 0;
}
// Answers only with a context current (retained), as the driver does (CUDA_ERROR_INVALID_CONTEXT otherwise).
FAKE_EXPORT int cuMemGetInfo_v2(size_t* free, size_t* total) {
  if (retained == 0) return 201;
  *total = total_memory();
  *free = memory_from("FAKE_CUDA_FREE_MEMORY", *total - (size_t{512} << 20));
  return 0;
}
