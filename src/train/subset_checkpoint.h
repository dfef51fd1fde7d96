// The whole model back from a checkpoint that holds only what trained (train/training_checkpoint.h): the frozen
// values from the base model, the trainable ones from trainable.safetensors. Used by --resume and `vitpipe export`.
#pragma once

#include <string>

#include "model/trainable_set.h"
#include "train/training_checkpoint.h"

namespace vitpipe {

// `values`: the whole model in split.full's layout, filled from the base model (and LoRA's initial values);
// overwritten here with the checkpoint's trainable parameters. Throws (naming `source`) when the base model's
// frozen values are not those the checkpoint was trained on, or when a trainable tensor is missing, misshapen or
// unexpected.
void restore_trainable(const TrainingCheckpoint& checkpoint, const TrainableSplit& split, FlatParameters& values,
                       const std::string& source);

// parameter_fingerprint() of the frozen part of `values` (split.full's layout).
uint64_t frozen_fingerprint(const TrainableSplit& split, const FlatParameters& values);

}  // namespace vitpipe
