// The concrete optimizers behind make_optimizer (optimizer.h); each lives in its own optimizer_<kind>.cpp.
#pragma once

#include <memory>

#include "train/optimizer.h"

namespace vitpipe {

std::unique_ptr<Optimizer> make_adamw(const OptimizerConfig& config, std::shared_ptr<const ParameterLayout> layout,
                                      int first_segment, int last_segment, OptimizerShard shard, Backend* backend);
std::unique_ptr<Optimizer> make_lamb(const OptimizerConfig& config, std::shared_ptr<const ParameterLayout> layout,
                                     int first_segment, int last_segment, OptimizerShard shard, Backend* backend);
std::unique_ptr<Optimizer> make_sgd(const OptimizerConfig& config, std::shared_ptr<const ParameterLayout> layout,
                                    int first_segment, int last_segment, OptimizerShard shard, Backend* backend);

}  // namespace vitpipe
