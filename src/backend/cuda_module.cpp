#include "backend/cuda_module.h"

#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <system_error>

namespace vitpipe {
namespace {

constexpr const char* kModuleFile = "libvitpipe_cuda.so";

std::filesystem::path executable_folder() {
  std::error_code error;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", error);
  return error ? std::filesystem::path() : exe.parent_path();
}

}  // namespace

bool cuda_module_built() {
#ifdef VITPIPE_CUDA_MODULE_BUILT
  return true;
#else
  return false;
#endif
}

std::vector<std::string> cuda_module_candidates() {
  if (const char* env = std::getenv("VITPIPE_CUDA_MODULE"); env != nullptr && *env != '\0') return {env};
  const std::filesystem::path folder = executable_folder();
  if (folder.empty()) return {};
  return {(folder / kModuleFile).string(), (folder.parent_path() / "lib" / "vitpipe" / kModuleFile).string()};
}

CudaModuleLoad open_cuda_module(const std::string& path) {
  CudaModuleLoad load;
  load.searched = {path};
  load.named = true;
  std::error_code exists_error;
  if (!std::filesystem::exists(path, exists_error)) {
    load.error = "the CUDA module is missing: no " + path;
    return load;
  }
  load.path = path;
  dlerror();
  // RTLD_NOW: a missing CUDA library is reported here, not at a first call in the middle of a step.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (handle == nullptr) {
    const char* why = dlerror();
    load.error = "the CUDA module " + path + " could not be loaded (" + (why ? why : "unknown reason") + ")";
    return load;
  }
  const auto entry = reinterpret_cast<VitpipeCudaModuleEntry>(dlsym(handle, VITPIPE_CUDA_MODULE_ENTRY));
  if (entry == nullptr) {
    load.error =
        "the CUDA module " + path + " is not a vitpipe CUDA module (it exports no " + VITPIPE_CUDA_MODULE_ENTRY + ")";
    return load;
  }
  const VitpipeCudaModule* module = entry();
  if (module == nullptr) {
    load.error = "the CUDA module " + path + " returned no interface";
    return load;
  }
  if (module->abi_version != VITPIPE_CUDA_MODULE_ABI_VERSION || module->struct_size != sizeof(VitpipeCudaModule)) {
    load.error = "the CUDA module " + path + " has interface version " + std::to_string(module->abi_version) +
                 " but this vitpipe needs version " + std::to_string(VITPIPE_CUDA_MODULE_ABI_VERSION) +
                 " (install the module built with this vitpipe)";
    return load;
  }
  if (const int status = module->library_versions(&load.libraries); status != 0) {
    load.error =
        "the CUDA module " + path + " could not read its libraries' versions (status " + std::to_string(status) + ")";
    return load;
  }
  load.module = module;
  return load;
}

const CudaModuleLoad& cuda_module() {
  static const CudaModuleLoad load = [] {
    const char* env = std::getenv("VITPIPE_CUDA_MODULE");
    const bool named = env != nullptr && *env != '\0';
    const std::vector<std::string> candidates = cuda_module_candidates();
    for (const std::string& path : candidates) {
      std::error_code error;
      if (!std::filesystem::exists(path, error)) continue;
      CudaModuleLoad found = open_cuda_module(path);
      found.searched = candidates;
      found.named = named;
      return found;
    }
    CudaModuleLoad missing;
    missing.searched = candidates;
    missing.named = named;
    std::string where;
    for (const std::string& path : candidates) where += (where.empty() ? "" : " or ") + path;
    missing.error = "the CUDA module is missing: no " + (where.empty() ? std::string(kModuleFile) : where) +
                    " (VITPIPE_CUDA_MODULE names another path)";
    return missing;
  }();
  return load;
}

}  // namespace vitpipe
