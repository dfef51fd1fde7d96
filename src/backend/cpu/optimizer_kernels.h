// The CPU backend's optimizer steps, gradient norms, zeroing and host copies (backend.h states the contracts).
// Compiled once, at the baseline level with the rest of the library (not per CPU level under kernels/): the loops
// are the ones the optimizers ran before they moved behind the Backend, so the bits of every update are unchanged.
// Threads take whole work items (the optimizers' fixed chunks), schedule static, as before.
#pragma once

#include <cstdint>
#include <span>

#include "backend/backend.h"

namespace vitpipe::cpu {

void adamw_update(const OptimizerStep& step, const OptimizerScalars& s);
void lamb_moments(const OptimizerStep& step, const OptimizerScalars& s, std::span<double> squares);
void lamb_update(const OptimizerStep& step, const OptimizerScalars& s);
void sgd_update(const OptimizerStep& step, const OptimizerScalars& s);
double sum_of_squares(const Tensor& x, std::span<const int64_t> bounds);
// sum of x[i]^2 in double, with 16 fixed lanes relative to x[0], so the bits do not depend on x's alignment.
double sum_of_squares_lanes(const float* x, int64_t n);
void zero(const Tensor& t);
void copy_tensor(const Tensor& from, const Tensor& to, const char* what);

}  // namespace vitpipe::cpu
