#include "model/initializer.h"

#include <algorithm>
#include <cmath>

#include "model/trainable_set.h"
#include "util/error.h"

namespace vitpipe {
namespace {

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

void initialize_one(const FlatParameters& parameters, const ParamSpec& spec, uint64_t seed) {
  const ViTConfig& config = parameters.layout().config();
  const double range = config.initializer_range;
  float* values = parameters.at(spec.offset);
  const bool zero_token =
      spec.kind == ParamKind::token &&
      (config.model_type == "deit" || ends_with(spec.name, ".mask_token") || ends_with(spec.name, ".register_tokens"));
  switch (spec.kind) {
    case ParamKind::linear_weight:
    case ParamKind::token: {
      if (zero_token) {
        std::fill(values, values + spec.numel, 0.0f);
        break;
      }
      Rng rng(parameter_stream_seed(seed, spec.name));
      for (int64_t i = 0; i < spec.numel; ++i) values[i] = static_cast<float>(truncated_normal(rng, range));
      break;
    }
    case ParamKind::lora_a: {
      // peft: kaiming_uniform_(a=sqrt(5)) = U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
      const double bound = 1.0 / std::sqrt(static_cast<double>(spec.shape.at(1)));
      Rng rng(parameter_stream_seed(seed, spec.name));
      for (int64_t i = 0; i < spec.numel; ++i) values[i] = static_cast<float>((2.0 * rng.uniform() - 1.0) * bound);
      break;
    }
    case ParamKind::bias:
    case ParamKind::norm_bias:
    case ParamKind::lora_b:
      std::fill(values, values + spec.numel, 0.0f);
      break;
    case ParamKind::norm_weight:
      std::fill(values, values + spec.numel, 1.0f);
      break;
    case ParamKind::layer_scale:
      std::fill(values, values + spec.numel, static_cast<float>(config.layerscale_value));
      break;
  }
}

}  // namespace

double truncated_normal(Rng& rng, double stddev, double low, double high) {
  VP_REQUIRE(low < high && stddev > 0, "truncated_normal: need low < high and a positive stddev");
  for (;;) {
    double x = rng.normal(0.0, stddev);
    if (x >= low && x <= high) return x;
  }
}

uint64_t parameter_stream_seed(uint64_t seed, std::string_view name) {
  uint64_t hash = 0xcbf29ce484222325ull;  // FNV-1a: stable across platforms and runs
  for (unsigned char c : name) hash = (hash ^ c) * 0x100000001b3ull;
  return mix_seed({seed, hash});
}

void initialize_parameters(FlatParameters& parameters, uint64_t seed) {
  const std::vector<const ParamSpec*> specs = parameters.held_specs();
#pragma omp parallel for schedule(dynamic, 1)
  for (size_t i = 0; i < specs.size(); ++i) initialize_one(parameters, *specs[i], seed);
}

void initialize_classifier(FlatParameters& parameters, uint64_t seed) {
  int found = 0;
  for (const ParamSpec* spec : parameters.held_specs()) {
    if (!is_classifier_parameter(*spec)) continue;
    initialize_one(parameters, *spec, seed);
    ++found;
  }
  VP_REQUIRE(found > 0, "initialize_classifier: the parameters hold no classifier");
}

void initialize_lora(FlatParameters& parameters, uint64_t seed) {
  for (const ParamSpec* spec : parameters.held_specs()) {
    if (spec->is_lora()) initialize_one(parameters, *spec, seed);
  }
}

}  // namespace vitpipe
