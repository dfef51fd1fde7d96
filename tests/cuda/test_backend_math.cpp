// The CUDA Backend kernels' arithmetic (backend/cuda/kernels/backend_math.h, __host__ __device__), run on the CPU in
// the kernels' order (column sums in the kernels' chunks of kColumnChunkRows rows, loss sums in index order) and
// held to the CPU backend: f32 within 1e-5 relative, bf16 rounding bit for bit, the losses' sums to 1e-12.
// The shapes include row counts past one chunk and not a multiple of it, so the two-pass decomposition is exercised.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/kernels/backend_math.h"
#include "backend/cuda/kernels/layernorm_math.h"
#include "util/random.h"

using namespace vitpipe;
using namespace vitpipe::cuda;

namespace {

constexpr double kF32Tolerance = 1e-5;

Tensor random_tensor(const Shape& shape, Rng& rng, double scale = 1.0) {
  Tensor t = Tensor::empty(shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = static_cast<float>(scale * rng.normal());
  return t;
}

// max |a - b| / max(1e-3, max |b|) over the elements.
double relative_difference(const float* actual, const float* expected, int64_t count) {
  double diff = 0.0, scale = 1e-3;
  for (int64_t i = 0; i < count; ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(actual[i]) - expected[i]));
    scale = std::max(scale, std::abs(static_cast<double>(expected[i])));
  }
  return diff / scale;
}

double relative_difference(const std::vector<float>& actual, const Tensor& expected) {
  EXPECT_EQ(static_cast<int64_t>(actual.size()), expected.numel());
  return relative_difference(actual.data(), expected.f32(), expected.numel());
}

// Column sums as the kernels' two passes compute them, added into `out`.
template <class Value>
void two_pass(const Value& value, int64_t rows, int64_t cols, std::vector<float>& out) {
  std::vector<float> partials(static_cast<size_t>(std::max<int64_t>(column_chunks(rows) * cols, 1)));
  column_sums_two_pass(value, rows, cols, partials.data(), out.data());
}

std::vector<float> copy_of(const Tensor& t) { return std::vector<float>(t.f32(), t.f32() + t.numel()); }

const int64_t kRowCounts[] = {1, 127, 128, 129, 300};

}  // namespace

TEST(CudaBackendMath, Bf16RoundingEqualsTheHosts) {
  Rng rng(3);
  for (int i = 0; i < 200000; ++i) {
    const uint32_t bits = static_cast<uint32_t>(rng.next_u64());
    float v;
    std::memcpy(&v, &bits, sizeof v);
    ASSERT_EQ(round_to_bf16(v), float_to_bf16(v)) << bits;
    ASSERT_EQ(float_bits(widen_bf16(static_cast<uint16_t>(bits))),
              float_bits(bf16_to_float(static_cast<uint16_t>(bits))));
  }
  for (float v : {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1.0f + 1.0f / 256.0f, 1.0f + 3.0f / 256.0f}) {
    EXPECT_EQ(round_to_bf16(v), float_to_bf16(v)) << v;
  }
}

TEST(CudaBackendMath, ColumnChunksCoverEveryRowOnce) {
  for (int64_t rows : {0, 1, 127, 128, 129, 1000}) {
    const int64_t chunks = column_chunks(rows);
    EXPECT_GE(chunks * kColumnChunkRows, rows);
    EXPECT_LT((chunks - 1) * kColumnChunkRows, std::max<int64_t>(rows, 1));
    // Every row counted once: the sum of ones is the row count.
    std::vector<float> out(1, 0.0f);
    two_pass([](int64_t, int64_t) { return 1.0f; }, rows, 1, out);
    EXPECT_EQ(out[0], static_cast<float>(rows));
  }
}

TEST(CudaBackendMath, BiasBackwardColumnSumsMatchTheCpuBackend) {
  auto cpu = make_cpu_backend();
  Rng rng(7);
  for (int64_t rows : kRowCounts) {
    const int64_t cols = 40;
    const Tensor grad = random_tensor({rows, cols}, rng);
    Tensor expected = random_tensor({cols}, rng);
    std::vector<float> actual = copy_of(expected);  // both add into the same start
    cpu->bias_backward(grad, expected);
    two_pass([&](int64_t r, int64_t c) { return load_value(grad.f32(), r * cols + c); }, rows, cols, actual);
    EXPECT_LT(relative_difference(actual, expected), kF32Tolerance) << rows;
    // bf16 gradient: the kernel widens each element as it loads it.
    const Tensor g16 = grad.to(DType::bf16);
    Tensor expected16 = Tensor::zeros({cols});
    std::vector<float> actual16(static_cast<size_t>(cols), 0.0f);
    cpu->bias_backward(g16, expected16);
    two_pass([&](int64_t r, int64_t c) { return load_value(g16.u16(), r * cols + c); }, rows, cols, actual16);
    EXPECT_LT(relative_difference(actual16, expected16), kF32Tolerance) << rows;
  }
}

