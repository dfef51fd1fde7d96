#include "train/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "util/error.h"

namespace vitpipe {

const char* schedule_name(LrScheduleKind kind) {
  switch (kind) {
    case LrScheduleKind::cosine:
      return "cosine";
    case LrScheduleKind::linear:
      return "linear";
    case LrScheduleKind::constant:
      return "constant";
  }
  return "?";
}

const std::vector<std::string>& schedule_names() {
  static const std::vector<std::string> names = {"cosine", "linear", "constant"};
  return names;
}

LrScheduleKind parse_schedule(const std::string& name) {
  for (LrScheduleKind kind : {LrScheduleKind::cosine, LrScheduleKind::linear, LrScheduleKind::constant}) {
    if (name == schedule_name(kind)) return kind;
  }
  fail("unknown learning-rate schedule '", name, "' (known: cosine, linear, constant)");
}

int64_t LrSchedule::warmup(int64_t total_steps) const {
  if (warmup_steps) return *warmup_steps;
  // math.ceil(num_training_steps * warmup_ratio), in double as Python computes it.
  return static_cast<int64_t>(std::ceil(static_cast<double>(total_steps) * warmup_ratio));
}

double LrSchedule::multiplier(int64_t step, int64_t total_steps) const {
  VP_REQUIRE(step >= 0, "learning-rate schedule: negative step ", step);
  VP_REQUIRE(total_steps > 0, "learning-rate schedule: total steps must be positive (got ", total_steps, ")");
  const int64_t warm = warmup(total_steps);
  VP_REQUIRE(warm >= 0, "learning-rate schedule: negative warm-up ", warm);
  // The same operations, in the same order, as transformers' lambdas (Python floats are doubles).
  if (step < warm) return static_cast<double>(step) / static_cast<double>(std::max<int64_t>(1, warm));
  const double rest = static_cast<double>(std::max<int64_t>(1, total_steps - warm));
  switch (kind) {
    case LrScheduleKind::constant:
      return 1.0;
    case LrScheduleKind::linear:
      return std::max(0.0, static_cast<double>(total_steps - step) / rest);
    case LrScheduleKind::cosine: {
      const double progress = static_cast<double>(step - warm) / rest;
      const double num_cycles = 0.5;
      return std::max(0.0, 0.5 * (1.0 + std::cos(std::numbers::pi * num_cycles * 2.0 * progress)));
    }
  }
  return 1.0;
}

}  // namespace vitpipe
