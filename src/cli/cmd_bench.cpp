// `vitpipe bench`: times full training steps (forward, loss, backward, AdamW step) or inference on random data,
// after a warm-up, and reports images/s, GFLOP/s, the fraction of the measured GEMM peak, peak memory and where the
// time goes. bench/compare_with_pytorch.py puts these beside the PyTorch peer. --scaling 1,2,... runs it at each
// thread count and reports how each operation (and the loader's decode + resize) scales (plan/core_scaling.h).
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "backend/cpu/cpu_features.h"
#include "backend/cpu/cpu_level.h"
#include "backend/cpu/gemm_peak.h"
#include "backend/cpu/memory_bandwidth.h"
#include "backend/cuda_module_backend.h"
#include "backend/profiling_backend.h"
#include "cli/commands.h"
#include "cli/device_flag.h"
#include "data/chestxray14_findings.h"
#include "data/image.h"
#include "data/pillow_resize.h"
#include "data/png_encoder.h"
#include "io/hf_config.h"
#include "model/flop_count.h"
#include "model/presets.h"
#include "model/trainable_set.h"
#include "model/vit_stage.h"
#include "plan/core_scaling.h"
#include "train/optimizer.h"
#include "util/error.h"
#include "util/random.h"
#include "util/threads.h"

namespace vitpipe::cli {
namespace {

struct BenchOptions {
  std::string device = "cpu";  // --device cpu|cuda|auto
  bool allow_tf32 = false;
  std::string preset = "vit-tiny";
  std::string config_path;
  int64_t batch = 32;
  int steps = 5;
  int threads = 0;
  std::string precision = "fp32";
  std::string mode = "train";
  bool json = false;
  int64_t image_size = 0;
  std::string freeze = "none";
  int64_t freeze_layers = 0;
  int64_t lora = 0;
  double lora_alpha = 0;
  std::string lora_targets = "query,value";
  std::string scaling;  // --scaling 1,2,...: thread counts to run in turn
};

// The same modes as `vitpipe train` (model/trainable_set.h).
TrainingMode bench_training_mode(const BenchOptions& o) {
  TrainingMode mode;
  const int modes = (o.freeze == "backbone") + (o.freeze_layers > 0) + (o.lora > 0);
  VP_REQUIRE(o.freeze == "none" || o.freeze == "backbone", "--freeze: expected none or backbone, got \"", o.freeze,
             "\"");
  VP_REQUIRE(modes <= 1, "--freeze backbone, --freeze-layers and --lora are exclusive: give one of them");
  if (o.freeze == "backbone") mode.freeze = FreezeMode::backbone;
  if (o.freeze_layers > 0) {
    mode.freeze = FreezeMode::layers;
    mode.frozen_layers = o.freeze_layers;
  }
  if (o.lora > 0) {
    mode.freeze = FreezeMode::lora;
    mode.lora.rank = o.lora;
    mode.lora.alpha = o.lora_alpha > 0 ? o.lora_alpha : static_cast<double>(o.lora);
    size_t start = 0;
    while (true) {
      const size_t comma = o.lora_targets.find(',', start);
      mode.lora.targets.push_back(parse_linear_site(o.lora_targets.substr(start, comma - start)));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  }
  return mode;
}

// Op by op, per step: its time beside the time its work takes at the measured GEMM peak (FLOPs) or memory
// bandwidth (bytes), whichever is longer, so the gap left is visible where it is. Bytes count each tensor once: an
// op whose data stays in cache can beat its memory bound.
nlohmann::json operation_bounds(const ProfilingBackend& backend, double optimizer_seconds, double optimizer_bytes,
                                int steps, double peak_gflops, double bandwidth) {
  nlohmann::json rows = nlohmann::json::array();
  auto add = [&](const std::string& name, OpKind kind, int64_t calls, double seconds, double flops, double bytes) {
    const double n = static_cast<double>(steps);
    const double flop_bound = flops / (peak_gflops * 1e9), byte_bound = bytes / bandwidth;
    rows.push_back({{"operation", name},
                    {"kind", op_kind_name(kind)},
                    {"calls_per_step", static_cast<double>(calls) / n},
                    {"seconds_per_step", seconds / n},
                    {"gflop_per_step", flops / n / 1e9},
                    {"mb_per_step", bytes / n / 1e6},
                    {"bound_seconds_per_step", std::max(flop_bound, byte_bound) / n},
                    {"bound_by", flop_bound >= byte_bound ? "GEMM peak" : "memory bandwidth"}});
  };
  for (const auto& [name, r] : backend.operations()) add(name, r.kind, r.calls, r.seconds, r.flops, r.bytes);
  if (optimizer_bytes > 0) {
    add("optimizer step (AdamW)", OpKind::other, steps, optimizer_seconds, 0.0, optimizer_bytes * steps);
  }
  std::sort(rows.begin(), rows.end(), [](const nlohmann::json& a, const nlohmann::json& b) {
    return a["seconds_per_step"].get<double>() > b["seconds_per_step"].get<double>();
  });
  return rows;
}

void print_operation_bounds(const nlohmann::json& rows, double step_seconds, double peak_gflops, double bandwidth) {
  std::printf(
      "  where the time goes, per step, against the GEMM peak (%.1f GFLOP/s) or the memory bandwidth (%.1f "
      "GB/s):\n",
      peak_gflops, bandwidth / 1e9);
  std::printf("    %-36s %6s %9s %9s %9s %9s %8s  %s\n", "operation", "calls", "GFLOP", "MB", "ms", "bound ms",
              "x bound", "share");
  for (const auto& r : rows) {
    const double ms = 1e3 * r["seconds_per_step"].get<double>(),
                 bound = 1e3 * r["bound_seconds_per_step"].get<double>();
    std::printf("    %-36s %6.0f %9.2f %9.1f %9.2f %9.2f %8.2f  %4.1f%% (%s)\n",
                r["operation"].get<std::string>().c_str(), r["calls_per_step"].get<double>(),
                r["gflop_per_step"].get<double>(), r["mb_per_step"].get<double>(), ms, bound,
                bound > 0 ? ms / bound : 0.0, 100.0 * r["seconds_per_step"].get<double>() / step_seconds,
                r["bound_by"].get<std::string>() == "GEMM peak" ? "compute" : "memory");
  }
}

double peak_rss_bytes() {
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) * 1024.0;
}

// `collected`: the result object is stored there instead of printed (--scaling runs one per thread count).
void run_bench(const BenchOptions& o, nlohmann::json* collected = nullptr) {
  VP_REQUIRE(o.batch > 0 && o.batch <= 4096, "--batch: expected 1..4096, got ", o.batch);
  VP_REQUIRE(o.steps > 0 && o.steps <= 10000, "--steps: expected 1..10000, got ", o.steps);
  VP_REQUIRE(o.mode == "train" || o.mode == "infer", "--mode: expected train or infer, got \"", o.mode, "\"");
  const Device device = resolve_device(o.device);
  const bool on_gpu = device == Device::cuda;
  // auto: bf16 on a GPU (sm_80 and later all have bf16 tensor cores), else as the CPU's instructions allow.
  const Precision precision = on_gpu && o.precision == "auto" ? Precision::bf16 : parse_precision(o.precision);
  const int threads = configure_threads(o.threads);
  ViTConfig config = o.config_path.empty() ? preset_config(o.preset) : read_hf_config(o.config_path).config;
  config.labels = chestxray14_findings();  // the 14-finding head the peer benchmarks too
  if (o.image_size > 0 && config.position_interpolation == PositionInterpolation::at_load) {
    config.image_size = o.image_size;
  } else if (o.image_size > 0) {
    config.input_image_size = o.image_size == config.image_size ? 0 : o.image_size;
  }
  config.validate(o.config_path.empty() ? "--preset " + o.preset : o.config_path);
  const TrainingMode training_mode = bench_training_mode(o);
  const std::string model_name = o.config_path.empty() ? o.preset : o.config_path;
  const bool train = o.mode == "train";

  auto layout = std::make_shared<const ParameterLayout>(config, training_mode.lora);
  auto compute = make_backend(device, o.allow_tf32);
  // On a GPU the ops are enqueued, not finished, when they return: the per-op times below would be launch times, so
  // a GPU run reports the step rate only (synchronised at the end of the timed steps).
  ProfilingBackend backend(*compute);
  StageOptions stage_options;
  stage_options.precision = precision;
  stage_options.training = train;
  stage_options.max_micro_batch = o.batch;
  stage_options.split = make_trainable_split(layout, training_mode);
  ViTStage model(layout, backend, stage_options);
  Rng rng(1);
  {
    FlatParameters values = FlatParameters::whole_model(layout);
    for (int64_t i = 0; i < values.numel(); ++i) values.data()[i] = 0.02f * rng.normal();
    model.load_values(values);
  }
  {
    const Tensor images = model.input(0, o.batch);
    Tensor host_images = Tensor::empty(images.shape());
    for (int64_t i = 0; i < host_images.numel(); ++i) host_images.f32()[i] = static_cast<float>(rng.normal());
    backend.copy_from_host(host_images, images);
  }
  Tensor targets = Tensor::empty({o.batch, config.num_labels()});
  for (int64_t i = 0; i < targets.numel(); ++i) targets.f32()[i] = rng.uniform() < 0.2 ? 1.0f : 0.0f;
  const double scale = 1.0 / static_cast<double>(targets.numel());
  // The peer's optimizer: AdamW, weight decay 0.05.
  OptimizerConfig adamw = optimizer_config_named("adamw");
  adamw.weight_decay = 0.05;
  auto optimizer = make_optimizer(adamw, model.parameters(), {}, compute.get());  // timed apart from the ops
  double optimizer_seconds = 0;

  auto step = [&] {
    if (train) {
      model.zero_gradients();
      model.forward(0, o.batch);
      model.loss(0, o.batch, targets, scale);
      model.backward(0, o.batch);
      const auto start = std::chrono::steady_clock::now();
      optimizer->step(model.parameters(), model.gradients(), 1e-4);
      model.parameters_changed();
      optimizer_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    } else {
      model.forward(0, o.batch);
    }
  };
  // The GEMM peak is measured before and after the timed steps and the higher taken: a neighbour's burst on a
  // shared machine lowers one measurement, and a peak measured low would overstate the fraction reached.
  const double peak_before = on_gpu ? 0.0 : cpu::measure_gemm_peak_gflops(compute_dtype(precision));
  const double bandwidth_before = on_gpu ? 0.0 : cpu::measure_memory_bandwidth_bytes_per_s(threads);
  step();  // warm-up: JIT kernels, first-touch memory
  backend.reset();
  optimizer_seconds = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < o.steps; ++i) step();
  to_host(*compute, model.parameters().numel() > 0 ? model.parameters().flat().slice(0, 1)
                                                   : model.output(0, 1).view({model.output(0, 1).numel()}).slice(0, 1));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  const double images_per_s = static_cast<double>(o.batch) * o.steps / seconds;
  // A full training step costs 3x the forward FLOPs; with frozen parts it costs less (not modelled: the rates below
  // then overstate the work done).
  const FlopCount forward_flops = forward_flops_per_image(config, layout->lora());
  const double pass_factor = train ? 3.0 : 1.0;
  const double flops_per_image = forward_flops.total() * pass_factor;
  const double gflops = flops_per_image * images_per_s / 1e9;
  // What eager PyTorch computes for the same images (every token through the final block): comparable across engines.
  const double full_model_gflops =
      full_model_forward_flops_per_image(config, layout->lora()).total() * (train ? 3.0 : 1.0) * images_per_s / 1e9;
  const double peak_after = on_gpu ? 0.0 : cpu::measure_gemm_peak_gflops(compute_dtype(precision));
  const double peak = std::max(peak_before, peak_after);
  const double bandwidth =
      on_gpu ? 0.0 : std::max(bandwidth_before, cpu::measure_memory_bandwidth_bytes_per_s(threads));
  const nlohmann::json operations = operation_bounds(
      backend, optimizer_seconds, train ? 7.0 * sizeof(float) * static_cast<double>(model.parameters().numel()) : 0.0,
      o.steps, peak, bandwidth);
  nlohmann::json breakdown = nlohmann::json::object();
  double accounted = 0.0;
  for (int k = 0; k < static_cast<int>(OpKind::count); ++k) {
    const double s = backend.seconds(static_cast<OpKind>(k));
    accounted += s;
    breakdown[op_kind_name(static_cast<OpKind>(k))] = s / seconds;
  }
  breakdown["optimizer"] = optimizer_seconds / seconds;
  accounted += optimizer_seconds;
  breakdown["unaccounted"] = std::max(0.0, 1.0 - accounted / seconds);
  // Attention's share of the executed FLOPs is the share of the step it would take at the GEMMs' rate: the
  // rates below say how far its kernel (small per-head GEMMs + softmax) is from the big GEMMs'.
  const double timed_images = static_cast<double>(o.batch) * o.steps;
  const double attention_flop_share = forward_flops.attention / forward_flops.total();
  const double attention_gflops =
      forward_flops.attention * pass_factor * timed_images / std::max(1e-12, backend.seconds(OpKind::attention)) / 1e9;
  // The linear GEMMs' rate from the plain GEMM calls: the GEMM+GELU calls (fc1 forward) also do elementwise work,
  // which would flatter attention's comparison. Their time beyond that rate is GELU's share of the step.
  double plain_flops = 0.0, fused_flops = 0.0;
  for (const auto& [name, r] : backend.operations()) {
    if (r.kind == OpKind::gemm) plain_flops += r.flops;
    if (r.kind == OpKind::gemm_gelu) fused_flops += r.flops;
  }
  const double plain_seconds = backend.seconds(OpKind::gemm), fused_seconds = backend.seconds(OpKind::gemm_gelu);
  const double linear_gflops = plain_flops / std::max(1e-12, plain_seconds) / 1e9;
  const double fused_gelu_share =
      plain_seconds > 0 ? std::max(0.0, fused_seconds - fused_flops / (linear_gflops * 1e9)) / seconds : 0.0;

