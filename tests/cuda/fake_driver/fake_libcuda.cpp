// A stand-in for the NVIDIA driver (libcuda.so.1) that reports one GPU, so that the path where everything is present
// (driver, GPU, module) is tested without one: --device cuda must then say that the CUDA backend is not built yet.
// FAKE_CUDA_CAPABILITY=MAJOR.MINOR in the environment sets the GPU's compute capability (default 9.0).
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
  *bytes = size_t{80} << 30;
  return 0;
}
