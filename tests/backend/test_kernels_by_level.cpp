// Every CPU backend kernel at every CPU level this machine runs, against a float64 reference written here from the
// math (not from the kernels). Levels the CPU lacks are skipped visibly. bf16 cases compare with the reference on
// the same bf16-rounded operands: a bf16 GEMM with fp32 accumulation differs from it only by summation order (and
// bf16 outputs by their final rounding), whether it runs in hardware or widened to fp32.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend_factory.h"
#include "backend/cpu/cpu_level.h"
#include "backend/cpu/onednn_matmul.h"
#include "float64_reference.h"
#include "util/random.h"

using namespace vitpipe;
using cpu::CpuLevel;

namespace {

using Doubles = std::vector<double>;

Tensor random_tensor(const Shape& shape, uint64_t seed, DType dtype, double scale = 1.0) {
  Tensor t = Tensor::empty(shape);
  Rng rng(seed);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = static_cast<float>(scale * rng.normal());
  return dtype == DType::f32 ? t : t.to(dtype);
}

Doubles values(const Tensor& t) {
  const Tensor f = t.to(DType::f32);
  return Doubles(f.f32(), f.f32() + f.numel());
}

// max |a - b| / max(1e-3, max |b|): relative to the size of the expected values.
double relative_difference(const Tensor& actual, const Doubles& expected) {
  const Doubles a = values(actual);
  EXPECT_EQ(a.size(), expected.size());
  double diff = 0.0, scale = 1e-3;
  for (size_t i = 0; i < a.size() && i < expected.size(); ++i) {
    diff = std::max(diff, std::abs(a[i] - expected[i]));
    scale = std::max(scale, std::abs(expected[i]));
  }
  return diff / scale;
}

// C[m][n] = sum_k A[m][k] * W[n][k] (a linear layer's forward, weights [out, in]).
Doubles matmul_nt(const Doubles& a, const Doubles& w, int64_t m, int64_t n, int64_t k) {
  Doubles c(static_cast<size_t>(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0.0;
      for (int64_t p = 0; p < k; ++p) s += a[i * k + p] * w[j * k + p];
      c[i * n + j] = s;
    }
  return c;
}

using reference::gelu;
using reference::gelu_derivative;

class KernelsAtLevel : public ::testing::TestWithParam<CpuLevel> {
 protected:
  void SetUp() override {
    const CpuLevel level = GetParam();
    if (level > cpu::best_cpu_level()) {
      GTEST_SKIP() << "this CPU offers up to " << cpu::cpu_level_name(cpu::best_cpu_level()) << ", not "
                   << cpu::cpu_level_name(level);
    }
    if (!cpu::cpu_level_compiled(level))
      GTEST_SKIP() << "this build has no " << cpu::cpu_level_name(level) << " kernels";
    backend_ = cpu::make_cpu_backend_at(level);
  }
  Backend& be() { return *backend_; }
  std::unique_ptr<Backend> backend_;
};

// fp32 within 1e-5 relative; bf16 results are rounded to bf16 (2^-9 relative) on top of the summation order.
double tolerance(DType out) { return out == DType::f32 ? 1e-5 : 8e-3; }

TEST_P(KernelsAtLevel, ReportsItsLevel) {
  EXPECT_NE(be().name().find(cpu::cpu_level_name(GetParam())), std::string::npos) << be().name();
}

// 37 rows take the weight as it is; 300 (from cpu::kPackWeightMinRows) have it packed into oneDNN's layout first.
TEST_P(KernelsAtLevel, LinearForwardWithBiasAndResidual) {
  static_assert(cpu::kPackWeightMinRows <= 300);
  for (const int64_t m : {37, 300})
    for (DType type : {DType::f32, DType::bf16}) {
      for (DType out_type : {DType::f32, DType::bf16}) {
        const int64_t k = 70, n = 45;
        const Tensor in = random_tensor({m, k}, 1, type), weight = random_tensor({n, k}, 2, type, 0.2);
        const Tensor bias = random_tensor({n}, 3, DType::f32), residual = random_tensor({m, n}, 4, DType::f32);
        Doubles expected = matmul_nt(values(in), values(weight), m, n, k);
        const Doubles b = values(bias), r = values(residual);
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) expected[i * n + j] += b[j] + (out_type == DType::f32 ? r[i * n + j] : 0.0);
        const Tensor out = Tensor::empty({m, n}, out_type);
        be().linear_forward(in, weight, &bias, out_type == DType::f32 ? &residual : nullptr, out);
        EXPECT_LT(relative_difference(out, expected), tolerance(out_type))
            << dtype_name(type) << " -> " << dtype_name(out_type) << " at " << m << " rows";
      }
    }
}

// Inference's fc1: GELU (exact erf, not oneDNN's tanh-form eltwise_gelu, 4.7e-4 away) in the GEMM's epilogue.
TEST_P(KernelsAtLevel, LinearWithGeluEpilogue) {
  for (DType type : {DType::f32, DType::bf16}) {
    for (DType out_type : {DType::f32, DType::bf16}) {
      const int64_t m = 37, k = 70, n = 45;
      const Tensor in = random_tensor({m, k}, 1, type), weight = random_tensor({n, k}, 2, type, 0.2);
      const Tensor bias = random_tensor({n}, 3, DType::f32);
      Doubles expected = matmul_nt(values(in), values(weight), m, n, k);
      const Doubles b = values(bias);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) expected[i * n + j] = gelu(expected[i * n + j] + b[j]);
      const Tensor out = Tensor::empty({m, n}, out_type);
      be().linear_gelu_forward(in, weight, bias, nullptr, out);
      EXPECT_LT(relative_difference(out, expected), tolerance(out_type))
          << dtype_name(type) << " -> " << dtype_name(out_type);
    }
  }
}