  nlohmann::json result = {
      {"model", model_name},
      {"mode", o.mode},
      {"training", training_mode.describe()},
      {"trainable_parameters", model.parameters().numel()},
      {"image_size", config.input_size()},
      {"precision", precision_name(precision)},
      {"batch", o.batch},
      {"threads", threads},
      {"steps", o.steps},
      {"images_per_s", images_per_s},
      {"seconds_per_step", seconds / o.steps},
      {"gflops_per_s", gflops},
      {"full_model_gflops_per_s", full_model_gflops},
      {"gemm_peak_gflops_per_s", peak},
      {"gemm_peak_gflops_per_s_before_and_after", {peak_before, peak_after}},
      {"fraction_of_gemm_peak", peak > 0 ? nlohmann::json(gflops / peak) : nlohmann::json(nullptr)},
      {"device", on_gpu ? "cuda" : "cpu"},
      {"gpu", on_gpu ? nlohmann::json(local_gpu_index()) : nlohmann::json(nullptr)},
      // Which path bf16 attention took on the GPU ("cudnn", or "fallback..." and why, each refused shape with the
      // kernels it fell back to), then "; backward: " and the cuDNN graph that ran the backward pass (the native
      // SDPA_BWD, or cudnn-frontend's composite graph and why the native one was refused): a figure without it cannot
      // be read.
      {"attention_path", on_gpu ? nlohmann::json(cuda_attention_path(*compute)) : nlohmann::json(nullptr)},
      {"peak_rss_bytes", peak_rss_bytes()},
      {"activation_bytes", model.activation_bytes()},
      {"activation_bytes_per_image", static_cast<double>(model.activation_bytes()) / static_cast<double>(o.batch)},
      {"breakdown", breakdown},
      {"attention_flop_share", attention_flop_share},
      {"attention_gflops_per_s", attention_gflops},
      {"linear_gemm_gflops_per_s", linear_gflops},
      {"gelu_in_fused_gemms_share", fused_gelu_share},
      {"includes_optimizer", train},
      {"memory_bandwidth_gb_per_s", bandwidth / 1e9},
      {"operations", operations},
      {"cpu_model", cpu::cpu_features().model},
      {"cpu_kernels", cpu::cpu_level_name(cpu::selected_cpu_level())},
      {"onednn_isa", cpu::onednn_isa_name()},
      {"bf16_in_hardware", cpu::has_native_bf16(cpu::selected_cpu_level())},
  };
  if (collected != nullptr) {
    *collected = std::move(result);
    return;
  }
  if (o.json) {
    std::printf("%s\n", result.dump().c_str());
    return;
  }
  std::printf("vitpipe bench: %s (%lld px, patch %lld, hidden %lld, %lld layers), batch %lld, %s, %s, %d threads\n",
              model_name.c_str(), static_cast<long long>(config.input_size()),
              static_cast<long long>(config.patch_size), static_cast<long long>(config.hidden_size),
              static_cast<long long>(config.num_hidden_layers), static_cast<long long>(o.batch),
              precision_name(precision), o.mode.c_str(), threads);
  std::printf("  CPU %s: kernels %s, oneDNN ISA %s%s\n", cpu::cpu_features().model.c_str(),
              cpu::cpu_level_name(cpu::selected_cpu_level()), cpu::onednn_isa_name().c_str(),
              precision == Precision::bf16 && !cpu::has_native_bf16(cpu::selected_cpu_level())
                  ? " (no bf16 instructions: bf16 runs as fp32 GEMMs on bf16-rounded operands)"
                  : "");
  if (on_gpu) {
    std::printf("  device: cuda, GPU %d (the CPU lines below describe the host); attention: %s\n", local_gpu_index(),
                cuda_attention_path(*compute).c_str());
  }
  std::printf("  %.2f images/s  (%.3f s per step)\n", images_per_s, seconds / o.steps);
  if (train) {
    std::printf("  training: %s, %lld trainable parameters\n", training_mode.describe().c_str(),
                static_cast<long long>(model.parameters().numel()));
  }
  if (on_gpu) {
    std::printf("  %.1f GFLOP/s executed; %.1f GFLOP/s counting every token through the final block\n", gflops,
                full_model_gflops);
    return;  // the per-operation times of an asynchronous device are launch times: not reported
  }
  std::printf(
      "  %.1f GFLOP/s executed = %.0f%% of the measured GEMM peak (%.1f GFLOP/s, the higher of %.1f before and\n"
      "  %.1f after the steps); %.1f GFLOP/s counting every token through the final block, as eager PyTorch computes "
      "it\n",
      gflops, 100.0 * gflops / peak, peak, peak_before, peak_after, full_model_gflops);
  std::printf("  peak memory (max RSS) %.2f GiB, activations + gradient workspace %.2f GiB (%.1f MiB per image)\n",
              peak_rss_bytes() / (1 << 30), static_cast<double>(model.activation_bytes()) / (1 << 30),
              static_cast<double>(model.activation_bytes()) / static_cast<double>(o.batch) / (1 << 20));
  std::printf("  time by operation:");
  for (auto& [name, fraction] : breakdown.items())
    std::printf(" %s %.1f%%", name.c_str(), 100.0 * fraction.get<double>());
  std::printf("\n");
  std::printf(
      "  attention is %.1f%% of the executed FLOPs and ran at %.1f GFLOP/s (with its softmax), the linear GEMMs at "
      "%.1f\n",
      100.0 * attention_flop_share, attention_gflops, linear_gflops);
  if (fused_seconds > 0) {
    std::printf("  GEMMs with GELU fused: %.1f%% of the step, %.1f%% beyond the linear GEMMs' rate (GELU's part)\n",
                100.0 * fused_seconds / seconds, 100.0 * fused_gelu_share);
  }
  print_operation_bounds(operations, seconds / o.steps, peak, bandwidth);
}

// The loader's CPU work per image, decode + Pillow resize of a 1024 x 1024 8-bit PNG (ChestX-ray14's originals) to
// the model's input, on `threads` independent threads as the loader's are: seconds per step of `batch` images.
double loader_seconds_per_step(int threads, int64_t batch, int64_t side) {
  static const std::vector<uint8_t> png = [] {
    DecodedImage image;
    image.width = image.height = 1024;
    image.channels = 1;
    image.pixels.resize(1024 * 1024);
    Rng rng(7);
    for (int64_t y = 0; y < 1024; ++y)  // smooth anatomy-like shading with noise: compresses as radiographs do
      for (int64_t x = 0; x < 1024; ++x)
        image.pixels[static_cast<size_t>(y * 1024 + x)] = static_cast<uint8_t>(
            std::clamp(110.0 + 60.0 * std::sin(x / 97.0) * std::cos(y / 131.0) + 6.0 * rng.normal(), 0.0, 255.0));
    return encode_png(image);
  }();
  const int per_thread = 12;
  std::vector<std::thread> workers;
  const auto start = std::chrono::steady_clock::now();
  for (int t = 0; t < threads; ++t)
    workers.emplace_back([&] {
      std::vector<uint8_t> out(static_cast<size_t>(side * side));
      for (int i = 0; i < per_thread; ++i) {
        const DecodedImage image = decode_image_memory_keep_gray(png.data(), png.size(), "bench image");
        resize_like_pillow(image.pixels.data(), image.width, image.height, image.channels, out.data(), side, side,
                           ResampleFilter::bilinear);
      }
    });
  for (auto& w : workers) w.join();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return seconds / (static_cast<double>(threads) * per_thread) * static_cast<double>(batch);
}

std::vector<int> parse_thread_counts(const std::string& text) {
  std::vector<int> counts;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, comma - start);
    int value = 0;
    try {
      size_t used = 0;
      value = std::stoi(item, &used);
      VP_REQUIRE(used == item.size(), "");
    } catch (const std::exception&) {
      fail("--scaling: expected thread counts such as 1,2,4, got \"", text, "\"");
    }
    VP_REQUIRE(value >= 1 && value <= 4096 && (counts.empty() || value > counts.back()),
               "--scaling: expected ascending thread counts from 1 to 4096, got \"", text, "\"");
    counts.push_back(value);
    start = comma + 1;
  }
  VP_REQUIRE(counts.size() >= 2 && counts.front() == 1,
             "--scaling: expected at least two thread counts, the first 1 (the serial reference), got \"", text, "\"");
  return counts;
}

