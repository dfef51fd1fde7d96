#include "train/trainer.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <numeric>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "backend/backend.h"
#include "backend/device_selection.h"
#include "data/data_spec.h"
#include "data/label_checks.h"
#include "data/loader.h"
#include "evaluation/subgroups.h"
#include "explain/explain_images.h"
#include "io/model_files.h"
#include "io/onnx_export.h"
#include "io/peft_adapter.h"
#include "model/initializer.h"
#include "model/trainable_set.h"
#include "model/vit_stage.h"
#include "parallel/comm_deadline.h"
#include "parallel/host_topology.h"
#include "parallel/optimizer_shards.h"
#include "parallel/pipeline_executor.h"
#include "parallel/process_grid.h"
#include "parallel/trace.h"
#include "plan/rank_placement.h"
#include "report/model_card.h"
#include "report/training_report.h"
#include "train/batch_source.h"
#include "train/distributed_state.h"
#include "train/evaluation.h"
#include "train/grad_clip.h"
#include "train/layout_auto.h"
#include "train/lora_export.h"
#include "train/metrics_log.h"
#include "train/pos_weight.h"
#include "train/predictions_file.h"
#include "train/run_world.h"
#include "train/subset_checkpoint.h"
#include "train/training_checkpoint.h"
#include "util/atomic_file.h"
#include "util/error.h"
#include "util/log.h"
#include "util/median.h"
#include "util/output_folder.h"
#include "util/output_folder_lock.h"
#include "util/progress.h"
#include "util/stop_request.h"
#include "util/threads.h"

namespace vitpipe {
namespace fs = std::filesystem;
namespace {

// The options check_resume_compatible compares (JSON keys).
const std::array<std::string_view, 23> kMustAgree = {"data",
                                                     "batch_size",
                                                     "seed",
                                                     "data_seed",
                                                     "val_fraction",
                                                     "view",
                                                     "add_no_finding",
                                                     "optimizer",
                                                     "partial_batch",
                                                     "image_size",
                                                     "intensity",
                                                     "dicom_window",
                                                     "dicom_first_frame",
                                                     "uncertain",
                                                     "blank",
                                                     "label_vote",
                                                     "mimic_labels",
                                                     "labels",
                                                     "freeze",
                                                     "freeze_layers",
                                                     "lora",
                                                     "lora_alpha",
                                                     "lora_targets"};

constexpr int kMaxTracedSteps = 50;  // a trace of every step of a long run would not fit in memory

ScheduleKind schedule_of(const TrainOptions& o) { return parse_schedule_kind(o.pipeline_schedule); }

// A replica's rows split into m micro-batches whose sizes differ by at most one.
std::vector<int64_t> even_split(int64_t rows, int parts) {
  std::vector<int64_t> sizes(static_cast<size_t>(parts));
  for (int j = 0; j < parts; ++j) sizes[static_cast<size_t>(j)] = (j + 1) * rows / parts - j * rows / parts;
  return sizes;
}

AugmentationSettings augmentation_settings(const AugmentOptions& a) {
  AugmentationSettings s;
  s.random_resized_crop = a.crop_scale.has_value();
  if (a.crop_scale) {
    s.crop_scale_min = a.crop_scale->first;
    s.crop_scale_max = a.crop_scale->second;
  }
  s.rotation = a.rotate_degrees > 0;
  s.max_rotation_degrees = a.rotate_degrees;
  s.color_jitter = a.brightness > 0 || a.contrast > 0;
  s.brightness = a.brightness;
  s.contrast = a.contrast;
  s.horizontal_flip = a.hflip;
  return s;
}

// Options a resumed run must share with the run that wrote the checkpoint, or the data order and the meaning of
// "step" would change under it. Every difference is named at once.
void check_resume_compatible(const TrainOptions& now, const nlohmann::json& saved, const std::string& source) {
  std::vector<std::string> changeable;
  const nlohmann::json current = now.to_json();
  for (const auto& [key, value] : current.items()) {
    if (std::find(kMustAgree.begin(), kMustAgree.end(), key) != kMustAgree.end()) continue;
    std::string flag = key;
    std::replace(flag.begin(), flag.end(), '_', '-');
    changeable.push_back(flag);
  }
  nlohmann::json was = saved;
  // Runs before absolute paths recorded --data as typed, relative to the directory resuming them.
  if (was.contains("data") && was["data"].is_string()) was["data"] = recorded_data_spec(was["data"].get<std::string>());
  // ... and a --labels FILE likewise.
  if (was.contains("labels") && was["labels"].is_string()) {
    TrainOptions labels_only;
    labels_only.labels = was["labels"].get<std::string>();
    was["labels"] = with_recorded_paths(labels_only).labels;
  }
  const std::vector<std::string> differing = differing_options(now, was, changeable);
  if (differing.empty()) return;
  std::string list;
  for (const auto& d : differing) list += (list.empty() ? "" : ", ") + d;
  fail(source, ": ", differing.size() == 1 ? "this option differs" : "these options differ",
       " from when the checkpoint was written: ", list, "; resume with the same values (or start a new --output-dir)");
}

struct Stopwatch {
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  double seconds() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); }
};

class RankTrainer {
 public:
  RankTrainer(Communicator& world, const TrainOptions& options) : world_(world), o_(options) {
    // --precision auto: bf16 on a GPU (every GPU this build runs on, sm_80 and later, has bf16 tensor cores); on the
    // CPU it was resolved from the CPU's bf16 instructions when the options were read.
    if (o_.precision_auto && device_ == Device::cuda) o_.precision = DType::bf16;
  }
  void run();
  // The signal that stopped the run before its end (util/stop_request.h), or 0.
  int stopped_by() const { return stopped_by_; }

 private:
  ParallelConfig parallel_config(int layers) const;
  void check_layout_before_loading();
  void open_data();
  double time_data_path() const;
  void load_model_and_state();
  void start_from_adapter();
  void build_pipeline();
  RankPlacement place_ranks(const ParallelConfig& pc) const;
  void plan_epochs();
  bool train_loop();
  StepShape step_shape(int64_t epoch, int64_t batch_in_epoch, Batch* batch);
  void optimizer_step(const StepResult& result, nlohmann::json* record);
  EvaluationReport evaluate(Split split);
  nlohmann::json data_summary_record() const;
  void write_report(const std::vector<EvaluationReport>& reports, int64_t model_step);
  void write_report_heatmaps(const EvaluationReport& report);
  void save_checkpoint();
  void export_model(const fs::path& directory);
  void write_model_cards();
  void after_evaluation(const EvaluationReport& report);
  void finish();
  bool root() const { return world_.rank() == 0; }

