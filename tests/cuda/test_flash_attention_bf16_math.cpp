// The bf16 tensor-core flash-attention backward (kernels/flash_attention_backward_bf16.cu) on the CPU: the host model
// of its two kernels (flash_attention_bf16_math.h: the same tiles of 64, k-steps of 16, fp32 accumulation, P and dS
// rounded to bf16 as the second matmuls' operands) against a float64 reference written from the formulas and against
// the CPU Backend's bf16 attention backward, at bf16's tolerance, including ViT-B/16's real shape (T = 197, 12 heads
// of 64) and token counts that leave partial tiles. The kernel itself has not run on a GPU; PyTorch's SDPA backward
// holds the same model in tests/cuda/check_flash_bf16_torch.py.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/kernels/flash_attention_bf16_math.h"
#include "call_test_support.h"

using namespace vitpipe;
using call_tests::kBf16Tolerance;
using call_tests::random_tensor;
using call_tests::relative_difference;

namespace {

// One head in float64 from bf16 values: lse, O (then rounded to bf16, as the forward stores it) and, from that O,
// dQ, dK, dV.
struct HeadReference {
  std::vector<float> lse, o;
  std::vector<double> dq, dk, dv, row_dot;
};

HeadReference float64_head(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
                           const std::vector<float>& d_o, int64_t T, int64_t d) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  HeadReference r{
      std::vector<float>(static_cast<size_t>(T)),           std::vector<float>(static_cast<size_t>(T * d)),
      std::vector<double>(static_cast<size_t>(T * d), 0.0), std::vector<double>(static_cast<size_t>(T * d), 0.0),
      std::vector<double>(static_cast<size_t>(T * d), 0.0), std::vector<double>(static_cast<size_t>(T))};
  std::vector<double> p(static_cast<size_t>(T * T));
  for (int64_t i = 0; i < T; ++i) {
    double max = -INFINITY;
    for (int64_t j = 0; j < T; ++j) {
      double s = 0;
      for (int64_t e = 0; e < d; ++e) s += double{q[i * d + e]} * k[j * d + e];
      p[i * T + j] = s * scale;
      max = std::max(max, p[i * T + j]);
    }
    double sum = 0;
    for (int64_t j = 0; j < T; ++j) sum += std::exp(p[i * T + j] - max);
    const double lse = max + std::log(sum);
    r.lse[i] = static_cast<float>(lse);
    for (int64_t j = 0; j < T; ++j) p[i * T + j] = std::exp(p[i * T + j] - lse);
    for (int64_t e = 0; e < d; ++e) {
      double o = 0;
      for (int64_t j = 0; j < T; ++j) o += p[i * T + j] * v[j * d + e];
      r.o[i * d + e] = bf16_to_float(float_to_bf16(static_cast<float>(o)));
    }
  }
  for (int64_t i = 0; i < T; ++i) {
    double row_dot = 0;
    for (int64_t e = 0; e < d; ++e) row_dot += double{d_o[i * d + e]} * r.o[i * d + e];
    r.row_dot[i] = row_dot;
    for (int64_t j = 0; j < T; ++j) {
      double dp = 0;
      for (int64_t e = 0; e < d; ++e) dp += double{d_o[i * d + e]} * v[j * d + e];
      const double pij = p[i * T + j], ds = pij * (dp - row_dot) * scale;
      for (int64_t e = 0; e < d; ++e) {
        r.dq[i * d + e] += ds * k[j * d + e];
        r.dk[j * d + e] += ds * q[i * d + e];
        r.dv[j * d + e] += pij * d_o[i * d + e];
      }
    }
  }
  return r;
}

// max |a - e| / max(1e-3, max |e|).
double relative_to(const std::vector<float>& actual, const std::vector<double>& expected) {
  double diff = 0.0, scale = 1e-3;
  for (size_t i = 0; i < expected.size(); ++i) {
    diff = std::max(diff, std::abs(actual[i] - expected[i]));
    scale = std::max(scale, std::abs(expected[i]));
  }
  return diff / scale;
}

std::vector<float> bf16_values(int64_t n, uint64_t seed, double scale) {
  const Tensor t = random_tensor({n}, DType::bf16, seed, scale).to(DType::f32);
  return std::vector<float>(t.f32(), t.f32() + n);
}