// The operation groups the scaling table reports: the profiling backend's kinds, the optimizer and the loader.
CoreScaling measure_core_scaling(const BenchOptions& o, std::vector<nlohmann::json>& runs) {
  CoreScaling s;
  s.threads = parse_thread_counts(o.scaling);
  VP_REQUIRE(o.mode == "train", "--scaling times training steps: leave out --mode ", o.mode);
  VP_REQUIRE(o.threads == 0, "--scaling sets each run's threads: leave out --threads ", o.threads);
  VP_REQUIRE(resolve_device(o.device) == Device::cpu, "--scaling: measures CPU threads; leave out --device ", o.device);
  std::map<std::string, OpScaling> groups;
  std::vector<std::string> order;
  double flops_first = 0;
  std::map<std::string, double> flops;
  for (size_t i = 0; i < s.threads.size(); ++i) {
    BenchOptions at = o;
    at.threads = s.threads[i];
    nlohmann::json result;
    run_bench(at, &result);
    VP_REQUIRE(result["threads"].get<int>() == s.threads[i], "--scaling: ran at ", result["threads"].get<int>(),
               " threads instead of ", s.threads[i]);
    s.bandwidth.push_back(result["memory_bandwidth_gb_per_s"].get<double>() * 1e9);
    for (const auto& row : result["operations"]) {
      const std::string name = row["operation"].get<std::string>().starts_with("optimizer")
                                   ? std::string("optimizer")
                                   : row["kind"].get<std::string>();
      if (!groups.contains(name)) {
        order.push_back(name);
        groups[name].name = name;
        groups[name].seconds.assign(s.threads.size(), 0.0);
      }
      groups[name].seconds[i] += row["seconds_per_step"].get<double>();
      if (i == 0) {
        groups[name].bytes += row["mb_per_step"].get<double>() * 1e6;
        flops[name] += row["gflop_per_step"].get<double>() * 1e9;
      }
    }
    const std::string loader = "loader (decode + resize)";
    if (!groups.contains(loader)) {
      order.push_back(loader);
      groups[loader].name = loader;
      groups[loader].seconds.assign(s.threads.size(), 0.0);
    }
    groups[loader].seconds[i] = loader_seconds_per_step(s.threads[i], o.batch, result["image_size"].get<int64_t>());
    if (i == 0) {
      flops_first = result["gemm_peak_gflops_per_s"].get<double>() * 1e9;
      s.gradient_bytes = 4.0 * result["trainable_parameters"].get<double>();
      s.batch = o.batch;
      s.describe = {{"model", result["model"]},         {"precision", result["precision"]},
                    {"batch", result["batch"]},         {"image_size", result["image_size"]},
                    {"cpu_model", result["cpu_model"]}, {"cpu_kernels", result["cpu_kernels"]}};
    }
    runs.push_back(std::move(result));
  }
  for (const auto& name : order) {
    OpScaling op = groups[name];
    op.bandwidth_bound = op.bytes > 0 && op.bytes / s.bandwidth.front() > flops[name] / std::max(1.0, flops_first);
    s.operations.push_back(std::move(op));
  }
  return s;
}

