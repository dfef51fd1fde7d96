// Command-line flags for datasets, shared by `vitpipe data`, `train`, `eval` and `predict`.
#pragma once

#include <CLI/CLI.hpp>
#include <map>
#include <string>

#include "data/augmentation.h"
#include "data/dataset.h"
#include "data/loader.h"

namespace vitpipe::cli {

// --data (required when `required`), --val-fraction, --seed, --view, --add-no-finding, --skip-unreadable.
inline void add_dataset_flags(CLI::App* cmd, std::string* spec, DatasetOptions* options, bool required = true) {
  auto* data = cmd->add_option(
      "--data", *spec, "Dataset: chestxray14:ROOT, csv:FILE, folder:ROOT or cache:DIR (from `vitpipe data prepare`)");
  if (required) data->required();
  cmd->add_option("--val-fraction", options->val_fraction,
                  "Share of the train_val images (whole patients) held out as the val split")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 0.99));
  cmd->add_option("--data-seed", options->seed, "Seed of the patient division into train and val")
      ->capture_default_str();
  cmd->add_option("--view", options->view, "Keep only this View Position (PA or AP)")
      ->transform(CLI::IsMember({"PA", "AP"}, CLI::ignore_case));
  cmd->add_flag("--add-no-finding", options->add_no_finding,
                "Add \"No Finding\" as a last label (1 when an image has no finding)");
  cmd->add_flag("--skip-unreadable", options->skip_unreadable,
                "Skip missing or undecodable images with a warning (and a count at the end) instead of stopping");
}

// Training augmentation, each part off/on (defaults suit chest X-rays: no horizontal flip).
inline void add_augmentation_flags(CLI::App* cmd, AugmentationSettings* a) {
  cmd->add_flag("--random-crop,!--no-random-crop", a->random_resized_crop, "Random resized crop (default on)");
  cmd->add_option("--crop-scale-min", a->crop_scale_min, "Smallest crop, as a share of the image area")
      ->capture_default_str()
      ->check(CLI::Range(0.05, 1.0));
  cmd->add_option("--crop-scale-max", a->crop_scale_max, "Largest crop, as a share of the image area")
      ->capture_default_str()
      ->check(CLI::Range(0.05, 1.0));
  cmd->add_flag("--rotate,!--no-rotate", a->rotation, "Small random rotation (default on)");
  cmd->add_option("--max-rotation", a->max_rotation_degrees, "Largest rotation in degrees (uniform in [-max, max])")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 45.0));
  cmd->add_flag("--color-jitter,!--no-color-jitter", a->color_jitter, "Brightness/contrast jitter (default on)");
  cmd->add_option("--brightness", a->brightness, "Brightness factor range: 1 +- this")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 0.9));
  cmd->add_option("--contrast", a->contrast, "Contrast factor range: 1 +- this")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 0.9));
  cmd->add_flag("--hflip,!--no-hflip", a->horizontal_flip,
                "Random horizontal flip (default off: chest anatomy is not left-right symmetric)");
}

// Loader threads, prefetch depth and what happens to a last partial batch.
inline void add_loader_flags(CLI::App* cmd, LoaderOptions* o) {
  cmd->add_option("--loader-threads", o->threads, "Threads decoding and augmenting images")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  cmd->add_option("--prefetch", o->prefetch, "Ready batches held ahead of the trainer")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  cmd->add_option("--partial-batch", o->partial_batch,
                  "Last partial batch of an epoch: use (a smaller batch) or drop (reported each epoch)")
      ->transform(CLI::CheckedTransformer(
          std::map<std::string, PartialBatch>{{"use", PartialBatch::use}, {"drop", PartialBatch::drop}},
          CLI::ignore_case));
}

}  // namespace vitpipe::cli