TEST(CudaBackendMath, GeluBackwardWithBiasMatchesTheCpuBackend) {
  auto cpu = make_cpu_backend();
  Rng rng(8);
  for (int64_t rows : kRowCounts) {
    const int64_t cols = 24;
    const Tensor g = random_tensor({rows, cols}, rng), x = random_tensor({rows, cols}, rng, 2.0);
    Tensor grad_in = Tensor::empty({rows, cols}), grad_bias = Tensor::zeros({cols});
    cpu->gelu_backward(g, x, grad_in, &grad_bias);
    std::vector<float> gi(static_cast<size_t>(rows * cols)), gb(static_cast<size_t>(cols), 0.0f);
    for (int64_t i = 0; i < rows * cols; ++i) gi[i] = g.f32()[i] * gelu_derivative(x.f32()[i]);
    two_pass([&](int64_t r, int64_t c) { return g.f32()[r * cols + c] * gelu_derivative(x.f32()[r * cols + c]); }, rows,
             cols, gb);
    EXPECT_LT(relative_difference(gi, grad_in), kF32Tolerance) << rows;
    EXPECT_LT(relative_difference(gb, grad_bias), kF32Tolerance) << rows;
  }
}

TEST(CudaBackendMath, LayerNormBackwardWithEveryOptionMatchesTheCpuBackend) {
  auto cpu = make_cpu_backend();
  Rng rng(9);
  for (int64_t rows : kRowCounts) {
    const int64_t d = 48;
    const float eps = 1e-6f;
    const Tensor x = random_tensor({rows, d}, rng, 2.0), w = random_tensor({d}, rng), b = random_tensor({d}, rng);
    Tensor out = Tensor::empty({rows, d}), mean = Tensor::empty({rows}), rstd = Tensor::empty({rows});
    cpu->layernorm_forward(x, w, b, eps, out, mean, rstd);
    LayerNormBackwardArgs a;
    a.grad_out = random_tensor({rows, d}, rng);
    a.in = x;
    a.weight = w;
    a.mean = mean;
    a.rstd = rstd;
    a.grad_in = Tensor::empty({rows, d});
    a.grad_residual = random_tensor({rows, d}, rng);
    a.grad_weight = random_tensor({d}, rng);
    a.grad_bias = random_tensor({d}, rng);
    a.grad_in_copy = Tensor::empty({rows, d}, DType::bf16);
    a.grad_in_colsum = random_tensor({d}, rng);
    std::vector<float> gw = copy_of(a.grad_weight), gb = copy_of(a.grad_bias), gc = copy_of(a.grad_in_colsum);
    const Tensor residual = a.grad_residual.clone();
    cpu->layernorm_backward(a);

    // The kernel's rows (warp-order sums, as layernorm_math.h models them), then its three column sums.
    std::vector<float> gi(static_cast<size_t>(rows * d));
    std::vector<uint16_t> copy(static_cast<size_t>(rows * d));
    for (int64_t r = 0; r < rows; ++r) {
      const RowStatistics s{mean.f32()[r], rstd.f32()[r]};
      layernorm_backward_row(a.grad_out.f32() + r * d, x.f32() + r * d, w.f32(), s, d, gi.data() + r * d);
      for (int64_t j = 0; j < d; ++j) {
        gi[r * d + j] += residual.f32()[r * d + j];
        copy[r * d + j] = round_to_bf16(gi[r * d + j]);
      }
    }
    const float* g = a.grad_out.f32();
    two_pass(
        [&](int64_t r, int64_t c) {
          return layernorm_weight_gradient_term(g[r * d + c], x.f32()[r * d + c], mean.f32()[r], rstd.f32()[r]);
        },
        rows, d, gw);
    two_pass([&](int64_t r, int64_t c) { return g[r * d + c]; }, rows, d, gb);
    two_pass([&](int64_t r, int64_t c) { return gi[r * d + c]; }, rows, d, gc);
    EXPECT_LT(relative_difference(gi, a.grad_in), kF32Tolerance) << rows;
    EXPECT_LT(relative_difference(gw, a.grad_weight), kF32Tolerance) << rows;
    EXPECT_LT(relative_difference(gb, a.grad_bias), kF32Tolerance) << rows;
    EXPECT_LT(relative_difference(gc, a.grad_in_colsum), kF32Tolerance) << rows;
    // The bf16 copy: each element within one bf16 rounding of the CPU's (whose f32 value may differ in the last bits).
    for (int64_t i = 0; i < rows * d; ++i) {
      const float ours = widen_bf16(copy[i]), theirs = bf16_to_float(a.grad_in_copy.u16()[i]);
      ASSERT_LE(std::abs(ours - theirs), std::abs(theirs) * (1.0f / 128.0f) + 1e-6f) << i;
    }
  }
}

