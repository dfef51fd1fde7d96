// A fake cuBLASLt for the CPU suite: the few entry points GemmExecutor calls, recording each descriptor's
// attributes as cuBLASLt documents them (sizes checked: a wrongly sized attribute is CUBLAS_STATUS_INVALID_VALUE), and
// a cublasLtMatmul that rebuilds the call from those attributes alone and runs it through the column-major CPU
// interpreter. Linked into test_cuda_executors in place of libcublasLt, so the executor's translation of a
// description into API calls is checked without a GPU.
#pragma once

#include <string>

namespace vitpipe::fake_cublaslt {

struct Counters {
  int descriptors_created = 0;
  int heuristic_queries = 0;
  int matmuls = 0;
  int largest_request = 0;  // the most algorithms one heuristic query asked for
};
Counters& counters();

// What a test makes the fake do. The heuristic offers `algorithms_offered` algorithms (numbered 0, 1, ... in
// algo.data[0]); a cublasLtMatmul with algorithm `refused_algorithm` answers CUBLAS_STATUS_NOT_SUPPORTED, as cuBLASLt
// may at run time; the next `failing_matmuls` matmuls answer CUBLAS_STATUS_EXECUTION_FAILED whatever the algorithm.
struct Behaviour {
  int algorithms_offered = 4;
  int refused_algorithm = -1;
  int failing_matmuls = 0;
};
Behaviour& behaviour();
// The last failure's reason (an attribute, a rule of the interpreter), for the tests' messages.
const std::string& last_error();

}  // namespace vitpipe::fake_cublaslt
