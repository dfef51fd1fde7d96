// Stand-ins for libvitpipe_cuda.so that need no CUDA, so the loader's refusals are tested on every machine:
// FAKE_ABI_VERSION sets the interface version (another one is refused; this one, with the fake driver, stands for a
// module that sees one GPU); FAKE_NO_ENTRY builds a library without the entry point.
#include "backend/cuda/module_abi.h"

#ifndef FAKE_NO_ENTRY
namespace {

int library_versions(VitpipeCudaLibraryVersions* out) {
  *out = VitpipeCudaLibraryVersions{};
  return 0;
}

int device_count(int* count, char*, size_t) {
  *count = 1;
  return 0;
}

const VitpipeCudaModule kModule = {
    FAKE_ABI_VERSION, sizeof(VitpipeCudaModule), "fake module, sm_80 sm_90", 0, library_versions, device_count};

}  // namespace

extern "C" __attribute__((visibility("default"))) const VitpipeCudaModule* vitpipe_cuda_module(void) {
  return &kModule;
}
#else
extern "C" __attribute__((visibility("default"))) int not_a_vitpipe_module(void) { return 0; }
#endif