TEST(CudaBackendMath, SwigluMatchesTheCpuBackend) {
  auto cpu = make_cpu_backend();
  Rng rng(10);
  for (int64_t rows : kRowCounts) {
    const int64_t h = 20;
    const Tensor in = random_tensor({rows, 2 * h}, rng, 2.0), g = random_tensor({rows, h}, rng);
    Tensor out = Tensor::empty({rows, h}), grad_in = Tensor::empty({rows, 2 * h}), grad_bias = Tensor::zeros({2 * h});
    cpu->swiglu_forward(in, out);
    cpu->swiglu_backward(g, in, grad_in, &grad_bias);
    std::vector<float> o(static_cast<size_t>(rows * h)), gi(static_cast<size_t>(rows * 2 * h));
    std::vector<float> gb(static_cast<size_t>(2 * h), 0.0f);
    const float* x = in.f32();
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < h; ++j) {
        o[r * h + j] = swiglu_value(x[r * 2 * h + j], x[r * 2 * h + h + j]);
        swiglu_gradients(g.f32()[r * h + j], x[r * 2 * h + j], x[r * 2 * h + h + j], &gi[r * 2 * h + j],
                         &gi[r * 2 * h + h + j]);
      }
    }
    two_pass(
        [&](int64_t r, int64_t c) {
          const int64_t j = c < h ? c : c - h;
          float d1, d2;
          swiglu_gradients(g.f32()[r * h + j], x[r * 2 * h + j], x[r * 2 * h + h + j], &d1, &d2);
          return c < h ? d1 : d2;
        },
        rows, 2 * h, gb);
    EXPECT_LT(relative_difference(o, out), kF32Tolerance) << rows;
    EXPECT_LT(relative_difference(gi, grad_in), kF32Tolerance) << rows;
    EXPECT_LT(relative_difference(gb, grad_bias), kF32Tolerance) << rows;
  }
}

TEST(CudaBackendMath, LayerScaleMatchesTheCpuBackend) {
  auto cpu = make_cpu_backend();
  Rng rng(11);
  for (int64_t rows : kRowCounts) {
    const int64_t d = 36;
    const Tensor branch = random_tensor({rows, d}, rng), scale = random_tensor({d}, rng),
                 residual = random_tensor({rows, d}, rng), grad = random_tensor({rows, d}, rng);
    Tensor out = Tensor::empty({rows, d}), branch_grad = Tensor::empty({rows, d});
    Tensor grad_scale = random_tensor({d}, rng), grad_bias = random_tensor({d}, rng);
    std::vector<float> gs = copy_of(grad_scale), gb = copy_of(grad_bias);
    cpu->layer_scale_forward(branch, scale, residual, out);
    cpu->layer_scale_backward(grad, branch, scale, branch_grad, &grad_scale, &grad_bias);
    std::vector<float> o(static_cast<size_t>(rows * d)), bg(static_cast<size_t>(rows * d));
    for (int64_t i = 0; i < rows * d; ++i) {
      o[i] = layer_scale_value(residual.f32()[i], scale.f32()[i % d], branch.f32()[i]);
      bg[i] = scale.f32()[i % d] * grad.f32()[i];
    }
    two_pass([&](int64_t r, int64_t c) { return grad.f32()[r * d + c] * branch.f32()[r * d + c]; }, rows, d, gs);
    two_pass([&](int64_t r, int64_t c) { return scale.f32()[c] * grad.f32()[r * d + c]; }, rows, d, gb);
    EXPECT_LT(relative_difference(o, out), kF32Tolerance);
    EXPECT_LT(relative_difference(bg, branch_grad), kF32Tolerance);
    EXPECT_LT(relative_difference(gs, grad_scale), kF32Tolerance) << rows;
    EXPECT_LT(relative_difference(gb, grad_bias), kF32Tolerance) << rows;
  }
}

