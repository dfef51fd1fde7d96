#include "model/initializer.h"

#include <algorithm>

#include "util/error.h"

namespace vitpipe {
namespace {

void initialize_one(const FlatParameters& parameters, const ParamSpec& spec, uint64_t seed) {
  const double range = parameters.layout().config().initializer_range;
  float* values = parameters.at(spec.offset);
  switch (spec.kind) {
    case ParamKind::linear_weight:
    case ParamKind::token: {
      Rng rng(parameter_stream_seed(seed, spec.name));
      for (int64_t i = 0; i < spec.numel; ++i) values[i] = static_cast<float>(truncated_normal(rng, range));
      break;
    }
    case ParamKind::bias:
    case ParamKind::norm_bias:
      std::fill(values, values + spec.numel, 0.0f);
      break;
    case ParamKind::norm_weight:
      std::fill(values, values + spec.numel, 1.0f);
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
  for (const char* name : {"classifier.weight", "classifier.bias"}) {
    const ParamSpec* spec = parameters.layout().find(name);
    VP_REQUIRE(spec != nullptr && parameters.holds(*spec), "initialize_classifier: the parameters do not hold ", name);
    initialize_one(parameters, *spec, seed);
  }
}

}  // namespace vitpipe