  Communicator& world_;
  TrainOptions o_;
  fs::path output_;
  std::shared_ptr<Dataset> dataset_;
  ImageReadOptions image_read_;  // as asked (a cache must have been prepared so)
  std::optional<fs::path> resume_from_;
  OutputFolder output_folder_;                     // --output-dir under the overwrite rule (checked by the root rank)
  std::unique_ptr<OutputFolderLock> output_lock_;  // held by the root rank from the first write to the end
  TrainingCheckpoint resumed_;
  LoadedModel model_;
  std::shared_ptr<const ParameterLayout> layout_;  // the whole model, LoRA matrices included
  std::shared_ptr<const TrainableSplit> split_;
  FlatParameters values_;             // whole model (layout_): the frozen values, and the trainable ones as exported
  FlatParameters resumed_trainable_;  // resuming: the checkpoint's trainable parameters (whole, trainable layout)
  uint64_t frozen_fingerprint_ = 0;
  ParallelPlan plan_;
  std::unique_ptr<ProcessGrid> grid_;
  // --device, resolved once: every chunk's backend (parameters, gradients, moments, activations) is on it.
  Device device_ = select_device(parse_device_choice(o_.device));
  std::vector<std::unique_ptr<Backend>> backends_;
  std::vector<std::unique_ptr<ViTStage>> chunks_;
  std::vector<std::unique_ptr<Optimizer>> optimizers_;
  std::unique_ptr<TraceRecorder> trace_;
  std::unique_ptr<PipelineExecutor> executor_;
  std::unique_ptr<Loader> loader_;
  std::unique_ptr<MetricsLog> metrics_;
  TrainerState state_;
  int64_t micro_batch_ = 0;
  int micro_batches_ = 0;
  int64_t batches_per_epoch_ = 0;
  // The latest validation evaluation of this process and the one of the weights in model/ (known to every rank;
  // the reports' contents are on rank 0), so finish() need not evaluate the same weights again.
  std::optional<int64_t> last_eval_step_, best_eval_step_;
  EvaluationReport last_eval_, best_eval_;
  bool use_partial_ = true;
  int64_t loader_epoch_ = -1;
  // Steps this process has run. Its first step is left out of the timings, also when it resumes a run: it pays
  // oneDNN's one-time primitive creation.
  int64_t steps_this_process_ = 0;
  // Per measured step: this rank's step and compute time,
  // and the share of the gradient all-reduce hidden behind its backward pass.
  std::vector<double> step_seconds_, compute_seconds_, hidden_samples_;
  double optimizer_state_bytes_ = 0;
  std::optional<LayoutPrediction> predicted_;  // --layout auto's choice
  HostTopology topology_;                      // which ranks share a host (MPI's shared-memory split)
  RankPlacement placement_;                    // the grid's rank order on those hosts
  std::vector<double> iteration_seconds_;      // per measured step: the whole iteration, optimizer included
  // Communication summed over ranks and measured steps (optimizer_step's order), for the end-of-run summary.
  std::array<double, 10> comm_sums_{};
  int64_t comm_steps_ = 0;
  int stopped_by_ = 0;
};

void RankTrainer::run() {
  VP_REQUIRE(!o_.model.empty(), "--model is required (a model directory or a Hugging Face repo id)");
  VP_REQUIRE(!o_.data.empty(), "--data is required");
  VP_REQUIRE(!o_.output_dir.empty(), "--output-dir is required");
  output_ = o_.output_dir;
  if (o_.resume) resume_from_ = latest_checkpoint(output_);
  if (o_.resume && !o_.resume_auto) {
    VP_REQUIRE(resume_from_.has_value(), "--resume: no checkpoint in ", (output_ / "checkpoints").string(),
               " (train without --resume to start, or with --resume auto to start when there is none)");
  } else if (o_.resume_auto && resume_from_) {
    if (root()) info("--resume auto: continuing ", resume_from_->string());
  } else if (root()) {
    if (o_.resume_auto) info("--resume auto: no checkpoint in ", (output_ / "checkpoints").string(), ": starting");
    VP_REQUIRE(!latest_checkpoint(output_).has_value(), "--output-dir ", output_.string(),
               " already holds a training run; add --resume to continue it or choose another directory");
    // A run whose checkpoints were deleted still holds its exported model, which a new run would replace.
    VP_REQUIRE(!fs::exists(output_ / "model" / "config.json"), "--output-dir ", output_.string(),
               " already holds an exported model (model/) but no checkpoint to resume; choose another directory or "
               "remove it");
    // The rule every command that writes a folder follows: new, empty, a run's own (started afresh when it holds
    // no checkpoint), or --force.
    output_folder_ = check_output_folder(output_, "train", "--output-dir", o_.force);
  }
  if (o_.layout != "auto") check_layout_before_loading();
  topology_ = learn_host_topology(world_);
  open_data();
  load_model_and_state();
  if (o_.layout == "auto")
    predicted_ = choose_training_layout(world_, o_, model_.config, topology_, [&] { return time_data_path(); });
  build_pipeline();
  plan_epochs();
  if (!train_loop()) return;  // stopped by a signal, with a checkpoint: the export and report wait for the end
  finish();
}

void RankTrainer::open_data() {
  DatasetOptions d;
  d.val_fraction = o_.val_fraction;
  d.seed = o_.data_seed;
  d.add_no_finding = o_.add_no_finding;
  d.view = o_.view;
  d.skip_unreadable = o_.skip_unreadable;
  d.image_read.intensity = parse_intensity_policy(o_.intensity, "--intensity");
  d.image_read.dicom_window = parse_dicom_window(o_.dicom_window, "--dicom-window");
  d.image_read.dicom_first_frame = o_.dicom_first_frame;
  d.uncertain = o_.uncertain == "ones"    ? UncertainPolicy::ones
                : o_.uncertain == "zeros" ? UncertainPolicy::zeros
                                          : UncertainPolicy::ignore;
  d.blank = o_.blank == "ignore" ? BlankPolicy::ignore : BlankPolicy::zeros;
  d.label_vote = o_.label_vote == "majority" ? LabelVote::majority : LabelVote::any;
  d.mimic_labels = o_.mimic_labels;
  d.labels = o_.labels;
  d.subgroup_columns = o_.subgroups;
  image_read_ = d.image_read;
  dataset_ = open_dataset(o_.data, d);
  VP_REQUIRE(o_.subgroups.empty() || dataset_->kind() == "csv", "--subgroup: only for csv: datasets (",
             dataset_->spec(), " is ", dataset_->kind(), "; its sex, age and view subgroups are reported anyway)");
  VP_REQUIRE(!dataset_->split_indices(Split::train).empty(), o_.data, ": the train split has no images");
  for (const auto& warning : check_trainable_labels(*dataset_, Split::train))
    if (root()) warn(warning);
  if (dataset_->has_masked_labels()) {
    int64_t masked = 0, elements = 0;
    for (int64_t i : dataset_->split_indices(Split::train)) {
      masked += static_cast<int64_t>(dataset_->item(i).masked.size());
      elements += dataset_->num_labels();
    }
    info("labels: ", masked, " of ", elements, " training labels are unknown (--uncertain ", o_.uncertain, ", --blank ",
         o_.blank, "): masked out of the loss, its gradient and the metrics");
  }
}

// The adapter's LoRA matrices, and its saved modules where their shapes fit (a classifier for other labels does
// not: the head starts fresh then).
void RankTrainer::start_from_adapter() {
  const PeftTrainingStart start = read_peft_adapter_for_training(o_.initial_adapter);
  int lora = 0, saved = 0;
  for (const auto& [name, tensor] : start.tensors) {
    const ParamSpec* spec = layout_->find(name);
    const bool lora_matrix = spec && spec->is_lora();
    VP_REQUIRE(spec != nullptr, o_.initial_adapter, ": tensor '", name, "' names no parameter of ", start.base_model);
    if (tensor.shape() != spec->shape) {
      VP_REQUIRE(is_classifier_parameter(*spec), o_.initial_adapter, ": '", name, "' is ", shape_string(tensor.shape()),
                 ", the model's is ", shape_string(spec->shape));
      if (root()) info(o_.initial_adapter, ": its classifier has other labels than the data; the head starts fresh");
      continue;
    }
    std::copy(tensor.f32(), tensor.f32() + tensor.numel(), values_.tensor(*spec).f32());
    ++(lora_matrix ? lora : saved);
  }
  if (root()) info("started from ", o_.initial_adapter, ": ", lora, " LoRA matrices, ", saved, " saved tensors");
}

