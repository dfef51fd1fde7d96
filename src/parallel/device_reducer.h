// Collectives over device memory (a GPU's) that the gradient buckets hand their buckets to, and the sharded
// optimizer's parameter gather its broadcasts: backend/nccl_group.h's NcclGroup is the one in use. An interface here
// so that parallel/ needs nothing of the CUDA module to link.
#pragma once

#include "tensor/tensor.h"

namespace vitpipe {

class DeviceReducer {
 public:
  virtual ~DeviceReducer() = default;
  // Asynchronous, as NcclGroup's: the tensors stay untouched until done() says true or wait() returns.
  virtual void allreduce_sum(const Tensor& device_f32) = 0;
  virtual void reduce_sum(const Tensor& device_f32, int root) = 0;
  // Copies the root's tensor into every rank's.
  virtual void broadcast(const Tensor& device, int root) = 0;
  virtual bool done() = 0;
  virtual void wait() = 0;
};

}  // namespace vitpipe
