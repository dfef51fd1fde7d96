// A fake cuDNN backend API for the CPU suite: descriptors that keep the attributes SdpaExecutor sets (each checked
// for the attribute type cuDNN documents for it), finalisation checks that a graph is complete, a heuristic offering
// two engine configurations (the first marked non-deterministic), and a cudnnBackendExecute that rebuilds the SDPA
// call from the graph's tensor descriptors and the variant pack alone and runs it through the strided CPU
// interpreter. Linked into test_cuda_executors in place of libcudnn.
#pragma once

#include <cstdint>
#include <string>

namespace vitpipe::fake_cudnn {

struct Counters {
  int graphs_finalized = 0;
  int executions = 0;
  int last_engine = -1;                  // the engine configuration the last execution ran
  const void* last_workspace = nullptr;  // the workspace its variant pack gave
};
// The workspace every execution plan asks for (0 unless a test sets it).
void set_plan_workspace_bytes(int64_t bytes);
// SDPA operations (forward and backward) with this many query rows fail to finalise, as cuDNN refuses a shape it has
// no engine for (0: none refused; the classifier token's call has 1).
void set_refused_query_rows(int64_t s_q);
Counters& counters();
const std::string& last_error();

}  // namespace vitpipe::fake_cudnn