// Training's fc1 keeps the pre-activation too: blocks of rows, each GEMM'd and then GELU'd by one thread. Row counts
// that split into several blocks with a shorter last one, one that is a single block, and none.
TEST_P(KernelsAtLevel, LinearGeluKeepingPreActivation) {
  struct Case {
    int64_t m, k, n;
  };
  for (const Case c : {Case{1103, 70, 300}, Case{1103, 24, 45}, Case{37, 70, 45}, Case{0, 70, 45}}) {
    for (DType type : {DType::f32, DType::bf16}) {
      for (DType pre_type : {DType::f32, DType::bf16}) {
        for (DType out_type : {DType::f32, DType::bf16}) {
          if (pre_type == DType::bf16 && out_type == DType::f32) continue;  // not a supported mix
          const Tensor in = random_tensor({c.m, c.k}, 1, type), weight = random_tensor({c.n, c.k}, 2, type, 0.2);
          const Tensor bias = random_tensor({c.n}, 3, DType::f32);
          Doubles expected = matmul_nt(values(in), values(weight), c.m, c.n, c.k);
          const Doubles b = values(bias);
          for (int64_t i = 0; i < c.m; ++i)
            for (int64_t j = 0; j < c.n; ++j) expected[i * c.n + j] += b[j];
          const Tensor pre = Tensor::empty({c.m, c.n}, pre_type), out = Tensor::empty({c.m, c.n}, out_type);
          be().linear_gelu_forward(in, weight, bias, &pre, out);
          const std::string what = std::string(dtype_name(type)) + " -> " + dtype_name(pre_type) + ", " +
                                   dtype_name(out_type) + " at " + std::to_string(c.m) + " rows";
          EXPECT_LT(relative_difference(pre, expected), tolerance(pre_type)) << what;
          // The activation is GELU of the pre-activation as stored (what the backward pass differentiates at).
          Doubles activation = values(pre);
          for (double& x : activation) x = gelu(x);
          EXPECT_LT(relative_difference(out, activation), out_type == DType::f32 ? 1e-6 : 8e-3) << what;
        }
      }
    }
  }
}

TEST_P(KernelsAtLevel, LinearBackward) {
  for (const int64_t m : {50, 300})  // 300: the input gradient's GEMM packs the weight (cpu::kPackWeightMinRows)
    for (DType type : {DType::f32, DType::bf16}) {
      const int64_t k = 33, n = 24;
      const Tensor grad_out = random_tensor({m, n}, 5, type), weight = random_tensor({n, k}, 6, type);
      const Tensor in = random_tensor({m, k}, 7, type);
      const Doubles go = values(grad_out), w = values(weight), x = values(in);
      // grad_in = grad_out . W  (overwrites), in the GEMM dtype
      Doubles expected_in(static_cast<size_t>(m * k), 0.0);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t p = 0; p < k; ++p)
          for (int64_t j = 0; j < n; ++j) expected_in[i * k + p] += go[i * n + j] * w[j * k + p];
      const Tensor grad_in = Tensor::empty({m, k}, type);
      be().linear_backward_input(grad_out, weight, grad_in);
      EXPECT_LT(relative_difference(grad_in, expected_in), tolerance(type))
          << dtype_name(type) << " at " << m << " rows";
      // grad_weight += grad_out^T . in (adds to what is there), always f32
      const Tensor grad_weight = random_tensor({n, k}, 8, DType::f32);
      Doubles expected_w = values(grad_weight);
      for (int64_t j = 0; j < n; ++j)
        for (int64_t p = 0; p < k; ++p)
          for (int64_t i = 0; i < m; ++i) expected_w[j * k + p] += go[i * n + j] * x[i * k + p];
      be().linear_backward_weight(grad_out, in, grad_weight);
      EXPECT_LT(relative_difference(grad_weight, expected_w), 1e-5) << dtype_name(type);
      // bias gradient adds the column sums
      const Tensor grad_bias = random_tensor({n}, 9, DType::f32);
      Doubles expected_b = values(grad_bias);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) expected_b[j] += go[i * n + j];
      be().bias_backward(grad_out, grad_bias);
      EXPECT_LT(relative_difference(grad_bias, expected_b), 1e-5) << dtype_name(type);
    }
}

// Many rows into a small weight gradient (kernels/linear.cpp splits the rows across the threads, an odd count so
// the last thread's share differs): the same sum as the reference, and the same bits run after run.
TEST_P(KernelsAtLevel, LinearWeightGradientOverManyRows) {
  if (omp_get_max_threads() < 2) GTEST_SKIP() << "one OpenMP thread: the rows are not split";
  for (DType type : {DType::f32, DType::bf16}) {
    const int64_t m = 1001, k = 33, n = 24;
    const Tensor grad_out = random_tensor({m, n}, 5, type), in = random_tensor({m, k}, 7, type);
    const Doubles go = values(grad_out), x = values(in);
    const Tensor start = random_tensor({n, k}, 8, DType::f32);
    Doubles expected = values(start);
    for (int64_t j = 0; j < n; ++j)
      for (int64_t p = 0; p < k; ++p)
        for (int64_t i = 0; i < m; ++i) expected[j * k + p] += go[i * n + j] * x[i * k + p];
    const Tensor first = start.clone(), second = start.clone();
    be().linear_backward_weight(grad_out, in, first);
    be().linear_backward_weight(grad_out, in, second);
    EXPECT_LT(relative_difference(first, expected), 1e-5) << dtype_name(type);
    EXPECT_EQ(std::memcmp(first.raw(), second.raw(), static_cast<size_t>(n * k) * sizeof(float)), 0)
        << dtype_name(type) << ": two identical calls differ";
  }
}

TEST_P(KernelsAtLevel, GeluForwardAndBackward) {
  // 4099 columns: odd row lengths exercise every vector tail.
  for (DType type : {DType::f32, DType::bf16}) {
    const int64_t rows = 9, cols = 4099;
    const Tensor in = random_tensor({rows, cols}, 10, type, 3.0);
    const Doubles x = values(in);
    const Tensor out = Tensor::empty({rows, cols}, type);
    be().gelu_forward(in, out);
    Doubles expected(x.size());
    for (size_t i = 0; i < x.size(); ++i) expected[i] = gelu(x[i]);
    EXPECT_LT(relative_difference(out, expected), type == DType::f32 ? 2e-6 : 8e-3) << dtype_name(type);

    const Tensor grad_out = random_tensor({rows, cols}, 11, type);
    const Doubles g = values(grad_out);
    const Tensor grad_in = Tensor::empty({rows, cols}, type), grad_bias = random_tensor({cols}, 12, DType::f32);
    Doubles expected_bias = values(grad_bias);
    Doubles expected_in(x.size());
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) {
        const double v = g[i * cols + j] * gelu_derivative(x[i * cols + j]);
        expected_in[i * cols + j] = v;
        expected_bias[j] += v;
      }
    be().gelu_backward(grad_out, in, grad_in, &grad_bias);
    EXPECT_LT(relative_difference(grad_in, expected_in), type == DType::f32 ? 2e-6 : 8e-3) << dtype_name(type);
    EXPECT_LT(relative_difference(grad_bias, expected_bias), type == DType::f32 ? 2e-6 : 8e-3) << dtype_name(type);
  }
}

