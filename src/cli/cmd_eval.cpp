// `vitpipe eval --model DIR --data SPEC --split {train,val,test} [--json] [--bootstrap N] [--thresholds FILE]`:
// loss, per-label ROC-AUC and PR-AUC (scikit-learn's definitions; null where a label has one class only), their
// means, bootstrap confidence intervals (resampling patients where the dataset knows them: --bootstrap-unit), and
// the operating points at thresholds chosen on another split (a run's thresholds.json, chosen on val), said where
// they came from, every finding by subgroup (sex, age band, view, --subgroup COLUMN: evaluation/subgroups.h), and
// with --boxes FILE the heatmaps scored on radiologists' boxes (explain/localize_boxes.h; --save-localization FILE.json
// keeps them, with the worst-localized images drawn, for the report).
// The same evaluation code as training's.
#include <cstdio>
#include <filesystem>

#include "backend/backend.h"
#include "cli/commands.h"
#include "cli/data_flags.h"
#include "cli/device_flag.h"
#include "data/data_spec.h"
#include "data/label_harmonisation.h"
#include "evaluation/bootstrap_unit.h"
#include "evaluation/box_list.h"
#include "evaluation/operating_thresholds.h"
#include "evaluation/subgroup_attributes.h"
#include "evaluation/subgroups.h"
#include "explain/localize_boxes.h"
#include "io/model_files.h"
#include "model/vit_stage.h"
#include "parallel/pipeline_executor.h"
#include "report/localization_section.h"
#include "train/evaluation.h"
#include "train/predictions_file.h"
#include "train/run_world.h"
#include "util/atomic_file.h"
#include "util/error.h"
#include "util/log.h"

