// Masked labels against references vitpipe does not write: the weighted BCE-with-logits kernel (loss and gradient)
// against float64 PyTorch autograd, and each label's ROC-AUC / PR-AUC over its known rows against scikit-learn.
#include <gtest/gtest.h>

#include <cmath>

#include "backend/backend.h"
#include "evaluation/ranking_metrics.h"
#include "reference.h"

namespace vitpipe {
namespace {

using testing::read_json_file;
using testing::run_reference_script;
using testing::ScratchDir;

Tensor tensor_of(const nlohmann::json& values, std::vector<int64_t> shape) {
  Tensor t = Tensor::empty(shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = values[static_cast<size_t>(i)].get<float>();
  return t;
}

// Runs reference_masked.py WHAT (torch for "loss", scikit-learn for "auc") and reads its cases.
bool reference_cases(const std::string& what, nlohmann::json* cases) {
  ScratchDir scratch("masked_" + what);
  if (!run_reference_script("reference_masked.py", scratch.path(), what)) return false;
  *cases = read_json_file(scratch.path() / ("masked_" + what + ".json"));
  return true;
}

TEST(MaskedLabels, LossAndGradientMatchTorch) {
  nlohmann::json cases;
  ASSERT_TRUE(reference_cases("loss", &cases));
  auto backend = make_cpu_backend();
  for (const auto& c : cases) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const int64_t rows = c["rows"], labels = c["labels"];
    const Tensor logits = tensor_of(c["logits"], {rows, labels});
    const Tensor targets = tensor_of(c["targets"], {rows, labels});
    const Tensor weights = tensor_of(c["weights"], {rows, labels});
    Tensor pos_weight;
    if (!c["pos_weight"].is_null()) pos_weight = tensor_of(c["pos_weight"], {labels});
    Tensor grad = Tensor::empty({rows, labels});
    const double weight_sum = c["weight_sum"];
    const double sum = backend->bce_with_logits(logits, targets, pos_weight.numel() ? &pos_weight : nullptr, &weights,
                                                1.0 / weight_sum, grad);
    EXPECT_NEAR(sum / weight_sum, c["loss"].get<double>(), 1e-9 * std::fabs(c["loss"].get<double>()));
    EXPECT_NEAR(sum, c["loss_sum_torch_weight"].get<double>(), 1e-9 * sum);
    double worst = 0, scale = 0;
    for (int64_t k = 0; k < rows * labels; ++k) {
      const double want = c["grad"][static_cast<size_t>(k)];
      worst = std::max(worst, std::fabs(grad.f32()[k] - want));
      scale = std::max(scale, std::fabs(want));
      if (weights.f32()[k] == 0.0f) {
        EXPECT_EQ(grad.f32()[k], 0.0f) << "a masked label has a gradient at " << k;
      }
    }
    EXPECT_LT(worst, 1e-5 * scale) << "max |grad - torch| " << worst;
    // All weights 1: the same numbers as no weights at all (the unmasked path is unchanged).
    Tensor ones = Tensor::empty({rows, labels});
    for (int64_t k = 0; k < rows * labels; ++k) ones.f32()[k] = 1.0f;
    Tensor g1 = Tensor::empty({rows, labels}), g2 = Tensor::empty({rows, labels});
    const double a = backend->bce_with_logits(logits, targets, nullptr, &ones, 0.5, g1);
    const double b = backend->bce_with_logits(logits, targets, nullptr, nullptr, 0.5, g2);
    EXPECT_EQ(a, b);
    for (int64_t k = 0; k < rows * labels; ++k) ASSERT_EQ(g1.f32()[k], g2.f32()[k]);
  }
}

TEST(MaskedLabels, AucOverKnownRowsMatchesScikitLearn) {
  nlohmann::json cases;
  ASSERT_TRUE(reference_cases("auc", &cases));
  for (const auto& c : cases) {
    const int64_t rows = c["rows"], labels = c["labels"];
    const std::vector<float> scores = c["scores"], targets = c["targets"], weights = c["weights"];
    const EvaluationMetrics m = evaluate_multilabel(scores, targets, labels, std::nullopt, weights);
    EXPECT_EQ(m.rows, rows);
    for (int64_t l = 0; l < labels; ++l) {
      SCOPED_TRACE(l);
      EXPECT_EQ(m.known[static_cast<size_t>(l)], c["known"][static_cast<size_t>(l)].get<int64_t>());
      const auto& auc = c["roc_auc"][static_cast<size_t>(l)];
      const auto& ap = c["average_precision"][static_cast<size_t>(l)];
      ASSERT_EQ(m.roc_auc.per_label[static_cast<size_t>(l)].has_value(), !auc.is_null());
      if (!auc.is_null()) {
        EXPECT_NEAR(*m.roc_auc.per_label[static_cast<size_t>(l)], auc.get<double>(), 1e-12);
      }
      ASSERT_EQ(m.average_precision.per_label[static_cast<size_t>(l)].has_value(), !ap.is_null());
      if (!ap.is_null()) {
        EXPECT_NEAR(*m.average_precision.per_label[static_cast<size_t>(l)], ap.get<double>(), 1e-12);
      }
    }
    // The same rows without the mask give other answers (the mask matters), and a bootstrap runs over it.
    const EvaluationMetrics unmasked = evaluate_multilabel(scores, targets, labels);
    EXPECT_NE(unmasked.roc_auc.per_label[1], m.roc_auc.per_label[1]);
    const EvaluationMetrics boot = evaluate_multilabel(scores, targets, labels, BootstrapOptions{50, 0.95, 1}, weights);
    EXPECT_TRUE(boot.roc_auc.per_label_ci[0].has_value());
    EXPECT_FALSE(boot.roc_auc.per_label_ci[3].has_value());  // never known
  }
}

}  // namespace
}  // namespace vitpipe