void RankTrainer::load_model_and_state() {
  LoadOptions lo;
  lo.labels = dataset_->label_names();
  lo.image_size = o_.image_size;
  lo.problem_type = dataset_->multi_label() ? ProblemType::multi_label : ProblemType::single_label;
  lo.seed = o_.seed;
  lo.allow_fresh_head = true;
  const TrainingMode mode = o_.training_mode();
  if (resume_from_) {
    resumed_ = read_training_checkpoint(*resume_from_);
    check_resume_compatible(o_, resumed_.state.options, resume_from_->string());
    state_ = resumed_.state;
    if (!resumed_.subset()) {
      lo.allow_fresh_head = false;
      model_ = load_model(resume_from_->string(), lo);
    } else {
      model_ = load_model(o_.model, lo);  // the base; what trained comes from the checkpoint below
    }
    info("resuming from ", resume_from_->string(), " at step ", state_.step, " (epoch ", state_.epoch + 1, ", batch ",
         state_.batch_in_epoch, ")");
  } else {
    model_ = load_model(o_.model, lo);
  }
  layout_ = std::make_shared<const ParameterLayout>(model_.config, mode.lora);
  values_ = FlatParameters::whole_model(layout_);
  copy_parameters(model_.parameters, values_, /*only_present=*/true);
  if (mode.lora.enabled()) initialize_lora(values_, o_.seed);
  if (!resume_from_ && !o_.initial_adapter.empty()) start_from_adapter();
  model_.parameters = FlatParameters();  // values_ holds them now
  split_ = make_trainable_split(layout_, mode);

  if (resume_from_ && resumed_.subset()) restore_trainable(resumed_, *split_, values_, resume_from_->string());
  frozen_fingerprint_ = frozen_fingerprint(*split_, values_);
  if (resume_from_) {
    resumed_trainable_ = FlatParameters::whole_model(split_->trainable);
    copy_parameters(values_, resumed_trainable_);
  }
  // How this run reads images goes into the exported preprocessor_config.json, so predict and eval read the same.
  model_.preprocessor.vitpipe_intensity = image_read_options_json(image_read_);
}

ParallelConfig RankTrainer::parallel_config(int layers) const {
  ParallelConfig pc;
  pc.world_size = world_.size();
  pc.stages = o_.pipeline_stages;
  pc.layers = layers;
  pc.micro_batch = static_cast<int>(*o_.micro_batch_size);
  pc.global_batch = static_cast<int>(o_.batch_size);
  pc.schedule = schedule_of(o_);
  pc.virtual_stages = o_.pipeline_schedule == "interleaved" ? o_.virtual_stages : 1;
  pc.layers_per_stage = o_.layers_per_stage;
  return pc;
}

void RankTrainer::check_layout_before_loading() {
  // What the layout needs of the model is its layer count; assume as many as the layout asks for here, so that
  // every other mistake (processes vs stages, batch vs micro-batches x replicas) is refused before the data set and
  // the weights are read. build_pipeline() checks again with the model's real count.
  const int pieces = o_.pipeline_stages * (o_.pipeline_schedule == "interleaved" ? o_.virtual_stages : 1);
  const int asked = o_.layers_per_stage.empty()
                        ? std::max(0, pieces - 2)
                        : std::accumulate(o_.layers_per_stage.begin(), o_.layers_per_stage.end(), 0);
  validate_parallel_config(parallel_config(asked));
}

// The rank order whose traffic between hosts is the smaller (plan/rank_placement.h); VITPIPE_RANK_ORDER
// (replica-major or stage-major) fixes it, for comparisons.
RankPlacement RankTrainer::place_ranks(const ParallelConfig& pc) const {
  GridTraffic traffic;
  traffic.stages = pc.stages;
  traffic.virtual_stages = pc.virtual_stages;
  const ViTConfig& c = model_.config;
  // Activations and their gradients, fp32 (as the planner counts them), every micro-batch of a replica's step.
  traffic.boundary_bytes = 2.0 * static_cast<double>(plan_.micro_batches) * static_cast<double>(pc.micro_batch) *
                           static_cast<double>(c.tokens() * c.hidden_size) * sizeof(float);
  for (int stage = 0; stage < pc.stages; ++stage) {
    double numel = 0;
    for (int chunk = 0; chunk < pc.virtual_stages; ++chunk) {
      const SegmentRange range = plan_.segments_of(stage, chunk);
      numel += static_cast<double>(split_->trainable->segment_end(range.last) -
                                   split_->trainable->segment_begin(range.first));
    }
    traffic.gradient_bytes.push_back(sizeof(float) * numel);
  }
  return with_fixed_rank_order(choose_rank_placement(topology_, traffic));
}

void RankTrainer::build_pipeline() {
  const ViTConfig& config = model_.config;
  const bool interleaved = o_.pipeline_schedule == "interleaved";
  const ParallelConfig pc = parallel_config(static_cast<int>(config.num_hidden_layers));
  plan_ = validate_parallel_config(pc);
  placement_ = place_ranks(pc);
  grid_ = std::make_unique<ProcessGrid>(world_.size(), world_.rank(), o_.pipeline_stages, placement_.order);
  if (topology_.hosts() > 1) {
    info("hosts: ", topology_.describe(), " (MPI's shared-memory split); ranks ", placement_.describe());
  }
  micro_batch_ = *o_.micro_batch_size;
  micro_batches_ = plan_.micro_batches;

  const Precision precision = o_.precision == DType::bf16 ? Precision::bf16 : Precision::fp32;
  size_t activation_bytes = 0, optimizer_bytes = 0, unsharded_optimizer_bytes = 0;
  std::vector<std::vector<ElementRange>> shards;  // per chunk (--shard-optimizer)
  for (int chunk = 0; chunk < pc.virtual_stages; ++chunk) {
    const SegmentRange range = plan_.segments_of(grid_->stage(), chunk);
    StageOptions so;
    so.first_segment = range.first;
    so.last_segment = range.last;
    so.precision = precision;
    so.recompute = o_.recompute;
    so.split_backward = schedule_splits_backward(pc.schedule);
    so.max_micro_batch = micro_batch_;
    so.slots = activation_slots_needed(pc.schedule, pc.stages, micro_batches_, grid_->stage(), pc.virtual_stages);
    so.split = split_;
    // On a GPU a rank's chunks share one backend (one stream): the pipeline's NCCL communicator orders every
    // chunk's activations against that stream (parallel/nccl_stage_exchange.h). On the CPU each keeps its own.
    if (backends_.empty() || device_ != Device::cuda) backends_.push_back(make_backend(device_, o_.allow_tf32));
    chunks_.push_back(std::make_unique<ViTStage>(layout_, *backends_.back(), so));
    ViTStage& stage = *chunks_.back();
    activation_bytes += stage.activation_bytes();
    OptimizerShard shard;
    if (o_.shard_optimizer) {
      // On the optimizers' chunk grid, so that a shard's update is the same arithmetic as the unsharded one's.
      const FlatParameters& p = stage.parameters();
      shards.push_back(shard_ranges(p.begin(), p.begin() + p.numel(), grid_->replicas(), kUpdateChunk));
      const ElementRange mine = shards.back()[static_cast<size_t>(grid_->replica())];
      shard.begin = mine.begin;
      shard.end = mine.end;
      // LAMB's whole-tensor norms: a tensor's pieces on the other replicas of this stage.
      shard.sum_across_shards = [this](std::span<double> sums) {
        executor_->data_parallel_group().allreduce(sums.data(), sums.size(), ReduceOp::sum);
      };
    }
    optimizers_.push_back(make_optimizer(o_.optimizer_config(), stage.parameters(), shard, backends_.back().get()));
    optimizer_bytes += optimizers_.back()->state_bytes();
    unsharded_optimizer_bytes +=
        optimizers_.back()->state_tensors().size() * static_cast<size_t>(stage.parameters().numel()) * sizeof(float);
    stage.load_values(values_);
    if (resume_from_) {
      load_chunk_state(stage, optimizers_.back().get(), resumed_trainable_, resumed_.optimizer_state,
                       resumed_.optimizer_metadata, resume_from_->string());
    }
  }
  resumed_ = TrainingCheckpoint{};  // the whole-model copies are no longer needed
  resumed_trainable_ = FlatParameters();

  trace_ = std::make_unique<TraceRecorder>(!o_.trace.empty(), world_.rank());
  trace_->synchronize_start(world_);
  ExecutorOptions eo;
  eo.schedule = pc.schedule;
  eo.virtual_stages = pc.virtual_stages;
  eo.shards = shards;
  eo.nccl_gradients = device_ == Device::cuda;  // replicas on GPUs reduce with NCCL, not through host memory
  eo.nccl_stages = device_ == Device::cuda;     // stages on GPUs exchange activations with NCCL send / recv
  if (o_.pos_weight_auto) {
    VP_REQUIRE(dataset_->multi_label(), "--pos-weight auto needs a multi-label dataset");
    const auto items = dataset_->split_indices(Split::train);
    const auto labels = static_cast<size_t>(dataset_->num_labels());
    std::vector<float> targets(items.size() * labels), known(items.size() * labels);
    for (size_t i = 0; i < items.size(); ++i) {
      dataset_->write_labels(items[i], targets.data() + i * labels);
      dataset_->write_label_weights(items[i], known.data() + i * labels);
    }
    // Among the known labels only: a masked label is neither positive nor negative.
    for (size_t k = 0; k < targets.size(); ++k) targets[k] *= known[k];
    const auto positives = count_positives(targets, dataset_->num_labels());
    std::vector<int64_t> known_counts(labels, 0);
    for (size_t k = 0; k < known.size(); ++k) known_counts[k % labels] += known[k] != 0.0f ? 1 : 0;
    const auto weights = pos_weight_from_known_counts(positives, known_counts);
    eo.pos_weight = Tensor::empty({dataset_->num_labels()});
    std::copy(weights.begin(), weights.end(), eo.pos_weight.f32());
  }
  std::vector<ViTStage*> chunks;
  for (auto& c : chunks_) chunks.push_back(c.get());
  executor_ = std::make_unique<PipelineExecutor>(*grid_, world_, chunks, eo, trace_.get());

  const double peak_activations = world_.allreduce(static_cast<double>(activation_bytes), ReduceOp::max);
  info("model: ", config.num_hidden_layers, " layers, hidden ", config.hidden_size, ", ", config.input_size(), " px, ",
       layout_->numel(), " parameters, ", config.num_labels(), " labels (",
       config.problem_type == ProblemType::multi_label ? "multi-label, BCE" : "single-label, cross-entropy", "), ",
       precision_name(precision), model_.fresh_head ? ", fresh classifier head" : "");
  if (const std::string note = bf16_speed_note(precision); !note.empty()) info(note);
  info("training: ", split_->mode.describe(), "; ", split_->trainable->numel(), " trainable parameters of ",
       layout_->numel(),
       split_->first_trained_segment > 0
           ? concat(" (the backward pass stops at segment ", split_->first_trained_segment, ")")
           : std::string());
  info("parallelism: ", world_.size(), launched_as_mpi_job() ? " MPI ranks" : " rank(s) in this process", " = ",
       o_.pipeline_stages, " pipeline stage(s) x ", grid_->replicas(), " replica(s), schedule ", o_.pipeline_schedule,
       o_.recompute ? ", activations recomputed" : "", "; ", configured_threads(), " CPU thread(s) per rank");
  if (o_.pipeline_stages > 1 || interleaved) info(plan_.describe());
  info("global batch ", o_.batch_size, " = micro-batch ", micro_batch_, " x ", micro_batches_,
       " accumulation step(s) x ", grid_->replicas(), " replica(s)");
  info("peak activation memory per rank (planned): ", format_bytes(peak_activations));
  double optimizer_state[2] = {static_cast<double>(optimizer_bytes), static_cast<double>(unsharded_optimizer_bytes)};
  world_.allreduce(optimizer_state, 2, ReduceOp::max);
  optimizer_state_bytes_ = optimizer_state[0];
  if (optimizer_state[1] > 0) {
    info("optimizer state per rank (most on any rank): ", format_bytes(optimizer_state[0]),
         o_.shard_optimizer ? concat(", sharded across ", grid_->replicas(),
                                     " replica(s) (unsharded: ", format_bytes(optimizer_state[1]), ")")
                            : std::string());
  }
}

