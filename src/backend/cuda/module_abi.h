// The C interface between vitpipe and its CUDA module, libvitpipe_cuda.so, which vitpipe opens at run time
// (backend/cuda_module.h) so that the binary itself links no CUDA library. The module exports one function,
// VITPIPE_CUDA_MODULE_ENTRY, returning a table of plain C function pointers: only C types cross, and any change to
// the table bumps VITPIPE_CUDA_MODULE_ABI_VERSION (the loader refuses a module of another version).
#pragma once

#include <stddef.h>
#include <stdint.h>

#define VITPIPE_CUDA_MODULE_ABI_VERSION 1u
#define VITPIPE_CUDA_MODULE_ENTRY "vitpipe_cuda_module"

#ifdef __cplusplus
extern "C" {
#endif

// The versions of the CUDA libraries the module loaded, as each library reports its own.
typedef struct VitpipeCudaLibraryVersions {
  int cuda_runtime;  // cudaRuntimeGetVersion: 13000 = 13.0
  size_t cublaslt;   // cublasLtGetVersion: 130100 = 13.1.0
  size_t cudnn;      // cudnnGetVersion: 91900 = 9.19.0
  int nccl;          // ncclGetVersion: 22809 = 2.28.9
} VitpipeCudaLibraryVersions;

typedef struct VitpipeCudaModule {
  uint32_t abi_version;    // first, at a fixed offset: the loader reads nothing else before checking it
  uint32_t struct_size;    // sizeof(VitpipeCudaModule) as the module was compiled
  const char* built_with;  // the toolkit, library headers and GPU architectures it was compiled for
  int has_backend;         // 0 until the CUDA Backend's kernels exist (a later part of issue 24)
  // Fills `out`; 0 on success. Needs no GPU and no driver.
  int (*library_versions)(VitpipeCudaLibraryVersions* out);
  // The number of GPUs the CUDA runtime sees; 0 on success, else writes the runtime's message into `error`. Call it
  // only after the driver answered (backend/cuda_driver.h): without one, the runtime says "CUDA driver version is
  // insufficient for CUDA runtime version", which misleads.
  int (*device_count)(int* count, char* error, size_t error_size);
} VitpipeCudaModule;

typedef const VitpipeCudaModule* (*VitpipeCudaModuleEntry)(void);

#ifdef __cplusplus
}
#endif