TEST_P(KernelsAtLevel, LayerNormForwardAndBackward) {
  for (DType type : {DType::f32, DType::bf16}) {
    const int64_t rows = 13, d = 197;  // a row length that is not a multiple of any vector width
    const double eps = 1e-6;
    const Tensor in = random_tensor({rows, d}, 13, DType::f32, 2.0);
    const Tensor weight = random_tensor({d}, 14, DType::f32), bias = random_tensor({d}, 15, DType::f32);
    const Doubles x = values(in), w = values(weight), b = values(bias);
    const Tensor out = Tensor::empty({rows, d}, type), mean = Tensor::empty({rows}), rstd = Tensor::empty({rows});
    be().layernorm_forward(in, weight, bias, eps, out, mean, rstd);
    const reference::LayerNormForward forward = reference::layernorm_forward(x, w, b, rows, d, eps);
    const Doubles& xhat = forward.xhat;
    EXPECT_LT(relative_difference(out, forward.out), tolerance(type)) << dtype_name(type);

    // Backward with the residual gradient added, a copy of the result and the column sums.
    const Tensor grad_out = random_tensor({rows, d}, 16, type), residual = random_tensor({rows, d}, 17, DType::f32);
    const Doubles g = values(grad_out), r = values(residual);
    Doubles expected_in = reference::layernorm_input_gradient(g, w, forward, rows, d);
    Doubles expected_dw(static_cast<size_t>(d), 0.0), expected_db(static_cast<size_t>(d), 0.0),
        expected_colsum(static_cast<size_t>(d), 0.0);
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < d; ++j) {
        expected_dw[j] += g[i * d + j] * xhat[i * d + j];
        expected_db[j] += g[i * d + j];
        expected_in[i * d + j] += r[i * d + j];
        expected_colsum[j] += expected_in[i * d + j];
      }
    }
    LayerNormBackwardArgs args;
    args.grad_out = grad_out, args.in = in, args.weight = weight, args.mean = mean, args.rstd = rstd;
    args.grad_in = Tensor::empty({rows, d});
    args.grad_residual = residual;
    args.grad_weight = Tensor::zeros({d}), args.grad_bias = Tensor::zeros({d});
    args.grad_in_copy = Tensor::empty({rows, d}, type);
    args.grad_in_colsum = Tensor::zeros({d});
    be().layernorm_backward(args);
    EXPECT_LT(relative_difference(args.grad_in, expected_in), 1e-5) << dtype_name(type);
    EXPECT_LT(relative_difference(args.grad_in_copy, expected_in), tolerance(type)) << dtype_name(type);
    EXPECT_LT(relative_difference(args.grad_weight, expected_dw), 1e-5) << dtype_name(type);
    EXPECT_LT(relative_difference(args.grad_bias, expected_db), 1e-5) << dtype_name(type);
    EXPECT_LT(relative_difference(args.grad_in_colsum, expected_colsum), 1e-5) << dtype_name(type);
  }
}

// softmax(Q K^T / sqrt(d)) V per (batch, head) and its gradients, in double.
struct AttentionReference {
  Doubles probs, lse, out, grad_qkv, grad_bias;
};

AttentionReference attention_reference(const Doubles& qkv, const Doubles& grad_out, int64_t B, int64_t T, int64_t D,
                                       int64_t H) {
  const int64_t hd = D / H;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  AttentionReference r;
  r.probs.assign(static_cast<size_t>(B * H * T * T), 0.0);
  r.lse.assign(static_cast<size_t>(B * H * T), 0.0);
  r.out.assign(static_cast<size_t>(B * T * D), 0.0);
  r.grad_qkv.assign(qkv.size(), 0.0);
  r.grad_bias.assign(static_cast<size_t>(3 * D), 0.0);
  auto at = [&](int64_t b, int64_t t, int64_t part, int64_t h, int64_t j) {
    return static_cast<size_t>((b * T + t) * 3 * D + part * D + h * hd + j);
  };
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      double* p = r.probs.data() + (b * H + h) * T * T;
      for (int64_t i = 0; i < T; ++i) {
        double max = -INFINITY;
        for (int64_t t = 0; t < T; ++t) {
          double s = 0;
          for (int64_t j = 0; j < hd; ++j) s += qkv[at(b, i, 0, h, j)] * qkv[at(b, t, 1, h, j)];
          p[i * T + t] = s * scale;
          max = std::max(max, p[i * T + t]);
        }
        double sum = 0;
        for (int64_t t = 0; t < T; ++t) sum += p[i * T + t] = std::exp(p[i * T + t] - max);
        for (int64_t t = 0; t < T; ++t) p[i * T + t] /= sum;
        r.lse[static_cast<size_t>((b * H + h) * T + i)] = max + std::log(sum);  // natural log, scaled scores
        for (int64_t j = 0; j < hd; ++j) {
          double o = 0;
          for (int64_t t = 0; t < T; ++t) o += p[i * T + t] * qkv[at(b, t, 2, h, j)];
          r.out[(b * T + i) * D + h * hd + j] = o;
        }
      }
      // dV = P^T dO; dP = dO V^T; dS = P * (dP - rowsum(dP * P)); dQ = dS K * scale; dK = dS^T Q * scale.
      for (int64_t i = 0; i < T; ++i) {
        Doubles dp(static_cast<size_t>(T));
        double dot = 0;
        for (int64_t t = 0; t < T; ++t) {
          double v = 0;
          for (int64_t j = 0; j < hd; ++j) v += grad_out[(b * T + i) * D + h * hd + j] * qkv[at(b, t, 2, h, j)];
          dp[t] = v;
          dot += v * p[i * T + t];
        }
        for (int64_t t = 0; t < T; ++t) {
          const double ds = p[i * T + t] * (dp[t] - dot) * scale;
          for (int64_t j = 0; j < hd; ++j) {
            r.grad_qkv[at(b, i, 0, h, j)] += ds * qkv[at(b, t, 1, h, j)];
            r.grad_qkv[at(b, t, 1, h, j)] += ds * qkv[at(b, i, 0, h, j)];
            r.grad_qkv[at(b, t, 2, h, j)] += p[i * T + t] * grad_out[(b * T + i) * D + h * hd + j];
          }
        }
      }
    }
  for (int64_t row = 0; row < B * T; ++row)
    for (int64_t c = 0; c < 3 * D; ++c) {
      if (c < D || c >= 2 * D) r.grad_bias[c] += r.grad_qkv[row * 3 * D + c];  // the key bias gradient is zero
    }
  return r;
}