void RankTrainer::plan_epochs() {
  const int64_t n = static_cast<int64_t>(dataset_->split_indices(Split::train).size());
  const int64_t full = n / o_.batch_size, remainder = n % o_.batch_size;
  const int replicas = grid_->replicas();
  // A partial batch is usable when every replica's share still gives each micro-batch at least one image.
  const bool usable = remainder > 0 && remainder / replicas >= micro_batches_;
  if (o_.partial_batch == "use") {
    VP_REQUIRE(remainder == 0 || usable, "--partial-batch use: the last batch of ", remainder, " images cannot feed ",
               micro_batches_, " micro-batches on each of ", replicas, " replicas; use --partial-batch drop or auto");
    use_partial_ = true;
  } else {
    use_partial_ = o_.partial_batch == "auto" && usable;
  }
  batches_per_epoch_ = full + (use_partial_ && remainder > 0 ? 1 : 0);
  VP_REQUIRE(batches_per_epoch_ > 0, o_.data, ": ", n, " training images do not fill one batch of ", o_.batch_size,
             "; lower --batch-size");
  state_.total_steps = o_.max_steps ? *o_.max_steps : *o_.epochs * batches_per_epoch_;
  info("data: ", dataset_->spec(), ": ", n, " train / ", dataset_->split_indices(Split::val).size(), " val / ",
       dataset_->split_indices(Split::test).size(), " test images; ", batches_per_epoch_, " steps per epoch, ",
       state_.total_steps, " steps in all");
  if (remainder > 0 && !use_partial_) {
    info("note: the last ", remainder, " images of each epoch's shuffled order are not trained on in that epoch ",
         "(the order changes every epoch, so every image is seen over the run); --partial-batch use keeps them");
  }
  if (grid_->first_stage()) {
    LoaderOptions lo = training_loader_options(o_.batch_size, o_.seed);
    lo.replica_index = grid_->replica();
    lo.replica_count = replicas;
    lo.threads = o_.loader_threads;
    lo.partial_batch = use_partial_ ? PartialBatch::use : PartialBatch::drop;
    lo.augment = o_.augment.enabled;
    lo.augmentation = augmentation_settings(o_.augment);
    lo.skip_unreadable = o_.skip_unreadable;
    loader_ = std::make_unique<Loader>(dataset_, dataset_->split_indices(Split::train), model_.preprocessor, lo);
    VP_REQUIRE(loader_->batches_per_epoch() == batches_per_epoch_, "loader plans ", loader_->batches_per_epoch(),
               " batches per epoch, the trainer ", batches_per_epoch_);
  }
  if (root()) {
    fs::create_directories(output_);
    // Before anything is written or removed: a second run into the folder stops here.
    output_lock_ = std::make_unique<OutputFolderLock>(output_, "--output-dir", "train");
    if (!resume_from_) mark_output_folder(output_folder_);
    remove_stale_temporaries(output_);  // what a killed run left half-written
    write_text_file_atomically(output_ / "train_options.json", o_.to_json().dump(2) + "\n");
    metrics_ = std::make_unique<MetricsLog>(output_ / "metrics.jsonl", resume_from_ ? state_.step : -1);
    if (!resume_from_) metrics_->write(data_summary_record());  // a resumed run keeps the first one
    if (topology_.hosts() > 1) {
      metrics_->write({{"type", "topology"},
                       {"hosts", topology_.hosts()},
                       {"host_of_rank", topology_.host_of_rank},
                       {"rank_order", rank_order_name(placement_.order)},
                       {"cross_host_bytes_per_step", placement_.chosen.total()},
                       {"other_order_cross_host_bytes_per_step", placement_.other.total()}});
    }
  }
}

// --layout auto's data path: one loader thread's CPU time per training image, as training loads them (decode or
// packed-cache read, resize, augmentation). The same batch is loaded twice, the second timed (files in the page
// cache, as in an epoch's steady state).
double RankTrainer::time_data_path() const {
  const std::vector<int64_t> train = dataset_->split_indices(Split::train);
  const int64_t batch = std::min<int64_t>({o_.batch_size, 64, static_cast<int64_t>(train.size())});
  if (batch < 1) return 0.0;
  LoaderOptions lo = training_loader_options(batch, o_.seed);
  lo.threads = 1;
  lo.prefetch = 1;
  lo.augment = o_.augment.enabled;
  lo.augmentation = augmentation_settings(o_.augment);
  lo.skip_unreadable = o_.skip_unreadable;
  const std::vector<int64_t> items(train.begin(), train.begin() + batch);
  double seconds = 0;
  int64_t rows = 0;
  for (int run = 0; run < 2; ++run) {
    const Stopwatch watch;
    Loader loader(dataset_, items, model_.preprocessor, lo);
    loader.start_epoch(0);
    Batch b;
    if (!loader.next(&b)) return 0.0;
    seconds = watch.seconds();
    rows = b.size();
  }
  return rows > 0 ? seconds / static_cast<double>(rows) : 0.0;
}

