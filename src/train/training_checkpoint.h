// A training checkpoint is a directory. When every parameter trains (full fine-tuning) it is also a Hugging Face
// model directory, so `--model`, `vitpipe export` and transformers can all read it:
//   config.json, preprocessor_config.json, model.safetensors   the whole model (fp32)
//   optimizer.safetensors   the optimizer's moment buffers over the trainable parameters (flat, layout order)
//   trainer_state.json      step, position in the data, best validation metric, the effective options
// When only some train (--freeze, --freeze-layers, --lora) it holds only what trains: trainable.safetensors (the
// trainable parameters by name, LoRA matrices included) instead of model.safetensors, with the base model it was
// trained on and a fingerprint of the frozen values in its metadata (resume and export reload the base and refuse
// one whose frozen values differ).
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
  FlatParameters model;             // a whole-model checkpoint: every parameter (the base layout); else empty
  TensorMap trainable;              // a subset checkpoint: the trainable parameters by name; else empty
  std::string base_model;           // a subset checkpoint: the --model its frozen values come from
  uint64_t frozen_fingerprint = 0;  // a subset checkpoint: parameter_fingerprint() of those frozen values
  TensorMap optimizer_state;        // buffers over the trainable parameters, e.g. "exp_avg" f32 [trainable numel]
  StringMap optimizer_metadata;
  TrainerState state;
  bool subset() const { return model.numel() == 0; }
};

// A 64-bit hash of the values (FNV-1a over their bits, in layout order): which frozen weights a run used.
uint64_t parameter_fingerprint(const FlatParameters& values);

// Writes <output_dir>/checkpoints/step-<step>/ and points checkpoints/latest at it; keeps the newest `keep` (>= 1)
// and the one of checkpoint.state.best_step (the best model's, when a checkpoint was written at that step).
std::filesystem::path write_training_checkpoint(const std::filesystem::path& output_dir,
                                                const TrainingCheckpoint& checkpoint, int64_t keep = 2);

// The newest complete checkpoint under <output_dir>/checkpoints, if any.
std::optional<std::filesystem::path> latest_checkpoint(const std::filesystem::path& output_dir);

// The checkpoint holding the weights of <output_dir>/model: the best step's (trainer_state.json's best_step of the
// latest checkpoint), or the latest when the run has no best step (--export-last, no validation split); nullopt when
// there is no checkpoint or the best step's was not written or not kept.
std::optional<std::filesystem::path> best_model_checkpoint(const std::filesystem::path& output_dir);

// Reads a checkpoint directory (throws naming the file on anything missing or malformed).
TrainingCheckpoint read_training_checkpoint(const std::filesystem::path& directory);

// Removes what a killed run left half-written in `output_dir`: the temporaries ("NAME.tmp-PID") of checkpoints,
// checkpoints/latest, model/, metrics.jsonl and train_options.json. Complete files and checkpoints are kept.
void remove_stale_temporaries(const std::filesystem::path& output_dir);

// Replaces directory `target` by a freshly written one in one atomic step (renameat2 exchange): `write` fills a
// sibling temporary directory first. Used for <output_dir>/model (the exported best model).
void replace_directory_atomically(const std::filesystem::path& target,
                                  const std::function<void(const std::filesystem::path& staging)>& write);

}  // namespace vitpipe