constexpr int kPredictedCores[] = {16, 32, 64};

nlohmann::json scaling_predictions(const CoreScaling& s) {
  nlohmann::json ops = nlohmann::json::array();
  const auto efficiency = [](double one, double at, int threads) { return one / std::max(1e-12, at) / threads; };
  for (const auto& op : s.operations) {
    nlohmann::json row = {
        {"operation", op.name}, {"serial_fraction", serial_fraction(s, op)}, {"bandwidth_bound", op.bandwidth_bound}};
    for (size_t i = 0; i < s.threads.size(); ++i)
      row["efficiency_at_" + std::to_string(s.threads[i])] = efficiency(op.seconds[0], op.seconds[i], s.threads[i]);
    for (const int cores : kPredictedCores)
      row["predicted_efficiency_at_" + std::to_string(cores)] =
          efficiency(op.seconds[0], predicted_op_seconds(s, op, cores, 1), cores);
    ops.push_back(row);
  }
  nlohmann::json step = nlohmann::json::object(), splits = nlohmann::json::object();
  const double one = predicted_step_seconds(s, 1, 1);
  for (const int cores : kPredictedCores) {
    step["predicted_speedup_at_" + std::to_string(cores)] = one / predicted_step_seconds(s, cores, 1);
    const NodeSplit best = rank_node_splits(s, cores).front();
    splits[std::to_string(cores)] = {
        {"ranks", best.ranks}, {"threads", best.threads}, {"images_per_s", best.images_per_s}};
  }
  return {{"operations", ops}, {"step", step}, {"best_node_split", splits}};
}

