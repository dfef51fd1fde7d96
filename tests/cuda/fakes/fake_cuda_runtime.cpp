// The CUDA runtime calls CudaBackend and test_cuda_gpu make, on the host: one "GPU", device memory that is host
// memory, streams that run everything at once (the host launchers of host_kernels.cpp are synchronous), and the
// cuBLASLt and cuDNN handles the executors' fakes (tests/cuda/executors) do not create. With them CudaBackend runs
// on the CPU: its shapes, pointers, scratch, staging and fallbacks are exercised, not the GPU's kernels.
#include "fake_cuda_runtime.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace vitpipe::fake_cuda_runtime {
namespace {
std::mutex log_mutex;
std::map<std::thread::id, std::vector<StreamEvent>> logs;
}  // namespace

void log_stream_event(const StreamEvent& e) {
  std::lock_guard<std::mutex> lock(log_mutex);
  logs[std::this_thread::get_id()].push_back(e);
}
std::vector<StreamEvent> take_stream_events() {
  std::lock_guard<std::mutex> lock(log_mutex);
  return std::exchange(logs[std::this_thread::get_id()], {});
}
CallCounts& call_counts() {
  static CallCounts counts;
  return counts;
}
namespace {
std::mutex pinned_mutex;
std::map<const char*, size_t> pinned;  // start -> bytes of each cudaHostAlloc block

bool is_pinned(const void* p, size_t bytes) {
  const char* c = static_cast<const char*>(p);
  std::lock_guard<std::mutex> lock(pinned_mutex);
  auto it = pinned.upper_bound(c);
  if (it == pinned.begin()) return false;
  --it;
  return c >= it->first && c + bytes <= it->first + it->second;
}

// Pinned blocks a host -> device copy read from, not yet known to have finished: the stream it ran on and the events
// recorded on that stream after it. A synchronisation of any of those events, or of the stream, ends it.
struct CopyInFlight {
  cudaStream_t stream;
  std::vector<cudaEvent_t> events;
};
std::map<const char*, CopyInFlight> uploads_in_flight;  // under pinned_mutex

// A copy from `p` (pinned) on `stream`: counts a refill of a block whose last copy may still run, then marks it.
void upload_from_pinned(const void* p, cudaStream_t stream) {
  const char* c = static_cast<const char*>(p);
  std::lock_guard<std::mutex> lock(pinned_mutex);
  auto it = pinned.upper_bound(c);
  if (it == pinned.begin()) return;
  --it;
  if (uploads_in_flight.count(it->first) > 0) ++call_counts().pinned_refills_in_flight;
  uploads_in_flight[it->first] = {stream, {}};
}
void record_after_uploads(cudaEvent_t event, cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(pinned_mutex);
  for (auto& [block, copy] : uploads_in_flight) {
    if (copy.stream == stream) copy.events.push_back(event);
  }
}
void uploads_done(cudaEvent_t event, cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(pinned_mutex);
  for (auto it = uploads_in_flight.begin(); it != uploads_in_flight.end();) {
    const std::vector<cudaEvent_t>& after = it->second.events;
    const bool done = (event != nullptr && std::find(after.begin(), after.end(), event) != after.end()) ||
                      (stream != nullptr && it->second.stream == stream);
    it = done ? uploads_in_flight.erase(it) : std::next(it);
  }
}

// Per-thread current device and what each stream, event, block and handle was made on (fake_cuda_runtime.h).
thread_local int current_device = 0;
std::mutex device_mutex;
std::map<const void*, int> made_on;  // stream, event, handle or block start -> its device
std::vector<std::string> violations;

void remember_device(const void* thing) {
  std::lock_guard<std::mutex> lock(device_mutex);
  made_on[thing] = current_device;
}
void forget_device(const void* thing) {
  std::lock_guard<std::mutex> lock(device_mutex);
  made_on.erase(thing);
}
// Records a violation when `thing` (a stream, event, handle or block; null is the legacy default stream, skipped)
// belongs to a device other than the calling thread's current one.
void require_current(const void* thing, const char* call) {
  if (thing == nullptr) return;
  std::lock_guard<std::mutex> lock(device_mutex);
  auto it = made_on.find(thing);
  if (it == made_on.end() || it->second == current_device) return;
  violations.push_back(std::string(call) + " on device " + std::to_string(it->second) + "'s handle while device " +
                       std::to_string(current_device) + " is current");
}

// FAKE_CUDA_DEVICE_REPORT=1: at exit, one line with the count of calls on another device's handle, then each call,
// for the tests that run a whole vitpipe on the module built on these fakes.
struct DeviceReportAtExit {
  ~DeviceReportAtExit() {
    const char* wanted = std::getenv("FAKE_CUDA_DEVICE_REPORT");
    if (wanted == nullptr || std::string(wanted) != "1") return;
    std::lock_guard<std::mutex> lock(device_mutex);
    std::fprintf(stderr, "fake CUDA runtime: %zu call(s) on another device's handle\n", violations.size());
    for (const std::string& v : violations) std::fprintf(stderr, "fake CUDA runtime: %s\n", v.c_str());
  }
} device_report_at_exit;
}  // namespace

