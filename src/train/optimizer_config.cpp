// The optimizers' names, configurations and layer-wise factors: what option parsing needs, apart from the
// optimizers themselves (which run on a Backend), so readers and their fuzzers link without the kernels.
#include <cmath>

#include "train/optimizer.h"
#include "train/optimizer_kinds.h"
#include "util/error.h"

namespace vitpipe {

std::string OptimizerConfig::name() const {
  switch (kind) {
    case OptimizerKind::adamw:
      return bias_correction ? "adamw" : "adamw-nobc";
    case OptimizerKind::lamb:
      return bias_correction ? "lamb" : "lamb-nobc";
    case OptimizerKind::sgd:
      return "sgd";
  }
  return "?";
}

void OptimizerConfig::validate() const {
  auto finite = [](double x) { return std::isfinite(x); };
  VP_REQUIRE(finite(weight_decay) && weight_decay >= 0.0, "optimizer: weight decay must be >= 0 (got ", weight_decay,
             ")");
  VP_REQUIRE(finite(layer_decay) && layer_decay > 0.0 && layer_decay <= 1.0,
             "optimizer: layer decay must be in (0, 1] (got ", layer_decay, ")");
  if (kind == OptimizerKind::sgd) {
    VP_REQUIRE(finite(momentum) && momentum >= 0.0 && momentum < 1.0, "optimizer: momentum must be in [0, 1) (got ",
               momentum, ")");
    VP_REQUIRE(finite(dampening) && dampening >= 0.0 && dampening <= 1.0,
               "optimizer: dampening must be in [0, 1] (got ", dampening, ")");
    VP_REQUIRE(!nesterov || (momentum > 0.0 && dampening == 0.0),
               "optimizer: Nesterov momentum needs momentum > 0 and dampening 0");
  } else {
    VP_REQUIRE(finite(beta1) && beta1 >= 0.0 && beta1 < 1.0, "optimizer: beta1 must be in [0, 1) (got ", beta1, ")");
    VP_REQUIRE(finite(beta2) && beta2 >= 0.0 && beta2 < 1.0, "optimizer: beta2 must be in [0, 1) (got ", beta2, ")");
    VP_REQUIRE(finite(eps) && eps > 0.0, "optimizer: eps must be > 0 (got ", eps, ")");
  }
}

const std::vector<std::string>& optimizer_names() {
  static const std::vector<std::string> names = {"adamw", "adamw-nobc", "lamb", "lamb-nobc", "sgd"};
  return names;
}

OptimizerConfig optimizer_config_named(const std::string& name) {
  OptimizerConfig config;
  if (name == "adamw") {
    config.kind = OptimizerKind::adamw;
  } else if (name == "adamw-nobc") {
    config.kind = OptimizerKind::adamw;
    config.bias_correction = false;
  } else if (name == "lamb") {
    config.kind = OptimizerKind::lamb;
  } else if (name == "lamb-nobc") {
    config.kind = OptimizerKind::lamb;
    config.bias_correction = false;
  } else if (name == "sgd") {
    config.kind = OptimizerKind::sgd;
  } else {
    std::string known;
    for (const auto& n : optimizer_names()) known += (known.empty() ? "" : ", ") + n;
    fail("unknown optimizer '", name, "' (known: ", known, ")");
  }
  return config;
}

std::vector<double> layer_lr_scales(int num_segments, double layer_decay) {
  std::vector<double> scales(static_cast<size_t>(num_segments), 1.0);
  for (int s = 0; s < num_segments; ++s) scales[static_cast<size_t>(s)] = std::pow(layer_decay, num_segments - 1 - s);
  return scales;
}

}  // namespace vitpipe