struct HeadCase {
  int64_t tokens, head_dim;
};

// Token counts below one tile, at whole tiles, one past them and ViT-B/16's 197; every head dimension instantiated.
TEST(FlashAttentionBf16Math, HostModelMatchesFloat64) {
  for (const HeadCase c :
       {HeadCase{17, 16}, HeadCase{64, 32}, HeadCase{65, 64}, HeadCase{130, 32}, HeadCase{197, 64}}) {
    SCOPED_TRACE("T=" + std::to_string(c.tokens) + " d=" + std::to_string(c.head_dim));
    const int64_t T = c.tokens, d = c.head_dim, n = T * d;
    const std::vector<float> q = bf16_values(n, 1, 1.0), k = bf16_values(n, 2, 1.0), v = bf16_values(n, 3, 1.0);
    const std::vector<float> d_o = bf16_values(n, 4, 1.0);
    const HeadReference r = float64_head(q, k, v, d_o, T, d);
    std::vector<float> row_dot(static_cast<size_t>(T)), dq(static_cast<size_t>(n)), dk(dq.size()), dv(dq.size());
    cuda::flash_backward_head_bf16(q.data(), k.data(), v.data(), r.o.data(), d_o.data(), r.lse.data(), T, d, d, d,
                                   1.0f / std::sqrt(static_cast<float>(d)), row_dot.data(), dq.data(), dk.data(),
                                   dv.data());
    EXPECT_LT(relative_to(row_dot, r.row_dot), 1e-5);
    EXPECT_LT(relative_to(dq, r.dq), kBf16Tolerance);
    EXPECT_LT(relative_to(dk, r.dk), kBf16Tolerance);
    EXPECT_LT(relative_to(dv, r.dv), kBf16Tolerance);
    // Not the fp32 path by accident: P and dS rounded to bf16 leave a trace well above fp32's rounding.
    EXPECT_GT(relative_to(dv, r.dv), 1e-5);
  }
}

// The packed layout at ViT-B/16's shape (batch 1, 197 tokens, 12 heads of 64) through the model, as the fakes' launcher
// calls it, against the CPU Backend's bf16 attention backward.
TEST(FlashAttentionBf16Math, HostModelMatchesTheCpuBackendAtVitB16) {
  auto cpu = make_cpu_backend();
  const int64_t B = 1, T = 197, H = 12, d = 64, D = H * d;
  const Tensor qkv = random_tensor({B, T, 3 * D}, DType::bf16, 7, 0.8);
  const Tensor grad_out = random_tensor({B, T, D}, DType::bf16, 8);
  const Tensor out = Tensor::empty({B, T, D}, DType::bf16), lse = Tensor::empty({B, H, T});
  cpu->attention_forward(qkv, H, lse, out);
  const Tensor expected = Tensor::empty(qkv.shape(), DType::bf16);
  cpu->attention_backward(grad_out, qkv, out, lse, H, expected, nullptr);

  const Tensor x = qkv.to(DType::f32), o = out.to(DType::f32), g = grad_out.to(DType::f32);
  const Tensor actual = Tensor::zeros(qkv.shape());
  std::vector<float> row_dot(static_cast<size_t>(T)), dq(static_cast<size_t>(T * d)), dk(dq.size()), dv(dq.size());
  for (int64_t h = 0; h < H; ++h) {
    const float* q = x.f32() + h * d;
    cuda::flash_backward_head_bf16(q, q + D, q + 2 * D, o.f32() + h * d, g.f32() + h * d, lse.f32() + h * T, T, d,
                                   3 * D, D, 1.0f / std::sqrt(static_cast<float>(d)), row_dot.data(), dq.data(),
                                   dk.data(), dv.data());
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t e = 0; e < d; ++e) {
        float* row = actual.f32() + t * 3 * D + h * d + e;
        row[0] = dq[t * d + e], row[D] = dk[t * d + e], row[2 * D] = dv[t * d + e];
      }
    }
  }
  EXPECT_LT(relative_difference(actual, expected), kBf16Tolerance);
}

