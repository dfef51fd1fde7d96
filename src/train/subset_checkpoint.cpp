#include "train/subset_checkpoint.h"

#include "util/error.h"

namespace vitpipe {

uint64_t frozen_fingerprint(const TrainableSplit& split, const FlatParameters& values) {
  FlatParameters frozen = FlatParameters::whole_model(split.frozen);
  copy_parameters(values, frozen);
  return parameter_fingerprint(frozen);
}

void restore_trainable(const TrainingCheckpoint& c, const TrainableSplit& split, FlatParameters& values,
                       const std::string& source) {
  VP_REQUIRE(c.subset(), "internal: restore_trainable on a whole-model checkpoint");
  VP_REQUIRE(c.frozen_fingerprint == frozen_fingerprint(split, values), source,
             ": the base model's frozen weights differ from those this checkpoint was trained on (", c.base_model,
             "); use the same base model");
  for (const ParamSpec& spec : split.trainable->specs()) {
    auto it = c.trainable.find(spec.name);
    VP_REQUIRE(it != c.trainable.end() && it->second.shape() == spec.shape, source, ": trainable.safetensors lacks '",
               spec.name, "' ", shape_string(spec.shape), " (was it written with other --freeze/--lora settings?)");
    values.tensor(spec.name).copy_from(it->second);
  }
  VP_REQUIRE(c.trainable.size() == split.trainable->specs().size(), source, ": trainable.safetensors holds ",
             c.trainable.size(), " tensors, the settings train ", split.trainable->specs().size());
}

}  // namespace vitpipe
