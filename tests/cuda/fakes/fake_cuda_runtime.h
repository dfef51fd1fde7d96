// What the fake CUDA runtime (fake_cuda_runtime.cpp) records of events: each cudaEventRecord and cudaStreamWaitEvent,
// per calling thread, for the NCCL executor's tests (the communication stream waits for the compute stream).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
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

// What the fake cudnnGetVersion answers (91900, the headers' 9.19.0, unless a test sets another).
extern size_t cudnn_version;

}  // namespace vitpipe::fake_cuda_runtime