// 65 tokens leave one key and one query alone in the second tile, beside 63 padded rows: their gradients are finite
// and right, and the padding adds nothing to the others.
TEST(FlashAttentionBf16Math, APartialLastTileKeepsItsOneRow) {
  const int64_t T = 65, d = 16, n = T * d;
  const std::vector<float> q = bf16_values(n, 11, 1.0), k = bf16_values(n, 12, 1.0), v = bf16_values(n, 13, 1.0);
  const std::vector<float> d_o = bf16_values(n, 14, 1.0);
  const HeadReference r = float64_head(q, k, v, d_o, T, d);
  std::vector<float> row_dot(static_cast<size_t>(T)), dq(static_cast<size_t>(n)), dk(dq.size()), dv(dq.size());
  cuda::flash_backward_head_bf16(q.data(), k.data(), v.data(), r.o.data(), d_o.data(), r.lse.data(), T, d, d, d, 0.25f,
                                 row_dot.data(), dq.data(), dk.data(), dv.data());
  double scale_v = 1e-3, scale_k = 1e-3;
  for (int64_t x = 0; x < n; ++x)
    scale_v = std::max(scale_v, std::abs(r.dv[x])), scale_k = std::max(scale_k, std::abs(r.dk[x]));
  for (int64_t e = 0; e < d; ++e) {
    const int64_t last = (T - 1) * d + e;
    EXPECT_TRUE(std::isfinite(dk[last]) && std::isfinite(dq[last]) && std::isfinite(dv[last]));
    EXPECT_LT(std::abs(dv[last] - r.dv[last]) / scale_v, kBf16Tolerance) << e;
    EXPECT_LT(std::abs(dk[last] - r.dk[last]) / scale_k, kBf16Tolerance) << e;
  }
  EXPECT_LT(relative_to(dq, r.dq), kBf16Tolerance);
  EXPECT_LT(relative_to(dk, r.dk), kBf16Tolerance);
}

// The fragment layouts the kernels load and store through (mma.sync m16n8k16, PTX ISA): every element of A (16 x 16),
// B (16 x 8) and C (16 x 8) is held by exactly one (lane, value); two values of a register are neighbours in a row of
// A and C (one 32-bit load or store) and in a column of B (a gather of two rows).
TEST(FlashAttentionBf16Math, FragmentLayoutsHoldEachElementOnce) {
  const auto check = [](const char* name, int rows, int cols, int values, auto element) {
    std::vector<int> held(static_cast<size_t>(rows * cols), 0);
    for (int lane = 0; lane < 32; ++lane) {
      for (int i = 0; i < values; ++i) {
        const cuda::FragmentElement e = element(lane, i);
        ASSERT_TRUE(e.row >= 0 && e.row < rows && e.col >= 0 && e.col < cols) << name << " lane " << lane << " " << i;
        ++held[static_cast<size_t>(e.row * cols + e.col)];
      }
    }
    for (int x = 0; x < rows * cols; ++x) EXPECT_EQ(held[static_cast<size_t>(x)], 1) << name << " element " << x;
  };
  check("A", 16, 16, 8, cuda::mma_a_element);
  check("B", 16, 8, 4, cuda::mma_b_element);
  check("C", 16, 8, 4, cuda::mma_c_element);
  for (int lane = 0; lane < 32; ++lane) {
    for (int i = 0; i < 8; i += 2) {
      const cuda::FragmentElement a0 = cuda::mma_a_element(lane, i), a1 = cuda::mma_a_element(lane, i + 1);
      EXPECT_TRUE(a1.row == a0.row && a1.col == a0.col + 1 && a0.col % 2 == 0) << "A register of lane " << lane;
    }
    for (int i = 0; i < 4; i += 2) {
      const cuda::FragmentElement b0 = cuda::mma_b_element(lane, i), b1 = cuda::mma_b_element(lane, i + 1);
      EXPECT_TRUE(b1.col == b0.col && b1.row == b0.row + 1 && b0.row % 2 == 0) << "B register of lane " << lane;
      const cuda::FragmentElement c0 = cuda::mma_c_element(lane, i), c1 = cuda::mma_c_element(lane, i + 1);
      EXPECT_TRUE(c1.row == c0.row && c1.col == c0.col + 1 && c0.col % 2 == 0) << "C pair of lane " << lane;
    }
  }
}

