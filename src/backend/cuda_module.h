// Finding and opening the CUDA module, libvitpipe_cuda.so (backend/cuda/module_abi.h), at run time: only when a
// command asks for CUDA (--device cuda|auto, `vitpipe info`), once per process, never closed (RTLD_NODELETE: no
// CUDA library is torn down by a static destructor at exit). Where: $VITPIPE_CUDA_MODULE when set (and only there),
// else beside the binary, else ../lib/vitpipe/ from the binary's folder (an installed layout).
#pragma once

#include <string>
#include <vector>

#include "backend/cuda/module_abi.h"

namespace vitpipe {

struct CudaModuleLoad {
  std::vector<std::string> searched;          // the paths looked at, in order
  std::string path;                           // the one that exists (opened or not); empty when none does
  const VitpipeCudaModule* module = nullptr;  // set when opened and of this vitpipe's interface version
  VitpipeCudaLibraryVersions libraries{};     // what the module's libraries say, when opened
  std::string error;                          // why `module` is null, as a clause
  bool named = false;  // the path was given (VITPIPE_CUDA_MODULE, or a test's), not the default places
  bool loaded() const { return module != nullptr; }
};

// Whether this build made the module (VITPIPE_CUDA found CUDA 13 and its libraries).
bool cuda_module_built();

// Where the module is looked for, in order (see above).
std::vector<std::string> cuda_module_candidates();

// Opens the module at `path` and checks its interface version. Not cached: tests open fakes through it.
CudaModuleLoad open_cuda_module(const std::string& path);

// The process's module: found and opened on first use, then the same answer every time.
const CudaModuleLoad& cuda_module();

}  // namespace vitpipe
