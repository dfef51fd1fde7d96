// Float64 references of the elementwise and per-row math, written from the formulas (not from any kernel): the CPU
// kernels (test_kernels_by_level.cpp) and the CUDA kernels' shared arithmetic (tests/cuda/) are held to the same ones.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

namespace vitpipe::reference {

// The exact GELU, x * Phi(x), and its derivative Phi(x) + x * phi(x).
inline double gelu(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }
inline double gelu_derivative(double x) {
  return 0.5 * (1.0 + std::erf(x / std::sqrt(2.0))) + x * std::exp(-0.5 * x * x) / std::sqrt(2.0 * M_PI);
}

// LayerNorm over rows of length d (biased variance): the output, the normalised input xhat and 1 / std per row.
struct LayerNormForward {
  std::vector<double> out, xhat, mean, rstd;
};

inline LayerNormForward layernorm_forward(const std::vector<double>& x, const std::vector<double>& w,
                                          const std::vector<double>& b, int64_t rows, int64_t d, double eps) {
  LayerNormForward f{std::vector<double>(x.size()), std::vector<double>(x.size()),
                     std::vector<double>(static_cast<size_t>(rows)), std::vector<double>(static_cast<size_t>(rows))};
  for (int64_t i = 0; i < rows; ++i) {
    double mu = 0, var = 0;
    for (int64_t j = 0; j < d; ++j) mu += x[i * d + j];
    mu /= static_cast<double>(d);
    for (int64_t j = 0; j < d; ++j) var += (x[i * d + j] - mu) * (x[i * d + j] - mu);
    f.mean[i] = mu;
    f.rstd[i] = 1.0 / std::sqrt(var / static_cast<double>(d) + eps);
    for (int64_t j = 0; j < d; ++j) {
      f.xhat[i * d + j] = (x[i * d + j] - mu) * f.rstd[i];
      f.out[i * d + j] = f.xhat[i * d + j] * w[j] + b[j];
    }
  }
  return f;
}

// d(LayerNorm)/d(in) applied to g: rstd * (g w - mean(g w) - xhat mean(g w xhat)) per row.
inline std::vector<double> layernorm_input_gradient(const std::vector<double>& g, const std::vector<double>& w,
                                                    const LayerNormForward& f, int64_t rows, int64_t d) {
  std::vector<double> grad_in(g.size());
  for (int64_t i = 0; i < rows; ++i) {
    double mean_g = 0, mean_gx = 0;
    for (int64_t j = 0; j < d; ++j) {
      mean_g += g[i * d + j] * w[j];
      mean_gx += g[i * d + j] * w[j] * f.xhat[i * d + j];
    }
    mean_g /= static_cast<double>(d), mean_gx /= static_cast<double>(d);
    for (int64_t j = 0; j < d; ++j) {
      grad_in[i * d + j] = f.rstd[i] * (g[i * d + j] * w[j] - mean_g - f.xhat[i * d + j] * mean_gx);
    }
  }
  return grad_in;
}

}  // namespace vitpipe::reference
