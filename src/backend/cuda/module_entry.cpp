// libvitpipe_cuda.so's one exported symbol: the table of backend/cuda/module_abi.h. Everything else in the module
// is hidden (-fvisibility=hidden), so nothing of cuBLASLt, cuDNN or NCCL leaks into vitpipe's symbol space.
#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <cudnn_version.h>
#include <nccl.h>

#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>

#include "backend/backend_call.h"
#include "backend/cuda/calls/nccl_c_calls.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/module_abi.h"
#include "backend/cuda/nccl_executor.h"

namespace {

// What the module was compiled against (headers) and for (GPU architectures), e.g. "CUDA 13.0, cuDNN 9.19.0, NCCL
// 2.28.9; sm_80 sm_90 + compute_90 PTX"; the loaded libraries' own versions come from library_versions().
std::string describe_build() {
  char text[160];
  std::snprintf(text, sizeof text, "CUDA %d.%d, cuDNN %d.%d.%d, NCCL %d.%d.%d; %s", CUDART_VERSION / 1000,
                CUDART_VERSION % 1000 / 10, CUDNN_MAJOR, CUDNN_MINOR, CUDNN_PATCHLEVEL, NCCL_MAJOR, NCCL_MINOR,
                NCCL_PATCH, VITPIPE_CUDA_ARCHITECTURES);
  return text;
}

int library_versions(VitpipeCudaLibraryVersions* out) {
  if (out == nullptr) return 1;
  *out = VitpipeCudaLibraryVersions{};
  if (cudaRuntimeGetVersion(&out->cuda_runtime) != cudaSuccess) return 2;
  out->cublaslt = cublasLtGetVersion();
  out->cudnn = cudnnGetVersion();
  if (ncclGetVersion(&out->nccl) != ncclSuccess) return 3;
  return 0;
}

int device_count(int* count, char* error, size_t error_size) {
  *count = 0;
  const cudaError_t status = cudaGetDeviceCount(count);
  if (status == cudaSuccess) return 0;
  if (error != nullptr && error_size > 0) {
    std::snprintf(error, error_size, "%s (%s)", cudaGetErrorString(status), cudaGetErrorName(status));
  }
  *count = 0;
  return static_cast<int>(status);
}

int backend_create(int device, int allow_tf32, void** backend, char* error, size_t error_size) {
  *backend = nullptr;
  try {
    *backend = new vitpipe::cuda::CudaBackend(device, allow_tf32 != 0);
    return 0;
  } catch (const std::exception& e) {
    if (error != nullptr && error_size > 0) std::snprintf(error, error_size, "%s", e.what());
    return 1;
  }
}

void backend_destroy(void* backend) { delete static_cast<vitpipe::cuda::CudaBackend*>(backend); }

int backend_call(void* backend, VitpipeBackendCall* call, char* error, size_t error_size) {
  auto& b = *static_cast<vitpipe::cuda::CudaBackend*>(backend);
  try {
    b.make_current();
  } catch (const std::exception& e) {
    if (error != nullptr && error_size > 0) std::snprintf(error, error_size, "%s", e.what());
    return 1;
  }
  return vitpipe::run_backend_call_reporting(b, call, error, error_size);
}

int backend_synchronize(void* backend, char* error, size_t error_size) {
  try {
    auto* b = static_cast<vitpipe::cuda::CudaBackend*>(backend);
    b->make_current();
    b->synchronize();
    return 0;
  } catch (const std::exception& e) {
    if (error != nullptr && error_size > 0) std::snprintf(error, error_size, "%s", e.what());
    return 1;
  }
}

int backend_allocate(void* backend, size_t bytes, void** memory, char* error, size_t error_size) {
  *memory = nullptr;
  try {
    *memory = static_cast<vitpipe::cuda::CudaBackend*>(backend)->allocate_bytes(bytes);
    return 0;
  } catch (const std::exception& e) {
    if (error != nullptr && error_size > 0) std::snprintf(error, error_size, "%s", e.what());
    return 1;
  }
}

int backend_attention_path(void* backend, char* out, size_t out_size) {
  if (out == nullptr || out_size == 0) return 1;
  std::snprintf(out, out_size, "%s", static_cast<vitpipe::cuda::CudaBackend*>(backend)->attention_path().c_str());
  return 0;
}

int backend_defer_losses(void* backend, char* error, size_t error_size) {
  try {
    auto* b = static_cast<vitpipe::cuda::CudaBackend*>(backend);
    b->make_current();
    b->defer_losses();
    return 0;
  } catch (const std::exception& e) {
    if (error != nullptr && error_size > 0) std::snprintf(error, error_size, "%s", e.what());
    return 1;
  }
}

int backend_take_losses(void* backend, double* sum, char* error, size_t error_size) {
  try {
    if (sum == nullptr) throw std::invalid_argument("backend_take_losses: no place for the sum");
    auto* b = static_cast<vitpipe::cuda::CudaBackend*>(backend);
    b->make_current();
    *sum = b->take_losses();
    return 0;
  } catch (const std::exception& e) {
    if (error != nullptr && error_size > 0) std::snprintf(error, error_size, "%s", e.what());
    return 1;
  }
}

void backend_free(void* backend, void* memory) {
  static_cast<vitpipe::cuda::CudaBackend*>(backend)->free_bytes(memory);
}

// ---- NCCL (ABI version 5): a communicator is its backend and an executor on the backend's GPU ----
static_assert(sizeof(ncclUniqueId) == VITPIPE_NCCL_UNIQUE_ID_BYTES, "ncclUniqueId crosses the table as 128 bytes");

struct ModuleComm {
  vitpipe::cuda::CudaBackend* backend;
  std::unique_ptr<vitpipe::cuda::NcclExecutor> executor;
};

void report(const std::exception& e, char* error, size_t error_size) {
  if (error != nullptr && error_size > 0) std::snprintf(error, error_size, "%s", e.what());
}

int nccl_unique_id(char out[VITPIPE_NCCL_UNIQUE_ID_BYTES], char* error, size_t error_size) {
  try {
    const ncclUniqueId id = vitpipe::cuda::NcclExecutor::unique_id();
    std::memcpy(out, id.internal, sizeof id.internal);
    return 0;
  } catch (const std::exception& e) {
    report(e, error, error_size);
    return 1;
  }
}

int nccl_comm_create(void* backend, const char id[VITPIPE_NCCL_UNIQUE_ID_BYTES], int nranks, int rank, void** comm,
                     char* error, size_t error_size) {
  *comm = nullptr;
  try {
    auto& b = *static_cast<vitpipe::cuda::CudaBackend*>(backend);
    b.make_current();
    ncclUniqueId unique{};
    std::memcpy(unique.internal, id, sizeof unique.internal);
    *comm = new ModuleComm{&b, std::make_unique<vitpipe::cuda::NcclExecutor>(unique, nranks, rank, b.device())};
    return 0;
  } catch (const std::exception& e) {
    report(e, error, error_size);
    return 1;
  }
}

void nccl_comm_destroy(void* comm) {
  auto* c = static_cast<ModuleComm*>(comm);
  if (c == nullptr) return;
  try {
    c->backend->make_current();
  } catch (const std::exception&) {
  }
  delete c;
}

int nccl_wait(void* comm, char* error, size_t error_size) {
  auto& c = *static_cast<ModuleComm*>(comm);
  try {
    c.backend->make_current();
    c.executor->wait();
    return 0;
  } catch (const std::exception& e) {
    report(e, error, error_size);
    return 1;
  }
}

int nccl_run(void* comm, const VitpipeNcclCall* calls, int count, int wait, char* error, size_t error_size) {
  auto& c = *static_cast<ModuleComm*>(comm);
  try {
    const vitpipe::cuda::NcclGroup group = vitpipe::cuda::nccl_group_from_c(calls, count);
    c.backend->make_current();
    c.executor->enqueue(group, c.backend->stream());
    if (wait != 0) c.executor->wait();
    return 0;
  } catch (const std::exception& e) {
    report(e, error, error_size);
    return 1;
  }
}

int nccl_query(void* comm, int* done, char* error, size_t error_size) {
  auto& c = *static_cast<ModuleComm*>(comm);
  *done = 0;
  try {
    c.backend->make_current();
    *done = c.executor->query() ? 1 : 0;
    return 0;
  } catch (const std::exception& e) {
    report(e, error, error_size);
    return 1;
  }
}

int nccl_join(void* comm, char* error, size_t error_size) {
  auto& c = *static_cast<ModuleComm*>(comm);
  try {
    c.backend->make_current();
    c.executor->join(c.backend->stream());
    return 0;
  } catch (const std::exception& e) {
    report(e, error, error_size);
    return 1;
  }
}

}  // namespace

extern "C" __attribute__((visibility("default"))) const VitpipeCudaModule* vitpipe_cuda_module(void) {
  static const std::string built_with = describe_build();
  static const VitpipeCudaModule module = {
      VITPIPE_CUDA_MODULE_ABI_VERSION,
      sizeof(VitpipeCudaModule),
      built_with.c_str(),
      1,
      library_versions,
      device_count,
      backend_create,
      backend_destroy,
      backend_call,
      backend_synchronize,
      backend_allocate,
      backend_free,
      nccl_unique_id,
      nccl_comm_create,
      nccl_comm_destroy,
      nccl_run,
      nccl_wait,
      nccl_query,
      backend_attention_path,
      backend_defer_losses,
      backend_take_losses,
      nccl_join,
  };
  return &module;
}
