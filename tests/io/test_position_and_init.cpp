// Position-embedding interpolation (exact properties; the comparison with torch is position_interpolation_reference.py)
// and transformers-style initialisation.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "model/initializer.h"
#include "model/position_interpolation.h"
#include "model/presets.h"
#include "util/error.h"
#include "util/random.h"

namespace vitpipe {
namespace {

TEST(BicubicResize, SameSizeIsExactlyTheIdentity) {
  Rng rng(1);
  std::vector<float> src(3 * 5 * 7), dst(src.size());
  for (auto& v : src) v = static_cast<float>(rng.normal());
  bicubic_resize(src.data(), 3, 5, 7, dst.data(), 5, 7);
  EXPECT_EQ(src, dst);
}

TEST(BicubicResize, KeepsConstants) {
  // The four weights sum to one (A = -0.75 reproduces constants, not ramps: only A = -0.5 does).
  const int64_t in = 8;
  std::vector<float> constant(in * in, 0.7f);
  for (int64_t out : {3, 8, 13, 31}) {
    std::vector<float> a(out * out);
    bicubic_resize(constant.data(), 1, in, in, a.data(), out, out);
    for (float v : a) ASSERT_NEAR(v, 0.7f, 1e-6) << out;
  }
}

TEST(BicubicResize, MatchesHandComputedTaps) {
  // 4 -> 2: source coordinate 2 * (0 + 0.5) - 0.5 = 0.5, t = 0.5: weights (-0.09375, 0.59375, 0.59375, -0.09375)
  // over indices (-1 -> 0, 0, 1, 2).
  std::vector<float> src = {1, 2, 4, 8};
  std::vector<float> dst(2);
  bicubic_resize(src.data(), 1, 1, 4, dst.data(), 1, 2);
  EXPECT_NEAR(dst[0], -0.09375f * 1 + 0.59375f * 1 + 0.59375f * 2 - 0.09375f * 4, 1e-6);
  EXPECT_NEAR(dst[1], -0.09375f * 2 + 0.59375f * 4 + 0.59375f * 8 - 0.09375f * 8, 1e-6);
}

TEST(PositionEmbeddings, KeepsClsAndResizesTheGrid) {
  const int64_t d = 4, old_side = 3;
  Tensor pos = Tensor::empty({1, 1 + old_side * old_side, d});
  for (int64_t i = 0; i < pos.numel(); ++i) pos.f32()[i] = static_cast<float>(i) * 0.1f;
  Tensor out = interpolate_position_embeddings(pos, 5, 4);
  EXPECT_EQ(out.shape(), (Shape{1, 21, d}));
  for (int64_t k = 0; k < d; ++k) EXPECT_EQ(out.f32()[k], pos.f32()[k]);
  // Channel k of the grid, alone through bicubic_resize, gives the same numbers.
  for (int64_t k = 0; k < d; ++k) {
    std::vector<float> plane(old_side * old_side), resized(20);
    for (int64_t p = 0; p < old_side * old_side; ++p) plane[p] = pos.f32()[(1 + p) * d + k];
    bicubic_resize(plane.data(), 1, old_side, old_side, resized.data(), 5, 4);
    for (int64_t p = 0; p < 20; ++p) EXPECT_EQ(out.f32()[(1 + p) * d + k], resized[p]);
  }
  EXPECT_THROW(interpolate_position_embeddings(Tensor::zeros({1, 11, d}), 2, 2), Error);  // 10 is not a square
}

// --- initialisation ---

struct Stats {
  double mean = 0, std = 0, max_abs = 0;
};

Stats stats(const float* v, int64_t n) {
  double sum = 0, sq = 0, mx = 0;
  for (int64_t i = 0; i < n; ++i) {
    sum += v[i];
    sq += static_cast<double>(v[i]) * v[i];
    mx = std::max(mx, std::fabs(static_cast<double>(v[i])));
  }
  Stats s;
  s.mean = sum / n;
  s.std = std::sqrt(sq / n - s.mean * s.mean);
  s.max_abs = mx;
  return s;
}

TEST(Initializer, FollowsTransformersViTInitialisation) {
  ViTConfig config = preset_config("vit-mini");
  config.labels = {"a", "b", "c"};
  auto layout = std::make_shared<const ParameterLayout>(config);
  FlatParameters p = FlatParameters::whole_model(layout);
  initialize_parameters(p, 7);
  for (const auto& spec : layout->specs()) {
    const float* v = p.at(spec.offset);
    Stats s = stats(v, spec.numel);
    switch (spec.kind) {
      case ParamKind::linear_weight:
      case ParamKind::token:
        if (spec.numel >= 4096) {  // enough samples for a 3% check on the std
          EXPECT_NEAR(s.std, 0.02, 0.02 * 0.03) << spec.name;
          EXPECT_NEAR(s.mean, 0.0, 0.002) << spec.name;
        }
        EXPECT_LT(s.max_abs, 0.02 * 6.5) << spec.name;
        EXPECT_GT(s.max_abs, 0.0) << spec.name;
        break;
      case ParamKind::norm_weight:
        for (int64_t i = 0; i < spec.numel; ++i) ASSERT_EQ(v[i], 1.0f) << spec.name;
        break;
      case ParamKind::bias:
      case ParamKind::norm_bias:
        for (int64_t i = 0; i < spec.numel; ++i) ASSERT_EQ(v[i], 0.0f) << spec.name;
        break;
      case ParamKind::layer_scale:  // DINOv2 and LoRA only: a plain ViT has none
      case ParamKind::lora_a:
      case ParamKind::lora_b:
        ADD_FAILURE() << "a plain ViT has no parameter of this kind: " << spec.name;
        break;
    }
  }
  // All linear weights together: std within 1% of initializer_range.
  std::vector<float> all;
  for (const auto& spec : layout->specs()) {
    if (spec.kind == ParamKind::linear_weight) all.insert(all.end(), p.at(spec.offset), p.at(spec.offset) + spec.numel);
  }
  EXPECT_NEAR(stats(all.data(), static_cast<int64_t>(all.size())).std, 0.02, 0.0002);
}

TEST(Initializer, IsDeterministicPerSeedAndPerName) {
  ViTConfig config = preset_config("vit-micro");
  config.labels = {"a", "b"};
  auto layout = std::make_shared<const ParameterLayout>(config);
  FlatParameters a = FlatParameters::whole_model(layout), b = FlatParameters::whole_model(layout),
                 c = FlatParameters::whole_model(layout);
  initialize_parameters(a, 5);
  initialize_parameters(b, 5);
  initialize_parameters(c, 6);
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.numel() * sizeof(float)));
  EXPECT_NE(0, std::memcmp(a.data(), c.data(), a.numel() * sizeof(float)));
  // A stage holding blocks 1..2 gets the same values as the whole model.
  FlatParameters stage(layout, 1, 2);
  initialize_parameters(stage, 5);
  EXPECT_EQ(0, std::memcmp(stage.data(), a.at(stage.begin()), stage.numel() * sizeof(float)));
  // initialize_classifier alone reproduces the whole-model classifier.
  FlatParameters head = FlatParameters::whole_model(layout);
  initialize_classifier(head, 5);
  Tensor w1 = a.tensor("classifier.weight"), w2 = head.tensor("classifier.weight");
  EXPECT_EQ(0, std::memcmp(w1.raw(), w2.raw(), w1.nbytes()));
}

TEST(Initializer, TruncatedNormalStaysInBounds) {
  Rng rng(3);
  for (int i = 0; i < 10000; ++i) {
    double x = truncated_normal(rng, 1.0, -0.5, 0.25);
    ASSERT_GE(x, -0.5);
    ASSERT_LE(x, 0.25);
  }
}

}  // namespace
}  // namespace vitpipe