// What the report's data section shows: images, patients and positives (of the known labels) per split.
nlohmann::json RankTrainer::data_summary_record() const {
  nlohmann::json splits = nlohmann::json::object();
  const int64_t labels = dataset_->num_labels();
  std::vector<float> row(static_cast<size_t>(labels)), known(static_cast<size_t>(labels));
  for (Split split : {Split::train, Split::val, Split::test}) {
    const std::vector<int64_t> items = dataset_->split_indices(split);
    if (items.empty()) continue;
    std::set<std::string> patients;
    std::vector<int64_t> positives(static_cast<size_t>(labels), 0), known_counts(static_cast<size_t>(labels), 0);
    for (int64_t i : items) {
      const DatasetItem& item = dataset_->item(i);
      patients.insert(item.patient.empty() ? item.name : item.patient);
      dataset_->write_labels(i, row.data());
      dataset_->write_label_weights(i, known.data());
      for (int64_t l = 0; l < labels; ++l) {
        if (known[static_cast<size_t>(l)] == 0.0f) continue;
        known_counts[static_cast<size_t>(l)] += 1;
        positives[static_cast<size_t>(l)] += row[static_cast<size_t>(l)] != 0.0f ? 1 : 0;
      }
    }
    nlohmann::json pos = nlohmann::json::object(), kn = nlohmann::json::object();
    for (int64_t l = 0; l < labels; ++l) {
      pos[dataset_->label_names()[static_cast<size_t>(l)]] = positives[static_cast<size_t>(l)];
      kn[dataset_->label_names()[static_cast<size_t>(l)]] = known_counts[static_cast<size_t>(l)];
    }
    splits[split_name(split)] = {{"images", static_cast<int64_t>(items.size())},
                                 {"patients", static_cast<int64_t>(patients.size())},
                                 {"positives", pos},
                                 {"known", kn}};
  }
  return {{"type", "data"},
          {"step", state_.step},
          {"dataset", dataset_->spec()},
          {"labels", dataset_->label_names()},
          {"splits", splits}};
}

StepShape RankTrainer::step_shape(int64_t epoch, int64_t batch_in_epoch, Batch* batch) {
  StepShape shape;
  shape.micro_batch_sizes.assign(static_cast<size_t>(micro_batches_), 1);  // non-first stages get the real ones
  if (!loader_) return shape;
  if (loader_epoch_ != epoch) {
    loader_->start_epoch(epoch, batch_in_epoch);
    loader_epoch_ = epoch;
  }
  VP_REQUIRE(loader_->next(batch), "training data ran out in epoch ", epoch + 1, " at batch ", batch_in_epoch);
  VP_REQUIRE(batch->index == batch_in_epoch, "loader delivered batch ", batch->index, ", expected ", batch_in_epoch);
  const int64_t rows = batch->size();
  VP_REQUIRE(rows >= micro_batches_, "batch ", batch_in_epoch, " of epoch ", epoch + 1, " has ", rows,
             " usable images on this replica, fewer than its ", micro_batches_,
             " micro-batches (too many unreadable images were skipped?)");
  shape.micro_batch_sizes = even_split(rows, micro_batches_);
  // The loss is the mean over the rows every replica actually uses (unreadable images skipped) and, with masked
  // labels, over the known labels of the whole global batch: summed over the replicas before any backward pass, so
  // every layout divides by what one process training on the global batch would.
  double totals[2] = {static_cast<double>(rows), 0.0};
  if (loader_->label_weights()) {
    const float* w = batch->label_weights.f32();
    for (int64_t k = 0; k < batch->label_weights.numel(); ++k) totals[1] += w[k];
  }
  executor_->data_parallel_group().allreduce(totals, 2, ReduceOp::sum);
  shape.global_rows = static_cast<int64_t>(totals[0]);
  if (loader_->label_weights()) shape.global_label_weight = totals[1];
  return shape;
}

void RankTrainer::optimizer_step(const StepResult& result, nlohmann::json* record) {
  // Global gradient norm over the whole model: the stages of one replica hold disjoint parts; with a sharded
  // optimizer only each shard's owner holds the reduced gradient, so every rank adds its shards over the world.
  const bool sharded = executor_->sharded();
  double squares = 0;
  for (size_t c = 0; c < chunks_.size(); ++c) {
    const Optimizer& opt = *optimizers_[c];
    const FlatParameters& g = chunks_[c]->gradients();
    squares += sharded ? sum_of_squares(chunks_[c]->backend(), g, opt.range_begin(), opt.range_end())
                       : sum_of_squares(chunks_[c]->backend(), g, g.begin(), g.begin() + g.numel());
  }
  squares = sharded ? world_.allreduce(squares) : executor_->pipeline_group().allreduce(squares);
  const double norm = std::sqrt(squares);
  if (o_.clip_grad_norm > 0) {
    const double factor = clip_factor(norm, o_.clip_grad_norm);
    if (factor != 1.0) {
      for (size_t c = 0; c < chunks_.size(); ++c) {
        scale(chunks_[c]->backend(), chunks_[c]->gradients(), factor, optimizers_[c]->range_begin(),
              optimizers_[c]->range_end());
      }
    }
  }
  const double lr = o_.lr_schedule().lr(state_.step, state_.total_steps);
  {
    TraceRecorder::Scope scope(trace_.get(), "optimizer", kTraceOptimizer, 0);
    for (size_t c = 0; c < chunks_.size(); ++c) {
      optimizers_[c]->step(chunks_[c]->parameters(), chunks_[c]->gradients(), lr);
      if (!sharded) chunks_[c]->parameters_changed();  // sharded: as each segment arrives (parameter_gather.h)
      chunks_[c]->zero_gradients();
    }
  }
  executor_->start_parameter_gather();  // sharded: each shard's owner sends its update to the other replicas
  // The loss, and this step's communication summed over every rank of the job, in one reduction.
  const CommunicationStats& c = result.comm;
  double sums[12] = {result.loss_sum,
                     static_cast<double>(result.loss_elements),
                     static_cast<double>(c.activation_bytes),
                     static_cast<double>(c.activation_grad_bytes),
                     static_cast<double>(c.label_bytes),
                     static_cast<double>(c.allreduce_bytes),
                     static_cast<double>(c.reduce_scatter_bytes),
                     static_cast<double>(c.allgather_bytes),
                     c.wire_bytes(),
                     c.p2p_wait_seconds,
                     c.collective_exposed_seconds,
                     c.collective_hidden_seconds()};
  world_.allreduce(sums, 12, ReduceOp::sum);
  (*record)["loss"] = sums[1] > 0 ? sums[0] / sums[1] : 0.0;
  (*record)["lr"] = lr;
  (*record)["grad_norm"] = norm;
  // Bytes: payloads handed to the communicator by all ranks together; wire: a ring algorithm's bytes on the links.
  // Seconds: summed over ranks (divide by the world size for a mean per rank).
  nlohmann::json comm = {{"activation_bytes", sums[2]},
                         {"activation_grad_bytes", sums[3]},
                         {"label_bytes", sums[4]},
                         {"allreduce_bytes", sums[5]},
                         {"reduce_scatter_bytes", sums[6]},
                         {"allgather_bytes", sums[7]},
                         {"wire_bytes", sums[8]},
                         {"p2p_wait_seconds", sums[9]},
                         {"collective_exposed_seconds", sums[10]},
                         {"collective_hidden_seconds", sums[11]}};
  (*record)["comm"] = std::move(comm);
  if (steps_this_process_ > 0) {
    for (int i = 2; i < 12; ++i) comm_sums_[static_cast<size_t>(i - 2)] += sums[i];
    ++comm_steps_;
  }
}

