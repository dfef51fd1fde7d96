// `vitpipe data inspect`: what a dataset holds (counts per split, label, view; missing files).
// `vitpipe data prepare`: decode and resize every image once into a packed cache for `--data cache:DIR`.
#include <cstdio>
#include <map>
#include <memory>

#include "cli/commands.h"
#include "cli/data_flags.h"
#include "data/data_spec.h"
#include "data/dataset_summary.h"
#include "data/file_dataset.h"
#include "data/label_checks.h"
#include "data/packed_cache.h"
#include "io/model_files.h"
#include "util/error.h"
#include "util/log.h"
#include "util/output_folder.h"
#include "util/progress.h"

namespace vitpipe::cli {

void add_data_command(CLI::App& app) {
  auto* data = app.add_subcommand("data", "Inspect datasets and prepare packed caches");
  data->require_subcommand(1);

  struct InspectArgs {
    std::string spec;
    DatasetOptions options;
    bool json = false;
  };
  auto inspect_args = std::make_shared<InspectArgs>();
  auto* inspect = data->add_subcommand("inspect", "Count images per split, label and view; report missing files");
  add_dataset_flags(inspect, &inspect_args->spec, &inspect_args->options);
  inspect->add_flag("--json", inspect_args->json, "Print one JSON object on stdout instead of a table");
  inspect->callback([inspect_args] {
    DatasetOptions options = inspect_args->options;
    options.allow_missing = true;  // inspection counts missing files rather than stopping at them
    auto dataset = open_dataset(inspect_args->spec, options);
    auto summary = summarize_dataset(*dataset);
    if (const auto* files = dynamic_cast<const FileDataset*>(dataset.get()); files && !files->source().archives.empty())
      info(dataset->spec(), ": the images are in ", files->source().archives.size(),
           " .tar.gz archives, counted here as listed; which are really there is known once `vitpipe data prepare` "
           "has read them");
    for (const auto& warning : check_trainable_labels(*dataset, Split::train)) warn(warning);
    if (inspect_args->json) {
      std::printf("%s\n", summary.dump().c_str());
    } else {
      std::printf("%s", format_dataset_summary(summary).c_str());
    }
  });

  struct PrepareArgs {
    std::string spec;
    DatasetOptions options;
    ImageReadFlags read;
    PrepareCacheOptions prepare;
    std::string out;
    std::string model;
  };
  auto prepare_args = std::make_shared<PrepareArgs>();
  auto* prepare = data->add_subcommand("prepare", "Decode and resize every image once into a packed cache (--out DIR)");
  prepare
      ->add_option("--data", prepare_args->spec,
                   "Dataset: chestxray14:ROOT (images in ROOT/images/, ROOT/images_0XX/images/ or still in NIH's "
                   "ROOT/images_0XX.tar.gz, read in place), chexpert:ROOT, mimic-cxr-jpg:ROOT, padchest:ROOT, "
                   "vindr-cxr:ROOT, csv:FILE or folder:ROOT")
      ->required();
  prepare->add_option("--out", prepare_args->out, "Cache directory to write: new, empty or a previous cache")
      ->required();
  prepare->add_flag("--force", prepare_args->prepare.force, "Write into --out even though it holds other files");
  prepare->add_option("--model", prepare_args->model,
                      "Prepare with this model's preprocessing (its preprocessor_config.json: resize, crop; "
                      "a cache is refused by a model whose preprocessing differs)");
  auto* image_size = prepare
                         ->add_option("--image-size", prepare_args->prepare.image_size,
                                      "Stored size S (images become S x S; with --model: the model run at S)")
                         ->capture_default_str();
  prepare
      ->add_option("--resample", prepare_args->prepare.resample,
                   "PIL resample filter id (2 = bilinear, as ViTImageProcessor; 3 = bicubic)")
      ->capture_default_str();
  prepare
      ->add_option(
          "--threads", prepare_args->prepare.threads,
          "Decoding threads (0 = all cores); from archives they also run the archive streams, one per archive at most")
      ->capture_default_str();
  prepare->add_flag("--skip-unreadable", prepare_args->options.skip_unreadable,
                    "Leave out (and list) missing or undecodable images instead of stopping");
  prepare
      ->add_option("--label-vote", prepare_args->options.label_vote,
                   "Several readers per image (VinDr-CXR): any (default) | majority")
      ->transform(CLI::CheckedTransformer(
          std::map<std::string, LabelVote>{{"any", LabelVote::any}, {"majority", LabelVote::majority}},
          CLI::ignore_case));
  prepare
      ->add_option("--mimic-labels", prepare_args->options.mimic_labels,
                   "MIMIC-CXR-JPG's label file: chexpert (default) | negbio")
      ->check(CLI::IsMember({"chexpert", "negbio"}));
  add_image_read_flags(prepare, &prepare_args->read);
  prepare->callback([prepare_args, image_size] {
    const bool image_size_given = image_size->count() > 0;
    // The overwrite rule before the source is listed (prepare_packed_cache applies it again, as a library call).
    check_output_folder(prepare_args->out, "data prepare", "--out", prepare_args->prepare.force, packed_cache_files());
    DataSpec spec = parse_data_spec(prepare_args->spec);
    VP_REQUIRE(spec.kind != "cache", "--data ", prepare_args->spec, ": already a cache (prepare reads image files)");
    DatasetOptions dataset_options = prepare_args->options;
    dataset_options.image_read = prepare_args->read.options;
    auto dataset = open_file_dataset(spec, dataset_options);
    PrepareCacheOptions options = prepare_args->prepare;
    options.skip_unreadable = prepare_args->options.skip_unreadable;
    if (!prepare_args->model.empty()) {
      options.preprocessor = read_model_preprocessor(prepare_args->model, image_size_given ? options.image_size : 0);
      options.image_size = options.preprocessor->fixed_output_size().second;
      info("preprocessing of ", prepare_args->model, ": ", options.preprocessor->geometry());
    }
    info("preparing ", dataset->source().entries.size(), " images of ", dataset->spec(), " at ", options.image_size,
         "x", options.image_size, " into ", prepare_args->out, " (",
         describe_image_read_options(dataset_options.image_read), ")");
    PrepareCacheReport report = prepare_packed_cache(*dataset, prepare_args->out, options);
    info("cache ", prepare_args->out, ": ", report.images, " images (", report.gray_images, " gray), ",
         format_bytes(static_cast<double>(report.pixel_bytes)), " in ", format_duration(report.seconds), " (",
         static_cast<int64_t>(static_cast<double>(report.images) / std::max(report.seconds, 1e-9)), " images/s)");
    if (!report.skipped.empty())
      warn(report.skipped.size(), " unreadable images were left out (listed in ", prepare_args->out, "/manifest.json)");
  });
}

}  // namespace vitpipe::cli
