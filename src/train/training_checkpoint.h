// A training checkpoint is a directory that is also a Hugging Face model directory, so `--model`, `vitpipe export`
// and transformers can all read it:
//   config.json, preprocessor_config.json, model.safetensors   the whole model (fp32)
//   optimizer.safetensors   the optimizer's moment buffers over the whole model (flat, layout order) + metadata
//   trainer_state.json      step, position in the data, best validation metric, the effective options
// It is written under a temporary name and renamed, so a checkpoint directory exists only when complete (a kill -9
// at any moment leaves the previous one intact); checkpoints/latest names the newest.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "io/named_tensors.h"
#include "io/preprocessor_config.h"
#include "model/parameter_layout.h"

namespace vitpipe {

struct TrainerState {
  int64_t step = 0;            // optimizer steps done
  int64_t epoch = 0;           // epoch of the next step
  int64_t batch_in_epoch = 0;  // global batch of the next step within that epoch
  int64_t total_steps = 0;
  std::optional<double> best_metric;  // validation mean ROC-AUC of the exported best model
  int64_t best_step = -1;
  nlohmann::json options = nlohmann::json::object();  // the effective training options

  nlohmann::json to_json() const;
  static TrainerState from_json(const nlohmann::json& json, const std::string& source);
};

struct TrainingCheckpoint {
  ViTConfig config;
  PreprocessorConfig preprocessor;
  FlatParameters parameters;  // whole model
  TensorMap optimizer_state;  // whole-model buffers, e.g. "exp_avg" f32 [model numel]
  StringMap optimizer_metadata;
  TrainerState state;
};

// Writes <output_dir>/checkpoints/step-<step>/ and points checkpoints/latest at it; keeps the newest `keep`.
std::filesystem::path write_training_checkpoint(const std::filesystem::path& output_dir,
                                                const TrainingCheckpoint& checkpoint, int keep = 2);

// The newest complete checkpoint under <output_dir>/checkpoints, if any.
std::optional<std::filesystem::path> latest_checkpoint(const std::filesystem::path& output_dir);

// Reads a checkpoint directory (throws naming the file on anything missing or malformed).
TrainingCheckpoint read_training_checkpoint(const std::filesystem::path& directory);

// Replaces directory `target` by a freshly written one in one atomic step (renameat2 exchange): `write` fills a
// sibling temporary directory first. Used for <output_dir>/model (the exported best model).
void replace_directory_atomically(const std::filesystem::path& target,
                                  const std::function<void(const std::filesystem::path& staging)>& write);

}  // namespace vitpipe
