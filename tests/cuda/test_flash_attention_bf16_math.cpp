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

// ---- The kernels' own loads (flash_attention_bf16_math.h: load_a_fragment, stage_tile_rows,
// load_b_fragment_transposed, load_b_fragment, accumulator_pair_as_a), run on the host over bf16 bits in the packed
// layout the kernels read (qkv rows 3 H d apart, o and dO rows H d apart, the last head's slice), with an mma.sync
// m16n8k16 emulated from its definition over the fragment layouts. Each warp's S tile (Q K^T, padded rows and keys
// 0), then dQ's k-steps (the tile's accumulators re-packed as A, times K from the staged tile), and dV's (P^T times
// dO), must equal the plain products, for the first and the partial last tiles of T = 197, 261 (256 + 4 registers
// + the class token), 1370 (DINOv2 at 518 px) and 65, at every head dimension the kernels are built for.

uint16_t bits_of(float v) { return cuda::round_to_bf16(v); }
float value_of(uint16_t b) { return cuda::widen_bf16(b); }

// One m16n8k16 over a warp's registers: C += A B, each lane's four values where mma_c_element puts them.
void emulated_mma(float (&c)[32][4], const uint32_t (&a)[32][4], const uint32_t (&b)[32][2]) {
  double A[16][16] = {}, B[16][8] = {};
  for (int lane = 0; lane < 32; ++lane) {
    for (int i = 0; i < 8; ++i) {
      const cuda::FragmentElement e = cuda::mma_a_element(lane, i);
      A[e.row][e.col] = value_of(static_cast<uint16_t>(a[lane][i / 2] >> (16 * (i % 2))));
    }
    for (int i = 0; i < 4; ++i) {
      const cuda::FragmentElement e = cuda::mma_b_element(lane, i);
      B[e.row][e.col] = value_of(static_cast<uint16_t>(b[lane][i / 2] >> (16 * (i % 2))));
    }
  }
  for (int lane = 0; lane < 32; ++lane) {
    for (int i = 0; i < 4; ++i) {
      const cuda::FragmentElement e = cuda::mma_c_element(lane, i);
      double sum = 0.0;
      for (int k = 0; k < 16; ++k) sum += A[e.row][k] * B[k][e.col];
      c[lane][i] += static_cast<float>(sum);
    }
  }
}

