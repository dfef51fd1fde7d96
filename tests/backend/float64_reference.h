// Float64 references of the elementwise math, written from the formulas (not from any kernel): the CPU kernels
// (test_kernels_by_level.cpp) and the CUDA kernels' shared arithmetic (tests/cuda/) are held to the same ones.
#pragma once

#include <cmath>

namespace vitpipe::reference {

// The exact GELU, x * Phi(x), and its derivative Phi(x) + x * phi(x).
inline double gelu(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }
inline double gelu_derivative(double x) {
  return 0.5 * (1.0 + std::erf(x / std::sqrt(2.0))) + x * std::exp(-0.5 * x * x) / std::sqrt(2.0 * M_PI);
}

}  // namespace vitpipe::reference
