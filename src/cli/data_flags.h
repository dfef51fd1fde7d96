// Command-line flags for datasets, shared by `vitpipe data`, `train`, `eval` and `predict`.
#pragma once

#include <CLI/CLI.hpp>
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "data/augmentation.h"
#include "data/dataset.h"
#include "data/image_read_options.h"
#include "data/loader.h"
#include "data/sample_transform.h"
#include "inference/image_classifier.h"
#include "io/preprocessor_config.h"
#include "util/log.h"

namespace vitpipe::cli {

// --intensity, --dicom-window, --dicom-first-frame, remembering which were given (a model's recorded reading is the
// default of predict and eval).
struct ImageReadFlags {
  ImageReadOptions options;
  bool intensity_given = false, window_given = false, frame_given = false;
};

inline void add_image_read_flags(CLI::App* cmd, ImageReadFlags* flags) {
  cmd->add_option_function<std::string>(
         "--intensity",
         [flags](const std::string& v) {
           flags->options.intensity = parse_intensity_policy(v, "--intensity");
           flags->intensity_given = true;
         },
         "Images above 8 bits (16-bit PNG, DICOM) to 8 bits: auto (default: full-range for PNG, the file's VOI for "
         "DICOM) | pillow | full-range | window:C,W | percentile:LO,HI")
      ->type_name("POLICY");
  cmd->add_option_function<std::string>(
         "--dicom-window",
         [flags](const std::string& v) {
           flags->options.dicom_window = parse_dicom_window(v, "--dicom-window");
           flags->window_given = true;
         },
         "DICOM VOI transform under --intensity auto: first (default; min..max when the file has none) | N | minmax")
      ->type_name("WHICH");
  cmd->add_flag_function(
      "--dicom-first-frame",
      [flags](int64_t) {
        flags->options.dicom_first_frame = true;
        flags->frame_given = true;
      },
      "Read the first frame of multi-frame DICOM files instead of refusing them");
}

// --labels NAME,NAME,...: a peft adapter's classifier labels that nothing else names.
inline std::vector<std::string> parse_label_list(const std::string& text) {
  std::vector<std::string> labels;
  for (size_t start = 0; !text.empty() && start <= text.size();) {
    const size_t comma = std::min(text.find(',', start), text.size());
    labels.push_back(text.substr(start, comma - start));
    VP_REQUIRE(!labels.back().empty(), "--labels: empty label name in \"", text, "\" (expected NAME,NAME,...)");
    start = comma + 1;
  }
  return labels;
}

// What a command uses for a model: the reading its preprocessor config records, overridden by the flags given.
inline ImageReadOptions resolve_image_read(const ImageReadFlags& flags, const PreprocessorConfig& config,
                                           const std::string& model) {
  ImageReadOptions options = image_read_options_of(config, model + "/preprocessor_config.json");
  const ImageReadOptions recorded = options;
  if (flags.intensity_given) options.intensity = flags.options.intensity;
  if (flags.window_given) options.dicom_window = flags.options.dicom_window;
  if (flags.frame_given) options.dicom_first_frame = true;
  if (!config.vitpipe_intensity.is_null() && !(options == recorded))
    warn(model, " was trained reading images with ", describe_image_read_options(recorded), "; reading them with ",
         describe_image_read_options(options), " as asked");
  return options;
}

// --data (required when `required`), --val-fraction, --seed, --view, --add-no-finding, --skip-unreadable, the label
// conventions (--uncertain, --blank, --label-vote, --mimic-labels, --labels) and the image reading flags.
inline void add_dataset_flags(CLI::App* cmd, std::string* spec, DatasetOptions* options, bool required = true,
                              ImageReadFlags* read_flags = nullptr) {
  auto* data = cmd->add_option(
      "--data", *spec,
      "Dataset: chestxray14:ROOT, chexpert:ROOT, mimic-cxr-jpg:ROOT, padchest:ROOT, vindr-cxr:ROOT, csv:FILE, "
      "folder:ROOT or cache:DIR (from `vitpipe data prepare`)");
  if (required) data->required();
  cmd->add_option("--val-fraction", options->val_fraction,
                  "Share of the train_val images (whole patients) held out as the val split")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 0.99));
  cmd->add_option("--data-seed", options->seed, "Seed of the patient division into train and val")
      ->capture_default_str();
  cmd->add_option("--view", options->view,
                  "Keep only this view: PA, AP, LATERAL, ... (the dataset's names, any case) or frontal / lateral");
  cmd->add_flag("--add-no-finding", options->add_no_finding,
                "Add \"No Finding\" as a last label (1 when an image has no finding)");
  cmd->add_flag("--skip-unreadable", options->skip_unreadable,
                "Skip missing or undecodable images with a warning (and a count at the end) instead of stopping");
  cmd->add_option("--uncertain", options->uncertain,
                  "Labels coded -1 (uncertain): ones | zeros | ignore (masked out of loss and metrics; default)")
      ->transform(CLI::CheckedTransformer(
          std::map<std::string, UncertainPolicy>{
              {"ones", UncertainPolicy::ones}, {"zeros", UncertainPolicy::zeros}, {"ignore", UncertainPolicy::ignore}},
          CLI::ignore_case));
  cmd->add_option("--blank", options->blank, "Labels left blank (not mentioned): zeros (default) | ignore (masked)")
      ->transform(CLI::CheckedTransformer(
          std::map<std::string, BlankPolicy>{{"zeros", BlankPolicy::zeros}, {"ignore", BlankPolicy::ignore}},
          CLI::ignore_case));
  cmd->add_option("--label-vote", options->label_vote,
                  "Several readers per image (VinDr-CXR): any (default) | majority")
      ->transform(CLI::CheckedTransformer(
          std::map<std::string, LabelVote>{{"any", LabelVote::any}, {"majority", LabelVote::majority}},
          CLI::ignore_case));
  cmd->add_option("--mimic-labels", options->mimic_labels, "MIMIC-CXR-JPG's label file: chexpert (default) | negbio")
      ->check(CLI::IsMember({"chexpert", "negbio"}));
  cmd->add_option("--labels", options->labels,
                  "Map the dataset's labels onto chestxray14 | chexpert | union | a JSON FILE (unmatched: masked)");
  if (read_flags != nullptr) add_image_read_flags(cmd, read_flags);
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

// What predict and serve run: the model (a directory, Hub repo or peft adapter; --labels names an adapter's
// labels) with the image reading its preprocessor config records, overridden by the flags given.
inline ImageClassifier load_image_classifier(const std::string& model, const std::string& revision, int64_t image_size,
                                             const std::string& labels, const ImageReadFlags& read, int64_t max_batch,
                                             Device device = Device::cpu, bool allow_tf32 = false) {
  LoadOptions load;
  load.image_size = image_size;
  load.reference.revision = revision;
  load.labels = parse_label_list(labels);
  LoadedModel loaded = load_model(model, load);
  const ImageReadOptions reading = resolve_image_read(read, loaded.preprocessor, loaded.directory.string());
  return ImageClassifier(std::move(loaded), model, reading, max_batch, device, allow_tf32);
}

}  // namespace vitpipe::cli