void print_core_scaling(const CoreScaling& s, const nlohmann::json& predictions) {
  std::printf("vitpipe bench --scaling: %s, batch %lld, %s, on %s (%s kernels)\n",
              s.describe["model"].get<std::string>().c_str(), static_cast<long long>(s.batch),
              s.describe["precision"].get<std::string>().c_str(), s.describe["cpu_model"].get<std::string>().c_str(),
              s.describe["cpu_kernels"].get<std::string>().c_str());
  std::printf(
      "  ms per step at each thread count, the parallel efficiency at the largest (speedup / threads), the\n"
      "  serial fraction that explains it (Karp-Flatt), the bound, and Amdahl's efficiency at 16, 32, 64 cores\n"
      "  (bandwidth-bound operations floored by the bandwidth, extrapolated the same way)\n");
  std::printf("    %-26s", "operation");
  for (const int t : s.threads) std::printf(" %8s", ("ms@" + std::to_string(t)).c_str());
  std::printf(" %7s %7s %-9s %6s %6s %6s\n", "eff.", "serial", "bound", "@16", "@32", "@64");
  std::vector<double> total(s.threads.size(), 0.0);
  for (size_t k = 0; k < s.operations.size(); ++k) {
    const OpScaling& op = s.operations[k];
    const nlohmann::json& p = predictions["operations"][k];
    std::printf("    %-26s", op.name.c_str());
    for (size_t i = 0; i < s.threads.size(); ++i) {
      std::printf(" %8.1f", 1e3 * op.seconds[i]);
      total[i] += op.seconds[i];
    }
    std::printf(" %6.0f%% %6.0f%% %-9s", 100 * p["efficiency_at_" + std::to_string(s.threads.back())].get<double>(),
                100 * p["serial_fraction"].get<double>(), op.bandwidth_bound ? "memory" : "compute");
    for (const int cores : kPredictedCores)
      std::printf(" %5.0f%%", 100 * p["predicted_efficiency_at_" + std::to_string(cores)].get<double>());
    std::printf("\n");
  }
  std::printf("    %-26s", "step (sum)");
  for (size_t i = 0; i < s.threads.size(); ++i) std::printf(" %8.1f", 1e3 * total[i]);
  const double speedup = total.front() / std::max(1e-12, total.back());
  std::printf(" %6.0f%%\n", 100 * speedup / s.threads.back());
  std::printf("  memory bandwidth GB/s:");
  for (size_t i = 0; i < s.threads.size(); ++i) std::printf(" %.1f@%d", s.bandwidth[i] / 1e9, s.threads[i]);
  std::printf("; predicted %.1f@16 %.1f@32 %.1f@64\n", bandwidth_at(s, 16) / 1e9, bandwidth_at(s, 32) / 1e9,
              bandwidth_at(s, 64) / 1e9);
  std::printf("  one rank of N threads: predicted step speedup");
  for (const int cores : kPredictedCores)
    std::printf(" %.1fx@%d", predictions["step"]["predicted_speedup_at_" + std::to_string(cores)].get<double>(), cores);
  std::printf("\n  best node split (vitpipe plan --scaling):");
  for (const int cores : kPredictedCores) {
    const nlohmann::json& b = predictions["best_node_split"][std::to_string(cores)];
    std::printf(" %d cores: %d x %d (%.0f images/s)", cores, b["ranks"].get<int>(), b["threads"].get<int>(),
                b["images_per_s"].get<double>());
  }
  std::printf("\n");
}