// The saved log-sum-exp (cuDNN's stats: fp32, natural log, scaled scores) and the probabilities it recovers,
// exp(q.k * scale - lse), as explain materialises them.
Doubles probabilities_from_lse(const Tensor& qkv, const Tensor& lse, int64_t B, int64_t T, int64_t D, int64_t H) {
  const Doubles x = values(qkv), l = values(lse);
  const int64_t hd = D / H;
  Doubles p(static_cast<size_t>(B * H * T * T));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < T; ++i)
        for (int64_t t = 0; t < T; ++t) {
          double s = 0;
          for (int64_t j = 0; j < hd; ++j)
            s += x[(b * T + i) * 3 * D + h * hd + j] * x[(b * T + t) * 3 * D + D + h * hd + j];
          p[((b * H + h) * T + i) * T + t] = std::exp(s / std::sqrt(static_cast<double>(hd)) - l[(b * H + h) * T + i]);
        }
  return p;
}

// T = 37: a head is one tile. T = 805 (past the whole-head limit of 320): 192-row query tiles against 384-key
// blocks, 805 = 2 x 384 + 37 keys and 4 x 192 + 37 queries, so the online softmax rescales across three key blocks,
// the backward GEMMs accumulate across tiles and both tails are short.
void check_attention(Backend& be, int64_t B, int64_t T, int64_t D, int64_t H) {
  for (DType type : {DType::f32, DType::bf16}) {
    const Tensor qkv = random_tensor({B, T, 3 * D}, 18, type), grad_out = random_tensor({B, T, D}, 19, type);
    const AttentionReference ref = attention_reference(values(qkv), values(grad_out), B, T, D, H);
    const Tensor lse = Tensor::empty({B, H, T}), out = Tensor::empty({B, T, D}, type);
    be.attention_forward(qkv, H, lse, out);
    // bf16 probabilities feed P V rounded: the output carries that rounding too.
    EXPECT_LT(relative_difference(lse, ref.lse), type == DType::f32 ? 1e-5 : 2e-2) << dtype_name(type) << " T " << T;
    const Doubles probs = probabilities_from_lse(qkv, lse, B, T, D, H);
    double worst = 0;
    for (size_t i = 0; i < probs.size(); ++i) worst = std::max(worst, std::abs(probs[i] - ref.probs[i]));
    EXPECT_LT(worst, type == DType::f32 ? 1e-5 : 2e-2) << dtype_name(type) << " T " << T;
    EXPECT_LT(relative_difference(out, ref.out), type == DType::f32 ? 1e-5 : 2e-2) << dtype_name(type) << " T " << T;
    for (DType grad_type : {DType::f32, type}) {
      const Tensor grad_qkv = Tensor::empty({B, T, 3 * D}, grad_type), grad_bias = Tensor::zeros({3 * D});
      be.attention_backward(grad_out, qkv, out, lse, H, grad_qkv, &grad_bias);
      EXPECT_LT(relative_difference(grad_qkv, ref.grad_qkv), type == DType::f32 ? 1e-5 : 2e-2)
          << dtype_name(type) << " T " << T;
      EXPECT_LT(relative_difference(grad_bias, ref.grad_bias), type == DType::f32 ? 1e-5 : 2e-2)
          << dtype_name(type) << " T " << T;
      for (int64_t j = D; j < 2 * D; ++j) ASSERT_EQ(grad_bias.f32()[j], 0.0f) << "the key bias gradient stays zero";
    }
  }
}

// Head dimensions that are not a multiple of 8 or 16 (20) or of 32 (40): the bias gradient's column sums take their
// narrower blocks and tails.
TEST_P(KernelsAtLevel, AttentionForwardAndBackward) {
  check_attention(be(), 2, 37, 48, 3);
  check_attention(be(), 1, 23, 60, 3);
  check_attention(be(), 1, 29, 80, 2);
}

TEST_P(KernelsAtLevel, AttentionByTilesWithOnlineSoftmax) { check_attention(be(), 1, 805, 32, 2); }

// The head dimensions the models use, 64 and 32: ViT-Tiny's heads at 224 px (T = 197, odd), a 32-wide head at
// T = 50 and a head of exactly 16 tokens.
TEST_P(KernelsAtLevel, AttentionWithHeadDimension64And32) {
  check_attention(be(), 2, 197, 192, 3);
  check_attention(be(), 1, 50, 64, 2);
  check_attention(be(), 1, 16, 128, 2);
}

// The shapes the tile kernels (kernels/attention_tiles.cpp, bf16 heads of a multiple of 64 up to 320 tokens) treat
// at their edges: one token, a tail of 1 past a 32-token step, 257 (DINOv2 at 224 px), exactly 320, and 128-wide
// heads (two groups of 4 result tiles). At other levels and in fp32 the same shapes check the oneDNN path.
TEST_P(KernelsAtLevel, TileAttentionEdges) {
  check_attention(be(), 2, 1, 64, 1);
  check_attention(be(), 1, 33, 128, 2);
  check_attention(be(), 1, 257, 128, 2);
  check_attention(be(), 1, 320, 64, 1);
  check_attention(be(), 1, 40, 256, 2);
}