TEST(CudaBackendMath, LossesMatchTheCpuBackend) {
  auto cpu = make_cpu_backend();
  Rng rng(12);
  const int64_t rows = 37, labels = 14;
  const Tensor logits = random_tensor({rows, labels}, rng, 3.0);
  Tensor targets = Tensor::empty({rows, labels}), weight = Tensor::empty({rows, labels});
  for (int64_t i = 0; i < targets.numel(); ++i) {
    targets.f32()[i] = rng.uniform() < 0.3 ? 1.0f : 0.0f;
    weight.f32()[i] = rng.uniform() < 0.1 ? 0.0f : 1.0f;
  }
  const Tensor pos_weight = random_tensor({labels}, rng);
  for (int variant = 0; variant < 2; ++variant) {
    const Tensor* pw = variant ? &pos_weight : nullptr;
    const Tensor* w = variant ? &weight : nullptr;
    Tensor grad = Tensor::empty({rows, labels});
    const double expected = cpu->bce_with_logits(logits, targets, pw, w, 0.25, grad);
    std::vector<double> losses(static_cast<size_t>(rows * labels));
    std::vector<float> ours(static_cast<size_t>(rows * labels));
    for (int64_t i = 0; i < rows * labels; ++i) {
      losses[i] = bce_element(logits.f32()[i], targets.f32()[i], pw ? pw->f32()[i % labels] : 1.0,
                              w ? w->f32()[i] : 1.0, 0.25, &ours[i]);
    }
    const double sum = sum_in_order(losses.data(), rows * labels);
    EXPECT_NEAR(sum, expected, 1e-12 * std::abs(expected)) << variant;
    EXPECT_LT(relative_difference(ours, grad), kF32Tolerance) << variant;
  }
  Tensor classes = Tensor::empty({rows}, DType::i64);
  for (int64_t i = 0; i < rows; ++i) classes.data<int64_t>()[i] = static_cast<int64_t>(rng.below(labels));
  Tensor grad = Tensor::empty({rows, labels});
  const double expected = cpu->cross_entropy(logits, classes, 0.5, grad);
  std::vector<double> losses(static_cast<size_t>(rows));
  std::vector<float> ours(static_cast<size_t>(rows * labels));
  for (int64_t r = 0; r < rows; ++r) {
    losses[r] =
        cross_entropy_row(logits.f32() + r * labels, labels, classes.data<int64_t>()[r], 0.5, ours.data() + r * labels);
  }
  EXPECT_NEAR(sum_in_order(losses.data(), rows), expected, 1e-12 * std::abs(expected));
  EXPECT_LT(relative_difference(ours, grad), kF32Tolerance);
}

TEST(CudaBackendMath, CrossEntropyFindsTheFirstClassOutsideTheLogits) {
  const int64_t targets[] = {0, 3, 4, -1};
  EXPECT_EQ(first_invalid_target(targets, 2, 4), -1);
  EXPECT_EQ(first_invalid_target(targets, 4, 4), 2);
  EXPECT_EQ(first_invalid_target(targets + 3, 1, 4), 0);
  const float row[] = {1.0f, 2.0f};
  float grad[] = {5.0f, 5.0f};
  EXPECT_EQ(cross_entropy_row(row, 2, 7, 1.0, grad), 0.0);  // nothing read past the row
  EXPECT_EQ(grad[0], 0.0f);
  EXPECT_EQ(grad[1], 0.0f);
}

