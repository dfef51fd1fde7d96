// Every option of `vitpipe train`, with one loader for all three sources: defaults, then a --config file (JSON or
// YAML), then the flags given on the command line. Config keys are the long flag names without the leading
// dashes ("output-dir" or "output_dir"); unknown keys are refused; null means "the default". A command-line flag
// of an exclusive pair (--epochs/--max-steps, --warmup-ratio/--warmup-steps) replaces the other one set in the
// file. to_json() writes the effective configuration in a form --config reads back.
//
// Structural checks that need the model or the world size (layers per stage summing to the model's layers, the
// image size being a multiple of the patch, micro-batches per replica >= stages) happen where those are known.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "model/trainable_set.h"
#include "tensor/dtype.h"
#include "train/lr_schedule.h"
#include "train/optimizer.h"

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace vitpipe {

// Defaults suit chest X-rays: mild crops, rotations and exposure changes, no horizontal flip (anatomy is not
// left-right symmetric). --no-augment switches everything off; each part is off at 0 (or with no crop scale).
struct AugmentOptions {
  bool enabled = true;                                                             // --augment / --no-augment
  std::optional<std::pair<double, double>> crop_scale = std::make_pair(0.7, 1.0);  // --aug-crop-scale MIN,MAX
  double rotate_degrees = 7.0;  // --aug-rotate DEG: uniform in [-DEG, DEG]
  double brightness = 0.1;      // --aug-brightness X: factor in [max(0, 1-X), 1+X]
  double contrast = 0.1;        // --aug-contrast X: factor in [max(0, 1-X), 1+X]
  bool hflip = false;           // --aug-hflip: horizontal flip with probability 1/2

  bool operator==(const AugmentOptions&) const = default;
};

struct TrainOptions {
  // What and where.
  std::string model;       // --model: a model directory or a Hugging Face repo id (resolved from the cache)
  std::string data;        // --data: the data set directory
  std::string output_dir;  // --output-dir
  // --resume: continue the run in output_dir from its latest checkpoint, with its own train_options.json as the base
  // of the options (flags given beside it must agree with it, resume_changeable_options() excepted). --resume auto:
  // the same when output_dir holds a checkpoint, else a fresh start (one command that can be submitted again).
  bool resume = false;
  bool resume_auto = false;
  bool force = false;        // --force: start in an output_dir holding other files (util/output_folder.h)
  bool export_last = false;  // --export-last: export the last step's weights, not the best validation's

  // How long and how much. Exactly one of epochs / max_steps is set after loading (default: 3 epochs).
  std::optional<int64_t> epochs;
  std::optional<int64_t> max_steps;
  int64_t batch_size = 128;                 // --batch-size: global batch (all replicas, all micro-batches)
  std::optional<int64_t> micro_batch_size;  // --micro-batch-size; default gcd(batch_size, 8)

  // Optimizer.
  std::string optimizer = "adamw";  // adamw | adamw-nobc | lamb | lamb-nobc | sgd
  double lr = 2e-4;
  double weight_decay = 0.0;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double momentum = 0.9;        // sgd only
  bool nesterov = false;        // sgd only
  double clip_grad_norm = 1.0;  // 0 = no clipping
  double layer_decay = 1.0;     // 1 = off

  // Schedule. Default warm-up (neither given): ratio 0.25.
  LrScheduleKind schedule = LrScheduleKind::cosine;
  std::optional<double> warmup_ratio;
  std::optional<int64_t> warmup_steps;

  // Loss, numerics, machine.
  bool pos_weight_auto = false;  // --pos-weight none|auto
  DType precision = DType::f32;  // --precision fp32|bf16
  bool precision_auto = false;   // --precision auto (the trainer makes it bf16 on a GPU)
  uint64_t seed = 42;
  int threads = 0;             // 0 = every core this process may use
  std::string device = "cpu";  // --device cpu|cuda|auto (backend/device_selection.h)
  bool allow_tf32 = false;     // --allow-tf32: TF32 GEMMs for fp32 on a GPU

  // Evaluation and logging.
  int64_t eval_every = 0;            // steps; 0 = at the end of each epoch
  int64_t log_every = 10;            // steps; 0 = no per-step log lines
  int64_t checkpoint_every = 0;      // steps; 0 = by time (checkpoint_minutes)
  double checkpoint_minutes = 30.0;  // without --checkpoint-every: every M minutes of work; 0 = only at the end
  int64_t keep_checkpoints = 2;      // the newest N checkpoints stay (and the best model's, when one was written)
  double val_fraction = 0.1;
  bool test = false;  // also evaluate on the test split at the end

  // Data.
  int64_t image_size = 0;  // 0 = the model's
  bool skip_unreadable = false;
  uint64_t data_seed = 0;       // seeds the patient division into train/val (kept apart from --seed)
  std::string view;             // "" = all; PA, AP, ... or frontal / lateral
  bool add_no_finding = false;  // ChestX-ray14: "No Finding" as a 15th label
  // How image files become 8-bit pixels (data/image_read_options.h); recorded in the exported model.
  std::string intensity = "auto";      // auto | pillow | full-range | window:C,W | percentile:LO,HI
  std::string dicom_window = "first";  // first | N | minmax
  bool dicom_first_frame = false;      // multi-frame DICOM: its first frame instead of a refusal
  // Label conventions (data/dataset.h).
  std::string uncertain = "ignore";       // ones | zeros | ignore: labels coded -1
  std::string blank = "zeros";            // zeros | ignore: labels not mentioned
  std::string label_vote = "any";         // any | majority: several readers per image (VinDr-CXR)
  std::string mimic_labels = "chexpert";  // chexpert | negbio (MIMIC-CXR-JPG)
  std::string labels;                     // --labels chestxray14 | chexpert | union | FILE; "" = the dataset's
  // --subgroup COLUMN (repeatable; csv: datasets): the final evaluation's subgroups by these columns too.
  std::vector<std::string> subgroups;
  std::string partial_batch = "auto";  // auto | use | drop: the last, smaller global batch of an epoch
  int loader_threads = 2;
  AugmentOptions augment;

  // Parallelism.
  int pipeline_stages = 1;
  std::vector<int> layers_per_stage;       // encoder layers per stage; empty = balanced
  std::string pipeline_schedule = "1f1b";  // 1f1b | gpipe | interleaved
  int virtual_stages = 2;                  // model chunks per rank for the interleaved schedule
  bool recompute = false;
  bool shard_optimizer = false;  // --shard-optimizer: ZeRO-1, moments partitioned across each stage's replicas
  std::string trace;             // --trace FILE: Chrome trace of the pipeline; empty = none
  // --comm-timeout SECONDS: the deadline of every blocking communication under mpirun (parallel/comm_deadline.h);
  // unset = VITPIPE_COMM_TIMEOUT or 300 s; 0 = none.
  std::optional<double> comm_timeout;
  // --layout auto: the planner (plan/) chooses stages, replicas, micro-batch, schedule, recompute and sharding.
  std::string layout = "manual";
  std::string memory_per_process;  // --memory-per-process SIZE for the planner; "" = this machine's per rank
  std::string link;                // --link BANDWIDTH[,LATENCY] for the planner; "" = measured (ping-pong)
  std::string profile_cache;       // --profile-cache DIR; "" = $XDG_CACHE_HOME/vitpipe (or ~/.cache/vitpipe)
  std::string scaling;             // --scaling FILE: per-operation core scaling; "" = the profile cache's, if any
  // Layout options given explicitly (command line or config file): --layout auto refuses them, naming the conflict.
  // Where a value came from is not part of the options' value: equal options compare equal whatever their source.
  struct GivenNames {
    std::vector<std::string> names;
    bool operator==(const GivenNames&) const { return true; }
  } layout_options_given;

  // What trains (model/trainable_set.h): at most one of --freeze backbone, --freeze-layers N, --lora RANK.
  std::string freeze = "none";  // --freeze none|backbone
  int64_t freeze_layers = 0;    // --freeze-layers N: the embeddings and the first N blocks
  int64_t lora_rank = 0;        // --lora RANK (0 = off)
  double lora_alpha = 0;        // --lora-alpha (0 = the rank: scale 1)
  std::vector<std::string> lora_targets = {"query", "value"};  // --lora-targets
  bool export_adapter = false;  // --export-adapter: also write peft's adapter files to <output-dir>/adapter
  bool export_onnx = false;     // --export-onnx: also write <output-dir>/model.onnx (io/onnx_export.h)
  std::string license;          // --license ID: declared in the model card (report/model_card.h); "" = not known
  std::string push_to_hub;      // --push-to-hub ORG/NAME: push <output-dir>/model at the end (io/hub_push.h)
  // Set by run_training when --model names a peft adapter: its LoRA and saved modules start the run (`model` is
  // then its base). Not an option of its own; a resumed run takes them from its checkpoint.
  std::string initial_adapter;

  bool operator==(const TrainOptions&) const = default;

  // Throws vitpipe::Error naming the option ("--lr must be > 0 (got -1)").
  void validate() const;
  nlohmann::json to_json() const;

  OptimizerConfig optimizer_config() const;
  LrSchedule lr_schedule() const;
  TrainingMode training_mode() const;
  int64_t micro_batches() const { return batch_size / micro_batch_size.value_or(batch_size); }
};

// Options a resumed run may change (long flag names): length (--epochs, --max-steps), the machine and the layout
// (a checkpoint is layout-free), cadences and what is written besides the model. Every other one must agree with the
// run's own train_options.json.
const std::vector<std::string>& resume_changeable_options();

// The options of `now` that differ from `run`'s (long flag names with their two values), outside `changeable`
// (long flag names): "--lr 0.001 (the run: 0.0002)". Empty when they agree.
std::vector<std::string> differing_options(const TrainOptions& now, const nlohmann::json& run,
                                           const std::vector<std::string>& changeable);

// The options --layout auto chooses (long flag names).
const std::vector<std::string>& layout_option_names();

// Fills what is left to defaults (epochs when neither epochs nor max_steps, warm-up ratio, micro-batch size unless
// --layout auto chooses it).
void complete_defaults(TrainOptions& options);
// --model naming a peft adapter directory: its base becomes the model, its rank, alpha and sites the LoRA settings,
// and initial_adapter remembers it (io/peft_adapter.h refuses what vitpipe's LoRA cannot continue). A no-op
// otherwise, and once applied.
void continue_peft_adapter(TrainOptions& options);

// `options` with every path a user typed as run files (train_options.json, checkpoints, the adapter) record it, so
// they mean the same from any working directory (predict, export, --resume elsewhere): --model and the adapter it
// continues (local directories; Hub ids stay ids), --data, --output-dir, --trace, a --labels FILE and
// --profile-cache made absolute. Paths that do not exist yet (the output folder, the trace) are made absolute too;
// a --data or --labels path that does not exist is kept as typed, for the error that names it.
TrainOptions with_recorded_paths(TrainOptions options);

// Applies a config file (.json, .yaml or .yml) on top of `options`. Errors name the file, the key and, for YAML,
// the line.
void apply_config_file(TrainOptions& options, const std::filesystem::path& path);
// The same for an already parsed JSON object (e.g. a saved train_options.json); `source` names it in messages.
void apply_config_json(TrainOptions& options, const nlohmann::json& config, const std::string& source);

// The config keys (long flag names without dashes), in help order.
std::vector<std::string> train_option_names();

// Registers --config and every flag of `vitpipe train` on `app` (boolean flags also get --no-X); after
// app->parse(), resolve() gives defaults <- config file <- command line, completed and validated. Keep the
// object alive until then (CLI11 writes into it).
class TrainOptionsParser {
 public:
  explicit TrainOptionsParser(CLI::App* app);
  TrainOptionsParser(const TrainOptionsParser&) = delete;
  TrainOptionsParser& operator=(const TrainOptionsParser&) = delete;

  // `validate` false (vitpipe plan, which takes train's flags): completed, not checked for a whole run (no --data or
  // --output-dir needed).
  TrainOptions resolve(bool validate = true) const;

 private:
  struct Registered;
  std::vector<std::unique_ptr<Registered>> registered_;
  std::string config_path_;
};

std::shared_ptr<TrainOptionsParser> add_train_options(CLI::App* app);

// One-shot: parses `args` (without the program and subcommand names) as `vitpipe train` would. CLI11 parse errors
// (unknown flag, missing value) are rethrown as vitpipe::Error with CLI11's message.
TrainOptions parse_train_options(const std::vector<std::string>& args);

}  // namespace vitpipe