// Which tile unit runs bf16 attention: the emulation when VITPIPE_ATTENTION_TILES=emulated (the test
// backend.tile_attention_emulated sets it), AMX at the amx level, none elsewhere.
TEST_P(KernelsAtLevel, TileAttentionUnitNamed) {
  const char* requested = std::getenv("VITPIPE_ATTENTION_TILES");
  const std::string name = be().name();
  if (requested && std::string(requested) == "emulated") {
    EXPECT_NE(name.find("emulated tile attention"), std::string::npos) << name;
  } else if (!requested && GetParam() == CpuLevel::amx) {
    EXPECT_NE(name.find("AMX tile attention"), std::string::npos) << name;
  } else {
    EXPECT_EQ(name.find("tile attention"), std::string::npos) << name;
  }
}

TEST_P(KernelsAtLevel, EmbeddingsForwardAndBackward) {
  for (DType type : {DType::f32, DType::bf16}) {
    const int64_t B = 2, C = 3, P = 4, G = 3, D = 20, Np = G * G, T = Np + 1;
    const Tensor images = random_tensor({B, C, G * P, G * P}, 20, DType::f32);
    const Doubles img = values(images);
    const Tensor patches = Tensor::empty({B * Np, C * P * P}, type);
    be().patchify(images, P, patches);
    Doubles expected(static_cast<size_t>(B * Np * C * P * P));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t py = 0; py < G; ++py)
        for (int64_t px = 0; px < G; ++px)
          for (int64_t c = 0; c < C; ++c)
            for (int64_t ky = 0; ky < P; ++ky)
              for (int64_t kx = 0; kx < P; ++kx)
                expected[((b * Np + py * G + px) * C + c) * P * P + ky * P + kx] =
                    img[((b * C + c) * G * P + py * P + ky) * G * P + px * P + kx];
    EXPECT_LT(relative_difference(patches, expected), tolerance(type)) << dtype_name(type);

    const Tensor proj = random_tensor({B * Np, D}, 21, DType::f32), cls = random_tensor({D}, 22, DType::f32);
    const Tensor pos = random_tensor({T, D}, 23, DType::f32), x = Tensor::empty({B, T, D});
    be().embeddings_forward(proj, cls, pos, x);
    const Doubles pr = values(proj), cl = values(cls), po = values(pos);
    Doubles expected_x(static_cast<size_t>(B * T * D));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t j = 0; j < D; ++j)
          expected_x[(b * T + t) * D + j] = (t == 0 ? cl[j] : pr[(b * Np + t - 1) * D + j]) + po[t * D + j];
    EXPECT_LT(relative_difference(x, expected_x), 1e-6);

    const Tensor grad_x = random_tensor({B, T, D}, 24, DType::f32);
    const Doubles g = values(grad_x);
    const Tensor grad_cls = Tensor::zeros({D}), grad_pos = Tensor::zeros({T, D}), grad_bias = Tensor::zeros({D});
    const Tensor grad_proj = Tensor::empty({B * Np, D}, type);
    be().embeddings_backward(grad_x, grad_cls, grad_pos, grad_proj, &grad_bias);
    Doubles e_cls(static_cast<size_t>(D), 0.0), e_pos(static_cast<size_t>(T * D), 0.0),
        e_bias(static_cast<size_t>(D), 0.0), e_proj(static_cast<size_t>(B * Np * D));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t j = 0; j < D; ++j) {
          const double v = g[(b * T + t) * D + j];
          e_pos[t * D + j] += v;
          if (t == 0) {
            e_cls[j] += v;
          } else {
            e_proj[(b * Np + t - 1) * D + j] = v;
            e_bias[j] += v;
          }
        }
    EXPECT_LT(relative_difference(grad_cls, e_cls), 1e-6);
    EXPECT_LT(relative_difference(grad_pos, e_pos), 1e-6);
    EXPECT_LT(relative_difference(grad_bias, e_bias), 1e-6);
    EXPECT_LT(relative_difference(grad_proj, e_proj), tolerance(type)) << dtype_name(type);
  }
}

