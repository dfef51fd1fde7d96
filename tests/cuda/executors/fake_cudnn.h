// A fake cuDNN backend API for the CPU suite: descriptors that keep the attributes SdpaExecutor sets (each checked
// for the attribute type cuDNN documents for it), finalisation checks that a graph is complete, a heuristic offering
// two engine configurations (the first marked non-deterministic), and a cudnnBackendExecute that rebuilds the SDPA
// call from the graph's tensor descriptors and the variant pack alone and runs it through the strided CPU
// interpreter. A graph of several operations must be cudnn-frontend's composite SDPA backward
// (frontend_sdpa_backward.h: operations, modes, data types, dimensions, strides, one uid per tensor) or it does not
// finalise; it runs operation by operation on host memory. Linked into test_cuda_executors in place of libcudnn.
#pragma once

#include <cstdint>
#include <string>

namespace vitpipe::fake_cudnn {

struct Counters {
  int graphs_finalized = 0;
  int executions = 0;
  int last_engine = -1;                      // the engine configuration the last execution ran
  const void* last_workspace = nullptr;      // the workspace its variant pack gave
  int composite_graphs_finalized = 0;        // graphs of several operations (held to cudnn-frontend's sdpa_backward)
  bool last_composite_dp_workspace = false;  // the last one was the frontend's deterministic dP-workspace variant
};
// The workspace every execution plan asks for (0 unless a test sets it).
void set_plan_workspace_bytes(int64_t bytes);
// SDPA operations (forward and backward) with this many query rows fail to finalise, as cuDNN refuses a shape it has
// no engine for (0: none refused; the classifier token's call has 1).
void set_refused_query_rows(int64_t s_q);
// The native SDPA_BWD operation fails to finalise with CUDNN_STATUS_BAD_PARAM, as a third-party binding reports for
// cuDNN up to 9.20 (the default: the backward pass takes cudnn-frontend's composite graph); false accepts it.
void set_native_sdpa_backward_refused(bool refused);
// A finalised native SDPA_BWD plan fails in cudnnBackendExecute.
void set_native_sdpa_backward_execution_fails(bool fails);
// Every engine configuration is marked non-deterministic (the heuristic's engine 0 only, by default).
void set_all_engines_nondeterministic(bool all);
Counters& counters();
const std::string& last_error();

}  // namespace vitpipe::fake_cudnn
