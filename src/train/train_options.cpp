#include "train/train_options.h"

#include <yaml-cpp/yaml.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <set>

#include "data/data_spec.h"
#include "data/image_read_options.h"
#include "io/peft_adapter.h"
#include "io/recorded_model_path.h"
#include "model/precision.h"
#include "train/training_checkpoint.h"
#include "util/atomic_file.h"
#include "util/error.h"
#include "util/json_error_detail.h"
#include "util/log.h"
#include "util/recorded_path.h"
#include "util/yaml_error_detail.h"

namespace vitpipe {
namespace {

// One option's value as read from a source, before it is typed: a scalar, a list, or null ("the default").
struct RawValue {
  std::string where;  // "train.yaml:3: lr" or "--lr", for messages
  bool null = false;
  bool is_list = false;
  std::vector<std::string> items;

  const std::string& scalar() const {
    VP_REQUIRE(!is_list && items.size() == 1, where, ": expected a single value, got a list");
    return items[0];
  }
  int64_t integer() const {
    const std::string& s = scalar();
    int64_t value = 0;
    auto [end, error] = std::from_chars(s.data(), s.data() + s.size(), value);
    VP_REQUIRE(!s.empty() && error == std::errc() && end == s.data() + s.size(), where, ": expected an integer, got '",
               escape_message_bytes(s), "'");
    return value;
  }
  uint64_t unsigned_integer() const {
    const std::string& s = scalar();
    uint64_t value = 0;
    auto [end, error] = std::from_chars(s.data(), s.data() + s.size(), value);
    VP_REQUIRE(!s.empty() && error == std::errc() && end == s.data() + s.size(), where,
               ": expected a non-negative integer, got '", escape_message_bytes(s), "'");
    return value;
  }
  static double parse_number(const std::string& s, const std::string& where) {
    double value = 0.0;
    auto [end, error] = std::from_chars(s.data(), s.data() + s.size(), value);
    VP_REQUIRE(!s.empty() && error == std::errc() && end == s.data() + s.size() && std::isfinite(value), where,
               ": expected a number, got '", escape_message_bytes(s), "'");
    return value;
  }
  double number() const { return parse_number(scalar(), where); }
  bool boolean() const {
    std::string s = scalar();
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
    if (s == "true" || s == "yes" || s == "on" || s == "1") return true;
    if (s == "false" || s == "no" || s == "off" || s == "0") return false;
    fail(where, ": expected true or false, got '", escape_message_bytes(scalar()), "'");
  }
  std::string choice(const std::vector<std::string>& allowed) const {
    const std::string& s = scalar();
    if (std::find(allowed.begin(), allowed.end(), s) != allowed.end()) return s;
    std::string known;
    for (const auto& a : allowed) known += (known.empty() ? "" : ", ") + a;
    fail(where, ": unknown value '", escape_message_bytes(s), "' (expected one of: ", known, ")");
  }
  // A list, or a scalar split at commas ("3,3,3,3").
  std::vector<std::string> list() const {
    if (is_list) return items;
    std::vector<std::string> parts;
    const std::string& s = scalar();
    size_t start = 0;
    while (true) {
      const size_t comma = s.find(',', start);
      std::string part = s.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      part.erase(0, part.find_first_not_of(" \t"));
      part.erase(part.find_last_not_of(" \t") + 1);
      parts.push_back(part);
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
    return parts;
  }
};

const TrainOptions& defaults() {
  static const TrainOptions options;
  return options;
}

struct OptionDef {
  const char* name;  // the long flag without dashes; also the config key
  const char* hint;  // value placeholder for --help; nullptr for a boolean flag
  const char* help;
  void (*apply)(TrainOptions&, const RawValue&);
  bool is_flag() const { return hint == nullptr; }
};

std::optional<int64_t> optional_integer(const RawValue& v) {
  if (v.null) return std::nullopt;
  return v.integer();
}

// Every option of `vitpipe train`, in --help order.
const std::vector<OptionDef>& option_table() {
  using O = TrainOptions;
  using V = RawValue;
  static const std::vector<OptionDef> table = {
      {"model", "DIR|REPO", "Model to fine-tune: a directory (config.json + weights) or a Hugging Face repo id",
       [](O& o, const V& v) { o.model = v.null ? defaults().model : v.scalar(); }},
      {"data", "SPEC", "Dataset: chestxray14:ROOT, csv:FILE, folder:ROOT or cache:DIR (vitpipe data prepare)",
       [](O& o, const V& v) { o.data = v.null ? defaults().data : v.scalar(); }},
      {"output-dir", "DIR", "Where checkpoints, logs, metrics and the exported model go",
       [](O& o, const V& v) { o.output_dir = v.null ? defaults().output_dir : v.scalar(); }},
      {"resume", "[auto]",
       "Continue the run in --output-dir from its latest checkpoint, bit for bit as if never stopped, with the "
       "options of its train_options.json (flags given beside it must agree with them, except length, machine, "
       "layout and cadences); `--resume auto`: the same if --output-dir holds a checkpoint, else start afresh",
       [](O& o, const V& v) {
         o.resume_auto = !v.null && v.scalar() == "auto";
         o.resume = v.null ? defaults().resume : o.resume_auto || v.boolean();
       }},
      {"force", nullptr,
       "Start in an --output-dir that holds other files (never over a training run: --resume it or remove it)",
       [](O& o, const V& v) { o.force = v.null ? defaults().force : v.boolean(); }},
      {"export-last", nullptr, "Export the last step's weights instead of the best validation ROC-AUC's",
       [](O& o, const V& v) { o.export_last = v.null ? defaults().export_last : v.boolean(); }},
      {"epochs", "N", "Train for N epochs (default 3; exclusive with --max-steps)",
       [](O& o, const V& v) { o.epochs = optional_integer(v); }},
      {"max-steps", "N", "Train for N optimizer steps (exclusive with --epochs)",
       [](O& o, const V& v) { o.max_steps = optional_integer(v); }},
      {"batch-size", "B", "Global batch size: images per optimizer step over all replicas (default 128)",
       [](O& o, const V& v) { o.batch_size = v.null ? defaults().batch_size : v.integer(); }},
      {"micro-batch-size", "b", "Images per forward/backward pass (default gcd(batch size, 8))",
       [](O& o, const V& v) { o.micro_batch_size = optional_integer(v); }},
      {"optimizer", "NAME", "adamw | adamw-nobc (no bias correction) | lamb | lamb-nobc | sgd (default adamw)",
       [](O& o, const V& v) { o.optimizer = v.null ? defaults().optimizer : v.choice(optimizer_names()); }},
      {"lr", "X", "Peak learning rate (default 2e-4)",
       [](O& o, const V& v) { o.lr = v.null ? defaults().lr : v.number(); }},
      {"weight-decay", "X", "Weight decay of linear weights (default 0)",
       [](O& o, const V& v) { o.weight_decay = v.null ? defaults().weight_decay : v.number(); }},
      {"beta1", "X", "Adam/LAMB beta1 (default 0.9)",
       [](O& o, const V& v) { o.beta1 = v.null ? defaults().beta1 : v.number(); }},
      {"beta2", "X", "Adam/LAMB beta2 (default 0.999)",
       [](O& o, const V& v) { o.beta2 = v.null ? defaults().beta2 : v.number(); }},
      {"eps", "X", "Adam/LAMB epsilon (default 1e-8)",
       [](O& o, const V& v) { o.eps = v.null ? defaults().eps : v.number(); }},
      {"momentum", "X", "SGD momentum (default 0.9)",
       [](O& o, const V& v) { o.momentum = v.null ? defaults().momentum : v.number(); }},
      {"nesterov", nullptr, "SGD with Nesterov momentum",
       [](O& o, const V& v) { o.nesterov = v.null ? defaults().nesterov : v.boolean(); }},
      {"clip-grad-norm", "X", "Clip the global gradient norm to X; 0 = off (default 1)",
       [](O& o, const V& v) { o.clip_grad_norm = v.null ? defaults().clip_grad_norm : v.number(); }},
      {"layer-decay", "X", "Layer-wise learning-rate decay in (0, 1]; 1 = off (default 1)",
       [](O& o, const V& v) { o.layer_decay = v.null ? defaults().layer_decay : v.number(); }},
      {"schedule", "NAME", "Learning-rate schedule: cosine | linear | constant (default cosine)",
       [](O& o, const V& v) {
         o.schedule = v.null ? defaults().schedule : parse_schedule(v.choice(schedule_names()));
       }},
      {"warmup-ratio", "R", "Warm-up as a fraction of all steps, in [0, 1) (default 0.25)",
       [](O& o, const V& v) { o.warmup_ratio = v.null ? std::nullopt : std::optional<double>(v.number()); }},
      {"warmup-steps", "N", "Warm-up steps (exclusive with --warmup-ratio)",
       [](O& o, const V& v) { o.warmup_steps = optional_integer(v); }},
      {"pos-weight", "MODE", "Positive-class weights of the loss: none | auto (negatives/positives per label)",
       [](O& o, const V& v) {
         o.pos_weight_auto = v.null ? defaults().pos_weight_auto : v.choice({"none", "auto"}) == "auto";
       }},
      {"precision", "P",
       "Compute precision: fp32 | bf16 | auto (bf16 on a GPU and where the CPU has bf16 instructions, else fp32; the "
       "effective one is saved) (master weights stay fp32) (default fp32)",
       [](O& o, const V& v) {
         const std::string name = v.null ? std::string() : v.choice({"fp32", "bf16", "auto"});
         o.precision = v.null ? defaults().precision : compute_dtype(parse_precision(name));
         o.precision_auto = name == "auto";
       }},
      {"seed", "N", "Random seed (default 42)",
       [](O& o, const V& v) { o.seed = v.null ? defaults().seed : v.unsigned_integer(); }},
      {"device", "DEVICE",
       "cpu | cuda | auto (cuda where the CUDA module loads and sees a GPU, else cpu) (default cpu)",
       [](O& o, const V& v) {
         o.device = v.null ? defaults().device : v.choice({"cpu", "cuda", "auto"});
       }},
      {"allow-tf32", nullptr, "On a GPU, let fp32 GEMMs use TF32 tensor cores (off by default)",
       [](O& o, const V& v) { o.allow_tf32 = v.null ? false : v.boolean(); }},
      {"threads", "N",
       "CPU threads; 0 = all cores this process may use, under mpirun or srun the rank's share of its node, in a Slurm "
       "job SLURM_CPUS_PER_TASK (default 0)",
       [](O& o, const V& v) {
         o.threads = v.null ? defaults().threads : static_cast<int>(std::clamp<int64_t>(v.integer(), -1, 1 << 20));
       }},
      {"eval-every", "N", "Evaluate on the validation split every N steps; 0 = after each epoch (default 0)",
       [](O& o, const V& v) { o.eval_every = v.null ? defaults().eval_every : v.integer(); }},
      {"log-every", "N", "Log the training loss every N steps; 0 = never (default 10)",
       [](O& o, const V& v) { o.log_every = v.null ? defaults().log_every : v.integer(); }},
      {"checkpoint-every", "N",
       "Write a checkpoint every N steps; 0 = every --checkpoint-minutes of work instead (default 0). There is always "
       "one at the end, and one when a signal stops the run",
       [](O& o, const V& v) { o.checkpoint_every = v.null ? defaults().checkpoint_every : v.integer(); }},
      {"keep-checkpoints", "N",
       "Keep the newest N checkpoints, and always the one of the best model when it was written (default 2)",
       [](O& o, const V& v) { o.keep_checkpoints = v.null ? defaults().keep_checkpoints : v.integer(); }},
      {"checkpoint-minutes", "M",
       "Without --checkpoint-every: write a checkpoint every M minutes of work (default 30; fractions allowed; 0 = "
       "only at the end)",
       [](O& o, const V& v) { o.checkpoint_minutes = v.null ? defaults().checkpoint_minutes : v.number(); }},
      {"val-fraction", "F", "Fraction of the training patients held out for validation, in [0, 1) (default 0.1)",
       [](O& o, const V& v) { o.val_fraction = v.null ? defaults().val_fraction : v.number(); }},
      {"test", nullptr, "Also evaluate on the test split at the end",
       [](O& o, const V& v) { o.test = v.null ? defaults().test : v.boolean(); }},
      {"image-size", "PX", "Input resolution; 0 = the model's (default 0)",
       [](O& o, const V& v) { o.image_size = v.null ? defaults().image_size : v.integer(); }},
      {"skip-unreadable", nullptr, "Skip images that cannot be decoded (with a warning) instead of failing",
       [](O& o, const V& v) { o.skip_unreadable = v.null ? defaults().skip_unreadable : v.boolean(); }},
      {"data-seed", "N", "Seed of the patient division into train and val (default 0)",
       [](O& o, const V& v) { o.data_seed = v.null ? defaults().data_seed : v.unsigned_integer(); }},
      {"view", "VIEW", "Keep only images of this view: PA, AP, LATERAL, ... (any case) or frontal / lateral",
       [](O& o, const V& v) { o.view = v.null ? defaults().view : v.scalar(); }},
      {"intensity", "POLICY",
       "Images above 8 bits (16-bit PNG, DICOM) to 8 bits: auto | pillow | full-range | window:C,W | "
       "percentile:LO,HI (default auto; recorded in the exported model)",
       [](O& o, const V& v) { o.intensity = v.null ? defaults().intensity : v.scalar(); }},
      {"dicom-window", "WHICH",
       "DICOM VOI transform under --intensity auto: first | N (1-based) | minmax (default first)",
       [](O& o, const V& v) { o.dicom_window = v.null ? defaults().dicom_window : v.scalar(); }},
      {"dicom-first-frame", nullptr, "Read the first frame of multi-frame DICOM files instead of refusing them",
       [](O& o, const V& v) { o.dicom_first_frame = v.null ? defaults().dicom_first_frame : v.boolean(); }},
      {"uncertain", "POLICY", "Labels coded -1 (uncertain): ones | zeros | ignore (masked) (default ignore)",
       [](O& o, const V& v) {
         o.uncertain = v.null ? defaults().uncertain : v.choice({"ones", "zeros", "ignore"});
       }},
      {"blank", "POLICY", "Labels left blank (not mentioned): zeros | ignore (masked) (default zeros)",
       [](O& o, const V& v) {
         o.blank = v.null ? defaults().blank : v.choice({"zeros", "ignore"});
       }},
      {"label-vote", "RULE", "Several readers per image (VinDr-CXR): any | majority (default any)",
       [](O& o, const V& v) {
         o.label_vote = v.null ? defaults().label_vote : v.choice({"any", "majority"});
       }},
      {"mimic-labels", "FILE", "MIMIC-CXR-JPG's label file: chexpert | negbio (default chexpert)",
       [](O& o, const V& v) {
         o.mimic_labels = v.null ? defaults().mimic_labels : v.choice({"chexpert", "negbio"});
       }},
      {"labels", "SET", "Map the dataset's labels onto chestxray14 | chexpert | union | a JSON FILE",
       [](O& o, const V& v) { o.labels = v.null ? defaults().labels : v.scalar(); }},
      {"subgroup", "COLUMN",
       "Also report the final evaluation by this column of a csv: dataset (repeatable; sex, age band and view always)",
       [](O& o, const V& v) { o.subgroups = v.null ? defaults().subgroups : v.list(); }},
      {"add-no-finding", nullptr, "ChestX-ray14: add \"No Finding\" as a 15th label",
       [](O& o, const V& v) { o.add_no_finding = v.null ? defaults().add_no_finding : v.boolean(); }},
      {"partial-batch", "MODE",
       "The last, smaller global batch of an epoch: use | drop (reported) | auto (use when every micro-batch "
       "gets an image, else drop) (default auto)",
       [](O& o, const V& v) {
         o.partial_batch = v.null ? defaults().partial_batch : v.choice({"auto", "use", "drop"});
       }},
      {"loader-threads", "N", "Threads decoding and augmenting images (default 2)",
       [](O& o, const V& v) {
         o.loader_threads =
             v.null ? defaults().loader_threads : static_cast<int>(std::clamp<int64_t>(v.integer(), -1, 1 << 20));
       }},
      {"aug-crop-scale", "MIN,MAX",
       "Random resized crop keeping a fraction of the area in [MIN, MAX] (0 < MIN <= MAX <= 1)",
       [](O& o, const V& v) {
         if (v.null) {
           o.augment.crop_scale = defaults().augment.crop_scale;
           return;
         }
         if (!v.is_list && (v.scalar() == "off" || v.scalar() == "none")) {
           o.augment.crop_scale.reset();
           return;
         }
         const std::vector<std::string> parts = v.list();
         VP_REQUIRE(parts.size() == 2, v.where, ": expected two numbers MIN,MAX, got ", parts.size(), " values");
         const double low = RawValue::parse_number(parts[0], v.where);
         const double high = RawValue::parse_number(parts[1], v.where);
         o.augment.crop_scale = std::make_pair(low, high);
       }},
      {"aug-rotate", "DEG", "Random rotation by up to DEG degrees either way; 0 = off (default 7)",
       [](O& o, const V& v) { o.augment.rotate_degrees = v.null ? defaults().augment.rotate_degrees : v.number(); }},
      {"aug-brightness", "X", "Random brightness factor in [max(0, 1-X), 1+X]; 0 = off (default 0.1)",
       [](O& o, const V& v) { o.augment.brightness = v.null ? defaults().augment.brightness : v.number(); }},
      {"aug-contrast", "X", "Random contrast factor in [max(0, 1-X), 1+X]; 0 = off (default 0.1)",
       [](O& o, const V& v) { o.augment.contrast = v.null ? defaults().augment.contrast : v.number(); }},
      {"augment", nullptr, "Training augmentation (default on; --no-augment switches every part off)",
       [](O& o, const V& v) { o.augment.enabled = v.null ? defaults().augment.enabled : v.boolean(); }},
      {"aug-hflip", nullptr, "Random horizontal flip (default off: chest anatomy is not left-right symmetric)",
       [](O& o, const V& v) { o.augment.hflip = v.null ? false : v.boolean(); }},
      {"pipeline-stages", "P", "Pipeline stages (default 1)",
       [](O& o, const V& v) {
         o.pipeline_stages = v.null ? 1 : static_cast<int>(std::clamp<int64_t>(v.integer(), -1, 1 << 20));
       }},
      {"layers-per-stage", "a,b,...", "Encoder layers of each pipeline stage (default: balanced)",
       [](O& o, const V& v) {
         o.layers_per_stage.clear();
         if (v.null) return;
         for (const std::string& part : v.list()) {
           RawValue one{v.where, false, false, {part}};
           o.layers_per_stage.push_back(static_cast<int>(std::clamp<int64_t>(one.integer(), -1, 1 << 20)));
         }
       }},
      {"pipeline-schedule", "NAME", "Pipeline schedule: 1f1b | gpipe | interleaved | zb-h1 (default 1f1b)",
       [](O& o, const V& v) {
         o.pipeline_schedule =
             v.null ? defaults().pipeline_schedule : v.choice({"1f1b", "gpipe", "interleaved", "zb-h1"});
       }},
      {"virtual-stages", "V", "Model chunks per rank for --pipeline-schedule interleaved (default 2)",
       [](O& o, const V& v) {
         o.virtual_stages =
             v.null ? defaults().virtual_stages : static_cast<int>(std::clamp<int64_t>(v.integer(), -1, 1 << 20));
       }},
      {"recompute", nullptr, "Recompute activations in the backward pass instead of keeping them",
       [](O& o, const V& v) { o.recompute = v.null ? false : v.boolean(); }},
      {"shard-optimizer", nullptr,
       "Partition the optimizer's moments across the data-parallel replicas of each stage (ZeRO stage 1)",
       [](O& o, const V& v) { o.shard_optimizer = v.null ? false : v.boolean(); }},
      {"trace", "FILE", "Write a Chrome trace (chrome://tracing) of the pipeline to FILE",
       [](O& o, const V& v) { o.trace = v.null ? defaults().trace : v.scalar(); }},
      {"comm-timeout", "SECONDS",
       "Under mpirun: a rank waiting longer than this for a peer (a lost link or host) writes why to stderr and "
       "<output-dir>/failures.log and ends the job; 0 = wait for ever (default: $VITPIPE_COMM_TIMEOUT, else 300)",
       [](O& o, const V& v) { o.comm_timeout = v.null ? std::nullopt : std::optional<double>(v.number()); }},
      {"layout", "NAME",
       "manual (the flags above) | auto: plan stages x replicas, micro-batch, schedule, recompute and sharding "
       "from a profile (see vitpipe plan) (default manual)",
       [](O& o, const V& v) {
         o.layout = v.null ? defaults().layout : v.choice({"manual", "auto"});
       }},
      {"memory-per-process", "SIZE",
       "--layout auto: memory each process may use, e.g. 16GiB (default: this machine's memory per rank; with "
       "--device cuda its GPU's free memory less a margin of 5%, at least 1 GiB)",
       [](O& o, const V& v) { o.memory_per_process = v.null ? defaults().memory_per_process : v.scalar(); }},
      {"link", "BANDWIDTH[,LATENCY]",
       "--layout auto: the network between processes, its line rate, e.g. 10Gbit,20us; under mpirun across hosts the "
       "gradient reduction's rate over it is measured too (default: measured by a ping-pong; with --device cuda, "
       "between "
       "a node's GPUs an assumption of PCIe 4.0 rates, printed as such)",
       [](O& o, const V& v) { o.link = v.null ? defaults().link : v.scalar(); }},
      {"profile-cache", "DIR",
       "--layout auto: where per-segment profiles are cached (default $XDG_CACHE_HOME/vitpipe or ~/.cache/vitpipe)",
       [](O& o, const V& v) { o.profile_cache = v.null ? defaults().profile_cache : v.scalar(); }},
      {"scaling", "FILE",
       "--layout auto and plan: how each operation scales with a rank's threads (the JSON of `vitpipe bench "
       "--scaling 1,2 --json`); one process splits its cores into the fastest ranks x threads whose ranks fit their "
       "memory (default: core_scaling.json in the profile cache if there, else one rank of every thread)",
       [](O& o, const V& v) { o.scaling = v.null ? defaults().scaling : v.scalar(); }},
      {"freeze", "WHAT", "none | backbone (a linear probe: only the classifier trains) (default none)",
       [](O& o, const V& v) {
         o.freeze = v.null ? defaults().freeze : v.choice({"none", "backbone"});
       }},
      {"freeze-layers", "N", "Freeze the embeddings and the first N encoder blocks (default 0)",
       [](O& o, const V& v) { o.freeze_layers = v.null ? defaults().freeze_layers : v.integer(); }},
      {"lora", "RANK", "LoRA of this rank on --lora-targets; base weights frozen, classifier trained (default off)",
       [](O& o, const V& v) { o.lora_rank = v.null ? defaults().lora_rank : v.integer(); }},
      {"lora-alpha", "X", "LoRA alpha: the update is scaled by alpha / rank (default: the rank)",
       [](O& o, const V& v) { o.lora_alpha = v.null ? defaults().lora_alpha : v.number(); }},
      {"lora-targets", "a,b,...", "Layers LoRA adapts: query, key, value, projection, fc1, fc2 (default query,value)",
       [](O& o, const V& v) { o.lora_targets = v.null ? defaults().lora_targets : v.list(); }},
      {"export-adapter", nullptr, "With --lora: also write peft's adapter_config.json + adapter_model.safetensors",
       [](O& o, const V& v) { o.export_adapter = v.null ? defaults().export_adapter : v.boolean(); }},
      {"export-onnx", nullptr, "Also write the exported model as <output-dir>/model.onnx (pixel_values -> logits)",
       [](O& o, const V& v) { o.export_onnx = v.null ? defaults().export_onnx : v.boolean(); }},
      {"license", "ID", "The license the model card declares (a Hub license id, e.g. apache-2.0); default none",
       [](O& o, const V& v) { o.license = v.null ? defaults().license : v.scalar(); }},
      {"push-to-hub", "ORG/NAME",
       "At the end, push the exported model (<output-dir>/model) to this Hub repository as `vitpipe push` does "
       "(HF_TOKEN or the token file: a write token); default off",
       [](O& o, const V& v) { o.push_to_hub = v.null ? defaults().push_to_hub : v.scalar(); }},
  };
  return table;
}

std::string normalise_key(std::string key) {
  std::replace(key.begin(), key.end(), '_', '-');
  return key;
}

const OptionDef* find_option(const std::string& normalised) {
  for (const OptionDef& def : option_table()) {
    if (normalised == def.name) return &def;
  }
  return nullptr;
}

const std::vector<std::pair<std::string, std::string>>& exclusive_pairs() {
  static const std::vector<std::pair<std::string, std::string>> pairs = {{"epochs", "max-steps"},
                                                                         {"warmup-ratio", "warmup-steps"}};
  return pairs;
}

std::string known_keys() {
  std::string known;
  for (const OptionDef& def : option_table()) known += (known.empty() ? "" : ", ") + std::string(def.name);
  return known;
}

// One source's values (a file or the command line), keyed by normalised name. `flag_style` names keys as
// "--epochs" in messages, otherwise as "epochs".
using Entries = std::vector<std::pair<std::string, RawValue>>;

void apply_entries(TrainOptions& options, const Entries& entries, const std::string& source, bool flag_style) {
  std::map<std::string, const RawValue*> given;
  for (const auto& [key, value] : entries) {
    VP_REQUIRE(find_option(key) != nullptr, value.where, ": unknown option '", escape_message_bytes(key),
               "' (known: ", known_keys(), ")");
    VP_REQUIRE(given.emplace(key, &value).second, value.where, ": '", key, "' is given twice in ", source);
  }
  const std::string dashes = flag_style ? "--" : "";
  for (const auto& [a, b] : exclusive_pairs()) {
    const bool has_a = given.count(a) && !given[a]->null, has_b = given.count(b) && !given[b]->null;
    VP_REQUIRE(!(has_a && has_b), source, ": ", dashes, a, " and ", dashes, b, " are exclusive: give one of them");
  }
  for (const auto& [key, value] : entries) {
    find_option(key)->apply(options, value);
    const auto& layout_names = layout_option_names();
    if (std::find(layout_names.begin(), layout_names.end(), key) != layout_names.end()) {
      auto& given_layout = options.layout_options_given.names;
      given_layout.erase(std::remove(given_layout.begin(), given_layout.end(), key), given_layout.end());
      if (!value.null) given_layout.push_back(key);
    }
    if (value.null) continue;
    for (const auto& [a, b] : exclusive_pairs()) {  // this source's choice replaces an earlier source's partner
      if (key == a || key == b) find_option(key == a ? b : a)->apply(options, RawValue{value.where, true, false, {}});
    }
  }
}

Entries entries_from_json(const nlohmann::json& config, const std::string& source) {
  VP_REQUIRE(config.is_object() || config.is_null(), source,
             ": expected an object of option names to values at the top level");
  Entries entries;
  if (config.is_null()) return entries;
  auto scalar_text = [&](const nlohmann::json& value, const std::string& where) -> std::string {
    if (value.is_string()) return value.get<std::string>();
    if (value.is_boolean()) return value.get<bool>() ? "true" : "false";
    if (value.is_number()) return value.dump();
    fail(where, ": expected a value or a list of values, got ", value.type_name());
  };
  for (const auto& [key, value] : config.items()) {
    RawValue raw;
    raw.where = concat(source, ": ", escape_message_bytes(key));
    if (value.is_null()) {
      raw.null = true;
    } else if (value.is_array()) {
      raw.is_list = true;
      for (const auto& item : value) raw.items.push_back(scalar_text(item, raw.where));
    } else {
      raw.items.push_back(scalar_text(value, raw.where));
    }
    entries.emplace_back(normalise_key(key), std::move(raw));
  }
  return entries;
}

Entries entries_from_yaml(const std::filesystem::path& path) {
  const std::string text = read_text_file(path);
  require_yaml_text(text, path.string());
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    fail(path.string(), ": not valid YAML", yaml_error_detail(e));
  }
  Entries entries;
  if (root.IsNull()) return entries;
  VP_REQUIRE(root.IsMap(), path.string(), ": expected a mapping of option names to values at the top level");
  for (const auto& item : root) {
    RawValue raw;
    const std::string key = item.first.Scalar();
    raw.where = concat(path.string(), ":", item.first.Mark().line + 1, ": ", escape_message_bytes(key));
    const YAML::Node& value = item.second;
    if (value.IsNull()) {
      raw.null = true;
    } else if (value.IsScalar()) {
      raw.items.push_back(value.Scalar());
    } else if (value.IsSequence()) {
      raw.is_list = true;
      for (const auto& element : value) {
        VP_REQUIRE(element.IsScalar(), raw.where, ": expected a list of plain values");
        raw.items.push_back(element.Scalar());
      }
    } else {
      fail(raw.where, ": expected a value or a list of values, got a mapping");
    }
    entries.emplace_back(normalise_key(key), std::move(raw));
  }
  return entries;
}

nlohmann::json parse_json_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  VP_REQUIRE(in.good(), path.string(), ": cannot open the config file");
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  // Reject duplicate top-level keys (nlohmann would keep the last silently).
  std::set<std::string> seen;
  auto callback = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    if (event == nlohmann::json::parse_event_t::key && depth == 1) {
      const std::string key = normalise_key(parsed.get<std::string>());
      VP_REQUIRE(seen.insert(key).second, path.string(), ": '", escape_message_bytes(key), "' is given twice");
    }
    return true;
  };
  try {
    return nlohmann::json::parse(text, callback);
  } catch (const nlohmann::json::exception& e) {  // parse_error, and out_of_range for numbers past a double
    fail(path.string(), ": invalid JSON", json_error_detail(e, text));
  }
}