template <int D>
void check_kernel_loads(int64_t T) {
  constexpr int64_t H = 3, h = H - 1, kTile = cuda::kFlashBf16Tile;
  constexpr int kSteps = D / cuda::kMmaK, kTilesN = kTile / cuda::kMmaN;
  const int64_t ld = 3 * H * D, ld_o = H * D;
  std::vector<uint16_t> qkv(static_cast<size_t>(T * ld)), grad_out(static_cast<size_t>(T * ld_o));
  const std::vector<float> r1 = bf16_values(T * ld, 31 + D, 1.0), r2 = bf16_values(T * ld_o, 37 + D, 1.0);
  for (size_t i = 0; i < qkv.size(); ++i) qkv[i] = bits_of(r1[i]);
  for (size_t i = 0; i < grad_out.size(); ++i) grad_out[i] = bits_of(r2[i]);
  const uint16_t* q = qkv.data() + h * D;
  const uint16_t* k = q + H * D;
  const uint16_t* d_o = grad_out.data() + h * D;
  const auto at = [](const uint16_t* m, int64_t row, int64_t rows, int64_t stride, int64_t e) {
    return row < rows ? double{value_of(m[row * stride + e])} : 0.0;
  };
  const int64_t blocks = (T + cuda::kFlashBf16Rows - 1) / cuda::kFlashBf16Rows, tiles = (T + kTile - 1) / kTile;
  for (const int64_t block : {int64_t{0}, blocks - 1}) {
    for (const int64_t tile : {int64_t{0}, tiles - 1}) {
      const int64_t j0 = tile * kTile;
      // The block's 128 threads stage the tiles (K for S and dQ; dO for dV, as the dK/dV kernel does).
      alignas(16) uint16_t keys[kTile][D + cuda::kFlashBf16SharedPad], grads[kTile][D + cuda::kFlashBf16SharedPad];
      for (unsigned thread = 0; thread < 128; ++thread) {
        ASSERT_NO_THROW(cuda::stage_tile_rows<D>(keys, k, ld, j0, T, thread, 128));
        ASSERT_NO_THROW(cuda::stage_tile_rows<D>(grads, d_o, ld_o, j0, T, thread, 128));
      }
      for (int warp = 0; warp < cuda::kFlashBf16Warps; ++warp) {
        const int64_t r0 = block * cuda::kFlashBf16Rows + warp * cuda::kMmaM;
        const std::string where = "T " + std::to_string(T) + " d " + std::to_string(D) + " rows from " +
                                  std::to_string(r0) + " keys from " + std::to_string(j0);
        // S = Q K^T: A fragments of Q's rows, B fragments of the staged K^T.
        uint32_t a[kSteps][32][4];
        for (int s = 0; s < kSteps; ++s) {
          for (int lane = 0; lane < 32; ++lane) cuda::load_a_fragment(a[s][lane], q, ld, r0, T, s * cuda::kMmaK, lane);
        }
        float scores[kTilesN][32][4] = {};
        for (int n = 0; n < kTilesN; ++n) {
          for (int s = 0; s < kSteps; ++s) {
            uint32_t b[32][2];
            for (int lane = 0; lane < 32; ++lane) {
              cuda::load_b_fragment_transposed(b[lane][0], b[lane][1], keys, n * cuda::kMmaN, s * cuda::kMmaK, lane);
            }
            emulated_mma(scores[n], a[s], b);
          }
        }
        for (int n = 0; n < kTilesN; ++n) {
          for (int lane = 0; lane < 32; ++lane) {
            for (int i = 0; i < 4; ++i) {
              const cuda::FragmentElement c = cuda::mma_c_element(lane, i);
              const int64_t row = r0 + c.row, key = j0 + n * cuda::kMmaN + c.col;
              float plain = 0.0f;  // k-steps of 16 added in fp32, as the accumulator takes them
              for (int s = 0; s < kSteps; ++s) {
                double step = 0.0;
                for (int e = 16 * s; e < 16 * s + 16; ++e) step += at(q, row, T, ld, e) * at(k, key, T, ld, e);
                plain += static_cast<float>(step);
              }
              ASSERT_EQ(scores[n][lane][i], plain) << where << " S(" << row << ", " << key << ")";
            }
          }
        }
        // dQ's k-steps: the accumulators (the scores stand in for dS) re-packed as A, times K's staged rows; and
        // dV's: the same as P^T times dO's staged rows. A 16-key slice of the tile each. `dense`: the warp's tile as
        // the lanes hold it, rounded to bf16 as the kernels round P and dS.
        double dense[cuda::kMmaM][kTile] = {};
        for (int n = 0; n < kTilesN; ++n) {
          for (int lane = 0; lane < 32; ++lane) {
            for (int i = 0; i < 4; ++i) {
              const cuda::FragmentElement c = cuda::mma_c_element(lane, i);
              dense[c.row][n * cuda::kMmaN + c.col] = value_of(bits_of(scores[n][lane][i]));
            }
          }
        }
        for (int ks = 0; ks < kTile / cuda::kMmaK; ++ks) {
          uint32_t a_ds[32][4];
          for (int lane = 0; lane < 32; ++lane) {
            float acc[kTilesN][4];
            for (int n = 0; n < kTilesN; ++n)
              for (int i = 0; i < 4; ++i) acc[n][i] = scores[n][lane][i];
            for (int r = 0; r < 4; ++r) {
              float lo = 0.0f, hi = 0.0f;
              cuda::accumulator_pair_as_a(acc, ks, r, &lo, &hi);
              a_ds[lane][r] = static_cast<uint32_t>(bits_of(lo)) | (static_cast<uint32_t>(bits_of(hi)) << 16);
            }
          }
          for (int n = 0; n < D / cuda::kMmaN; ++n) {
            for (int which = 0; which < 2; ++which) {
              const auto& tile_rows = which == 0 ? keys : grads;
              const uint16_t* source = which == 0 ? k : d_o;
              const int64_t stride = which == 0 ? ld : ld_o;
              uint32_t b[32][2];
              for (int lane = 0; lane < 32; ++lane) {
                cuda::load_b_fragment(b[lane][0], b[lane][1], tile_rows, ks * cuda::kMmaK, n * cuda::kMmaN, lane);
              }
              float out[32][4] = {};
              emulated_mma(out, a_ds, b);
              for (int lane = 0; lane < 32; ++lane) {
                for (int i = 0; i < 4; ++i) {
                  const cuda::FragmentElement c = cuda::mma_c_element(lane, i);
                  const int64_t feature = n * cuda::kMmaN + c.col;
                  double plain = 0.0;
                  for (int kk = 0; kk < cuda::kMmaK; ++kk) {
                    const int key_in_tile = ks * cuda::kMmaK + kk;
                    plain += dense[c.row][key_in_tile] * at(source, j0 + key_in_tile, T, stride, feature);
                  }
                  ASSERT_EQ(out[lane][i], static_cast<float>(plain))
                      << where << (which == 0 ? " dQ" : " dV") << " k-step " << ks << " (" << c.row << ", " << feature
                      << ")";
                }
              }
            }
          }
        }
      }
    }
  }
}

TEST(FlashAttentionBf16Math, KernelLoadsGiveTheTilesProductsAtRealLayouts) {
  for (const int64_t T : {197, 261, 1370, 65}) {
    check_kernel_loads<16>(T);
    check_kernel_loads<32>(T);
    check_kernel_loads<64>(T);
  }
}

// A 16-byte tile load off 16-byte alignment (a head slice starting 8 bytes in) is refused on the host, as the device's
// 128-bit load would fault.
TEST(FlashAttentionBf16Math, TileStagingNeedsSixteenByteAlignment) {
  alignas(16) uint16_t rows[4 * 32] = {};
  alignas(16) uint16_t tile[cuda::kFlashBf16Tile][16 + cuda::kFlashBf16SharedPad];
  EXPECT_NO_THROW(cuda::stage_tile_rows<16>(tile, rows, 32, 0, 4, 0, 1));
  EXPECT_THROW(cuda::stage_tile_rows<16>(tile, rows + 4, 32, 0, 4, 0, 1), std::logic_error);
}

TEST(FlashAttentionBf16Math, HeadDimensionsTheKernelsAreBuiltFor) {
  for (int64_t d : {16, 32, 64}) EXPECT_TRUE(cuda::flash_bf16_head_dim_supported(d)) << d;
  for (int64_t d : {8, 24, 48, 80, 128}) EXPECT_FALSE(cuda::flash_bf16_head_dim_supported(d)) << d;
}

}  // namespace