TEST_P(KernelsAtLevel, LossesAndConversions) {
  const int64_t B = 6, L = 5;
  const Tensor logits = random_tensor({B, L}, 25, DType::f32, 4.0), pos_weight = random_tensor({L}, 26, DType::f32);
  Tensor targets = Tensor::empty({B, L});
  for (int64_t i = 0; i < B * L; ++i) targets.f32()[i] = (i * 7) % 3 == 0 ? 1.0f : 0.0f;
  for (int64_t i = 0; i < L; ++i) pos_weight.f32()[i] = 1.0f + std::abs(pos_weight.f32()[i]);
  const Doubles z = values(logits), y = values(targets), pw = values(pos_weight);
  double expected_loss = 0;
  Doubles expected_grad(static_cast<size_t>(B * L));
  for (int64_t i = 0; i < B * L; ++i) {
    const double sig = 1.0 / (1.0 + std::exp(-z[i])), w = pw[i % L];
    expected_loss += -(w * y[i] * std::log(sig) + (1 - y[i]) * std::log(1 - sig));
    expected_grad[i] = 0.5 * (w * y[i] * (sig - 1) + (1 - y[i]) * sig);
  }
  const Tensor grad = Tensor::empty({B, L});
  EXPECT_NEAR(be().bce_with_logits(logits, targets, &pos_weight, nullptr, 0.5, grad), expected_loss,
              1e-9 * expected_loss);
  EXPECT_LT(relative_difference(grad, expected_grad), 1e-6);
  // Per-element weights (0 = an unknown label): the loss and gradient scale by them; masked elements give nothing.
  Tensor weight = Tensor::empty({B, L});
  double expected_weighted = 0;
  Doubles expected_weighted_grad(static_cast<size_t>(B * L));
  for (int64_t i = 0; i < B * L; ++i) {
    weight.f32()[i] = i % 4 == 0 ? 0.0f : 1.0f;
    const double sig = 1.0 / (1.0 + std::exp(-z[i])), w = pw[i % L];
    expected_weighted += weight.f32()[i] * -(w * y[i] * std::log(sig) + (1 - y[i]) * std::log(1 - sig));
    expected_weighted_grad[i] = weight.f32()[i] * 0.5 * (w * y[i] * (sig - 1) + (1 - y[i]) * sig);
  }
  EXPECT_NEAR(be().bce_with_logits(logits, targets, &pos_weight, &weight, 0.5, grad), expected_weighted,
              1e-9 * expected_weighted);
  EXPECT_LT(relative_difference(grad, expected_weighted_grad), 1e-6);
  for (int64_t i = 0; i < B * L; i += 4) ASSERT_EQ(grad.f32()[i], 0.0f) << "a masked element has no gradient";

  Tensor classes = Tensor::empty({B}, DType::i64);
  for (int64_t i = 0; i < B; ++i) classes.data<int64_t>()[i] = i % L;
  double expected_ce = 0;
  for (int64_t i = 0; i < B; ++i) {
    double sum = 0;
    for (int64_t l = 0; l < L; ++l) sum += std::exp(z[i * L + l]);
    for (int64_t l = 0; l < L; ++l) expected_grad[i * L + l] = std::exp(z[i * L + l]) / sum - (l == i % L ? 1 : 0);
    expected_ce += std::log(sum) - z[i * L + i % L];
  }
  EXPECT_NEAR(be().cross_entropy(logits, classes, 1.0, grad), expected_ce, 1e-9 * expected_ce);
  EXPECT_LT(relative_difference(grad, expected_grad), 1e-6);

  const Tensor wide = random_tensor({1001}, 27, DType::f32), narrow = Tensor::empty({1001}, DType::bf16);
  be().convert(wide, narrow);
  for (int64_t i = 0; i < 1001; ++i) ASSERT_EQ(narrow.u16()[i], float_to_bf16(wide.f32()[i])) << i;
  const Tensor back = Tensor::empty({1001});
  be().convert(narrow, back);
  for (int64_t i = 0; i < 1001; ++i) ASSERT_EQ(back.f32()[i], bf16_to_float(narrow.u16()[i])) << i;
}

// ---- the model families' kernels (DeiT, DINOv2, LoRA) ----

TEST_P(KernelsAtLevel, ScaleKernel) {
  for (DType in_type : {DType::f32, DType::bf16}) {
    for (DType out_type : {DType::f32, DType::bf16}) {
      const Tensor in = random_tensor({333}, 40, in_type), out = Tensor::empty({333}, out_type);
      be().scale(in, -0.75, out);
      Doubles expected = values(in);
      for (double& v : expected) v *= -0.75;
      EXPECT_LT(relative_difference(out, expected), tolerance(out_type)) << dtype_name(in_type);
    }
  }
}

// Prefix tokens of which the first `positioned` have position embeddings (DeiT: 2 of 2; registers: 1 of 3).
TEST_P(KernelsAtLevel, TokenEmbeddingsForwardAndBackward) {
  for (auto [P, Q] : {std::pair<int64_t, int64_t>{2, 2}, {3, 1}}) {
    for (DType type : {DType::f32, DType::bf16}) {
      const int64_t B = 3, Np = 5, D = 24, T = P + Np;
      const Tensor proj = random_tensor({B * Np, D}, 41, DType::f32), prefix = random_tensor({P, D}, 42, DType::f32);
      const Tensor pos = random_tensor({Q + Np, D}, 43, DType::f32), x = Tensor::empty({B, T, D});
      be().token_embeddings_forward(proj, prefix, Q, pos, x);
      const Doubles pr = values(proj), pf = values(prefix), po = values(pos);
      Doubles expected(static_cast<size_t>(B * T * D));
      for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < T; ++t)
          for (int64_t j = 0; j < D; ++j) {
            double v = t < P ? pf[t * D + j] : pr[(b * Np + t - P) * D + j];
            if (t < Q) v += po[t * D + j];
            if (t >= P) v += po[(Q + t - P) * D + j];
            expected[(b * T + t) * D + j] = v;
          }
      EXPECT_LT(relative_difference(x, expected), 1e-6);
      const Tensor grad_x = random_tensor({B, T, D}, 44, DType::f32);
      const Doubles g = values(grad_x);
      const Tensor grad_prefix = Tensor::zeros({P, D}), grad_pos = Tensor::zeros({Q + Np, D});
      const Tensor grad_bias = Tensor::zeros({D}), grad_proj = Tensor::empty({B * Np, D}, type);
      be().token_embeddings_backward(grad_x, &grad_prefix, Q, &grad_pos, grad_proj, &grad_bias);
      Doubles e_prefix(static_cast<size_t>(P * D), 0.0), e_pos(static_cast<size_t>((Q + Np) * D), 0.0);
      Doubles e_bias(static_cast<size_t>(D), 0.0), e_proj(static_cast<size_t>(B * Np * D));
      for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < T; ++t)
          for (int64_t j = 0; j < D; ++j) {
            const double v = g[(b * T + t) * D + j];
            if (t < P) e_prefix[t * D + j] += v;
            if (t < Q) e_pos[t * D + j] += v;
            if (t >= P) {
              e_pos[(Q + t - P) * D + j] += v;
              e_proj[(b * Np + t - P) * D + j] = v;
              e_bias[j] += v;
            }
          }
      EXPECT_LT(relative_difference(grad_prefix, e_prefix), 1e-6);
      EXPECT_LT(relative_difference(grad_pos, e_pos), 1e-6);
      EXPECT_LT(relative_difference(grad_bias, e_bias), 1e-6);
      EXPECT_LT(relative_difference(grad_proj, e_proj), tolerance(type)) << dtype_name(type);
    }
  }
}