std::vector<std::string> take_device_violations() {
  std::lock_guard<std::mutex> lock(device_mutex);
  return std::exchange(violations, {});
}
}  // namespace vitpipe::fake_cuda_runtime

using vitpipe::fake_cuda_runtime::call_counts;
using vitpipe::fake_cuda_runtime::forget_device;
using vitpipe::fake_cuda_runtime::remember_device;
using vitpipe::fake_cuda_runtime::require_current;

namespace {
// FAKE_CUDA_DEVICES=N makes the runtime see N GPUs (default 1), so that N ranks of one node may each take one
// (device_selection.h refuses more ranks than GPUs); they all share this process's host memory.
int fake_device_count() {
  const char* text = std::getenv("FAKE_CUDA_DEVICES");
  const int n = text != nullptr ? std::atoi(text) : 1;
  return n >= 1 ? n : 1;
}
}  // namespace

extern "C" {

cudaError_t cudaGetDeviceCount(int* count) {
  *count = fake_device_count();
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) {
  if (device < 0 || device >= fake_device_count()) return cudaErrorInvalidDevice;
  vitpipe::fake_cuda_runtime::current_device = device;
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* device) {
  *device = vitpipe::fake_cuda_runtime::current_device;
  return cudaSuccess;
}
// Each stream and event its own token (never dereferenced), so that the tests tell them apart.
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int) {
  static std::atomic<intptr_t> next{1};
  *stream = reinterpret_cast<cudaStream_t>(next++ * 16);
  remember_device(*stream);
  return cudaSuccess;
}
// Events: everything has already run when it is enqueued, so every event has happened; each record and wait is
// logged (fake_cuda_runtime.h) for the NCCL executor's tests. Copies from pinned memory are tracked as a GPU would
// run them, until an event recorded after them or their stream is synchronised (CallCounts::pinned_refills_in_flight).
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int) {
  static std::atomic<intptr_t> next{1};
  *event = reinterpret_cast<cudaEvent_t>(next++ * 16 + 8);
  remember_device(*event);
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  require_current(event, "cudaEventDestroy");
  forget_device(event);
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  require_current(stream, "cudaEventRecord");
  require_current(event, "cudaEventRecord");
  vitpipe::fake_cuda_runtime::record_after_uploads(event, stream);
  vitpipe::fake_cuda_runtime::log_stream_event({vitpipe::fake_cuda_runtime::StreamEvent::record, event, stream});
  return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int) {
  require_current(stream, "cudaStreamWaitEvent");
  vitpipe::fake_cuda_runtime::log_stream_event({vitpipe::fake_cuda_runtime::StreamEvent::wait, event, stream});
  return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t event) {
  require_current(event, "cudaEventQuery");
  vitpipe::fake_cuda_runtime::uploads_done(event, nullptr);
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  ++call_counts().event_synchronizations;
  require_current(event, "cudaEventSynchronize");
  vitpipe::fake_cuda_runtime::uploads_done(event, nullptr);
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  ++call_counts().stream_synchronizations;
  require_current(stream, "cudaStreamSynchronize");
  vitpipe::fake_cuda_runtime::uploads_done(nullptr, stream);
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  require_current(stream, "cudaStreamDestroy");
  forget_device(stream);
  return cudaSuccess;
}
cudaError_t cudaMalloc(void** p, size_t bytes) {
  ++call_counts().device_allocations;
  *p = std::aligned_alloc(256, (bytes + 255) / 256 * 256 + 256);
  if (*p == nullptr) return cudaErrorMemoryAllocation;
  remember_device(*p);
  return cudaSuccess;
}
cudaError_t cudaFree(void* p) {
  ++call_counts().device_frees;
  require_current(p, "cudaFree");
  forget_device(p);
  std::free(p);
  return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attribute, int device) {
  if (device < 0 || device >= fake_device_count()) return cudaErrorInvalidDevice;
  *value = attribute == cudaDevAttrMemoryPoolsSupported && vitpipe::fake_cuda_runtime::memory_pools_supported ? 1 : 0;
  return cudaSuccess;
}
// Stream-ordered: the stream has run everything enqueued before, so the block is free (or taken) at once.
cudaError_t cudaMallocAsync(void** p, size_t bytes, cudaStream_t stream) {
  if (!vitpipe::fake_cuda_runtime::memory_pools_supported) return cudaErrorNotSupported;
  ++call_counts().stream_ordered_allocations;
  require_current(stream, "cudaMallocAsync");
  *p = std::aligned_alloc(256, (bytes + 255) / 256 * 256 + 256);
  if (*p == nullptr) return cudaErrorMemoryAllocation;
  remember_device(*p);
  return cudaSuccess;
}
cudaError_t cudaFreeAsync(void* p, cudaStream_t stream) {
  if (!vitpipe::fake_cuda_runtime::memory_pools_supported) return cudaErrorNotSupported;
  ++call_counts().stream_ordered_frees;
  require_current(stream, "cudaFreeAsync");
  forget_device(p);
  std::free(p);
  return cudaSuccess;
}
cudaError_t cudaHostAlloc(void** p, size_t bytes, unsigned int) {
  ++call_counts().pinned_allocations;
  *p = std::aligned_alloc(256, (bytes + 255) / 256 * 256 + 256);
  if (*p == nullptr) return cudaErrorMemoryAllocation;
  std::lock_guard<std::mutex> lock(vitpipe::fake_cuda_runtime::pinned_mutex);
  vitpipe::fake_cuda_runtime::pinned[static_cast<const char*>(*p)] = bytes;
  return cudaSuccess;
}
cudaError_t cudaFreeHost(void* p) {
  {
    std::lock_guard<std::mutex> lock(vitpipe::fake_cuda_runtime::pinned_mutex);
    vitpipe::fake_cuda_runtime::pinned.erase(static_cast<const char*>(p));
    vitpipe::fake_cuda_runtime::uploads_in_flight.erase(static_cast<const char*>(p));
  }
  std::free(p);
  return cudaSuccess;
}
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind) {
  std::memmove(dst, src, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream) {
  require_current(stream, "cudaMemcpyAsync");
  if (kind == cudaMemcpyHostToDevice) {
    const bool from_pinned = vitpipe::fake_cuda_runtime::is_pinned(src, bytes);
    ++(from_pinned ? call_counts().pinned_uploads : call_counts().pageable_uploads);
    if (from_pinned) vitpipe::fake_cuda_runtime::upload_from_pinned(src, stream);
  } else if (kind == cudaMemcpyDeviceToHost && !vitpipe::fake_cuda_runtime::is_pinned(dst, bytes)) {
    ++call_counts().pageable_readbacks;
  }
  std::memmove(dst, src, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                              cudaMemcpyKind, cudaStream_t stream) {
  require_current(stream, "cudaMemcpy2DAsync");
  if (width > dpitch || width > spitch) return cudaErrorInvalidPitchValue;
  for (size_t r = 0; r < height; ++r) {
    std::memmove(static_cast<char*>(dst) + r * dpitch, static_cast<const char*>(src) + r * spitch, width);
  }
  return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t stream) {
  require_current(stream, "cudaMemsetAsync");
  std::memset(p, value, bytes);
  return cudaSuccess;
}
cudaError_t cudaGetLastError(void) { return cudaSuccess; }
const char* cudaGetErrorName(cudaError_t) { return "cudaErrorFake"; }
const char* cudaGetErrorString(cudaError_t) { return "an error of the fake CUDA runtime"; }

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  static std::atomic<intptr_t> next{1};
  *handle = reinterpret_cast<cublasLtHandle_t>(next++ * 16 + 4);
  remember_device(*handle);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  require_current(handle, "cublasLtDestroy");
  forget_device(handle);
  return CUBLAS_STATUS_SUCCESS;
}
const char* cublasLtGetStatusName(cublasStatus_t) { return "CUBLAS_STATUS_FAKE"; }
const char* cublasLtGetStatusString(cublasStatus_t) { return "a status of the fake cuBLASLt"; }

cudnnStatus_t cudnnCreate(cudnnHandle_t* handle) {
  static std::atomic<intptr_t> next{1};
  *handle = reinterpret_cast<cudnnHandle_t>(next++ * 16 + 12);
  remember_device(*handle);
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnDestroy(cudnnHandle_t handle) {
  require_current(handle, "cudnnDestroy");
  forget_device(handle);
  return CUDNN_STATUS_SUCCESS;
}

}  // extern "C"

size_t vitpipe::fake_cuda_runtime::cudnn_version = 91900;
bool vitpipe::fake_cuda_runtime::memory_pools_supported = true;

// What module_entry.cpp's library_versions asks (the probe on fakes goes through the module's own table).
extern "C" {
cudaError_t cudaRuntimeGetVersion(int* version) {
  *version = 13000;
  return cudaSuccess;
}
size_t cublasLtGetVersion(void) { return 130100; }
size_t cudnnGetVersion(void) { return vitpipe::fake_cuda_runtime::cudnn_version; }
}

// ncclGetVersion: tests/cuda/executors/fake_nccl.cpp, with the rest of the fake NCCL.