namespace vitpipe::cli {
namespace {

struct EvalOptions {
  std::string model;
  std::string revision = "main";
  std::string data;
  DatasetOptions dataset;
  ImageReadFlags read;
  std::string split = "test";
  bool json = false;
  int64_t bootstrap = 0;
  uint64_t bootstrap_seed = 0;
  std::string bootstrap_unit = "auto";
  std::string thresholds;
  int64_t batch_size = 32;
  int threads = 0;
  std::string device = "cpu";  // --device cpu|cuda|auto
  bool allow_tf32 = false;
  int loader_threads = 2;
  int64_t image_size = 0;
  std::string save_predictions;
  std::vector<std::string> subgroups;  // --subgroup COLUMN (csv datasets)
  std::string boxes;                   // --boxes FILE: localization on radiologists' boxes
  std::string save_localization;       // --save-localization FILE.json: for the report
  std::string explain_method = "grad-rollout";
};

void run_eval(const EvalOptions& o) {
  VP_REQUIRE(o.batch_size >= 1 && o.batch_size <= 4096, "--batch-size: expected 1..4096, got ", o.batch_size);
  VP_REQUIRE(o.bootstrap >= 0 && o.bootstrap <= 100000, "--bootstrap: expected 0..100000, got ", o.bootstrap);
  const Split split = parse_split(o.split, "--split");
  if (!o.save_predictions.empty()) {
    const auto parent = std::filesystem::absolute(o.save_predictions).parent_path();
    VP_REQUIRE(std::filesystem::is_directory(parent), "--save-predictions ", o.save_predictions, ": directory ",
               parent.string(), " does not exist");
  }
  VP_REQUIRE(split != Split::none, "--split: expected train, val or test");
  const BootstrapUnit unit = parse_bootstrap_unit(o.bootstrap_unit, "--bootstrap-unit");
  VP_REQUIRE(o.explain_method == "rollout" || o.explain_method == "grad-rollout" || o.explain_method == "gradcam",
             "--explain-method: expected rollout, grad-rollout or gradcam, got '", o.explain_method, "'");
  const ExplainMethod explain_method = parse_explain_method(o.explain_method);
  VP_REQUIRE(o.save_localization.empty() || !o.boxes.empty(),
             "--save-localization: needs --boxes FILE (the radiologists' boxes to score the heatmaps on)");
  if (!o.save_localization.empty()) {
    const auto parent = std::filesystem::absolute(o.save_localization).parent_path();
    VP_REQUIRE(std::filesystem::is_directory(parent), "--save-localization ", o.save_localization, ": directory ",
               parent.string(), " does not exist");
  }
  std::vector<FindingBox> boxes;
  if (!o.boxes.empty()) boxes = read_box_list(o.boxes);
  std::optional<ThresholdSet> thresholds;
  if (!o.thresholds.empty()) thresholds = read_thresholds_file(o.thresholds);
  LoadOptions load;
  load.image_size = o.image_size;
  load.reference.revision = o.revision;
  LoadedModel model = load_model(o.model, load);
  DatasetOptions dataset_options = o.dataset;
  dataset_options.subgroup_columns = o.subgroups;
  dataset_options.image_read = resolve_image_read(o.read, model.preprocessor, model.directory.string());
  model.preprocessor.vitpipe_intensity = image_read_options_json(dataset_options.image_read);
  auto dataset = open_dataset(o.data, dataset_options);
  VP_REQUIRE(o.subgroups.empty() || dataset->kind() == "csv", "--subgroup: only for csv: datasets (", dataset->spec(),
             " is ", dataset->kind(), "; its sex, age and view subgroups are reported anyway)");
  // Resolved (and `patient` refused without patient ids) even without --bootstrap, so the flag never passes unchecked.
  std::optional<BootstrapOptions> bootstrap = BootstrapOptions{o.bootstrap, 0.95, o.bootstrap_seed};
  std::vector<std::string> patients;  // the split's rows in the order evaluate_split returns them (dataset order)
  for (const int64_t item : dataset->split_indices(split)) patients.push_back(dataset->item(item).patient);
  set_bootstrap_unit(*bootstrap, unit, patients, dataset->spec());
  if (o.bootstrap == 0) bootstrap.reset();
  // Another dataset's labels (cross-dataset evaluation): the model's labels taken from the dataset's by name.
  nlohmann::json label_mapping;
  if (model.config.labels != dataset->label_names()) {
    VP_REQUIRE(dataset->multi_label() && model.config.problem_type == ProblemType::multi_label, o.model,
               ": the model's labels are not the dataset's, and only multi-label labels can be mapped by name");
    const LabelMapping mapping = map_labels(dataset->label_names(), LabelSet{model.config.labels, {}});
    VP_REQUIRE(!mapping.mapped.empty(), o.model, ": none of the model's ", model.config.num_labels(),
               " labels matches a label of ", dataset->spec());
    apply_label_mapping(*dataset, mapping);
    label_mapping = label_mapping_json(mapping);
    std::string unmapped;
    for (const auto& name : mapping.unmapped) unmapped += (unmapped.empty() ? "" : ", ") + name;
    info("labels: ", mapping.mapped.size(), " of the model's ", mapping.names.size(), " labels mapped onto ",
         dataset->spec(), unmapped.empty() ? "" : "; not in this dataset (no AUC): " + unmapped);
  }
  auto layout = model.parameters.layout_ptr();
  EvaluationReport report;
  run_on_world(1, o.threads, [&](Communicator& world) {
    auto backend = make_backend(resolve_device(o.device), o.allow_tf32);
    StageOptions so;
    so.training = false;
    so.max_micro_batch = o.batch_size;
    ViTStage stage(layout, *backend, so);
    stage.load_values(model.parameters);
    ProcessGrid grid(1, 0, 1);
    PipelineExecutor executor(grid, world, {&stage}, ExecutorOptions{}, nullptr);
    EvaluationSettings settings;
    settings.micro_batch = o.batch_size;
    settings.micro_batches = 1;
    settings.loader_threads = o.loader_threads;
    settings.progress = !o.json;
    settings.bootstrap = bootstrap;
    report = evaluate_split(executor, world, dataset, split, model.preprocessor, settings);
  });
  report.label_mapping = label_mapping;
  if (thresholds) report.apply(*thresholds, dataset->spec());
  if (!o.save_predictions.empty()) write_predictions_csv(o.save_predictions, report, *dataset, o.subgroups);
  // By sex, age band, view and the --subgroup columns, on the same patient resamples as the intervals above.
  const std::vector<double> probabilities = report.probabilities();
  SubgroupData rows{report.labels,  report.scores, report.targets,
                    report.weights, probabilities, dataset->multi_label()};
  const SubgroupAnalysis subgroups =
      analyze_subgroups(item_attributes(*dataset, report.items, o.subgroups), rows, patients, bootstrap, thresholds);
  std::optional<BoxLocalizationResult> localization;
  if (!o.boxes.empty()) {
    std::optional<BootstrapOptions> over_boxes;  // intervals over boxes where intervals were asked for
    if (bootstrap) over_boxes = BootstrapOptions{bootstrap->resamples, 0.95, bootstrap->seed};
    localization = localize_boxes(model, *dataset, split, boxes, explain_method, resolve_device(o.device), over_boxes,
                                  o.save_localization.empty() ? 0 : kReportLocalizationImages);
    if (!o.save_localization.empty()) {
      nlohmann::json file = localization_result_json(*localization);
      file["format"] = kLocalizationFormat;
      file["version"] = 1;
      file["model"] = model.directory.string();
      file["data"] = dataset->spec();
      file["split"] = split_name(split);
      file["box_list"] = std::filesystem::absolute(o.boxes).string();
      write_text_file_atomically(o.save_localization, file.dump(1) + "\n");
    }
  }
  if (o.json) {
    nlohmann::json j = report.to_json();
    if (localization) {
      j["localization"] = localization_result_json(*localization);
      nlohmann::json& boxes_json = j["localization"];  // the images go to --save-localization's file only
      if (boxes_json.contains("worst_images"))
        for (auto& w : boxes_json["worst_images"]) w.erase("overlay_png");
    }
    j["model"] = model.directory.string();
    j["data"] = dataset->spec();
    j["subgroups"] = subgroups_json(subgroups);
    j["subgroup_gaps"] = subgroup_gaps_json(subgroups);
    j["subgroup_left_out"] = subgroup_left_out_json(subgroups);
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("%s split of %s: %lld images, loss %.4f\n%s", report.split.c_str(), dataset->spec().c_str(),
                static_cast<long long>(report.rows), report.loss, report.table().c_str());
    if (!thresholds)
      std::printf("operating points: none (--thresholds RUN_DIR/thresholds.json applies those train chose on val)\n");
    std::printf("%s", subgroups_table(subgroups).c_str());
    if (localization) std::printf("%s", localization_table(*localization).c_str());
    if (!label_mapping.is_null()) {
      std::string mapped;
      for (const auto& [target, source] : label_mapping["mapped"].items())
        mapped += (mapped.empty() ? "" : ", ") +
                  (target == source.get<std::string>() ? target : target + " <- " + source.get<std::string>());
      std::printf("labels mapped: %s\n", mapped.c_str());
      std::string unmapped, unused;
      for (const auto& name : label_mapping["unmapped"])
        unmapped += (unmapped.empty() ? "" : ", ") + name.get<std::string>();
      for (const auto& name : label_mapping["unused"]) unused += (unused.empty() ? "" : ", ") + name.get<std::string>();
      if (!unmapped.empty()) std::printf("model labels not in this dataset: %s\n", unmapped.c_str());
      if (!unused.empty()) std::printf("dataset labels the model lacks: %s\n", unused.c_str());
    }
  }
}

}  // namespace

void add_eval_command(CLI::App& app) {
  auto o = std::make_shared<EvalOptions>();
  auto* cmd = app.add_subcommand("eval", "Evaluate a model on a dataset split: loss, per-label ROC-AUC and PR-AUC");
  cmd->add_option("--model", o->model, "Model directory or Hugging Face repo id")->required();
  cmd->add_option("--revision", o->revision, "Hub revision (branch, tag or commit) of a repo id");
  add_dataset_flags(cmd, &o->data, &o->dataset, true, &o->read);
  cmd->add_option("--split", o->split, "train, val or test")->capture_default_str();
  cmd->add_flag("--json", o->json, "Print one JSON object");
  cmd->add_option("--save-predictions", o->save_predictions,
                  "Also write FILE.csv: per image its path, patient, true labels, logits and probabilities");
  cmd->add_option("--bootstrap", o->bootstrap, "Bootstrap resamples for 95% confidence intervals (0 = none)");
  cmd->add_option("--bootstrap-seed", o->bootstrap_seed, "Seed of the bootstrap resampling");
  cmd->add_option("--bootstrap-unit", o->bootstrap_unit,
                  "What the bootstrap resamples: patient, image, or auto (patients where the dataset has ids)")
      ->capture_default_str();
  cmd->add_option("--thresholds", o->thresholds,
                  "Operating points at these thresholds (a run's thresholds.json, chosen on its val split)");
  cmd->add_option("--subgroup", o->subgroups,
                  "Also report by this column of a csv: dataset (repeatable; sex, age band and view always)");
  cmd->add_option("--boxes", o->boxes,
                  "Score the heatmaps on radiologists' boxes: NIH's BBox_List_2017.csv or image,finding,x,y,w,h");
  cmd->add_option("--save-localization", o->save_localization,
                  "With --boxes: also write FILE.json (the box metrics and the worst-localized images with their "
                  "boxes drawn) for vitpipe report (a run's RUN_DIR/localization-SPLIT.json is read by default)");
  cmd->add_option("--explain-method", o->explain_method, "Heatmaps for --boxes: rollout, grad-rollout or gradcam")
      ->capture_default_str();
  cmd->add_option("--batch-size", o->batch_size, "Images per forward pass")->capture_default_str();
  cmd->add_option("--image-size", o->image_size, "Evaluate at another resolution (position embeddings resized)");
  cmd->add_option("--threads", o->threads, "CPU threads (0 = all cores)");
  cmd->add_option("--loader-threads", o->loader_threads, "Image decoding threads")->capture_default_str();
  add_device_flag(cmd, &o->device);
  add_allow_tf32_flag(cmd, &o->allow_tf32);
  cmd->callback([o] {
    resolve_device(o->device);
    run_eval(*o);
  });
}

}  // namespace vitpipe::cli