nlohmann::json optional_json(const std::optional<int64_t>& value) {
  return value ? nlohmann::json(*value) : nlohmann::json(nullptr);
}

}  // namespace

const std::vector<std::string>& layout_option_names() {
  static const std::vector<std::string> names = {"pipeline-stages", "layers-per-stage", "pipeline-schedule",
                                                 "virtual-stages",  "micro-batch-size", "recompute",
                                                 "shard-optimizer"};
  return names;
}

std::vector<std::string> train_option_names() {
  std::vector<std::string> names;
  for (const OptionDef& def : option_table()) names.emplace_back(def.name);
  return names;
}

void complete_defaults(TrainOptions& options) {
  if (!options.epochs && !options.max_steps) options.epochs = 3;
  if (!options.warmup_ratio && !options.warmup_steps) options.warmup_ratio = 0.25;
  if (!options.micro_batch_size && options.batch_size > 0 && options.layout != "auto") {
    options.micro_batch_size = std::gcd(options.batch_size, 8);
  }
}

void TrainOptions::validate() const {
  parse_intensity_policy(intensity, "--intensity");
  parse_dicom_window(dicom_window, "--dicom-window");
  auto positive_finite = [](double x) { return std::isfinite(x) && x > 0.0; };
  auto unit = [](double x) { return std::isfinite(x) && x >= 0.0 && x < 1.0; };
  VP_REQUIRE(!model.empty(), "--model is required (a model directory or a Hugging Face repo id)");
  VP_REQUIRE(!data.empty(), "--data is required (the data set directory)");
  VP_REQUIRE(!output_dir.empty(), "--output-dir is required");
  VP_REQUIRE(!(epochs && max_steps), "--epochs and --max-steps are exclusive: give one of them");
  VP_REQUIRE(epochs || max_steps, "give --epochs or --max-steps");
  VP_REQUIRE(!epochs || *epochs > 0, "--epochs must be a positive integer (got ", epochs.value_or(0), ")");
  VP_REQUIRE(!max_steps || *max_steps > 0, "--max-steps must be a positive integer (got ", max_steps.value_or(0), ")");
  VP_REQUIRE(batch_size > 0, "--batch-size must be a positive integer (got ", batch_size, ")");
  if (layout == "auto") {
    const auto& given = layout_options_given.names;
    if (!given.empty()) {
      std::string conflict;
      for (const auto& name : given) conflict += (conflict.empty() ? "--" : ", --") + name;
      fail(
          "--layout auto chooses the pipeline stages, layers per stage, schedule, virtual stages, micro-batch size, "
          "recompute and optimizer sharding itself, but ",
          conflict, given.size() > 1 ? " were" : " was", " given too: drop ", given.size() > 1 ? "them" : "it",
          " or use --layout manual");
    }
  } else {
    VP_REQUIRE(micro_batch_size.has_value(), "--micro-batch-size is not set (complete_defaults() fills it)");
    VP_REQUIRE(*micro_batch_size > 0, "--micro-batch-size must be a positive integer (got ", *micro_batch_size, ")");
    VP_REQUIRE(batch_size % *micro_batch_size == 0, "--batch-size ", batch_size,
               " is not divisible by --micro-batch-size ", *micro_batch_size);
  }
  VP_REQUIRE(std::find(optimizer_names().begin(), optimizer_names().end(), optimizer) != optimizer_names().end(),
             "--optimizer: unknown optimizer '", optimizer, "'");
  VP_REQUIRE(positive_finite(lr), "--lr must be > 0 (got ", lr, ")");
  VP_REQUIRE(std::isfinite(weight_decay) && weight_decay >= 0.0, "--weight-decay must be >= 0 (got ", weight_decay,
             ")");
  VP_REQUIRE(unit(beta1), "--beta1 must be in [0, 1) (got ", beta1, ")");
  VP_REQUIRE(unit(beta2), "--beta2 must be in [0, 1) (got ", beta2, ")");
  VP_REQUIRE(positive_finite(eps), "--eps must be > 0 (got ", eps, ")");
  VP_REQUIRE(unit(momentum), "--momentum must be in [0, 1) (got ", momentum, ")");
  VP_REQUIRE(!nesterov || optimizer == "sgd", "--nesterov applies to --optimizer sgd only (got ", optimizer, ")");
  VP_REQUIRE(!nesterov || momentum > 0.0, "--nesterov needs --momentum > 0");
  VP_REQUIRE(std::isfinite(clip_grad_norm) && clip_grad_norm >= 0.0, "--clip-grad-norm must be >= 0 (0 = off) (got ",
             clip_grad_norm, ")");
  VP_REQUIRE(std::isfinite(layer_decay) && layer_decay > 0.0 && layer_decay <= 1.0,
             "--layer-decay must be in (0, 1] (got ", layer_decay, ")");
  VP_REQUIRE(!(warmup_ratio && warmup_steps), "--warmup-ratio and --warmup-steps are exclusive: give one of them");
  VP_REQUIRE(!warmup_ratio || unit(*warmup_ratio), "--warmup-ratio must be in [0, 1) (got ", warmup_ratio.value_or(0),
             ")");
  VP_REQUIRE(!warmup_steps || *warmup_steps >= 0, "--warmup-steps must be >= 0 (got ", warmup_steps.value_or(0), ")");
  VP_REQUIRE(!warmup_steps || !max_steps || *warmup_steps < *max_steps, "--warmup-steps ", warmup_steps.value_or(0),
             " leaves no step after the warm-up of --max-steps ", max_steps.value_or(0));
  VP_REQUIRE(precision == DType::f32 || precision == DType::bf16, "--precision must be fp32 or bf16");
  VP_REQUIRE(threads >= 0, "--threads must be >= 0 (0 = all cores) (got ", threads, ")");
  VP_REQUIRE(eval_every >= 0, "--eval-every must be >= 0 (0 = each epoch) (got ", eval_every, ")");
  VP_REQUIRE(log_every >= 0, "--log-every must be >= 0 (got ", log_every, ")");
  VP_REQUIRE(unit(val_fraction), "--val-fraction must be in [0, 1) (got ", val_fraction, ")");
  VP_REQUIRE(image_size >= 0, "--image-size must be >= 0 (0 = the model's) (got ", image_size, ")");
  if (augment.crop_scale) {
    const auto [low, high] = *augment.crop_scale;
    VP_REQUIRE(0.0 < low && low <= high && high <= 1.0,
               "--aug-crop-scale must be MIN,MAX with 0 < MIN <= MAX <= 1 (got ", low, ",", high, ")");
  }
  VP_REQUIRE(std::isfinite(augment.rotate_degrees) && augment.rotate_degrees >= 0.0 && augment.rotate_degrees <= 180.0,
             "--aug-rotate must be in [0, 180] degrees (got ", augment.rotate_degrees, ")");
  VP_REQUIRE(std::isfinite(augment.brightness) && augment.brightness >= 0.0, "--aug-brightness must be >= 0 (got ",
             augment.brightness, ")");
  VP_REQUIRE(std::isfinite(augment.contrast) && augment.contrast >= 0.0, "--aug-contrast must be >= 0 (got ",
             augment.contrast, ")");
  VP_REQUIRE(pipeline_stages >= 1, "--pipeline-stages must be >= 1 (got ", pipeline_stages, ")");
  if (!layers_per_stage.empty()) {
    VP_REQUIRE(static_cast<int>(layers_per_stage.size()) == pipeline_stages, "--layers-per-stage lists ",
               layers_per_stage.size(), " stages but --pipeline-stages is ", pipeline_stages);
    for (size_t s = 0; s < layers_per_stage.size(); ++s) {
      // The first and last stages also hold the embeddings / the head, so they may hold no encoder layer.
      const bool end_stage = s == 0 || s + 1 == layers_per_stage.size();
      VP_REQUIRE(layers_per_stage[s] >= (end_stage ? 0 : 1), "--layers-per-stage: stage ", s, " gets ",
                 layers_per_stage[s], " layers, expected ", end_stage ? ">= 0" : ">= 1");
    }
  }
  VP_REQUIRE(pipeline_schedule == "1f1b" || pipeline_schedule == "gpipe" || pipeline_schedule == "interleaved" ||
                 pipeline_schedule == "zb-h1",
             "--pipeline-schedule must be 1f1b, gpipe, interleaved or zb-h1 (got '", pipeline_schedule, "')");
  VP_REQUIRE(!(recompute && pipeline_schedule == "zb-h1"),
             "--recompute cannot be combined with --pipeline-schedule zb-h1: its deferred weight-gradient pass reads "
             "the activations --recompute discards; use 1f1b with --recompute, or zb-h1 without it");
  VP_REQUIRE(layout == "manual" || layout == "auto", "--layout must be manual or auto (got '", layout, "')");
  VP_REQUIRE(!comm_timeout || (*comm_timeout >= 0 && *comm_timeout <= 1e7),
             "--comm-timeout must be seconds in [0, 1e7] (0 = no deadline) (got ", comm_timeout.value_or(0), ")");
  VP_REQUIRE(virtual_stages >= 1, "--virtual-stages must be >= 1 (got ", virtual_stages, ")");
  VP_REQUIRE(keep_checkpoints >= 1 && keep_checkpoints <= 1000000,
             "--keep-checkpoints must be in [1, 1000000] (the newest is what --resume continues) (got ",
             keep_checkpoints, ")");
  VP_REQUIRE(checkpoint_every >= 0, "--checkpoint-every must be >= 0 (0 = by time, --checkpoint-minutes) (got ",
             checkpoint_every, ")");
  VP_REQUIRE(std::isfinite(checkpoint_minutes) && checkpoint_minutes >= 0, "--checkpoint-minutes must be >= 0 (got ",
             checkpoint_minutes, ")");
  VP_REQUIRE(loader_threads >= 1 && loader_threads <= 256, "--loader-threads must be in [1, 256] (got ", loader_threads,
             ")");
  VP_REQUIRE(freeze_layers >= 0, "--freeze-layers must be >= 0 (got ", freeze_layers, ")");
  VP_REQUIRE(lora_rank >= 0 && lora_rank <= 4096, "--lora must be a rank in [1, 4096] (got ", lora_rank, ")");
  const int modes = (freeze == "backbone") + (freeze_layers > 0) + (lora_rank > 0);
  VP_REQUIRE(modes <= 1, "--freeze backbone, --freeze-layers and --lora are exclusive: give one of them");
  VP_REQUIRE(std::isfinite(lora_alpha) && lora_alpha >= 0.0, "--lora-alpha must be > 0 (got ", lora_alpha, ")");
  VP_REQUIRE(lora_rank > 0 || lora_alpha == 0.0, "--lora-alpha needs --lora RANK");
  VP_REQUIRE(!export_adapter || lora_rank > 0, "--export-adapter needs --lora RANK (it writes the LoRA adapter)");
  if (lora_rank > 0) {
    VP_REQUIRE(!lora_targets.empty(), "--lora-targets: give at least one layer");
    std::set<std::string> seen;
    for (const auto& name : lora_targets) {
      parse_linear_site(name);  // throws naming the known layers
      VP_REQUIRE(seen.insert(name).second, "--lora-targets: \"", name, "\" is given twice");
    }
  }
}