TEST(CudaBackendMath, PositionResamplingMatchesTheCpuBackend) {
  auto cpu = make_cpu_backend();
  Rng rng(13);
  const int64_t kept = 2, hs = 4, ws = 5, hd = 6, wd = 3, d = 8;
  const Tensor pos = random_tensor({kept + hs * ws, d}, rng);
  Tensor wy = random_tensor({hd, hs}, rng), wx = random_tensor({wd, ws}, rng);
  wy.f32()[1] = 0.0f;  // zero weights are skipped, as on the CPU
  wx.f32()[2] = 0.0f;
  Tensor out = Tensor::empty({kept + hd * wd, d});
  cpu->resample_positions_forward(pos, kept, wy, wx, out);
  std::vector<float> o(static_cast<size_t>(out.numel()));
  for (int64_t i = 0; i < out.numel(); ++i) {
    const int64_t row = i / d, c = i % d;
    o[i] = row < kept ? pos.f32()[i]
                      : resample_forward_value(pos.f32(), kept, wy.f32(), wx.f32(), hs, ws, d, (row - kept) / wd,
                                               (row - kept) % wd, c);
  }
  EXPECT_LT(relative_difference(o, out), kF32Tolerance);
  const Tensor grad = random_tensor({kept + hd * wd, d}, rng);
  Tensor grad_pos = random_tensor({kept + hs * ws, d}, rng);
  std::vector<float> gp = copy_of(grad_pos);
  cpu->resample_positions_backward(grad, kept, wy, wx, grad_pos);
  for (int64_t i = 0; i < grad_pos.numel(); ++i) {
    const int64_t row = i / d, c = i % d;
    gp[i] += row < kept ? grad.f32()[i]
                        : resample_backward_value(grad.f32(), kept, wy.f32(), wx.f32(), hd, hs, wd, ws, d,
                                                  (row - kept) / ws, (row - kept) % ws, c);
  }
  EXPECT_LT(relative_difference(gp, grad_pos), kF32Tolerance);
}

TEST(CudaBackendMath, EmbeddingIndexingMatchesTheCpuBackend) {
  auto cpu = make_cpu_backend();
  Rng rng(14);
  // patchify, f32 and bf16 (the bf16 output bit for bit: same value, same rounding).
  const int64_t b = 2, c = 3, h = 12, w = 8, p = 4, np = (h / p) * (w / p), k = c * p * p;
  const Tensor images = random_tensor({b, c, h, w}, rng);
  Tensor patches = Tensor::empty({b * np, k}), patches16 = Tensor::empty({b * np, k}, DType::bf16);
  cpu->patchify(images, p, patches);
  cpu->patchify(images, p, patches16);
  for (int64_t i = 0; i < patches.numel(); ++i) {
    const float v = images.f32()[patchify_source(i, c, h, w, p)];
    ASSERT_EQ(v, patches.f32()[i]) << i;
    ASSERT_EQ(round_to_bf16(v), patches16.u16()[i]) << i;
  }
  // Token embeddings with 3 prefix tokens, the first 1 positioned (DINOv2 with registers); ViT's is P = Q = 1.
  const int64_t d = 16, prefix_count = 3, positioned = 1;
  const Tensor proj = random_tensor({b * np, d}, rng), prefix = random_tensor({prefix_count, d}, rng),
               pos = random_tensor({positioned + np, d}, rng);
  Tensor x = Tensor::empty({b, prefix_count + np, d});
  cpu->token_embeddings_forward(proj, prefix, positioned, pos, x);
  std::vector<float> ours(static_cast<size_t>(x.numel()));
  for (int64_t i = 0; i < x.numel(); ++i) {
    ours[i] = token_embedding_value(i, proj.f32(), prefix.f32(), prefix_count, positioned, pos.f32(), np, d);
  }
  EXPECT_LT(relative_difference(ours, x), kF32Tolerance);
  // DINOv2's classifier input and its gradient, skipping the prefix tokens.
  const int64_t tokens = prefix_count + np, skip = prefix_count;
  Tensor cm = Tensor::empty({b, 2 * d}), grad_x = Tensor::empty({b, tokens, d});
  cpu->cls_and_mean_forward(x, skip, cm);
  const Tensor g = random_tensor({b, 2 * d}, rng);
  cpu->cls_and_mean_backward(g, skip, grad_x);
  std::vector<float> cm_ours(static_cast<size_t>(cm.numel())), gx_ours(static_cast<size_t>(grad_x.numel()));
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t j = 0; j < d; ++j) {
      cm_ours[bi * 2 * d + j] = x.f32()[bi * tokens * d + j];
      cm_ours[bi * 2 * d + d + j] = token_mean(x.f32() + bi * tokens * d, tokens, d, skip, j);
    }
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t j = 0; j < d; ++j) {
        gx_ours[(bi * tokens + t) * d + j] = cls_and_mean_gradient(g.f32() + bi * 2 * d, tokens, d, skip, t, j);
      }
    }
  }
  EXPECT_LT(relative_difference(cm_ours, cm), kF32Tolerance);
  EXPECT_LT(relative_difference(gx_ours, grad_x), kF32Tolerance);
}
