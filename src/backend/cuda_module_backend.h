// The CUDA module's Backend seen from vitpipe: an adapter that implements backend.h by describing each call's
// Tensors in C (backend_call.h) and handing it to the module's table (module_abi.h: backend_create, backend_call).
// Links no CUDA library; the Tensors' raw() pointers are whatever memory the table's backend works on (device memory
// for libvitpipe_cuda.so, host memory for the loopback table of cuda_module_loopback.h that the CPU tests use).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "backend/backend.h"
#include "backend/cuda/module_abi.h"

namespace vitpipe {

// A backend instance of `module` on GPU `device`. Throws vitpipe::Error with the module's message when the module
// has no backend or cannot create one; each op throws with the module's message when it fails.
std::unique_ptr<Backend> make_cuda_module_backend(const VitpipeCudaModule& module, int device, bool allow_tf32);

// The module and its backend instance behind a Backend that make_cuda_module_backend made (not through a wrapper);
// nullopt for any other backend. The instance is shared: it lives as long as the returned pointer does (the NCCL
// communicators of backend/nccl_group.h keep it so).
struct CudaModuleInstance {
  const VitpipeCudaModule* module = nullptr;
  std::shared_ptr<void> instance;
};
std::optional<CudaModuleInstance> cuda_module_instance(Backend& backend);

// The module backend's losses read once a step's backward passes are enqueued (module_abi.h version 8): after
// defer_losses(backend) its bce_with_logits and cross_entropy return 0, and take_losses(backend) returns their sum
// (added in call order from 0.0), waiting for the device only then, and ends the deferral. defer_losses returns
// false, changing nothing, for any other backend (the CPU's, a wrapper, a table without the entries); take_losses
// then returns 0. Both throw vitpipe::Error with the module's message (a deferred cross-entropy's bad target).
bool defer_losses(Backend& backend);
double take_losses(Backend& backend);

// Which path the module backend's bf16 attention took (module_abi.h's backend_attention_path: "cudnn", or
// "fallback..." with the reasons); empty for any other backend.
std::string cuda_attention_path(Backend& backend);

}  // namespace vitpipe