TrainingMode TrainOptions::training_mode() const {
  TrainingMode mode;
  if (freeze == "backbone") {
    mode.freeze = FreezeMode::backbone;
  } else if (freeze_layers > 0) {
    mode.freeze = FreezeMode::layers;
    mode.frozen_layers = freeze_layers;
  } else if (lora_rank > 0) {
    mode.freeze = FreezeMode::lora;
    mode.lora.rank = lora_rank;
    mode.lora.alpha = lora_alpha > 0 ? lora_alpha : static_cast<double>(lora_rank);
    for (const auto& name : lora_targets) mode.lora.targets.push_back(parse_linear_site(name));
  }
  return mode;
}

nlohmann::json TrainOptions::to_json() const {
  nlohmann::json j;
  j["model"] = model;
  j["data"] = data;
  j["output_dir"] = output_dir;
  j["resume"] = resume_auto ? nlohmann::json("auto") : nlohmann::json(resume);
  j["force"] = force;
  j["export_last"] = export_last;
  j["epochs"] = optional_json(epochs);
  j["max_steps"] = optional_json(max_steps);
  j["batch_size"] = batch_size;
  j["micro_batch_size"] = optional_json(micro_batch_size);
  j["optimizer"] = optimizer;
  j["lr"] = lr;
  j["weight_decay"] = weight_decay;
  j["beta1"] = beta1;
  j["beta2"] = beta2;
  j["eps"] = eps;
  j["momentum"] = momentum;
  j["nesterov"] = nesterov;
  j["clip_grad_norm"] = clip_grad_norm;
  j["layer_decay"] = layer_decay;
  j["schedule"] = schedule_name(schedule);
  j["warmup_ratio"] = warmup_ratio ? nlohmann::json(*warmup_ratio) : nlohmann::json(nullptr);
  j["warmup_steps"] = optional_json(warmup_steps);
  j["pos_weight"] = pos_weight_auto ? "auto" : "none";
  j["precision"] = precision == DType::bf16 ? "bf16" : "fp32";
  j["seed"] = seed;
  j["threads"] = threads;
  j["device"] = device;
  j["allow_tf32"] = allow_tf32;
  j["eval_every"] = eval_every;
  j["log_every"] = log_every;
  j["val_fraction"] = val_fraction;
  j["test"] = test;
  j["image_size"] = image_size;
  j["skip_unreadable"] = skip_unreadable;
  j["aug_crop_scale"] = augment.crop_scale
                            ? nlohmann::json::array({augment.crop_scale->first, augment.crop_scale->second})
                            : nlohmann::json("off");
  j["aug_rotate"] = augment.rotate_degrees;
  j["aug_brightness"] = augment.brightness;
  j["aug_contrast"] = augment.contrast;
  j["aug_hflip"] = augment.hflip;
  j["augment"] = augment.enabled;
  j["data_seed"] = data_seed;
  j["view"] = view;
  j["add_no_finding"] = add_no_finding;
  j["intensity"] = intensity;
  j["dicom_window"] = dicom_window;
  j["dicom_first_frame"] = dicom_first_frame;
  j["uncertain"] = uncertain;
  j["blank"] = blank;
  j["label_vote"] = label_vote;
  j["mimic_labels"] = mimic_labels;
  j["labels"] = labels;
  j["subgroup"] = subgroups;
  j["partial_batch"] = partial_batch;
  j["loader_threads"] = loader_threads;
  j["checkpoint_every"] = checkpoint_every;
  j["keep_checkpoints"] = keep_checkpoints;
  j["checkpoint_minutes"] = checkpoint_minutes;
  j["virtual_stages"] = virtual_stages;
  j["pipeline_stages"] = pipeline_stages;
  j["layers_per_stage"] = layers_per_stage;
  j["pipeline_schedule"] = pipeline_schedule;
  j["recompute"] = recompute;
  j["shard_optimizer"] = shard_optimizer;
  j["trace"] = trace;
  j["comm_timeout"] = comm_timeout ? nlohmann::json(*comm_timeout) : nlohmann::json(nullptr);
  j["layout"] = layout;
  j["memory_per_process"] = memory_per_process;
  j["link"] = link;
  j["profile_cache"] = profile_cache;
  j["scaling"] = scaling;
  if (layout == "auto") {  // chosen by the planner: read back, they must not count as given
    for (const auto& name : layout_option_names()) {
      std::string key = name;
      std::replace(key.begin(), key.end(), '-', '_');
      j[key] = nullptr;
    }
  }
  j["freeze"] = freeze;
  j["freeze_layers"] = freeze_layers;
  j["lora"] = lora_rank;
  j["lora_alpha"] = lora_alpha;
  j["lora_targets"] = lora_targets;
  j["export_adapter"] = export_adapter;
  j["export_onnx"] = export_onnx;
  j["license"] = license;
  j["push_to_hub"] = push_to_hub;
  return j;
}

