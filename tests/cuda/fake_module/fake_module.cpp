// Stand-ins for libvitpipe_cuda.so that need no CUDA, so the loader's refusals are tested on every machine:
// FAKE_ABI_VERSION sets the interface version (another one is refused; this one, with the fake driver, stands for a
// module that sees one GPU); FAKE_NO_ENTRY builds a library without the entry point.
#include <cstdio>
#include <cstdlib>

#include "backend/cuda/module_abi.h"

#ifndef FAKE_NO_ENTRY
namespace {

int library_versions(VitpipeCudaLibraryVersions* out) {
  *out = VitpipeCudaLibraryVersions{};
  return 0;
}

// One GPU, or the runtime's error when FAKE_CUDA_RUNTIME_ERROR is set (a driver the runtime refuses).
int device_count(int* count, char* error, size_t error_size) {
  if (const char* message = std::getenv("FAKE_CUDA_RUNTIME_ERROR"); message != nullptr) {
    *count = 0;
    std::snprintf(error, error_size, "%s", message);
    return 35;
  }
  *count = 1;
  return 0;
}

const VitpipeCudaModule kModule = {FAKE_ABI_VERSION,
                                   sizeof(VitpipeCudaModule),
                                   "fake module, sm_80 sm_90",
                                   0,
                                   library_versions,
                                   device_count,
                                   nullptr,
                                   nullptr,
                                   nullptr,
                                   nullptr,
                                   nullptr,
                                   nullptr,
                                   nullptr,
                                   nullptr,
                                   nullptr,
                                   nullptr,
                                   nullptr,
                                   nullptr,
                                   nullptr,
                                   nullptr,
                                   nullptr,
                                   nullptr};

}  // namespace

extern "C" __attribute__((visibility("default"))) const VitpipeCudaModule* vitpipe_cuda_module(void) {
  return &kModule;
}
#else
extern "C" __attribute__((visibility("default"))) int not_a_vitpipe_module(void) { return 0; }
#endif
