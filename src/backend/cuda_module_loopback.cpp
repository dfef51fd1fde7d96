#include "backend/cuda_module_loopback.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>

#include "backend/backend_call.h"
#include "backend/cpu/cpu_backend_factory.h"

namespace vitpipe {
namespace {

std::atomic<long long> calls{0};
std::atomic<long long> op_calls[VITPIPE_OP_COUNT_PLUS_ONE];

int library_versions(VitpipeCudaLibraryVersions* out) {
  *out = VitpipeCudaLibraryVersions{};
  return 0;
}

int device_count(int* count, char*, size_t) {
  *count = 1;
  return 0;
}

int backend_create(int device, int, void** backend, char* error, size_t error_size) {
  if (device != 0) {
    std::snprintf(error, error_size, "the loopback module has one device, not %d", device);
    return 1;
  }
  try {
    // Never the test wrapper's (set_backend_wrapper): a wrapper that makes loopback backends would recurse here.
    *backend = cpu::make_cpu_backend_at(cpu::selected_cpu_level()).release();
    return 0;
  } catch (const std::exception& e) {
    std::snprintf(error, error_size, "%s", e.what());
    return 1;
  }
}

void backend_destroy(void* backend) { delete static_cast<Backend*>(backend); }

int backend_call(void* backend, VitpipeBackendCall* call, char* error, size_t error_size) {
  ++calls;
  if (call != nullptr && call->op > 0 && call->op < VITPIPE_OP_COUNT_PLUS_ONE) ++op_calls[call->op];
  return run_backend_call_reporting(*static_cast<Backend*>(backend), call, error, error_size);
}

int backend_synchronize(void*, char*, size_t) { return 0; }

// "Device memory" of the loopback is host memory the CPU backend behind the table works on.
int backend_allocate(void*, size_t bytes, void** memory, char* error, size_t error_size) {
  *memory = nullptr;
  if (bytes == 0) return 0;
  *memory = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
  if (*memory != nullptr) return 0;
  std::snprintf(error, error_size, "out of memory allocating %zu bytes", bytes);
  return 1;
}

void backend_free(void*, void* memory) { std::free(memory); }

}  // namespace

const VitpipeCudaModule& cuda_module_loopback() {
  static const VitpipeCudaModule module = {VITPIPE_CUDA_MODULE_ABI_VERSION,
                                           sizeof(VitpipeCudaModule),
                                           "loopback (the CPU backend behind the module's C table)",
                                           1,
                                           library_versions,
                                           device_count,
                                           backend_create,
                                           backend_destroy,
                                           backend_call,
                                           backend_synchronize,
                                           backend_allocate,
                                           backend_free};
  return module;
}

long long cuda_module_loopback_calls() { return calls.load(); }

long long cuda_module_loopback_calls(int op) {
  return op > 0 && op < VITPIPE_OP_COUNT_PLUS_ONE ? op_calls[op].load() : 0;
}

}  // namespace vitpipe