OptimizerConfig TrainOptions::optimizer_config() const {
  OptimizerConfig config = optimizer_config_named(optimizer);
  config.weight_decay = weight_decay;
  config.beta1 = beta1;
  config.beta2 = beta2;
  config.eps = eps;
  if (config.kind == OptimizerKind::sgd) {
    config.momentum = momentum;
    config.nesterov = nesterov;
  }
  config.layer_decay = layer_decay;
  return config;
}

LrSchedule TrainOptions::lr_schedule() const {
  LrSchedule schedule_config;
  schedule_config.kind = schedule;
  schedule_config.base_lr = lr;
  schedule_config.warmup_ratio = warmup_ratio.value_or(0.0);
  schedule_config.warmup_steps = warmup_steps;
  return schedule_config;
}

void apply_config_json(TrainOptions& options, const nlohmann::json& config, const std::string& source) {
  apply_entries(options, entries_from_json(config, source), source, false);
}

void apply_config_file(TrainOptions& options, const std::filesystem::path& path) {
  VP_REQUIRE(std::filesystem::is_regular_file(path), path.string(), ": config file not found");
  std::string extension = path.extension().string();
  std::transform(extension.begin(), extension.end(), extension.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  if (extension == ".json") {
    apply_entries(options, entries_from_json(parse_json_file(path), path.string()), path.string(), false);
  } else if (extension == ".yaml" || extension == ".yml") {
    apply_entries(options, entries_from_yaml(path), path.string(), false);
  } else {
    fail(path.string(), ": unknown config format '", extension, "' (expected .json, .yaml or .yml)");
  }
}

// Options given once per value on the command line (--subgroup A --subgroup B); a list in a config file.
static bool repeatable(const OptionDef& def) { return std::string(def.name) == "subgroup"; }

struct TrainOptionsParser::Registered {
  const OptionDef* def = nullptr;
  std::string value;
  std::vector<std::string> values;  // a repeatable option (--subgroup)
  bool flag = false;
  CLI::Option* option = nullptr;
};

TrainOptionsParser::TrainOptionsParser(CLI::App* app) {
  const nlohmann::json defaults_json = defaults().to_json();
  auto underscored = [](std::string name) {
    for (char& c : name)
      if (c == '-') c = '_';
    return name;
  };
  app->add_option("--config", config_path_,
                  "JSON or YAML file of options (keys: the flag names without dashes); flags given here override it")
      ->type_name("FILE");
  for (const OptionDef& def : option_table()) {
    auto entry = std::make_unique<Registered>();
    entry->def = &def;
    const std::string flag = std::string("--") + def.name;
    if (def.is_flag()) {
      // The default said in words where the help does not already say it (the --no- form sets false, not the
      // default: see cli/help_formatter.h).
      std::string help = def.help;
      const std::string key = underscored(def.name);
      if (help.find("default") == std::string::npos && defaults_json.contains(key) && defaults_json[key].is_boolean())
        help += defaults_json[key].get<bool>() ? " (default on)" : " (default off)";
      entry->option = app->add_flag(flag + ",!--no-" + def.name, entry->flag, help);
    } else if (std::string(def.name) == "resume") {
      // --resume alone (a flag) or --resume auto: an optional value; "" stands for "given without one".
      entry->option = app->add_option(flag, entry->value, def.help)->type_name(def.hint)->expected(0, 1);
    } else if (repeatable(def)) {
      entry->option = app->add_option(flag, entry->values, def.help)->type_name(def.hint);
    } else {
      entry->option = app->add_option(flag, entry->value, def.help)->type_name(def.hint);
    }
    registered_.push_back(std::move(entry));
  }
}

TrainOptions with_recorded_paths(TrainOptions o) {
  o.model = recorded_model_reference(o.model);
  if (!o.initial_adapter.empty()) o.initial_adapter = recorded_model_reference(o.initial_adapter);
  o.data = recorded_data_spec(o.data);
  if (!o.output_dir.empty()) o.output_dir = recorded_path(o.output_dir);
  if (!o.trace.empty()) o.trace = recorded_path(o.trace);
  if (!o.profile_cache.empty()) o.profile_cache = recorded_path(o.profile_cache);
  if (!o.scaling.empty()) o.scaling = recorded_path(o.scaling);
  // A named set stays a name; a file is recorded where it is (named_label_set reads either).
  std::error_code error;
  if (o.labels != "chestxray14" && o.labels != "chexpert" && o.labels != "union" && !o.labels.empty() &&
      std::filesystem::is_regular_file(o.labels, error)) {
    o.labels = recorded_path(o.labels);
  }
  return o;
}

void continue_peft_adapter(TrainOptions& o) {
  if (!is_peft_adapter_directory(o.model)) return;
  // Continue the adapter: vitpipe's LoRA on its base, with the adapter's rank, alpha and layers.
  const PeftTrainingStart start = read_peft_adapter_for_training(o.model);
  VP_REQUIRE(o.lora_rank == 0 || o.lora_rank == start.rank, "--lora ", o.lora_rank, ": the adapter ", o.model,
             " has rank ", start.rank, " (leave --lora out to continue it)");
  VP_REQUIRE(start.revision == "main", "--model ", o.model, ": its base is pinned to revision \"", start.revision,
             "\", which train does not take; export it with `vitpipe export ADAPTER --out DIR` and train DIR");
  std::string sites;
  for (const auto& site : start.sites) sites += (sites.empty() ? "" : ",") + site;
  info("continuing the LoRA adapter ", o.model, " on ", start.base_model, ": rank ", start.rank, ", alpha ",
       start.alpha, ", ", sites);
  o.initial_adapter = o.model;
  o.model = start.base_model;
  o.lora_rank = start.rank;
  o.lora_alpha = start.alpha;
  o.lora_targets = start.sites;
}

TrainOptions TrainOptionsParser::resolve(bool validate) const {
  Entries given;
  for (const auto& entry : registered_) {
    if (entry->option->count() == 0) continue;
    RawValue raw;
    raw.where = std::string("--") + entry->def->name;
    if (repeatable(*entry->def)) {  // each use one value; commas inside a value are part of the column name
      raw.is_list = true;
      raw.items = entry->values;
      given.emplace_back(entry->def->name, std::move(raw));
      continue;
    }
    raw.items.push_back(entry->def->is_flag()                                ? (entry->flag ? "true" : "false")
                        : entry->value.empty() && entry->def->hint[0] == '[' ? "true"  // --resume without a value
                                                                             : entry->value);
    given.emplace_back(entry->def->name, std::move(raw));
  }
  // defaults <- `base` (a run's own options, when it continues) <- --config <- the command line.
  const auto layered = [&](const nlohmann::json* base, const std::string& base_source) {
    TrainOptions options;
    if (base != nullptr) apply_config_json(options, *base, base_source);
    if (!config_path_.empty()) apply_config_file(options, config_path_);
    apply_entries(options, given, "the command line", true);
    continue_peft_adapter(options);
    complete_defaults(options);
    return options;
  };
  TrainOptions options = layered(nullptr, "");
  // A run that continues takes its own options first: `train --resume --output-dir DIR` alone is the whole command.
  // Only where there is a checkpoint to continue: --resume auto in a run stopped before its first one starts afresh
  // with the options as given.
  const std::filesystem::path saved_path = std::filesystem::path(options.output_dir) / "train_options.json";
  if (options.resume && !options.output_dir.empty() && std::filesystem::is_regular_file(saved_path) &&
      latest_checkpoint(options.output_dir)) {
    const nlohmann::json saved = parse_json_file(saved_path);
    TrainOptions run;
    apply_config_json(run, saved, saved_path.string());
    continue_peft_adapter(run);
    complete_defaults(run);
    options = layered(&saved, saved_path.string());
    // Compared as run files record them (run_training does the same): a relative --model or --data given beside
    // --resume names the same run as the absolute path in train_options.json.
    const auto recorded = [](const TrainOptions& o) { return with_recorded_paths(o); };
    const std::vector<std::string> differing =
        differing_options(recorded(options), recorded(run).to_json(), resume_changeable_options());
    if (!differing.empty()) {
      std::string list;
      for (const auto& d : differing) list += (list.empty() ? "" : ", ") + d;
      fail("--resume: ", differing.size() == 1 ? "this option differs" : "these options differ", " from the run's own ",
           saved_path.string(), ": ", list,
           "; leave them out to continue the run as it was (or start a new --output-dir)");
    }
  }
  if (validate) options.validate();
  return options;
}

const std::vector<std::string>& resume_changeable_options() {
  static const std::vector<std::string> names = {"output-dir",
                                                 "resume",
                                                 "force",
                                                 "epochs",
                                                 "max-steps",
                                                 "threads",
                                                 "loader-threads",
                                                 "device",
                                                 "allow-tf32",
                                                 "log-every",
                                                 "eval-every",
                                                 "checkpoint-every",
                                                 "checkpoint-minutes",
                                                 "keep-checkpoints",
                                                 "comm-timeout",
                                                 "trace",
                                                 "test",
                                                 "export-last",
                                                 "export-onnx",
                                                 "export-adapter",
                                                 "push-to-hub",
                                                 "layout",
                                                 "pipeline-stages",
                                                 "layers-per-stage",
                                                 "pipeline-schedule",
                                                 "virtual-stages",
                                                 "recompute",
                                                 "shard-optimizer",
                                                 "micro-batch-size",
                                                 "memory-per-process",
                                                 "link",
                                                 "profile-cache",
                                                 "scaling"};
  return names;
}

std::vector<std::string> differing_options(const TrainOptions& now, const nlohmann::json& run,
                                           const std::vector<std::string>& changeable) {
  const nlohmann::json current = now.to_json();
  std::vector<std::string> differing;
  for (const auto& [key, value] : current.items()) {
    std::string flag = key;
    std::replace(flag.begin(), flag.end(), '_', '-');
    if (std::find(changeable.begin(), changeable.end(), flag) != changeable.end()) continue;
    if (!run.contains(key) || run[key] == value) continue;
    differing.push_back(concat("--", flag, " ", value.dump(), " (the run: ", run[key].dump(), ")"));
  }
  return differing;
}

std::shared_ptr<TrainOptionsParser> add_train_options(CLI::App* app) {
  return std::make_shared<TrainOptionsParser>(app);
}

TrainOptions parse_train_options(const std::vector<std::string>& args) {
  CLI::App app{"vitpipe train"};
  TrainOptionsParser parser(&app);
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 consumes from the back
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    fail("command line: ", e.what());
  }
  return parser.resolve();
}

}  // namespace vitpipe