// P and dS go from accumulators (two C tiles of 8 columns) straight into the next matmul's A fragment without leaving
// the lane: A value i must be the same (row, column) as the C value it is taken from.
TEST(FlashAttentionBf16Math, AccumulatorsRepackAsTheNextMatmulsA) {
  for (int lane = 0; lane < 32; ++lane) {
    for (int i = 0; i < 8; ++i) {
      const cuda::FragmentElement a = cuda::mma_a_element(lane, i);
      const cuda::FragmentElement c = cuda::mma_c_element(lane, cuda::a_value_source_value(i));
      EXPECT_EQ(c.row, a.row) << "lane " << lane << " value " << i;
      EXPECT_EQ(cuda::a_value_source_tile(i) * cuda::kMmaN + c.col, a.col) << "lane " << lane << " value " << i;
    }
  }
}

// One warp's S = Q K^T tile as the kernels compute it: A from Q's rows and B from K's rows in shared memory through
// the fragment layouts (load_a, load_b_transposed), each C value the sum over k of A(row, k) B(k, col) that the lane
// finds in its own and its quad's fragments, against the plain product.
TEST(FlashAttentionBf16Math, FragmentsOfQAndKGiveTheScoreTile) {
  const int d = 32, keys = 8;
  const std::vector<float> q = bf16_values(16 * d, 21, 1.0), k = bf16_values(keys * d, 22, 1.0);
  // What each lane holds, as the kernel loads it: A value i of k-step s is Q[row][16 s + col]; B value i of k-step s
  // is K[n][16 s + k] (load_b_transposed: element (k, n) = rows[n][k0 + k]).
  std::vector<std::vector<float>> a(32, std::vector<float>(static_cast<size_t>(d / 16 * 8)));
  std::vector<std::vector<float>> b(32, std::vector<float>(static_cast<size_t>(d / 16 * 4)));
  for (int lane = 0; lane < 32; ++lane) {
    for (int s = 0; s < d / 16; ++s) {
      for (int i = 0; i < 8; ++i) {
        const cuda::FragmentElement e = cuda::mma_a_element(lane, i);
        a[lane][static_cast<size_t>(s * 8 + i)] = q[static_cast<size_t>(e.row * d + 16 * s + e.col)];
      }
      for (int i = 0; i < 4; ++i) {
        const cuda::FragmentElement e = cuda::mma_b_element(lane, i);
        b[lane][static_cast<size_t>(s * 4 + i)] = k[static_cast<size_t>(e.col * d + 16 * s + e.row)];
      }
    }
  }
  // The mma's definition over fragments: D(row, col) = sum_k A(row, k) B(k, col), A and B gathered from whichever
  // lanes hold them.
  const auto a_at = [&](int row, int kk) {
    for (int lane = 0; lane < 32; ++lane) {
      for (int i = 0; i < 8; ++i) {
        const cuda::FragmentElement e = cuda::mma_a_element(lane, i);
        if (e.row == row && e.col == kk % 16) return a[lane][static_cast<size_t>(kk / 16 * 8 + i)];
      }
    }
    return NAN;
  };
  const auto b_at = [&](int kk, int col) {
    for (int lane = 0; lane < 32; ++lane) {
      for (int i = 0; i < 4; ++i) {
        const cuda::FragmentElement e = cuda::mma_b_element(lane, i);
        if (e.row == kk % 16 && e.col == col) return b[lane][static_cast<size_t>(kk / 16 * 4 + i)];
      }
    }
    return NAN;
  };
  for (int lane = 0; lane < 32; ++lane) {
    for (int i = 0; i < 4; ++i) {
      const cuda::FragmentElement c = cuda::mma_c_element(lane, i);
      double fragments = 0.0, plain = 0.0;
      for (int kk = 0; kk < d; ++kk) {
        fragments += double{a_at(c.row, kk)} * b_at(kk, c.col);
        plain += double{q[static_cast<size_t>(c.row * d + kk)]} * k[static_cast<size_t>(c.col * d + kk)];
      }
      EXPECT_DOUBLE_EQ(fragments, plain) << "lane " << lane << " value " << i;
    }
  }
}

TEST(FlashAttentionBf16Math, HeadDimensionsTheKernelsAreBuiltFor) {
  for (int64_t d : {16, 32, 64}) EXPECT_TRUE(cuda::flash_bf16_head_dim_supported(d)) << d;
  for (int64_t d : {8, 24, 48, 80, 128}) EXPECT_FALSE(cuda::flash_bf16_head_dim_supported(d)) << d;
}

}  // namespace
