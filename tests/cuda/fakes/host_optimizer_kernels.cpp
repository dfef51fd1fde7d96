// The launchers of kernels/optimizer_kernels.h on the host, for CudaBackend on fakes (tests/cuda/fakes), over the
// same optimizer_math.h functions the kernels call. Compiled with -ffp-contract=off (tests/cuda/tests.cmake): each
// operation rounded once, as the kernels' _rn intrinsics do on the device. What this cannot prove is the kernels' own
// indexing, launch configuration and warp shuffles: only a GPU does (test_cuda_gpu).
#include <algorithm>
#include <cstdint>

#include "backend/cuda/kernels/optimizer_kernels.h"

// The element-wise updates walk the tile table as the kernel's blocks do (each tile finds its run by run_of_tile);
// the sums of squares run each (run, lane) in order and fold the 16 lanes with fold_lanes, the kernel's shuffle
// butterfly in the same order.
namespace vitpipe::cuda {
namespace {

template <class Op>
void host_tiles(const OptimizerRunTable& table, Op op) {
  for (int64_t tile = 0; tile < table.tiles; ++tile) {
    const int64_t r = run_of_tile(table.tile_starts, table.run_count, tile);
    const OptimizerRunView run = table.runs[r];
    const int64_t first = run.begin + (tile - table.tile_starts[r]) * kOptimizerTile;
    const int64_t last = std::min(first + kOptimizerTile, run.end);
    for (int64_t i = first; i < last; ++i) op(i, run);
  }
}

}  // namespace

cudaError_t launch_adamw_update(float* p, const float* g, float* m, float* v, const OptimizerRunTable& table,
                                const OptimizerStepScalars& s, cudaStream_t) {
  host_tiles(table, [&](int64_t i, const OptimizerRunView& run) {
    adamw_update(p[i], g[i], m[i], v[i], adamw_run_scalars(s, run));
  });
  return cudaSuccess;
}

cudaError_t launch_lamb_update(float* p, const float* m, const float* v, const OptimizerRunTable& table,
                               const OptimizerStepScalars& s, cudaStream_t) {
  host_tiles(table, [&](int64_t i, const OptimizerRunView& run) {
    lamb_apply(p[i], m[i], v[i], lamb_run_scalars(s, run), run.step);
  });
  return cudaSuccess;
}

cudaError_t launch_sgd_update(float* p, const float* g, float* buffer, const OptimizerRunTable& table,
                              const OptimizerStepScalars& s, cudaStream_t) {
  host_tiles(table, [&](int64_t i, const OptimizerRunView& run) {
    if (buffer != nullptr) {
      sgd_momentum_update(p[i], g[i], buffer[i], sgd_run_scalars(s, run));
    } else {
      sgd_update(p[i], g[i], sgd_run_scalars(s, run));
    }
  });
  return cudaSuccess;
}

cudaError_t launch_lamb_moments(const float* p, const float* g, float* m, float* v, const OptimizerRunView* runs,
                                int64_t run_count, const OptimizerStepScalars& s, double* squares, cudaStream_t) {
  for (int64_t r = 0; r < run_count; ++r) {
    const OptimizerRunView run = runs[r];
    const LambScalars ls = lamb_run_scalars(s, run);
    double p_lanes[kSquareLanes] = {}, u_lanes[kSquareLanes] = {};
    for (int lane = 0; lane < kSquareLanes; ++lane) {
      for (int64_t i = run.begin + lane; i < run.end; i += kSquareLanes) {
        const float pi = p[i];
        const double u = lamb_moments(pi, g[i], m[i], v[i], ls);
        p_lanes[lane] = add_square(p_lanes[lane], pi);
        u_lanes[lane] = add_square(u_lanes[lane], u);
      }
    }
    squares[2 * r] = fold_lanes(p_lanes);
    squares[2 * r + 1] = fold_lanes(u_lanes);
  }
  return cudaSuccess;
}

cudaError_t launch_sum_of_squares_parts(const float* x, const int64_t* bounds, int64_t parts, double* sums,
                                        cudaStream_t) {
  for (int64_t j = 0; j < parts; ++j) {
    double lanes[kSquareLanes] = {};
    for (int lane = 0; lane < kSquareLanes; ++lane) {
      for (int64_t i = bounds[j] + lane; i < bounds[j + 1]; i += kSquareLanes) {
        lanes[lane] = add_square(lanes[lane], x[i]);
      }
    }
    sums[j] = fold_lanes(lanes);
  }
  return cudaSuccess;
}

}  // namespace vitpipe::cuda