EvaluationReport RankTrainer::evaluate(Split split) {
  // Evaluation's forward passes are not part of a training step (the trace's per-step bubble leaves them out).
  const int step = trace_->step();
  trace_->set_step(-1);
  struct RestoreStep {
    TraceRecorder* trace;
    int step;
    ~RestoreStep() { trace->set_step(step); }
  } restore{trace_.get(), step};
  EvaluationSettings s;
  s.micro_batch = micro_batch_;
  s.micro_batches = micro_batches_;
  s.loader_threads = o_.loader_threads;
  return evaluate_split(*executor_, world_, dataset_, split, model_.preprocessor, s);
}

void RankTrainer::export_model(const fs::path& directory) {
  executor_->complete_parameters();
  std::vector<ViTStage*> chunks;
  for (auto& c : chunks_) chunks.push_back(c.get());
  GatheredState gathered = gather_state(world_, *grid_, chunks, {});
  if (!root()) return;
  copy_parameters(gathered.parameters, values_, /*only_present=*/true);  // the frozen values stay as loaded
  // LoRA: merged into the base weights (peft's merge_and_unload): a plain model transformers loads.
  const FlatParameters model = layout_->lora().enabled() ? merge_lora(values_) : values_;
  replace_directory_atomically(
      directory, [&](const fs::path& staging) { save_model(staging, model_.config, model_.preprocessor, model); });
  if (o_.export_onnx) {
    LoadedModel exported;
    exported.config = model_.config;
    exported.preprocessor = model_.preprocessor;
    exported.parameters = model;
    export_onnx(exported, output_ / "model.onnx", {directory.string(), false});
  }
  if (o_.export_adapter) {
    const fs::path adapter = output_ / "adapter";
    replace_directory_atomically(adapter,
                                 [&](const fs::path& staging) { write_peft_adapter(staging, values_, o_.model); });
  }
}

void RankTrainer::save_checkpoint() {
  executor_->complete_parameters();
  std::vector<ViTStage*> chunks;
  std::vector<Optimizer*> optimizers;
  for (auto& c : chunks_) chunks.push_back(c.get());
  for (auto& opt : optimizers_) optimizers.push_back(opt.get());
  GatheredState gathered = gather_state(world_, *grid_, chunks, optimizers);
  if (!root()) return;
  TrainingCheckpoint c;
  c.config = model_.config;
  c.preprocessor = model_.preprocessor;
  copy_parameters(gathered.parameters, values_, /*only_present=*/true);  // frozen ones stay as loaded
  if (split_->trains_whole_model()) {
    c.model = values_;  // a whole Hugging Face model directory
  } else {
    for (const ParamSpec& spec : split_->trainable->specs()) c.trainable[spec.name] = gathered.parameters.tensor(spec);
    c.base_model = o_.model;
    c.frozen_fingerprint = frozen_fingerprint_;
  }
  c.optimizer_state = gathered.optimizer_state;
  c.optimizer_metadata = gathered.optimizer_metadata;
  c.state = state_;
  c.state.options = o_.to_json();
  const fs::path written = write_training_checkpoint(output_, c, o_.keep_checkpoints);
  info("checkpoint: ", written.string());
}

void RankTrainer::after_evaluation(const EvaluationReport& report) {
  last_eval_ = report;
  last_eval_step_ = state_.step;
  // Rank 0 decides; everyone must agree whether to take part in the export (it is collective).
  double improved = 0;
  if (root()) {
    nlohmann::json record = report.to_json();
    record.erase("detail");
    record["type"] = "eval";
    record["step"] = state_.step;
    record["epoch"] = static_cast<double>(state_.step) / static_cast<double>(batches_per_epoch_);
    metrics_->write(record);
    const auto& mean = report.metrics.roc_auc.mean;
    char line[160];
    std::snprintf(line, sizeof(line), "eval %s at step %lld: loss %.4f, mean ROC-AUC %s", report.split.c_str(),
                  static_cast<long long>(state_.step), report.loss,
                  mean ? std::to_string(*mean).substr(0, 6).c_str() : "n/a");
    info(line);
    if (!o_.export_last && mean && (!state_.best_metric || *mean > *state_.best_metric)) {
      state_.best_metric = *mean;
      state_.best_step = state_.step;
      improved = 1;
    }
  }
  world_.broadcast_bytes(&improved, sizeof(improved), 0);
  if (improved != 0) {
    best_eval_ = report;
    best_eval_step_ = state_.step;
    export_model(output_ / "model");
    info("best so far (mean ROC-AUC ", *state_.best_metric, "): exported to ", (output_ / "model").string());
  }
}

bool RankTrainer::train_loop() {
  const bool has_val = !dataset_->split_indices(Split::val).empty();
  if (!has_val) info("no validation images (--val-fraction 0?): exporting the last weights");
  ProgressBar progress("training", state_.total_steps, "step");
  progress.update(state_.step);
  const int64_t images_per_step = o_.batch_size;
  Stopwatch since_log;
  int64_t images_since_log = 0;
  double loss_since_log = 0;
  int64_t steps_since_log = 0;
  std::string detail;  // the progress line's epoch, loss and rate
  // Minutes of work since this process's last checkpoint (or its start), for --checkpoint-minutes: a long epoch on
  // the full data set would otherwise leave hours unsaved.
  Stopwatch since_checkpoint;
  while (state_.step < state_.total_steps) {
    const Stopwatch iteration;
    const int64_t epoch = state_.epoch, index = state_.batch_in_epoch;
    trace_->set_step(static_cast<int>(state_.step));
    Batch batch;
    StepShape shape;
    {
      TraceRecorder::Scope scope(trace_.get(), "load batch", kTraceData, 0);
      shape = step_shape(epoch, index, &batch);
    }
    const MicroBatchSource source = micro_batches_of(batch, shape.micro_batch_sizes, dataset_->multi_label());
    const StepResult result = executor_->train_step(shape, source);
    nlohmann::json record = {{"type", "train"}, {"step", state_.step + 1}};
    optimizer_step(result, &record);
    if (steps_this_process_ > 0) iteration_seconds_.push_back(iteration.seconds());
    if (steps_this_process_ > 0 && result.seconds > 0) {
      step_seconds_.push_back(result.seconds);
      compute_seconds_.push_back(result.compute_seconds);
      hidden_samples_.push_back(result.reduction.hidden_fraction());
    }
    // --trace keeps the first kMaxTracedSteps steps of this run; recording stops there (clearing would throw the
    // whole trace away).
    if (++steps_this_process_ >= kMaxTracedSteps) trace_->set_enabled(false);

    ++state_.step;
    ++state_.batch_in_epoch;
    if (state_.batch_in_epoch == batches_per_epoch_) {
      state_.batch_in_epoch = 0;
      ++state_.epoch;
    }
    const bool epoch_end = state_.batch_in_epoch == 0;
    images_since_log += images_per_step;
    loss_since_log += record["loss"].get<double>();
    ++steps_since_log;
    const double rate = static_cast<double>(images_since_log) / std::max(1e-9, since_log.seconds());
    char text[128];
    std::snprintf(text, sizeof(text), "epoch %lld  loss %.4f  %.1f img/s", static_cast<long long>(epoch + 1),
                  record["loss"].get<double>(), rate);
    detail = text;
    progress.update(state_.step, detail);
    if (root() && ((o_.log_every > 0 && state_.step % o_.log_every == 0) || state_.step == state_.total_steps)) {
      record["epoch"] = static_cast<double>(state_.step) / static_cast<double>(batches_per_epoch_);
      record["images_per_s"] = rate;
      record["time"] = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
      record["mean_loss_since_last_log"] = loss_since_log / static_cast<double>(steps_since_log);
      metrics_->write(record);
      images_since_log = 0;
      loss_since_log = 0;
      steps_since_log = 0;
      since_log = Stopwatch{};
    }
    const bool last = state_.step == state_.total_steps;
    const bool evaluate_now = has_val && (o_.eval_every > 0 ? state_.step % o_.eval_every == 0 : epoch_end);
    if (evaluate_now || (last && has_val && !(o_.eval_every > 0 ? state_.step % o_.eval_every == 0 : epoch_end))) {
      after_evaluation(evaluate(Split::val));
    }
    // A stop request (util/stop_request.h) counts when every rank has seen it: the largest signal number of any
    // rank, so all ranks stop after the same step (evaluated as scheduled, so a resumed run stays exact).
    // The time-based checkpoint is agreed the same way: due when any rank's clock says so.
    const bool time_due = o_.checkpoint_every == 0 && o_.checkpoint_minutes > 0 &&
                          since_checkpoint.seconds() >= 60.0 * o_.checkpoint_minutes;
    double agreed[2] = {static_cast<double>(stop_signal()), time_due ? 1.0 : 0.0};
    world_.allreduce(agreed, 2, ReduceOp::max);
    const double stop = agreed[0];
    const bool checkpoint_now = o_.checkpoint_every > 0 ? state_.step % o_.checkpoint_every == 0 : agreed[1] != 0;
    if (checkpoint_now || last || stop != 0) {
      save_checkpoint();
      since_checkpoint = Stopwatch{};
    }
    if (stop != 0) {
      stopped_by_ = static_cast<int>(stop);
      progress.finish(detail);
      if (root()) {
        info("stopped by ", stop_signal_name(stopped_by_), " after step ", state_.step, " of ", state_.total_steps,
             ", checkpoint written; continue with --resume auto (exit status ", stop_exit_status(stopped_by_), ")");
      }
      return false;
    }
  }
  progress.finish(detail);
  return true;
}

