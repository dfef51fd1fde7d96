// Which parameters train (DESIGN.md "Trainable subsets"). A stage keeps the trainable ones in one flat buffer and the
// frozen ones in another; gradients and optimizer state exist for the trainable buffer only, so a frozen parameter
// costs its values and nothing else. The modes:
//   full          every parameter the forward pass reads (DINOv2's mask_token never: it serves masked-image
//                 pre-training and stays as loaded, so the export still holds it)
//   backbone      the classifier(s) alone (a linear probe): the backbone runs forward only
//   layers N      everything but the embeddings and the first N encoder blocks
//   lora          peft's LoRA matrices and the classifier(s) (peft's modules_to_save); every base weight frozen
// The backward pass runs down to the lowest segment that trains (first_trained_segment) and no further: blocks below
// keep no activations.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "model/parameter_layout.h"

namespace vitpipe {

enum class FreezeMode { none, backbone, layers, lora };

struct TrainingMode {
  FreezeMode freeze = FreezeMode::none;
  int64_t frozen_layers = 0;  // FreezeMode::layers: the embeddings and this many blocks
  LoraSettings lora;          // FreezeMode::lora
  std::string describe() const;
  bool operator==(const TrainingMode&) const = default;
};

// Whether `spec` trains in `mode`.
bool trains(const ParamSpec& spec, const TrainingMode& mode, const ViTConfig& config);
// A classifier head parameter (classifier.*, cls_classifier.*, distillation_classifier.*).
bool is_classifier_parameter(const ParamSpec& spec);

struct TrainableSplit {
  std::shared_ptr<const ParameterLayout> full;       // every parameter (LoRA matrices included)
  std::shared_ptr<const ParameterLayout> trainable;  // subset of full
  std::shared_ptr<const ParameterLayout> frozen;     // subset of full: the rest
  TrainingMode mode;
  int first_trained_segment = 0;  // the lowest segment holding a trainable parameter
  // Every parameter the forward pass reads trains (full fine-tuning): checkpoints can then be whole model
  // directories; otherwise they hold the trainable parameters alone.
  bool trains_whole_model() const;
};

// Throws naming the option for a mode the model cannot take (e.g. more frozen layers than it has).
std::shared_ptr<const TrainableSplit> make_trainable_split(std::shared_ptr<const ParameterLayout> full,
                                                           const TrainingMode& mode);
// Everything the forward pass reads trains (tools, tests, inference stages).
std::shared_ptr<const TrainableSplit> full_training_split(std::shared_ptr<const ParameterLayout> full);

}  // namespace vitpipe
