#include "backend/cuda_module_loopback.h"

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "backend/backend_call.h"
#include "backend/cpu/cpu_backend_factory.h"
#include "backend/cuda/calls/nccl_c_calls.h"
#include "backend/cuda/calls/nccl_host_ranks.h"

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
int backend_attention_path(void*, char* out, size_t out_size) {
  if (out == nullptr || out_size == 0) return 1;
  std::snprintf(out, out_size, "%s", "the CPU backend (loopback)");
  return 0;
}

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

// NCCL over host memory: ranks are threads of this process (calls/nccl_host_ranks.h), a communicator is found by its
// unique id. Each communicator runs its groups in order on a thread of its own, which stands for the communication
// stream: nccl_run(wait = 0) returns at once and nccl_wait waits for the queue to drain, as on a GPU (so a caller
// that reads a buffer before nccl_wait races here as well). Both stream choices run on that thread.
std::atomic<long long> nccl_groups{0};

class LoopbackComm {
 public:
  LoopbackComm(const cuda::NcclIdBytes& id, int nranks, int rank)
      : host_(id, nranks, rank), worker_([this] { work(); }) {}
  ~LoopbackComm() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    changed_.notify_all();
    worker_.join();
  }

  void enqueue(cuda::NcclGroup group) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.push_back(std::move(group));
    }
    changed_.notify_all();
  }
  // "" when every group finished well; else the first failure's message (reported once).
  std::string wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return queue_.empty() && !busy_; });
    return std::exchange(error_, std::string());
  }
  bool done(std::string& error) {
    std::lock_guard<std::mutex> lock(mutex_);
    error = std::exchange(error_, std::string());
    return queue_.empty() && !busy_;
  }

 private:
  void work() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      changed_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopped, with nothing left to run
      cuda::NcclGroup group = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
      lock.unlock();
      std::string failure;
      try {
        host_.run(group);
        ++nccl_groups;
      } catch (const std::exception& e) {
        failure = e.what();
      }
      lock.lock();
      if (!failure.empty() && error_.empty()) error_ = failure;
      busy_ = false;
      changed_.notify_all();
    }
  }

  cuda::HostNcclComm host_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<cuda::NcclGroup> queue_;
  bool busy_ = false, stop_ = false;
  std::string error_;
  std::thread worker_;  // last: starts once everything above exists
};

int nccl_unique_id(char out[VITPIPE_NCCL_UNIQUE_ID_BYTES], char*, size_t) {
  const cuda::NcclIdBytes id = cuda::host_nccl_unique_id();
  std::memcpy(out, id.data(), id.size());
  return 0;
}

int nccl_comm_create(void*, const char id[VITPIPE_NCCL_UNIQUE_ID_BYTES], int nranks, int rank, void** comm, char* error,
                     size_t error_size) {
  *comm = nullptr;
  try {
    cuda::NcclIdBytes bytes{};
    std::memcpy(bytes.data(), id, bytes.size());
    *comm = new LoopbackComm(bytes, nranks, rank);
    return 0;
  } catch (const std::exception& e) {
    std::snprintf(error, error_size, "%s", e.what());
    return 1;
  }
}

void nccl_comm_destroy(void* comm) { delete static_cast<LoopbackComm*>(comm); }

int nccl_wait(void* comm, char* error, size_t error_size) {
  const std::string failure = static_cast<LoopbackComm*>(comm)->wait();
  if (failure.empty()) return 0;
  std::snprintf(error, error_size, "%s", failure.c_str());
  return 1;
}

int nccl_run(void* comm, const VitpipeNcclCall* calls, int count, int wait, char* error, size_t error_size) {
  try {
    static_cast<LoopbackComm*>(comm)->enqueue(cuda::nccl_group_from_c(calls, count));
  } catch (const std::exception& e) {
    std::snprintf(error, error_size, "%s", e.what());
    return 1;
  }
  return wait != 0 ? nccl_wait(comm, error, error_size) : 0;
}

int nccl_query(void* comm, int* done, char* error, size_t error_size) {
  std::string failure;
  *done = static_cast<LoopbackComm*>(comm)->done(failure) ? 1 : 0;
  if (failure.empty()) return 0;
  std::snprintf(error, error_size, "%s", failure.c_str());
  return 1;
}

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
                                           backend_free,
                                           nccl_unique_id,
                                           nccl_comm_create,
                                           nccl_comm_destroy,
                                           nccl_run,
                                           nccl_wait,
                                           nccl_query,
                                           backend_attention_path,
                                           nullptr,   // backend_defer_losses: the CPU's losses wait for nothing
                                           nullptr,   // backend_take_losses
                                           nullptr};  // nccl_join: point-to-point stays on the backend's stream
  return module;
}

long long cuda_module_loopback_calls() { return calls.load(); }

long long cuda_module_loopback_nccl_groups() { return nccl_groups.load(); }

long long cuda_module_loopback_calls(int op) {
  return op > 0 && op < VITPIPE_OP_COUNT_PLUS_ONE ? op_calls[op].load() : 0;
}

}  // namespace vitpipe
