// Command-line flags for datasets, shared by `vitpipe data`, `train`, `eval` and `predict`.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "data/dataset.h"

namespace vitpipe::cli {

// --data (required when `required`), --val-fraction, --seed, --view, --add-no-finding, --skip-unreadable.
inline void add_dataset_flags(CLI::App* cmd, std::string* spec, DatasetOptions* options, bool required = true) {
  auto* data = cmd->add_option("--data", *spec,
                               "Dataset: chestxray14:ROOT, csv:FILE, folder:ROOT or cache:DIR (from `vitpipe data prepare`)");
  if (required) data->required();
  cmd->add_option("--val-fraction", options->val_fraction,
                  "Share of the train_val images (whole patients) held out as the val split")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 0.99));
  cmd->add_option("--data-seed", options->seed, "Seed of the patient division into train and val")->capture_default_str();
  cmd->add_option("--view", options->view, "Keep only this View Position (PA or AP)")
      ->transform(CLI::IsMember({"PA", "AP"}, CLI::ignore_case));
  cmd->add_flag("--add-no-finding", options->add_no_finding,
                "Add \"No Finding\" as a last label (1 when an image has no finding)");
  cmd->add_flag("--skip-unreadable", options->skip_unreadable,
                "Skip missing or undecodable images with a warning (and a count at the end) instead of stopping");
}

}  // namespace vitpipe::cli
