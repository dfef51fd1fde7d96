#include <gtest/gtest.h>

#include "train/pos_weight.h"
#include "util/error.h"

namespace vitpipe {
namespace {

TEST(PosWeight, NegativesOverPositivesClamped) {
  // 3 labels x 8 rows: 2 positives (6/2 = 3), 0 positives (-> max), 8 positives (0 -> min).
  std::vector<float> targets;
  for (int r = 0; r < 8; ++r) {
    targets.push_back(r < 2 ? 1.0f : 0.0f);
    targets.push_back(0.0f);
    targets.push_back(1.0f);
  }
  const std::vector<int64_t> positives = count_positives(targets, 3);
  EXPECT_EQ(positives, (std::vector<int64_t>{2, 0, 8}));
  EXPECT_EQ(pos_weight_from_counts(positives, 8), (std::vector<float>{3.0f, 100.0f, 0.01f}));
  EXPECT_EQ(pos_weight_from_counts(positives, 8, {0.5, 2.0}), (std::vector<float>{2.0f, 2.0f, 0.5f}));
  // ChestX-ray14's full label file: 227 Hernia among 112,120 images -> 492.9..., clamped to 100 by default.
  EXPECT_EQ(pos_weight_from_counts({227}, 112120, {0.01, 1000.0}), (std::vector<float>{111893.0f / 227.0f}));
  EXPECT_EQ(pos_weight_from_counts({11559}, 112120), (std::vector<float>{static_cast<float>(100561.0 / 11559.0)}));
}

TEST(PosWeight, MaskedLabelsCountOnlyTheirKnownRows) {
  // Label 0: 2 positives among 5 known rows; label 1: never known (the maximum); label 2: 1 of 8.
  EXPECT_EQ(pos_weight_from_known_counts({2, 0, 1}, {5, 0, 8}), (std::vector<float>{1.5f, 100.0f, 7.0f}));
  EXPECT_EQ(pos_weight_from_known_counts({2, 0, 8}, {8, 8, 8}), pos_weight_from_counts({2, 0, 8}, 8));
  EXPECT_THROW(pos_weight_from_known_counts({3}, {2}), Error);
}

TEST(PosWeight, RefusesBadInput) {
  EXPECT_THROW(count_positives(std::vector<float>{0, 1, 0.5f}, 3), Error);
  EXPECT_THROW(count_positives(std::vector<float>{0, 1, 1}, 2), Error);
  EXPECT_THROW(pos_weight_from_counts({1}, 0), Error);
  EXPECT_THROW(pos_weight_from_counts({5}, 4), Error);
  EXPECT_THROW(pos_weight_from_counts({1}, 4, {2.0, 1.0}), Error);
}

}  // namespace
}  // namespace vitpipe
