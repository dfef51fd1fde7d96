// What the fake CUDA runtime (fake_cuda_runtime.cpp) records of events: each cudaEventRecord and cudaStreamWaitEvent,
// per calling thread, for the NCCL executor's tests (the communication stream waits for the compute stream); and
// counts of the calls that cost a real GPU a host wait or a device-wide synchronisation, for CudaBackend's tests.
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstddef>
#include <string>
#include <vector>

namespace vitpipe::fake_cuda_runtime {

struct StreamEvent {
  enum Kind { record, wait } kind;  // cudaEventRecord(event, stream) / cudaStreamWaitEvent(stream, event)
  cudaEvent_t event;
  cudaStream_t stream;
};

void log_stream_event(const StreamEvent& e);
// The calling thread's events since its last call.
std::vector<StreamEvent> take_stream_events();

// Calls counted over all threads since the process started (tests take differences). On a GPU: cudaMalloc and
// cudaFree may synchronise the device (every stream, NCCL's too); cudaStreamSynchronize drains the stream; a
// cudaMemcpyAsync from pageable host memory is staged by the driver and returns only when the copy is done.
struct CallCounts {
  std::atomic<int> stream_synchronizations{0};     // cudaStreamSynchronize
  std::atomic<int> event_synchronizations{0};      // cudaEventSynchronize
  std::atomic<int> device_allocations{0};          // cudaMalloc
  std::atomic<int> device_frees{0};                // cudaFree
  std::atomic<int> stream_ordered_allocations{0};  // cudaMallocAsync
  std::atomic<int> stream_ordered_frees{0};        // cudaFreeAsync
  std::atomic<int> pinned_allocations{0};          // cudaHostAlloc / cudaMallocHost
  std::atomic<int> pageable_uploads{0};            // cudaMemcpyAsync host -> device from memory not pinned
  std::atomic<int> pinned_uploads{0};              // cudaMemcpyAsync host -> device from pinned memory
  std::atomic<int> pageable_readbacks{0};          // cudaMemcpyAsync device -> host into memory not pinned
  // cudaMemcpyAsync host -> device from a pinned block whose previous copy may still be running: neither the event
  // recorded after that copy was synchronised (or queried done) nor its stream since. On a GPU the host refilled the
  // block under the DMA engine reading it.
  std::atomic<int> pinned_refills_in_flight{0};
};
CallCounts& call_counts();

// The current device is per host thread, as the runtime's is (cudaSetDevice / cudaGetDevice; 0 until set). Streams,
// events, cudaMalloc'd blocks and cuBLASLt / cuDNN handles remember the device current when they were made. A call
// that enqueues on a stream (a copy, a memset, an event record or wait, a stream-ordered allocation or free, a
// synchronisation or query) or destroys a stream or handle while another device is current is a violation: on a GPU it
// fails (cudaErrorInvalidResourceHandle for a stream of another device) or runs against the wrong device. The fake
// records each one (the call and both devices) instead of failing, for the tests to assert on. Stricter than the
// runtime for a few (synchronising or querying another device's stream or event, freeing its block, which the
// runtime allows): vitpipe's rule is that every entry makes its backend's GPU current, so none should happen.
std::vector<std::string> take_device_violations();

// What the fake cudnnGetVersion answers (91900, the headers' 9.19.0, unless a test sets another).
extern size_t cudnn_version;
// Whether the fake GPU answers cudaDevAttrMemoryPoolsSupported with 1 (the default); without, cudaMallocAsync and
// cudaFreeAsync fail with cudaErrorNotSupported, as the runtime's do on a device or driver without memory pools.
extern bool memory_pools_supported;

}  // namespace vitpipe::fake_cuda_runtime