void RankTrainer::finish() {
  const fs::path model_dir = output_ / "model";
  const bool has_val = !dataset_->split_indices(Split::val).empty();
  // Rank 0 knows whether a best model was exported; the export is collective, so it decides for everyone.
  double export_last = root() && (o_.export_last || !has_val || !fs::exists(model_dir) || !state_.best_metric);
  world_.broadcast_bytes(&export_last, sizeof(export_last), 0);
  if (export_last != 0) {
    export_model(model_dir);
    info("exported the last weights to ", model_dir.string());
  }
  // Bubble and gradient reduction figures, averaged over steps and ranks. A step's window is its pipeline's longest
  // rank's step, as in the theory: a last stage that finishes early idles until the first one is done (it waits in
  // the optimizer's norm reduction, outside its own step time).
  std::vector<double> window = step_seconds_;  // every rank measured the same steps
  executor_->pipeline_group().allreduce(window.data(), window.size(), ReduceOp::max);
  double sums[3] = {0, 0, 0};
  for (size_t i = 0; i < window.size(); ++i) sums[0] += window[i] > 0 ? 1.0 - compute_seconds_[i] / window[i] : 0.0;
  for (double h : hidden_samples_) sums[1] += h;
  sums[2] = static_cast<double>(window.size());
  world_.allreduce(sums, 3, ReduceOp::sum);
  if (sums[2] > 0 && (o_.pipeline_stages > 1 || grid_->replicas() > 1)) {
    const double theory = theoretical_bubble_fraction(schedule_of(o_), o_.pipeline_stages, micro_batches_,
                                                      o_.pipeline_schedule == "interleaved" ? o_.virtual_stages : 1);
    char line[200];
    std::snprintf(line, sizeof(line),
                  "pipeline bubble: measured %.1f%% of step time idle (mean over ranks and steps), theory %.1f%%",
                  100.0 * sums[0] / sums[2], 100.0 * theory);
    std::string text = line;
    if (grid_->replicas() > 1) {  // with one replica there is no all-reduce to hide
      std::snprintf(line, sizeof(line), "; gradient all-reduce hidden behind backward: %.0f%%",
                    100.0 * sums[1] / sums[2]);
      text += line;
    }
    info(text);
    if (root()) {
      nlohmann::json record = {{"type", "parallel"},
                               {"step", state_.step},
                               {"pipeline_stages", o_.pipeline_stages},
                               {"replicas", grid_->replicas()},
                               {"schedule", o_.pipeline_schedule},
                               {"micro_batches", micro_batches_},
                               {"bubble_measured", sums[0] / sums[2]},
                               {"bubble_theory", theory}};
      if (grid_->replicas() > 1) record["allreduce_hidden"] = sums[1] / sums[2];
      metrics_->write(record);
    }
  }
  if (comm_steps_ > 0 && world_.size() > 1) {
    const double n = static_cast<double>(comm_steps_), ranks = world_.size();
    const auto& c = comm_sums_;
    info("communication per step (all ranks): activations ", format_bytes(c[0] / n), ", their gradients ",
         format_bytes(c[1] / n), ", labels ", format_bytes(c[2] / n), ", gradient all-reduce ", format_bytes(c[3] / n),
         ", reduce-scatter ", format_bytes(c[4] / n), ", parameter all-gather ", format_bytes(c[5] / n),
         "; on the wire (ring model) ", format_bytes(c[6] / n),
         ". Per rank and step: ", static_cast<int>(1e3 * c[7] / n / ranks), " ms waiting for messages, collectives ",
         static_cast<int>(1e3 * c[8] / n / ranks), " ms exposed / ", static_cast<int>(1e3 * c[9] / n / ranks),
         " ms hidden");
  }
  const double measured = median_of(iteration_seconds_);  // of this process's steps after its first
  if (!predicted_ && !iteration_seconds_.empty()) {
    // Every layout reports it, so a hand-picked layout can be set beside `vitpipe plan`'s prediction for it.
    info("step time: median ", format_seconds(measured), " of ", iteration_seconds_.size(),
         " steps after the first (from waiting for the batch to the optimizer's end)");
    if (root()) {
      metrics_->write({{"type", "step_time"},
                       {"step", state_.step},
                       {"measured_step_seconds", measured},
                       {"measured_steps", iteration_seconds_.size()}});
    }
  }
  if (predicted_ && !iteration_seconds_.empty()) {
    char line[400];
    std::snprintf(line, sizeof(line),
                  "--layout auto: predicted %.3f s per step (pipeline %.3f, exposed communication %.3f, optimizer "
                  "%.3f, data path %.3f), measured %.3f s (median of %zu steps after the first, each from waiting "
                  "for its batch to the optimizer's end; measured / predicted = %.2f)",
                  predicted_->step_seconds, predicted_->pipeline_seconds, predicted_->exposed_communication_seconds,
                  predicted_->optimizer_seconds, predicted_->data_seconds, measured, iteration_seconds_.size(),
                  measured / predicted_->step_seconds);
    info(line);
    if (root()) {
      nlohmann::json record = {{"type", "layout"},
                               {"step", state_.step},
                               {"layout", predicted_->layout.describe()},
                               {"train_flags", predicted_->layout.train_flags()},
                               {"predicted_step_seconds", predicted_->step_seconds},
                               {"measured_step_seconds", measured},
                               {"measured_steps", iteration_seconds_.size()},
                               {"predicted_bubble", predicted_->bubble},
                               {"predicted_exposed_communication_seconds", predicted_->exposed_communication_seconds},
                               {"predicted_wire_bytes", predicted_->volume.wire},
                               {"predicted_data_seconds", predicted_->data_seconds}};
      metrics_->write(record);
    }
  }
  if (!o_.trace.empty()) {
    write_chrome_trace(world_, *trace_, grid_->describe(), o_.trace);
    info("trace (first ", kMaxTracedSteps, " steps at most) written to ", o_.trace,
         " (open in chrome://tracing or ui.perfetto.dev)");
  }
  // Final report on the exported model. Its validation numbers are already at hand when this process evaluated
  // exactly those weights (the best step's, or the last step's when the last weights were exported): they are not
  // computed twice. Anything else runs on the model reloaded from model/, so the numbers describe what was written.
  const std::optional<int64_t>& exported_eval = export_last != 0 ? last_eval_step_ : best_eval_step_;
  const bool val_known = has_val && exported_eval && (export_last == 0 || *exported_eval == state_.step);
  const bool test = o_.test && !dataset_->split_indices(Split::test).empty();
  if (o_.test && !test) info("--test: the dataset has no test split images");
  if ((has_val && !val_known) || test) {
    LoadOptions lo;
    lo.reference.allow_download = false;
    LoadedModel exported = load_model(model_dir.string(), lo);
    // LoRA: the export is merged, so the matrices stay zero here (no update on top of the merged weights).
    FlatParameters values = FlatParameters::whole_model(layout_);
    copy_parameters(exported.parameters, values, /*only_present=*/true);
    for (auto& chunk : chunks_) chunk->load_values(values);
  }
  std::vector<EvaluationReport> reports;
  if (has_val) reports.push_back(val_known ? (export_last != 0 ? last_eval_ : best_eval_) : evaluate(Split::val));
  if (test) reports.push_back(evaluate(Split::test));
  if (root()) {
    for (const auto& report : reports) {
      info("\n", report.split, " split (", report.rows, " images), model ", model_dir.string(), ", loss ", report.loss,
           ":\n", report.table());
    }
    write_report(reports, exported_eval.value_or(state_.step));
    info("model written to ", model_dir.string(),
         " (Hugging Face format: config.json, model.safetensors, "
         "preprocessor_config.json); metrics in ",
         (output_ / "metrics.jsonl").string());
  }
}

