// Learning-rate schedules of transformers (get_cosine/linear/constant_schedule_with_warmup): a LambdaLR multiplier
// of the base learning rate, evaluated at the index of the optimizer step about to be taken. transformers' Trainer
// calls scheduler.step() after optimizer.step(), so optimizer step 0 uses multiplier(0) (= 0 with any warm-up) and
// step t uses multiplier(t). Pure functions of (step, total_steps), so a resumed run needs only the step index.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace vitpipe {

enum class LrScheduleKind { cosine, linear, constant };

const char* schedule_name(LrScheduleKind kind);
LrScheduleKind parse_schedule(const std::string& name);  // throws listing the known names
const std::vector<std::string>& schedule_names();

struct LrSchedule {
  LrScheduleKind kind = LrScheduleKind::cosine;
  double base_lr = 0.0;
  // Warm-up length: `warmup_steps` when set (0 included), else ceil(total_steps * warmup_ratio) as Trainer's
  // get_warmup_steps computes it.
  double warmup_ratio = 0.0;
  std::optional<int64_t> warmup_steps;

  int64_t warmup(int64_t total_steps) const;
  // In the warm-up: step / max(1, warmup). Then cosine: max(0, 0.5 * (1 + cos(pi * progress))), linear:
  // max(0, (total - step) / max(1, total - warmup)), constant: 1; progress = (step - warmup) / max(1, total - warmup).
  // Steps past the end follow the same formulas (transformers' cosine rises again; linear stays 0).
  double multiplier(int64_t step, int64_t total_steps) const;
  double lr(int64_t step, int64_t total_steps) const { return base_lr * multiplier(step, total_steps); }
};

}  // namespace vitpipe
