#include <gtest/gtest.h>

#include <CLI/CLI.hpp>
#include <fstream>
#include <nlohmann/json.hpp>

#include "reference.h"
#include "train/train_options.h"
#include "util/error.h"

namespace vitpipe {
namespace {

const std::vector<std::string> kRequired = {
    "--model", "google/vit-base-patch16-224-in21k", "--data", "/data/cxr14", "--output-dir", "/tmp/run"};

std::vector<std::string> with_required(std::vector<std::string> args) {
  args.insert(args.begin(), kRequired.begin(), kRequired.end());
  return args;
}

std::string error_of(const std::vector<std::string>& args) {
  try {
    parse_train_options(args);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

void write_file(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
}

TEST(TrainOptions, DefaultsAreTheReferenceRecipe) {
  TrainOptions o = parse_train_options(kRequired);
  EXPECT_EQ(o.model, "google/vit-base-patch16-224-in21k");
  EXPECT_EQ(o.epochs, 3);
  EXPECT_FALSE(o.max_steps.has_value());
  EXPECT_EQ(o.batch_size, 128);
  EXPECT_EQ(o.micro_batch_size, 8);
  EXPECT_EQ(o.micro_batches(), 16);
  EXPECT_EQ(o.optimizer, "adamw");
  EXPECT_EQ(o.lr, 2e-4);
  EXPECT_EQ(o.schedule, LrScheduleKind::cosine);
  EXPECT_EQ(o.warmup_ratio, 0.25);
  EXPECT_FALSE(o.warmup_steps.has_value());
  EXPECT_EQ(o.clip_grad_norm, 1.0);
  EXPECT_EQ(o.precision, DType::f32);
  EXPECT_EQ(o.pipeline_schedule, "1f1b");
  // The default micro-batch divides any batch size.
  EXPECT_EQ(parse_train_options(with_required({"--batch-size", "12"})).micro_batch_size, 4);
  EXPECT_EQ(parse_train_options(with_required({"--batch-size", "7"})).micro_batch_size, 1);
}

TEST(TrainOptions, EveryFlagIsParsed) {
  TrainOptions o = parse_train_options(with_required({"--max-steps",
                                                      "500",
                                                      "--batch-size",
                                                      "64",
                                                      "--micro-batch-size",
                                                      "4",
                                                      "--lr",
                                                      "1e-3",
                                                      "--schedule",
                                                      "linear",
                                                      "--warmup-steps",
                                                      "50",
                                                      "--seed",
                                                      "7",
                                                      "--threads",
                                                      "2",
                                                      "--export-last",
                                                      "--resume",
                                                      "--optimizer",
                                                      "sgd",
                                                      "--weight-decay",
                                                      "0.05",
                                                      "--beta1",
                                                      "0.8",
                                                      "--beta2",
                                                      "0.95",
                                                      "--eps",
                                                      "1e-6",
                                                      "--momentum",
                                                      "0.85",
                                                      "--nesterov",
                                                      "--clip-grad-norm",
                                                      "0",
                                                      "--pos-weight",
                                                      "auto",
                                                      "--precision",
                                                      "bf16",
                                                      "--layer-decay",
                                                      "0.75",
                                                      "--eval-every",
                                                      "100",
                                                      "--log-every",
                                                      "5",
                                                      "--val-fraction",
                                                      "0.2",
                                                      "--image-size",
                                                      "384",
                                                      "--test",
                                                      "--skip-unreadable",
                                                      "--aug-crop-scale",
                                                      "0.08,1.0",
                                                      "--aug-rotate",
                                                      "10",
                                                      "--aug-brightness",
                                                      "0.2",
                                                      "--aug-contrast",
                                                      "0.3",
                                                      "--aug-hflip",
                                                      "--pipeline-stages",
                                                      "4",
                                                      "--layers-per-stage",
                                                      "2,4,4,2",
                                                      "--pipeline-schedule",
                                                      "gpipe",
                                                      "--recompute",
                                                      "--trace",
                                                      "trace.json"}));
  EXPECT_FALSE(o.epochs.has_value());
  EXPECT_EQ(o.max_steps, 500);
  EXPECT_EQ(o.batch_size, 64);
  EXPECT_EQ(o.micro_batch_size, 4);
  EXPECT_EQ(o.lr, 1e-3);
  EXPECT_EQ(o.schedule, LrScheduleKind::linear);
  EXPECT_EQ(o.warmup_steps, 50);
  EXPECT_FALSE(o.warmup_ratio.has_value());
  EXPECT_EQ(o.seed, 7u);
  EXPECT_EQ(o.threads, 2);
  EXPECT_TRUE(o.export_last);
  EXPECT_TRUE(o.resume);
  EXPECT_EQ(o.optimizer, "sgd");
  EXPECT_EQ(o.weight_decay, 0.05);
  EXPECT_EQ(o.beta1, 0.8);
  EXPECT_EQ(o.beta2, 0.95);
  EXPECT_EQ(o.eps, 1e-6);
  EXPECT_EQ(o.momentum, 0.85);
  EXPECT_TRUE(o.nesterov);
  EXPECT_EQ(o.clip_grad_norm, 0.0);
  EXPECT_TRUE(o.pos_weight_auto);
  EXPECT_EQ(o.precision, DType::bf16);
  EXPECT_EQ(o.layer_decay, 0.75);
  EXPECT_EQ(o.eval_every, 100);
  EXPECT_EQ(o.log_every, 5);
  EXPECT_EQ(o.val_fraction, 0.2);
  EXPECT_EQ(o.image_size, 384);
  EXPECT_TRUE(o.test);
  EXPECT_TRUE(o.skip_unreadable);
  EXPECT_EQ(o.augment.crop_scale, std::make_pair(0.08, 1.0));
  EXPECT_EQ(o.augment.rotate_degrees, 10.0);
  EXPECT_EQ(o.augment.brightness, 0.2);
  EXPECT_EQ(o.augment.contrast, 0.3);
  EXPECT_TRUE(o.augment.hflip);
  EXPECT_EQ(o.pipeline_stages, 4);
  EXPECT_EQ(o.layers_per_stage, (std::vector<int>{2, 4, 4, 2}));
  EXPECT_EQ(o.pipeline_schedule, "gpipe");
  EXPECT_TRUE(o.recompute);
  EXPECT_EQ(o.trace, "trace.json");

  OptimizerConfig oc = o.optimizer_config();
  EXPECT_EQ(oc.kind, OptimizerKind::sgd);
  EXPECT_EQ(oc.momentum, 0.85);
  EXPECT_TRUE(oc.nesterov);
  EXPECT_EQ(oc.weight_decay, 0.05);
  EXPECT_EQ(oc.layer_decay, 0.75);
  LrSchedule schedule = o.lr_schedule();
  EXPECT_EQ(schedule.kind, LrScheduleKind::linear);
  EXPECT_EQ(schedule.warmup(500), 50);
  EXPECT_EQ(schedule.lr(25, 500), 5e-4);
  EXPECT_EQ(parse_train_options(with_required({"--optimizer", "adamw-nobc"})).optimizer_config().bias_correction,
            false);
  EXPECT_EQ(parse_train_options(with_required({"--optimizer", "adamw"})).optimizer_config().momentum, 0.0);
}

TEST(TrainOptions, ConfigFileThenCommandLine) {
  testing::ScratchDir dir("options");
  write_file(dir.path() / "train.yaml",
             "model: ./vit-tiny\n"
             "data: /data/cxr14\n"
             "output_dir: /tmp/out\n"
             "epochs: 5\n"
             "warmup-steps: 10\n"
             "lr: 3e-4\n"
             "layers_per_stage: [3, 3]\n"
             "pipeline_stages: 2\n"
             "aug_crop_scale: [0.5, 1]\n"
             "aug_hflip: yes\n"
             "trace: ~\n");
  TrainOptions o = parse_train_options({"--config", (dir.path() / "train.yaml").string()});
  EXPECT_EQ(o.model, "./vit-tiny");
  EXPECT_EQ(o.output_dir, "/tmp/out");
  EXPECT_EQ(o.epochs, 5);
  EXPECT_EQ(o.warmup_steps, 10);
  EXPECT_FALSE(o.warmup_ratio.has_value());
  EXPECT_EQ(o.lr, 3e-4);
  EXPECT_EQ(o.layers_per_stage, (std::vector<int>{3, 3}));
  EXPECT_EQ(o.augment.crop_scale, std::make_pair(0.5, 1.0));
  EXPECT_TRUE(o.augment.hflip);
  // Flags override the file; a flag of an exclusive pair replaces the file's partner.
  o = parse_train_options({"--config", (dir.path() / "train.yaml").string(), "--lr", "1e-4", "--max-steps", "20",
                           "--warmup-ratio", "0.1", "--no-aug-hflip", "--model", "other"});
  EXPECT_EQ(o.lr, 1e-4);
  EXPECT_EQ(o.max_steps, 20);
  EXPECT_FALSE(o.epochs.has_value());
  EXPECT_EQ(o.warmup_ratio, 0.1);
  EXPECT_FALSE(o.warmup_steps.has_value());
  EXPECT_FALSE(o.augment.hflip);
  EXPECT_EQ(o.model, "other");

  write_file(dir.path() / "train.json",
             R"({"model": "m", "data": "d", "output-dir": "o", "max_steps": 7, "batch_size": 6,
                 "micro-batch-size": 3, "optimizer": "lamb", "clip_grad_norm": 0.5, "layers_per_stage": "1,1,1",
                 "pipeline_stages": 3, "test": true, "seed": 0, "aug_crop_scale": null})");
  o = parse_train_options({"--config", (dir.path() / "train.json").string()});
  EXPECT_EQ(o.max_steps, 7);
  EXPECT_FALSE(o.epochs.has_value());
  EXPECT_EQ(o.micro_batches(), 2);
  EXPECT_EQ(o.optimizer, "lamb");
  EXPECT_EQ(o.clip_grad_norm, 0.5);
  EXPECT_EQ(o.layers_per_stage, (std::vector<int>{1, 1, 1}));
  EXPECT_TRUE(o.test);
  EXPECT_EQ(o.seed, 0u);
}

TEST(TrainOptions, EffectiveConfigurationRoundTrips) {
  testing::ScratchDir dir("options_roundtrip");
  TrainOptions o = parse_train_options(
      with_required({"--max-steps", "500", "--warmup-steps", "50", "--optimizer", "lamb", "--aug-crop-scale", "0.08,1",
                     "--layers-per-stage", "1,2", "--pipeline-stages", "2", "--precision", "bf16", "--pos-weight",
                     "auto", "--seed", "18446744073709551615"}));
  const nlohmann::json saved = o.to_json();
  EXPECT_EQ(saved["output_dir"], "/tmp/run");
  EXPECT_TRUE(saved["epochs"].is_null());
  EXPECT_EQ(saved["aug_crop_scale"], nlohmann::json::array({0.08, 1.0}));
  EXPECT_EQ(saved["precision"], "bf16");
  EXPECT_EQ(saved["pos_weight"], "auto");
  EXPECT_EQ(saved["seed"].get<uint64_t>(), UINT64_MAX);
  // Every option appears, under its config key.
  for (const std::string& name : train_option_names()) {
    std::string key = name;
    std::replace(key.begin(), key.end(), '-', '_');
    EXPECT_TRUE(saved.contains(key)) << key;
  }
  EXPECT_EQ(saved.size(), train_option_names().size());
  // Read back as JSON and as YAML (JSON is YAML), it gives the same options.
  for (const char* name : {"effective.json", "effective.yaml"}) {
    write_file(dir.path() / name, saved.dump(2));
    TrainOptions back;
    apply_config_file(back, dir.path() / name);
    complete_defaults(back);
    EXPECT_EQ(back, o) << name;
  }
  TrainOptions from_json;
  apply_config_json(from_json, saved, "train_options.json");
  complete_defaults(from_json);
  EXPECT_EQ(from_json, o);
}

TEST(TrainOptions, RegistersOnASubcommand) {
  CLI::App app{"vitpipe"};
  auto* train = app.add_subcommand("train", "fine-tune");
  auto parser = add_train_options(train);
  std::vector<std::string> args = {"train", "--model", "m", "--data", "d", "--output-dir", "o", "--epochs", "2"};
  std::reverse(args.begin(), args.end());
  app.parse(args);
  TrainOptions o = parser->resolve();
  EXPECT_EQ(o.epochs, 2);
  EXPECT_NE(train->help().find("--aug-crop-scale"), std::string::npos);
  EXPECT_NE(train->help().find("--no-aug-hflip"), std::string::npos);
}

// --comm-timeout: unset leaves the deadline to VITPIPE_COMM_TIMEOUT or 300 s (parallel/comm_deadline.h); a config
// file sets it as comm_timeout; 0 means no deadline; negative or absurd values are refused naming the flag.
TEST(TrainOptions, CommTimeout) {
  EXPECT_FALSE(parse_train_options(kRequired).comm_timeout.has_value());
  EXPECT_EQ(parse_train_options(with_required({"--comm-timeout", "30"})).comm_timeout, 30.0);
  EXPECT_EQ(parse_train_options(with_required({"--comm-timeout", "0"})).comm_timeout, 0.0);
  testing::ScratchDir dir("comm_timeout");
  write_file(dir.path() / "train.yaml", "comm_timeout: 45\n");
  const TrainOptions from_file = parse_train_options(with_required({"--config", (dir.path() / "train.yaml").string()}));
  EXPECT_EQ(from_file.comm_timeout, 45.0);
  EXPECT_EQ(from_file.to_json()["comm_timeout"], 45.0);
  EXPECT_NE(error_of(with_required({"--comm-timeout", "-1"})).find("--comm-timeout must be seconds in [0, 1e7]"),
            std::string::npos);
  EXPECT_NE(error_of(with_required({"--comm-timeout", "soon"})).find("--comm-timeout: expected a number, got 'soon'"),
            std::string::npos);
}

TEST(TrainOptions, RefusesBadValuesNamingTheOption) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--lr", "0"}, "--lr must be > 0 (got 0)"},
      {{"--lr", "-1"}, "--lr must be > 0 (got -1)"},
      {{"--lr", "fast"}, "--lr: expected a number, got 'fast'"},
      {{"--lr", "nan"}, "--lr: expected a number, got 'nan'"},
      {{"--batch-size", "30", "--micro-batch-size", "8"}, "--batch-size 30 is not divisible by --micro-batch-size 8"},
      {{"--batch-size", "0"}, "--batch-size must be a positive integer"},
      {{"--micro-batch-size", "0"}, "--micro-batch-size must be a positive integer"},
      {{"--epochs", "2", "--max-steps", "10"}, "--epochs and --max-steps are exclusive"},
      {{"--epochs", "0"}, "--epochs must be a positive integer (got 0)"},
      {{"--epochs", "1.5"}, "--epochs: expected an integer, got '1.5'"},
      {{"--max-steps", "-5"}, "--max-steps must be a positive integer (got -5)"},
      {{"--optimizer", "adam"}, "--optimizer: unknown value 'adam' (expected one of: adamw, adamw-nobc, lamb"},
      {{"--schedule", "step"}, "--schedule: unknown value 'step' (expected one of: cosine, linear, constant)"},
      {{"--warmup-ratio", "1"}, "--warmup-ratio must be in [0, 1) (got 1)"},
      {{"--warmup-ratio", "0.1", "--warmup-steps", "5"}, "--warmup-ratio and --warmup-steps are exclusive"},
      {{"--warmup-steps", "-1"}, "--warmup-steps must be >= 0"},
      {{"--max-steps", "10", "--warmup-steps", "10"}, "leaves no step after the warm-up"},
      {{"--beta1", "1"}, "--beta1 must be in [0, 1) (got 1)"},
      {{"--beta2", "1.5"}, "--beta2 must be in [0, 1) (got 1.5)"},
      {{"--eps", "0"}, "--eps must be > 0"},
      {{"--weight-decay", "-0.1"}, "--weight-decay must be >= 0"},
      {{"--momentum", "1"}, "--momentum must be in [0, 1)"},
      {{"--nesterov"}, "--nesterov applies to --optimizer sgd only"},
      {{"--optimizer", "sgd", "--nesterov", "--momentum", "0"}, "--nesterov needs --momentum > 0"},
      {{"--clip-grad-norm", "-1"}, "--clip-grad-norm must be >= 0"},
      {{"--layer-decay", "0"}, "--layer-decay must be in (0, 1]"},
      {{"--layer-decay", "1.2"}, "--layer-decay must be in (0, 1]"},
      {{"--pos-weight", "balanced"}, "--pos-weight: unknown value 'balanced' (expected one of: none, auto)"},
      {{"--precision", "fp16"}, "--precision: unknown value 'fp16' (expected one of: fp32, bf16, auto)"},
      {{"--freeze", "encoder"}, "--freeze: unknown value 'encoder' (expected one of: none, backbone)"},
      {{"--freeze", "backbone", "--lora", "4"}, "--freeze backbone, --freeze-layers and --lora are exclusive"},
      {{"--lora-alpha", "8"}, "--lora-alpha needs --lora RANK"},
      {{"--export-adapter"}, "--export-adapter needs --lora RANK"},
      {{"--lora", "4", "--lora-targets", "query,query"}, "--lora-targets: \"query\" is given twice"},
      {{"--seed", "-1"}, "--seed: expected a non-negative integer, got '-1'"},
      {{"--threads", "-2"}, "--threads must be >= 0"},
      {{"--eval-every", "-1"}, "--eval-every must be >= 0"},
      {{"--log-every", "-1"}, "--log-every must be >= 0"},
      {{"--val-fraction", "1"}, "--val-fraction must be in [0, 1)"},
      {{"--image-size", "-224"}, "--image-size must be >= 0"},
      {{"--aug-crop-scale", "0.5"}, "--aug-crop-scale: expected two numbers MIN,MAX, got 1 values"},
      {{"--aug-crop-scale", "0.9,0.5"}, "--aug-crop-scale must be MIN,MAX with 0 < MIN <= MAX <= 1"},
      {{"--aug-crop-scale", "0,1"}, "--aug-crop-scale must be MIN,MAX with 0 < MIN <= MAX <= 1"},
      {{"--aug-crop-scale", "a,b"}, "--aug-crop-scale: expected a number, got 'a'"},
      {{"--aug-rotate", "200"}, "--aug-rotate must be in [0, 180]"},
      {{"--aug-brightness", "-1"}, "--aug-brightness must be >= 0"},
      {{"--aug-contrast", "-1"}, "--aug-contrast must be >= 0"},
      {{"--pipeline-stages", "0"}, "--pipeline-stages must be >= 1"},
      {{"--pipeline-stages", "3", "--layers-per-stage", "3,3"}, "--layers-per-stage lists 2 stages but"},
      {{"--pipeline-stages", "3", "--layers-per-stage", "3,0,3"}, "stage 1 gets 0 layers, expected >= 1"},
      {{"--pipeline-stages", "2", "--layers-per-stage", "3,x"}, "--layers-per-stage: expected an integer, got 'x'"},
      {{"--pipeline-schedule", "zb"},
       "--pipeline-schedule: unknown value 'zb' (expected one of: 1f1b, gpipe, interleaved, zb-h1)"},
      {{"--frobnicate"}, "command line: "},
      {{"--lr"}, "command line: "},
  };
  for (const auto& [args, expected] : cases) {
    const std::string message = error_of(with_required(args));
    EXPECT_NE(message.find(expected), std::string::npos) << "args " << args[0] << ": got '" << message << "'";
  }
  EXPECT_NE(error_of({"--data", "d", "--output-dir", "o"}).find("--model is required"), std::string::npos);
  EXPECT_NE(error_of({"--model", "m", "--output-dir", "o"}).find("--data is required"), std::string::npos);
  EXPECT_NE(error_of({"--model", "m", "--data", "d"}).find("--output-dir is required"), std::string::npos);
}

TEST(TrainOptions, RefusesBadConfigFiles) {
  testing::ScratchDir dir("options_bad");
  auto message = [&](const std::string& name, const std::string& text) {
    write_file(dir.path() / name, text);
    return error_of({"--config", (dir.path() / name).string()});
  };
  const std::string yaml = (dir.path() / "c.yaml").string(), json = (dir.path() / "c.json").string();
  EXPECT_NE(message("c.yaml", "model: m\nlearning_rate: 1e-3\n")
                .find(yaml + ":2: learning_rate: unknown option 'learning-rate' (known: model, data,"),
            std::string::npos);
  EXPECT_NE(message("c.yaml", "model: m\ndata: d\nlr: fast\n").find(yaml + ":3: lr: expected a number, got 'fast'"),
            std::string::npos);
  EXPECT_NE(message("c.yaml", "lr: 1e-3\nlr: 2e-3\n").find("'lr' is given twice"), std::string::npos);
  EXPECT_NE(message("c.yaml", "output_dir: a\noutput-dir: b\n").find("'output-dir' is given twice"), std::string::npos);
  EXPECT_NE(message("c.yaml", "epochs: 2\nmax_steps: 9\n").find(yaml + ": epochs and max-steps are exclusive"),
            std::string::npos);
  EXPECT_NE(message("c.yaml", "augment:\n  hflip: true\n").find("expected a value or a list of values, got a mapping"),
            std::string::npos);
  EXPECT_NE(message("c.yaml", "lr: [1, 2\n").find(yaml + ": not valid YAML at line 2, column 1: "), std::string::npos);
  EXPECT_NE(message("c.yaml", "- lr\n- 2\n").find("expected a mapping of option names"), std::string::npos);
  EXPECT_NE(message("c.yaml", "config: other.yaml\n").find("unknown option 'config'"), std::string::npos);
  EXPECT_NE(message("c.json", R"({"lr": 1e-3, "lr": 2e-3})").find(json + ": 'lr' is given twice"), std::string::npos);
  EXPECT_NE(message("c.json", R"({"lr": 1e-3,})").find(json + ": invalid JSON"), std::string::npos);
  EXPECT_NE(message("c.json", R"({"epochs": 2.5})").find(json + ": epochs: expected an integer, got '2.5'"),
            std::string::npos);
  EXPECT_NE(message("c.json", R"({"aug": {"x": 1}})").find("got object"), std::string::npos);
  EXPECT_NE(message("c.json", R"([1, 2])").find("expected an object of option names"), std::string::npos);
  EXPECT_NE(message("c.toml", "lr = 1").find("unknown config format '.toml'"), std::string::npos);
  EXPECT_NE(error_of({"--config", (dir.path() / "missing.yaml").string()}).find("config file not found"),
            std::string::npos);
}

}  // namespace
}  // namespace vitpipe