// The report's "where the model looks": the exported model's gradient-weighted rollout on the kReportHeatmaps
// images of the last evaluated split (test when evaluated) whose most probable finding scores highest. A dataset
// without image files (a packed cache) has none to show; a failure here costs the run nothing but the maps.
void RankTrainer::write_report_heatmaps(const EvaluationReport& report) {
  constexpr size_t kReportHeatmaps = 4;
  const size_t labels = static_cast<size_t>(dataset_->num_labels());
  if (report.items.empty() || labels == 0 || report.scores.size() != report.items.size() * labels) return;
  std::vector<std::pair<double, size_t>> best;  // (highest score of the row, row)
  for (size_t r = 0; r < report.items.size(); ++r) {
    const float* row = report.scores.data() + r * labels;
    best.emplace_back(*std::max_element(row, row + labels), r);  // logits rank as their probabilities do
  }
  std::stable_sort(best.begin(), best.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::string> images;
  for (const auto& [score, r] : best) {
    const fs::path file = dataset_->file_path(report.items[r]);
    if (file.empty()) return;
    images.push_back(file.string());
    if (images.size() == kReportHeatmaps) break;
  }
  try {
    const fs::path dir = output_ / "heatmaps";
    LoadedModel exported = load_model((output_ / "model").string());
    ExplainRequest request;
    request.out_dir = dir;
    request.reading = image_read_;
    explain_images(exported, (output_ / "model").string(), images, request);
    info("heatmaps: ", images.size(), " ", report.split, " images in ", dir.string());
  } catch (const Error& e) {
    warn("heatmaps for the report not written: ", e.what());
  }
}

// Rank 0: the exported model's predictions on each evaluated split, the operating-point thresholds chosen on val
// (thresholds.json: what the report and `eval --thresholds` apply to test), then the HTML report over the run's files.
void RankTrainer::write_report(const std::vector<EvaluationReport>& reports, int64_t model_step) {
  for (const auto& report : reports) {
    write_predictions_csv(output_ / ("predictions-" + report.split + ".csv"), report, *dataset_, o_.subgroups);
  }
  if (!reports.empty()) write_report_heatmaps(reports.back());
  const fs::path thresholds = output_ / "thresholds.json";
  fs::remove(thresholds);  // a resumed run's old file must not outlive the model it described
  ReportInputs inputs = read_run_directory(output_);
  // Chosen on the val predictions as written (the report reads the same file), so both agree to the bit; only when
  // this run evaluated val (a predictions-val.csv left by an earlier run in the directory is not this model's).
  const bool val = std::any_of(reports.begin(), reports.end(), [](const auto& r) { return r.split == "val"; });
  std::optional<ThresholdSet> chosen = val ? report_thresholds(inputs) : std::nullopt;
  if (chosen) {
    chosen->data = dataset_->spec();
    chosen->step = model_step;
    write_thresholds_file(thresholds, *chosen);
    inputs.thresholds = read_thresholds_file(thresholds);
    info("operating-point thresholds chosen on val: ", thresholds.string());
  }
  // The final evaluation's record of each split, its subgroups beside its other metrics under the names `eval --json`
  // uses (computed from the predictions as written, at the val-chosen thresholds: what the report shows).
  const std::optional<ThresholdSet> applied = report_thresholds(inputs);
  for (const auto& report : reports) {
    nlohmann::json record = report.to_json();
    record.erase("detail");
    record["type"] = "final_eval";
    record["step"] = state_.step;
    if (inputs.splits.count(report.split)) {
      const SubgroupAnalysis subgroups =
          predictions_subgroups(inputs.splits.at(report.split), ReportOptions{}, applied);
      record["subgroups"] = subgroups_json(subgroups);
      record["subgroup_gaps"] = subgroup_gaps_json(subgroups);
      record["subgroup_left_out"] = subgroup_left_out_json(subgroups);
      if (report.split == "test")  // train --test: the test split by subgroup, as the report shows it
        info("\ntest split by subgroup:\n", subgroups_table(subgroups));
    }
    metrics_->write(record);
    inputs.metrics.push_back(std::move(record));
  }
  const fs::path html = output_ / "report.html";
  write_text_file_atomically(html, training_report_html(inputs, ReportOptions{}));
  info("report: ", html.string(), " (predictions of the exported model: predictions-SPLIT.csv)");
  write_model_cards();
}

// The model card beside every model this run wrote (model/, and adapter/ with --export-adapter), from the files just
// written. Like the heatmaps, a card that cannot be written costs the run nothing but the card.
void RankTrainer::write_model_cards() {
  ModelCardOptions card;
  card.run_dir = output_;  // its train_options.json holds --license, so `vitpipe card` finds the same one
  std::vector<std::pair<fs::path, bool>> targets = {{output_ / "model", false}};
  if (o_.export_adapter) targets.emplace_back(output_ / "adapter", true);
  for (const auto& [directory, adapter] : targets) {
    try {
      card.adapter = adapter;
      info("model card: ", write_model_card(directory, card).string());
    } catch (const std::exception& e) {
      warn("model card for ", directory.string(), " not written: ", e.what());
    }
  }
}

}  // namespace

int run_training(const TrainOptions& options) {
  TrainOptions o = options;
  continue_peft_adapter(o);
  // Run files (train_options.json, checkpoints, the adapter) must name the same paths from any directory.
  o = with_recorded_paths(o);
  complete_defaults(o);
  o.validate();
  // Every rank appends its line to the same file: on the host it runs on, the output directory is where a user
  // looks, and a remote rank's stderr is lost with the link.
  configure_comm_deadline(resolve_comm_timeout(o.comm_timeout.value_or(-1)),
                          (std::filesystem::path(o.output_dir) / "failures.log").string());
  // Without mpirun, the pipeline's stages run as threads of this process; with --layout auto and a core-scaling
  // profile (CPU threads: not for a GPU run), the ranks x threads it predicts fastest (whose ranks fit their memory)
  // do, and the planner lays them out.
  int local_ranks = o.pipeline_stages, threads = o.threads;
  if (o.layout == "auto" && !launched_as_mpi_job() && select_device(parse_device_choice(o.device)) == Device::cpu) {
    const int cores = threads_of_one_process(o.threads);
    if (const auto split = node_split_from_scaling(o, model_config_for_plan(o), cores, false)) {
      info("--layout auto: ", split->describe());
      local_ranks = split->choice.chosen.ranks;
      threads = cores;  // shared evenly by the local ranks
    }
  }
  std::atomic<int> stopped_by{0};
  run_on_world(local_ranks, threads, [&](Communicator& world) {
    install_stop_handlers();  // here, after MPI_Init (which may install handlers of its own)
    RankTrainer trainer(world, o);
    trainer.run();
    if (trainer.stopped_by() != 0) stopped_by = trainer.stopped_by();
  });
  return stopped_by != 0 ? stop_exit_status(stopped_by) : 0;
}

}  // namespace vitpipe