TEST_P(KernelsAtLevel, ResamplePositionsAndItsTranspose) {
  for (const int64_t D : {17, 1024}) {  // 1024: enough work for the parallel loops
    const int64_t Q = 2, hs = 5, ws = 4, hd = 3, wd = 6;
    const Tensor pos = random_tensor({Q + hs * ws, D}, 45, DType::f32);
    const Tensor wy = random_tensor({hd, hs}, 46, DType::f32), wx = random_tensor({wd, ws}, 47, DType::f32);
    for (int64_t i = 0; i < hd * hs; i += 3) wy.f32()[i] = 0.0f;  // zero weights are skipped: still exact
    const Tensor out = Tensor::empty({Q + hd * wd, D});
    be().resample_positions_forward(pos, Q, wy, wx, out);
    const Doubles p = values(pos), y = values(wy), x = values(wx);
    Doubles expected(static_cast<size_t>((Q + hd * wd) * D), 0.0);
    for (int64_t i = 0; i < Q * D; ++i) expected[i] = p[i];
    for (int64_t a = 0; a < hd; ++a)
      for (int64_t c = 0; c < wd; ++c)
        for (int64_t i = 0; i < hs; ++i)
          for (int64_t k = 0; k < ws; ++k)
            for (int64_t j = 0; j < D; ++j)
              expected[(Q + a * wd + c) * D + j] += y[a * hs + i] * x[c * ws + k] * p[(Q + i * ws + k) * D + j];
    EXPECT_LT(relative_difference(out, expected), 1e-5);
    const Tensor grad_out = random_tensor({Q + hd * wd, D}, 48, DType::f32);
    const Tensor grad_pos = random_tensor({Q + hs * ws, D}, 49, DType::f32);  // the kernel adds into it
    Doubles e_grad = values(grad_pos);
    const Doubles go = values(grad_out);
    for (int64_t i = 0; i < Q * D; ++i) e_grad[i] += go[i];
    for (int64_t a = 0; a < hd; ++a)
      for (int64_t c = 0; c < wd; ++c)
        for (int64_t i = 0; i < hs; ++i)
          for (int64_t k = 0; k < ws; ++k)
            for (int64_t j = 0; j < D; ++j)
              e_grad[(Q + i * ws + k) * D + j] += y[a * hs + i] * x[c * ws + k] * go[(Q + a * wd + c) * D + j];
    be().resample_positions_backward(grad_out, Q, wy, wx, grad_pos);
    EXPECT_LT(relative_difference(grad_pos, e_grad), 1e-5);
  }
}

TEST_P(KernelsAtLevel, LayerScaleForwardAndBackward) {
  for (DType type : {DType::f32, DType::bf16}) {
    const int64_t M = 37, D = 40;
    const Tensor branch = random_tensor({M, D}, 50, type), scale = random_tensor({D}, 51, DType::f32);
    const Tensor residual = random_tensor({M, D}, 52, DType::f32), out = Tensor::empty({M, D});
    be().layer_scale_forward(branch, scale, residual, out);
    const Doubles br = values(branch), sc = values(scale), re = values(residual);
    Doubles expected(static_cast<size_t>(M * D));
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < D; ++j) expected[i * D + j] = re[i * D + j] + sc[j] * br[i * D + j];
    EXPECT_LT(relative_difference(out, expected), 1e-6) << dtype_name(type);
    const Tensor grad = random_tensor({M, D}, 53, DType::f32), branch_grad = Tensor::empty({M, D}, type);
    const Tensor grad_scale = Tensor::zeros({D}), grad_bias = Tensor::zeros({D});
    be().layer_scale_backward(grad, branch, scale, branch_grad, &grad_scale, &grad_bias);
    const Doubles g = values(grad);
    Doubles e_branch(static_cast<size_t>(M * D)), e_scale(static_cast<size_t>(D), 0.0), e_bias(static_cast<size_t>(D));
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < D; ++j) {
        e_branch[i * D + j] = sc[j] * g[i * D + j];
        e_scale[j] += g[i * D + j] * br[i * D + j];
        e_bias[j] += sc[j] * g[i * D + j];
      }
    EXPECT_LT(relative_difference(branch_grad, e_branch), tolerance(type)) << dtype_name(type);
    EXPECT_LT(relative_difference(grad_scale, e_scale), 1e-5) << dtype_name(type);
    EXPECT_LT(relative_difference(grad_bias, e_bias), 1e-5) << dtype_name(type);
  }
}

TEST_P(KernelsAtLevel, SwigluForwardAndBackward) {
  auto silu = [](double z) { return z / (1.0 + std::exp(-z)); };
  for (DType type : {DType::f32, DType::bf16}) {
    const int64_t M = 29, H = 40;
    const Tensor in = random_tensor({M, 2 * H}, 54, type, 2.0), out = Tensor::empty({M, H}, type);
    be().swiglu_forward(in, out);
    const Doubles x = values(in);
    Doubles expected(static_cast<size_t>(M * H));
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < H; ++j) expected[i * H + j] = silu(x[i * 2 * H + j]) * x[i * 2 * H + H + j];
    EXPECT_LT(relative_difference(out, expected), tolerance(type)) << dtype_name(type);
    const Tensor grad_out = random_tensor({M, H}, 55, type), grad_in = Tensor::empty({M, 2 * H}, type);
    const Tensor grad_bias = Tensor::zeros({2 * H});
    be().swiglu_backward(grad_out, in, grad_in, &grad_bias);
    const Doubles go = values(grad_out);
    Doubles e_in(static_cast<size_t>(M * 2 * H)), e_bias(static_cast<size_t>(2 * H), 0.0);
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < H; ++j) {
        const double z = x[i * 2 * H + j], s = 1.0 / (1.0 + std::exp(-z)), g = go[i * H + j];
        const double d1 = g * x[i * 2 * H + H + j] * s * (1.0 + z * (1.0 - s)), d2 = g * silu(z);
        e_in[i * 2 * H + j] = d1;
        e_in[i * 2 * H + H + j] = d2;
        e_bias[j] += d1;
        e_bias[H + j] += d2;
      }
    EXPECT_LT(relative_difference(grad_in, e_in), tolerance(type)) << dtype_name(type);
    EXPECT_LT(relative_difference(grad_bias, e_bias), type == DType::f32 ? 1e-5 : 2e-2) << dtype_name(type);
  }
}

