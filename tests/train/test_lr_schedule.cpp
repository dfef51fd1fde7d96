#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "reference.h"
#include "train/lr_schedule.h"
#include "util/error.h"

namespace vitpipe {
namespace {

TEST(LrSchedule, MatchesTransformersUnderTorchLambdaLR) {
  testing::ScratchDir dir("lr");
  ASSERT_TRUE(testing::run_reference_script("reference_lr_schedule.py", dir.path()));
  const nlohmann::json cases = testing::read_json_file(dir.path() / "lr_cases.json");
  ASSERT_GE(cases.size(), 8u);
  for (const auto& c : cases) {
    LrSchedule schedule;
    schedule.kind = parse_schedule(c["kind"]);
    schedule.base_lr = c["base_lr"];
    // Trainer's rule: warmup_steps when > 0, else the ratio.
    if (c["warmup_steps"].get<int64_t>() > 0) {
      schedule.warmup_steps = c["warmup_steps"].get<int64_t>();
    } else {
      schedule.warmup_ratio = c["warmup_ratio"];
    }
    const int64_t total = c["total"];
    EXPECT_EQ(schedule.warmup(total), c["warmup"].get<int64_t>());
    for (size_t step = 0; step < c["lrs"].size(); ++step) {
      // Bit for bit: the same double operations as the Python lambdas.
      ASSERT_EQ(schedule.lr(static_cast<int64_t>(step), total), c["lrs"][step].get<double>())
          << c["kind"] << " total " << total << " step " << step;
    }
  }
}

TEST(LrSchedule, ExactValues) {
  LrSchedule linear{LrScheduleKind::linear, 1.0, 0.0, 10};
  EXPECT_EQ(linear.lr(0, 110), 0.0);  // the first optimizer step of a warm-up gets lr 0, as in Trainer
  EXPECT_EQ(linear.lr(5, 110), 0.5);
  EXPECT_EQ(linear.lr(10, 110), 1.0);
  EXPECT_EQ(linear.lr(60, 110), 0.5);
  EXPECT_EQ(linear.lr(110, 110), 0.0);
  EXPECT_EQ(linear.lr(120, 110), 0.0);

  LrSchedule cosine{LrScheduleKind::cosine, 2.0, 0.25, std::nullopt};
  EXPECT_EQ(cosine.warmup(100), 25);
  EXPECT_EQ(cosine.warmup(101), 26);  // ceil(25.25)
  EXPECT_EQ(cosine.lr(0, 100), 0.0);
  EXPECT_EQ(cosine.lr(5, 100), 0.4);
  EXPECT_EQ(cosine.lr(25, 100), 2.0);
  EXPECT_EQ(cosine.warmup(150), 38);  // ceil(37.5)
  EXPECT_DOUBLE_EQ(cosine.lr(75, 150), 2.0 * 0.5 * (1.0 + std::cos(std::numbers::pi * 37.0 / 112.0)));
  LrSchedule cosine_mid{LrScheduleKind::cosine, 2.0, 0.0, 20};
  EXPECT_EQ(cosine_mid.lr(60, 100), 1.0);  // progress 1/2: cos(pi/2) ~ 6e-17 vanishes in 1 + it
  EXPECT_EQ(cosine_mid.lr(100, 100), 0.0);

  LrSchedule constant{LrScheduleKind::constant, 3e-4, 0.0, 4};
  EXPECT_EQ(constant.lr(2, 10), 1.5e-4);
  EXPECT_EQ(constant.lr(4, 10), 3e-4);
  EXPECT_EQ(constant.lr(1000, 10), 3e-4);

  LrSchedule none{LrScheduleKind::cosine, 1.0, 0.0, 0};
  EXPECT_EQ(none.lr(0, 10), 1.0);  // no warm-up: full lr at once
}

TEST(LrSchedule, RefusesBadInput) {
  LrSchedule s;
  EXPECT_THROW(s.multiplier(-1, 10), Error);
  EXPECT_THROW(s.multiplier(0, 0), Error);
  try {
    parse_schedule("cosine_with_restarts");
    FAIL() << "accepted an unknown schedule";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown learning-rate schedule 'cosine_with_restarts'"), std::string::npos);
  }
  EXPECT_EQ(schedule_names().size(), 3u);
}

}  // namespace
}  // namespace vitpipe
