// The Backend's calls as C data (backend/cuda/module_abi.h: VitpipeBackendCall) and back: the one routine both sides
// of the CUDA module boundary use. The host adapter (cuda_module_backend.h) describes its Tensors with
// describe_tensor / describe_optional; the module runs a call on its CudaBackend with run_backend_call, which wraps
// the descriptors back into Tensors (views of the same memory, device memory in the module) in the order of the
// op's C++ parameters. The loopback table (cuda_module_loopback.h) runs the same routine over the CPU backend, so a
// CPU test proves the packing and unpacking of every op. Plain C++: no CUDA header.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/module_abi.h"

namespace vitpipe {

// A present tensor (VITPIPE_TENSOR_EMPTY for a default-constructed Tensor(): no data, no shape), in device memory
// (VITPIPE_MEMORY_DEVICE) unless `memory` says VITPIPE_MEMORY_HOST (only the host end of copy_to_host/from_host).
VitpipeTensorDesc describe_tensor(const Tensor& tensor, int32_t memory = VITPIPE_MEMORY_DEVICE);
// An optional `const Tensor*`: VITPIPE_TENSOR_ABSENT for null.
VitpipeTensorDesc describe_optional(const Tensor* tensor);

// Builds a call: tensors, doubles and int64s appended in the op's parameter order.
class BackendCallBuilder {
 public:
  explicit BackendCallBuilder(int op);
  BackendCallBuilder& tensor(const Tensor& t);
  // The host end of copy_to_host / copy_from_host (described as VITPIPE_MEMORY_HOST).
  BackendCallBuilder& host_tensor(const Tensor& t);
  BackendCallBuilder& optional(const Tensor* t);
  BackendCallBuilder& scalar(double value);
  BackendCallBuilder& integer(int64_t value);
  // An optimizer step: its four tensors (params, grads, exp_avg, exp_avg_sq; undefined ones as EMPTY), its runs
  // (converted into a copy the builder keeps) and work items (host memory, referenced), and the scalars.
  BackendCallBuilder& optimizer_step(const OptimizerStep& step, const OptimizerScalars& s);
  BackendCallBuilder& squares(std::span<double> out);           // lamb_moments' host output
  BackendCallBuilder& bounds(std::span<const int64_t> bounds);  // sum_of_squares' host bounds
  VitpipeBackendCall& call() { return call_; }
  // The position of the first tensor described as device memory whose Tensor says it is host memory (Device::cpu),
  // or -1: the host adapter refuses such a call before the module could hand a host pointer to a GPU kernel.
  int first_host_tensor() const { return first_host_tensor_; }

 private:
  void note_device_side(const Tensor& t);

  VitpipeBackendCall call_{};
  int first_host_tensor_ = -1;
  int scalars_ = 0, integers_ = 0;
  std::vector<VitpipeOptimizerRun> runs_;
};

// backend.h's structs as C data and back (bit for bit: floats copied, booleans as 0 / 1).
VitpipeOptimizerRun to_c(const OptimizerRun& run);
VitpipeOptimizerScalars to_c(const OptimizerScalars& s);
OptimizerScalars from_c(const VitpipeOptimizerScalars& s);

// The op's name as backend.h spells it ("linear_forward"), or "op N" for an unknown code.
std::string backend_op_name(int op);

// Runs `call` on `backend`; a loss's sum goes into call.result. Throws vitpipe::Error on a malformed call (unknown
// op, wrong tensor count, bad rank or dtype code) and lets the backend's own exceptions through.
void run_backend_call(Backend& backend, VitpipeBackendCall& call);

// The same for the C table: 0 on success, else 1 and "<op>: <what went wrong>" in `error`.
int run_backend_call_reporting(Backend& backend, VitpipeBackendCall* call, char* error, size_t error_size);

}  // namespace vitpipe