void run_scaling(const BenchOptions& o) {
  std::vector<nlohmann::json> runs;
  const CoreScaling s = measure_core_scaling(o, runs);
  const nlohmann::json predictions = scaling_predictions(s);
  if (o.json) {
    std::printf("%s\n",
                nlohmann::json{{"scaling", s.to_json()}, {"predictions", predictions}, {"runs", runs}}.dump().c_str());
    return;
  }
  print_core_scaling(s, predictions);
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto options = std::make_shared<BenchOptions>();
  auto* cmd = app.add_subcommand("bench", "Time training steps or inference on random data");
  std::string presets;
  for (const auto& name : preset_names()) presets += (presets.empty() ? "" : ", ") + name;
  cmd->add_option("--preset", options->preset, presets);
  cmd->add_option("--config", options->config_path, "a Hugging Face config.json instead of a preset");
  cmd->add_option("--batch", options->batch, "images per step");
  cmd->add_option("--steps", options->steps, "timed steps after one warm-up step");
  cmd->add_option("--threads", options->threads, "CPU threads (0 = all cores)");
  cmd->add_option("--precision", options->precision, "fp32, bf16 or auto (bf16 where the CPU has bf16 instructions)");
  cmd->add_option("--mode", options->mode, "train or infer");
  cmd->add_flag("--json", options->json, "print one JSON object");
  cmd->add_option("--image-size", options->image_size,
                  "input side in pixels (DINOv2: its position embeddings are interpolated to that grid)");
  cmd->add_option("--freeze", options->freeze, "none or backbone (train the classifier only)");
  cmd->add_option("--freeze-layers", options->freeze_layers, "freeze the embeddings and the first N blocks");
  cmd->add_option("--lora", options->lora, "LoRA rank (base weights frozen)");
  cmd->add_option("--lora-alpha", options->lora_alpha, "LoRA alpha (default: the rank)");
  cmd->add_option("--lora-targets", options->lora_targets, "layers LoRA adapts (default query,value)");
  add_device_flag(cmd, &options->device);
  add_allow_tf32_flag(cmd, &options->allow_tf32);
  cmd->add_option("--scaling", options->scaling,
                  "run at each of these thread counts in turn (1,2,... starting at 1) and report per operation "
                  "(GEMMs, attention, LayerNorm, GELU, the optimizer, the loader) the time, the parallel efficiency, "
                  "the serial fraction and the bound, with Amdahl's prediction for 16, 32 and 64 cores; --json writes "
                  "what `vitpipe plan --scaling` reads")
      ->type_name("LIST");
  cmd->callback([options] {
    if (options->scaling.empty()) {
      run_bench(*options);
    } else {
      run_scaling(*options);
    }
  });
}

}  // namespace vitpipe::cli
