// The CUDA Backend's optimizer kernels (launchers in optimizer_kernels.h). Element-wise updates: one launch over every
// run of a step, a block per kOptimizerTile-element tile of a run (the block finds its run by a binary search of the
// tile table), each element read and written once. Sums of squares: one thread per (run, lane) adds its lane's
// elements in order, then the 16 lanes fold by warp shuffles in the fixed order w = 8, 4, 2, 1 (backend.h's contract,
// so the bits equal the CPU backend's). Every float and double operation is one _rn intrinsic (optimizer_math.h):
// nothing is fused. NOT YET RUN ON A GPU.
#include <cstdint>

#include "backend/cuda/kernels/optimizer_kernels.h"

namespace vitpipe::cuda {
namespace {

constexpr unsigned int kBlock = 256;
constexpr int kRunsPerBlock = kBlock / kSquareLanes;  // lanes of one run stay inside one half-warp
constexpr int64_t kMaxGrid = int64_t{1} << 20;

unsigned int grid_for(int64_t blocks) {
  return static_cast<unsigned int>(blocks < kMaxGrid ? (blocks > 0 ? blocks : 1) : kMaxGrid);
}

// op(i, run) for every element i of every run: block-stride over the tiles.
template <class Op>
__global__ void run_tiles_kernel(OptimizerRunTable table, Op op) {
  for (int64_t tile = blockIdx.x; tile < table.tiles; tile += gridDim.x) {
    const int64_t r = run_of_tile(table.tile_starts, table.run_count, tile);
    const OptimizerRunView run = table.runs[r];
    const int64_t first = run.begin + (tile - table.tile_starts[r]) * kOptimizerTile;
    const int64_t last = first + kOptimizerTile < run.end ? first + kOptimizerTile : run.end;
    for (int64_t i = first + threadIdx.x; i < last; i += blockDim.x) op(i, run);
  }
}

struct AdamWOp {
  float* p;
  const float* g;
  float *m, *v;
  OptimizerStepScalars s;
  __device__ void operator()(int64_t i, const OptimizerRunView& run) const {
    float pi = p[i], mi = m[i], vi = v[i];
    adamw_update(pi, g[i], mi, vi, adamw_run_scalars(s, run));
    p[i] = pi;
    m[i] = mi;
    v[i] = vi;
  }
};

struct LambApplyOp {
  float* p;
  const float *m, *v;
  OptimizerStepScalars s;
  __device__ void operator()(int64_t i, const OptimizerRunView& run) const {
    float pi = p[i];
    lamb_apply(pi, m[i], v[i], lamb_run_scalars(s, run), run.step);
    p[i] = pi;
  }
};

struct SgdOp {
  float* p;
  const float* g;
  float* buffer;  // null: without momentum
  OptimizerStepScalars s;
  __device__ void operator()(int64_t i, const OptimizerRunView& run) const {
    float pi = p[i];
    if (buffer != nullptr) {
      float b = buffer[i];
      sgd_momentum_update(pi, g[i], b, sgd_run_scalars(s, run));
      buffer[i] = b;
    } else {
      sgd_update(pi, g[i], sgd_run_scalars(s, run));
    }
    p[i] = pi;
  }
};

template <class Op>
cudaError_t launch_tiles(const OptimizerRunTable& table, const Op& op, cudaStream_t stream) {
  if (table.tiles == 0) return cudaSuccess;
  run_tiles_kernel<<<grid_for(table.tiles), kBlock, 0, stream>>>(table, op);
  return cudaGetLastError();
}

// lanes[k] += lanes[k + w] for w = 8, 4, 2, 1 across the 16 threads of one run; lane 0 ends with the sum. Every
// thread of the warp calls it (full mask).
__device__ double fold_half_warp(double value, int lane) {
  for (int w = kSquareLanes / 2; w > 0; w /= 2) {
    const double other = __shfl_down_sync(0xffffffffu, value, w, kSquareLanes);
    if (lane < w) value = add_rn(value, other);
  }
  return value;
}

__global__ void lamb_moments_kernel(const float* __restrict__ p, const float* __restrict__ g, float* __restrict__ m,
                                    float* __restrict__ v, const OptimizerRunView* __restrict__ runs, int64_t run_count,
                                    OptimizerStepScalars s, double* __restrict__ squares) {
  const int lane = static_cast<int>(threadIdx.x) % kSquareLanes;
  const int64_t groups = (run_count + kRunsPerBlock - 1) / kRunsPerBlock;
  for (int64_t group = blockIdx.x; group < groups; group += gridDim.x) {  // uniform across the block
    const int64_t r = group * kRunsPerBlock + threadIdx.x / kSquareLanes;
    double p_lane = 0.0, u_lane = 0.0;
    if (r < run_count) {
      const OptimizerRunView run = runs[r];
      const LambScalars ls = lamb_run_scalars(s, run);
      for (int64_t i = run.begin + lane; i < run.end; i += kSquareLanes) {
        const float pi = p[i];
        float mi = m[i], vi = v[i];
        const double u = lamb_moments(pi, g[i], mi, vi, ls);
        m[i] = mi;
        v[i] = vi;
        p_lane = add_square(p_lane, pi);
        u_lane = add_square(u_lane, u);
      }
    }
    p_lane = fold_half_warp(p_lane, lane);
    u_lane = fold_half_warp(u_lane, lane);
    if (r < run_count && lane == 0) {
      squares[2 * r] = p_lane;
      squares[2 * r + 1] = u_lane;
    }
  }
}

__global__ void sum_of_squares_kernel(const float* __restrict__ x, const int64_t* __restrict__ bounds, int64_t parts,
                                      double* __restrict__ sums) {
  const int lane = static_cast<int>(threadIdx.x) % kSquareLanes;
  const int64_t groups = (parts + kRunsPerBlock - 1) / kRunsPerBlock;
  for (int64_t group = blockIdx.x; group < groups; group += gridDim.x) {
    const int64_t j = group * kRunsPerBlock + threadIdx.x / kSquareLanes;
    double lane_sum = 0.0;
    if (j < parts) {
      const int64_t end = bounds[j + 1];
      for (int64_t i = bounds[j] + lane; i < end; i += kSquareLanes) lane_sum = add_square(lane_sum, x[i]);
    }
    lane_sum = fold_half_warp(lane_sum, lane);
    if (j < parts && lane == 0) sums[j] = lane_sum;
  }
}

}  // namespace

cudaError_t launch_adamw_update(float* p, const float* g, float* m, float* v, const OptimizerRunTable& table,
                                const OptimizerStepScalars& s, cudaStream_t stream) {
  return launch_tiles(table, AdamWOp{p, g, m, v, s}, stream);
}

cudaError_t launch_lamb_update(float* p, const float* m, const float* v, const OptimizerRunTable& table,
                               const OptimizerStepScalars& s, cudaStream_t stream) {
  return launch_tiles(table, LambApplyOp{p, m, v, s}, stream);
}

cudaError_t launch_sgd_update(float* p, const float* g, float* buffer, const OptimizerRunTable& table,
                              const OptimizerStepScalars& s, cudaStream_t stream) {
  return launch_tiles(table, SgdOp{p, g, buffer, s}, stream);
}

cudaError_t launch_lamb_moments(const float* p, const float* g, float* m, float* v, const OptimizerRunView* runs,
                                int64_t run_count, const OptimizerStepScalars& s, double* squares,
                                cudaStream_t stream) {
  if (run_count == 0) return cudaSuccess;
  lamb_moments_kernel<<<grid_for((run_count + kRunsPerBlock - 1) / kRunsPerBlock), kBlock, 0, stream>>>(
      p, g, m, v, runs, run_count, s, squares);
  return cudaGetLastError();
}

cudaError_t launch_sum_of_squares_parts(const float* x, const int64_t* bounds, int64_t parts, double* sums,
                                        cudaStream_t stream) {
  if (parts == 0) return cudaSuccess;
  sum_of_squares_kernel<<<grid_for((parts + kRunsPerBlock - 1) / kRunsPerBlock), kBlock, 0, stream>>>(x, bounds, parts,
                                                                                                      sums);
  return cudaGetLastError();
}

}  // namespace vitpipe::cuda