TEST_P(KernelsAtLevel, TokenGatherScatterAndPatchMean) {
  const int64_t B = 3, T = 9, D = 12, K = 2, skip = 3;
  const Tensor x = random_tensor({B, T, D}, 56, DType::f32);
  const Doubles xv = values(x);
  const Tensor tokens = Tensor::empty({K, B, D});
  be().gather_tokens(x, K, tokens);
  Doubles e_tokens(static_cast<size_t>(K * B * D));
  for (int64_t k = 0; k < K; ++k)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t j = 0; j < D; ++j) e_tokens[(k * B + b) * D + j] = xv[(b * T + k) * D + j];
  EXPECT_EQ(relative_difference(tokens, e_tokens), 0.0);
  const Tensor grad_x = random_tensor({B, T, D}, 57, DType::f32);  // overwritten everywhere
  be().scatter_tokens(tokens, grad_x);
  Doubles e_scatter(static_cast<size_t>(B * T * D), 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t j = 0; j < D; ++j) e_scatter[(b * T + k) * D + j] = xv[(b * T + k) * D + j];
  EXPECT_EQ(relative_difference(grad_x, e_scatter), 0.0);

  const Tensor features = Tensor::empty({B, 2 * D});
  be().cls_and_mean_forward(x, skip, features);
  Doubles e_features(static_cast<size_t>(B * 2 * D), 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = 0; j < D; ++j) {
      e_features[b * 2 * D + j] = xv[b * T * D + j];
      for (int64_t t = skip; t < T; ++t) e_features[b * 2 * D + D + j] += xv[(b * T + t) * D + j] / (T - skip);
    }
  EXPECT_LT(relative_difference(features, e_features), 1e-6);
  const Tensor grad_features = random_tensor({B, 2 * D}, 58, DType::f32);
  const Doubles gf = values(grad_features);
  be().cls_and_mean_backward(grad_features, skip, grad_x);
  Doubles e_grad(static_cast<size_t>(B * T * D), 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = 0; j < D; ++j) {
      e_grad[b * T * D + j] = gf[b * 2 * D + j];
      for (int64_t t = skip; t < T; ++t) e_grad[(b * T + t) * D + j] = gf[b * 2 * D + D + j] / (T - skip);
    }
  EXPECT_LT(relative_difference(grad_x, e_grad), 1e-6);
}

// LoRA on the middle columns of a wider output, as on the value block of the fused q|k|v projection.
TEST_P(KernelsAtLevel, LoraForwardAndBackward) {
  for (DType type : {DType::f32, DType::bf16}) {
    for (DType out_type : {DType::f32, type}) {
      const int64_t M = 23, K = 30, N = 20, R = 4, LD = 3 * N, C0 = N;
      const double scale = 2.5;
      const Tensor in = random_tensor({M, K}, 60, type), a = random_tensor({R, K}, 61, type, 0.3);
      const Tensor b = random_tensor({N, R}, 62, type, 0.3), low = Tensor::empty({M, R}, type);
      const Tensor out = random_tensor({M, LD}, 63, out_type);  // the base layer's output, added to
      const Doubles x = values(in), av = values(a), bv = values(b);
      Doubles expected = values(out), e_low(static_cast<size_t>(M * R), 0.0);
      for (int64_t i = 0; i < M; ++i)
        for (int64_t r = 0; r < R; ++r) {
          for (int64_t k = 0; k < K; ++k) e_low[i * R + r] += x[i * K + k] * av[r * K + k];
          e_low[i * R + r] *= scale;
        }
      be().lora_forward(in, a, b, scale, low, out, C0);
      EXPECT_LT(relative_difference(low, e_low), tolerance(type)) << dtype_name(type);
      const Doubles lo = values(low);  // the backward pass reads the stored (rounded) values
      for (int64_t i = 0; i < M; ++i)
        for (int64_t n = 0; n < N; ++n)
          for (int64_t r = 0; r < R; ++r) expected[i * LD + C0 + n] += lo[i * R + r] * bv[n * R + r];
      EXPECT_LT(relative_difference(out, expected), tolerance(out_type)) << dtype_name(type) << dtype_name(out_type);

      const Tensor grad_out = random_tensor({M, LD}, 64, type);
      const Tensor grad_in = random_tensor({M, K}, 65, out_type);  // added to (the base layer's input gradient)
      const Tensor grad_a = Tensor::zeros({R, K}), grad_b = Tensor::zeros({N, R});
      Doubles e_in = values(grad_in);  // before the kernel adds into it
      be().lora_backward(grad_out, C0, in, a, b, scale, low, &grad_in, &grad_a, &grad_b);
      const Doubles go = values(grad_out);
      Doubles e_a(static_cast<size_t>(R * K), 0.0), e_b(static_cast<size_t>(N * R), 0.0);
      Doubles t(static_cast<size_t>(M * R), 0.0);
      for (int64_t i = 0; i < M; ++i)
        for (int64_t r = 0; r < R; ++r) {
          for (int64_t n = 0; n < N; ++n) t[i * R + r] += go[i * LD + C0 + n] * bv[n * R + r];
          t[i * R + r] *= scale;
        }
      for (int64_t i = 0; i < M; ++i) {
        for (int64_t n = 0; n < N; ++n)
          for (int64_t r = 0; r < R; ++r) e_b[n * R + r] += go[i * LD + C0 + n] * lo[i * R + r];
        for (int64_t r = 0; r < R; ++r)
          for (int64_t k = 0; k < K; ++k) {
            e_a[r * K + k] += t[i * R + r] * x[i * K + k];
            e_in[i * K + k] += t[i * R + r] * av[r * K + k];
          }
      }
      const double tol = type == DType::f32 ? 1e-5 : 2e-2;  // bf16: t is rounded before its two products
      EXPECT_LT(relative_difference(grad_b, e_b), tolerance(type)) << dtype_name(type);
      EXPECT_LT(relative_difference(grad_a, e_a), tol) << dtype_name(type);
      EXPECT_LT(relative_difference(grad_in, e_in), tol) << dtype_name(type) << dtype_name(out_type);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Levels, KernelsAtLevel,
                         ::testing::Values(CpuLevel::avx2, CpuLevel::avx512, CpuLevel::avx512_bf16, CpuLevel::amx),
                         [](const ::testing::TestParamInfo<CpuLevel>& info) {
                           return std::string(cpu::cpu_level_name(info.param));
                         });

}  // namespace
