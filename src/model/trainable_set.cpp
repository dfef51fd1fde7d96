#include "model/trainable_set.h"

#include <algorithm>

#include "util/error.h"

namespace vitpipe {

std::string TrainingMode::describe() const {
  switch (freeze) {
    case FreezeMode::none:
      return "full fine-tuning";
    case FreezeMode::backbone:
      return "frozen backbone (linear probe)";
    case FreezeMode::layers:
      return concat("embeddings and the first ", frozen_layers, " blocks frozen");
    case FreezeMode::lora: {
      std::string targets;
      for (LinearSite site : lora.targets) targets += concat(targets.empty() ? "" : ",", linear_site_name(site));
      return concat("LoRA rank ", lora.rank, ", alpha ", lora.alpha, " on ", targets, " (base weights frozen)");
    }
  }
  return "?";
}

bool is_classifier_parameter(const ParamSpec& spec) {
  const std::string& n = spec.name;
  return n.rfind("classifier.", 0) == 0 || n.rfind("cls_classifier.", 0) == 0 ||
         n.rfind("distillation_classifier.", 0) == 0;
}

bool trains(const ParamSpec& spec, const TrainingMode& mode, const ViTConfig& config) {
  if (spec.name == model_prefix(config) + "embeddings.mask_token") return false;  // unused by classification
  switch (mode.freeze) {
    case FreezeMode::none:
      return !spec.is_lora();
    case FreezeMode::backbone:
      return is_classifier_parameter(spec);
    case FreezeMode::layers:
      return !spec.is_lora() && spec.segment > mode.frozen_layers;
    case FreezeMode::lora:
      return spec.is_lora() || is_classifier_parameter(spec);
  }
  return false;
}

bool TrainableSplit::trains_whole_model() const {
  for (const ParamSpec& spec : frozen->specs()) {
    if (spec.name != model_prefix(full->config()) + "embeddings.mask_token") return false;
  }
  return true;
}

std::shared_ptr<const TrainableSplit> make_trainable_split(std::shared_ptr<const ParameterLayout> full,
                                                           const TrainingMode& mode) {
  const ViTConfig& c = full->config();
  if (mode.freeze == FreezeMode::layers) {
    VP_REQUIRE(mode.frozen_layers >= 0 && mode.frozen_layers <= c.num_hidden_layers, "--freeze-layers ",
               mode.frozen_layers, ": the model has ", c.num_hidden_layers, " encoder blocks (0..", c.num_hidden_layers,
               " can be frozen)");
  }
  VP_REQUIRE((mode.freeze == FreezeMode::lora) == full->lora().enabled(),
             "internal: LoRA matrices in the layout and the training mode disagree");
  auto split = std::make_shared<TrainableSplit>();
  split->full = full;
  split->mode = mode;
  split->trainable =
      std::make_shared<const ParameterLayout>(*full, [&](const ParamSpec& s) { return trains(s, mode, c); });
  split->frozen =
      std::make_shared<const ParameterLayout>(*full, [&](const ParamSpec& s) { return !trains(s, mode, c); });
  split->first_trained_segment = full->num_segments() - 1;
  for (const ParamSpec& spec : split->trainable->specs()) {
    split->first_trained_segment = std::min(split->first_trained_segment, spec.segment);
  }
  return split;
}

std::shared_ptr<const TrainableSplit> full_training_split(std::shared_ptr<const ParameterLayout> full) {
  TrainingMode mode;
  if (full->lora().enabled()) {
    mode.freeze = FreezeMode::lora;
    mode.lora = full->lora();
  }
  return make_trainable_split(std::move(full), mode);
}

}  // namespace vitpipe
