// Launchers of the CUDA Backend's optimizer kernels (kernels/optimizer_kernels.cu): backend.h's adamw_update,
// lamb_moments, lamb_update, sgd_update and sum_of_squares on device pointers, with the per-element arithmetic of
// optimizer_math.h. Every table here is DEVICE memory the caller filled (CudaBackend copies the host's runs into its
// scratch arena): `runs` [run_count], `tile_starts` [run_count + 1] (optimizer_math.h: the first kOptimizerTile-element
// tile of each run, then the tile count). One launch covers every run. All asynchronous on `stream`; each returns
// cudaGetLastError(). NOT YET RUN ON A GPU: tests/cuda/fakes/host_kernels.cpp runs the same arithmetic on the host.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/kernels/optimizer_math.h"

namespace vitpipe::cuda {

struct OptimizerRunTable {
  const OptimizerRunView* runs = nullptr;  // device
  const int64_t* tile_starts = nullptr;    // device, run_count + 1 entries
  int64_t run_count = 0;
  int64_t tiles = 0;  // tile_starts[run_count], known on the host
};

// p, m, v updated in place; g read.
cudaError_t launch_adamw_update(float* p, const float* g, float* m, float* v, const OptimizerRunTable& table,
                                const OptimizerStepScalars& s, cudaStream_t stream);
// LAMB pass 2: p -= run.step * u(p, m, v).
cudaError_t launch_lamb_update(float* p, const float* m, const float* v, const OptimizerRunTable& table,
                               const OptimizerStepScalars& s, cudaStream_t stream);
// SGD; `buffer` null: without momentum.
cudaError_t launch_sgd_update(float* p, const float* g, float* buffer, const OptimizerRunTable& table,
                              const OptimizerStepScalars& s, cudaStream_t stream);
// LAMB pass 1: m, v updated; squares (device, [2 * run_count]) = per run the 16-lane sums of p^2 and u^2. One thread
// per (run, lane) adds its lane's elements in order, then the fixed butterfly w = 8, 4, 2, 1. Needs only `runs`.
cudaError_t launch_lamb_moments(const float* p, const float* g, float* m, float* v, const OptimizerRunView* runs,
                                int64_t run_count, const OptimizerStepScalars& s, double* squares, cudaStream_t stream);
// sums (device, [parts]): part j = the 16-lane sum of x^2 over [bounds[j], bounds[j + 1]) (bounds device, parts + 1).
cudaError_t launch_sum_of_squares_parts(const float* x, const int64_t* bounds, int64_t parts, double* sums,
                                        cudaStream_t stream);

}  // namespace vitpipe::cuda