namespace vitpipe {
namespace {

TEST(TrainOptions, ResumeTakesAnOptionalAuto) {
  TrainOptions alone = parse_train_options(with_required({"--resume"}));
  EXPECT_TRUE(alone.resume);
  EXPECT_FALSE(alone.resume_auto);
  EXPECT_EQ(alone.to_json()["resume"], true);
  TrainOptions automatic = parse_train_options(with_required({"--resume", "auto"}));
  EXPECT_TRUE(automatic.resume);
  EXPECT_TRUE(automatic.resume_auto);
  EXPECT_EQ(automatic.to_json()["resume"], "auto");
  // --resume followed by another flag does not swallow it.
  TrainOptions first = parse_train_options({"--resume", "--model", "m", "--data", "d", "--output-dir", "/tmp/run"});
  EXPECT_TRUE(first.resume);
  EXPECT_EQ(first.model, "m");
  TrainOptions from_config;
  apply_config_json(from_config, {{"resume", "auto"}}, "c.json");
  EXPECT_TRUE(from_config.resume_auto);
  EXPECT_NE(error_of(with_required({"--resume", "later"})).find("--resume"), std::string::npos);
}

TEST(TrainOptions, ResumeContinuesTheRunsOwnOptionsAndNamesEveryDifference) {
  testing::ScratchDir dir("options_resume");
  const std::string out = (dir.path() / "run").string();
  const TrainOptions run = parse_train_options({"--model", "m", "--data", "csv:/d.csv", "--output-dir", out, "--lr",
                                                "0.001", "--seed", "3", "--batch-size", "16", "--epochs", "2"});
  std::filesystem::create_directories(dir.path() / "run" / "checkpoints" / "step-00000004");
  write_file(dir.path() / "run" / "checkpoints" / "step-00000004" / "trainer_state.json", "{}");
  write_file(dir.path() / "run" / "checkpoints" / "latest", "step-00000004\n");
  write_file(dir.path() / "run" / "train_options.json", run.to_json().dump(2));

  // The whole command: --resume and the directory.
  TrainOptions continued = parse_train_options({"--resume", "--output-dir", out});
  EXPECT_TRUE(continued.resume);
  EXPECT_EQ(continued.model, "m");
  EXPECT_EQ(continued.data, "csv:/d.csv");
  EXPECT_EQ(continued.lr, 0.001);
  EXPECT_EQ(continued.seed, 3u);
  EXPECT_EQ(continued.batch_size, 16);
  // Length and machine may change; the same value given again is no difference.
  TrainOptions longer = parse_train_options(
      {"--resume", "auto", "--output-dir", out, "--epochs", "4", "--threads", "1", "--lr", "0.001"});
  EXPECT_EQ(longer.epochs, 4);
  EXPECT_EQ(longer.threads, 1);
  // Every disagreement at once, with both values.
  const std::string error =
      error_of({"--resume", "--output-dir", out, "--lr", "0.002", "--seed", "4", "--model", "other", "--epochs", "5"});
  EXPECT_NE(error.find("--lr 0.002 (the run: 0.001)"), std::string::npos) << error;
  EXPECT_NE(error.find("--seed 4 (the run: 3)"), std::string::npos) << error;
  EXPECT_NE(error.find("--model \"other\" (the run: \"m\")"), std::string::npos) << error;
  EXPECT_EQ(error.find("--epochs"), std::string::npos) << error;
  // A relative --model or --data beside --resume names the run's absolute one (as run files record them).
  std::filesystem::create_directories(dir.path() / "base");
  write_file(dir.path() / "d.csv", "image,label\n");
  const TrainOptions absolute = parse_train_options(
      {"--model", (dir.path() / "base").string(), "--data", "csv:" + (dir.path() / "d.csv").string(), "--output-dir",
       out});
  write_file(dir.path() / "run" / "train_options.json", absolute.to_json().dump(2));
  const std::filesystem::path was = std::filesystem::current_path();
  std::filesystem::current_path(dir.path());
  const std::string relative = error_of({"--resume", "--output-dir", out, "--model", "base", "--data", "csv:d.csv"});
  std::filesystem::current_path(was);
  EXPECT_EQ(relative, "no error");
  // Without a checkpoint (a run stopped before its first), --resume auto starts afresh with the options as given.
  std::filesystem::remove_all(dir.path() / "run" / "checkpoints");
  TrainOptions fresh = parse_train_options(
      {"--resume", "auto", "--output-dir", out, "--model", "other", "--data", "csv:/e.csv", "--seed", "4"});
  EXPECT_EQ(fresh.model, "other");
  EXPECT_EQ(fresh.seed, 4u);
}

}  // namespace
}  // namespace vitpipe
