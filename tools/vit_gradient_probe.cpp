// Test tool: runs one training step of a small random ViT, DeiT or DINOv2 (optionally split into pipeline stages run
// in sequence, optionally with gradient accumulation over micro-batches, LoRA or frozen parameters) and dumps
// parameters, inputs, logits, loss and every trainable parameter's gradient, so tests/model/reference_vit.py and
// tests/model/reference_families.py can compare them with a PyTorch reference.
// Dump format: <out>/index.json {name: {"shape": [...], "offset": n}} + <out>/data.f32 (float32, little-endian).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "backend/backend_call.h"
#include "backend/cuda_module_backend.h"
#include "backend/cuda_module_loopback.h"
#include "backend/device_selection.h"
#include "model/initializer.h"
#include "model/parameter_layout.h"
#include "model/trainable_set.h"
#include "model/vit_stage.h"
#include "seam_backend.h"
#ifdef VITPIPE_PROBE_CUDA_FAKES
extern "C" const VitpipeCudaModule* vitpipe_cuda_module(void);  // module_entry.cpp, linked into this build
#endif
#include "train/optimizer.h"
#include "util/error.h"
#include "util/random.h"
#include "util/threads.h"

using namespace vitpipe;

namespace {

struct Dump {
  nlohmann::json index = nlohmann::json::object();
  std::vector<float> data;
  void add(const std::string& name, const Tensor& t) {
    Tensor f = t.dtype() == DType::f32 ? t : t.to(DType::f32);
    index[name] = {{"shape", t.shape()}, {"offset", data.size()}};
    data.insert(data.end(), f.f32(), f.f32() + f.numel());
  }
  void write(const std::filesystem::path& dir) {
    std::filesystem::create_directories(dir);
    std::ofstream(dir / "index.json") << index.dump();
    std::ofstream bin(dir / "data.f32", std::ios::binary);
    bin.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size() * sizeof(float)));
  }
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"vit_gradient_probe"};
  ViTConfig c;
  int64_t labels = 5, batch = 3, micro_batch = 0, seed = 1;
  int stages = 1, threads = 2;
  std::string precision = "fp32", problem = "multi", out;
  bool recompute = false, swiglu = false;
  std::string family = "vit", freeze = "none", lora_targets = "query,value";
  int64_t registers = 0, input_image = 0, lora_rank = 0, freeze_layers = 0;
  double lora_alpha = 0, lr = 1e-3;
  int64_t steps = 0;
  app.add_option("--steps", steps, "AdamW steps on the same batch after the first gradients (0 = none)");
  app.add_option("--lr", lr, "their learning rate");
  app.add_option("--family", family, "vit | deit | deit-teacher | dinov2 | dinov2-registers");
  app.add_option("--registers", registers, "register tokens (dinov2-registers)");
  app.add_flag("--swiglu", swiglu, "SwiGLU MLP (dinov2): --mlp is its hidden width, fc1 has twice as many rows");
  app.add_option("--input-image", input_image, "DINOv2: run on this image side (positions resampled per pass)");
  app.add_option("--lora", lora_rank, "LoRA rank (0 = none)");
  app.add_option("--lora-alpha", lora_alpha, "LoRA alpha (0 = the rank)");
  app.add_option("--lora-targets", lora_targets, "comma-separated layers");
  app.add_option("--freeze", freeze, "none | backbone | layers");
  app.add_option("--freeze-layers", freeze_layers, "with --freeze layers: frozen blocks");
  app.add_option("--hidden", c.hidden_size);
  app.add_option("--layers", c.num_hidden_layers);
  app.add_option("--heads", c.num_attention_heads);
  app.add_option("--mlp", c.intermediate_size);
  app.add_option("--image", c.image_size);
  app.add_option("--patch", c.patch_size);
  app.add_option("--channels", c.num_channels);
  app.add_option("--eps", c.layer_norm_eps);
  app.add_option("--qkv-bias", c.qkv_bias);
  app.add_option("--labels", labels);
  app.add_option("--batch", batch);
  app.add_option("--micro-batch", micro_batch, "0 = the whole batch");
  app.add_option("--stages", stages, "split into this many stages run one after another");
  app.add_option("--precision", precision);
  app.add_option("--problem", problem, "multi | single");
  app.add_flag("--recompute", recompute);
  bool split_backward = false;
  app.add_flag("--split-backward", split_backward,
               "backward_input then backward_weight (ZB-H1), each micro-batch's W after the next one's B");
  app.add_option("--seed", seed);
  app.add_option("--threads", threads);
  app.add_option("--out", out)->required();
  CLI11_PARSE(app, argc, argv);
  try {
    configure_threads(threads);
    for (int64_t i = 0; i < labels; ++i) c.labels.push_back(concat("L", i));
    c.problem_type = problem == "single" ? ProblemType::single_label : ProblemType::multi_label;
    if (family == "deit" || family == "deit-teacher") {
      c.model_type = "deit";
      c.distillation_token = true;
      c.head = family == "deit" ? HeadKind::cls_token : HeadKind::cls_and_distillation;
    } else if (family == "dinov2" || family == "dinov2-registers") {
      c.model_type = family == "dinov2" ? "dinov2" : "dinov2_with_registers";
      c.layer_scale = true;
      c.mask_token = true;
      c.swiglu = swiglu;
      c.head = HeadKind::cls_and_patch_mean;
      c.num_register_tokens = family == "dinov2" ? 0 : registers;
      c.position_interpolation =
          family == "dinov2" ? PositionInterpolation::bicubic : PositionInterpolation::bicubic_antialias;
      c.input_image_size = input_image;
    } else {
      VP_REQUIRE(family == "vit", "--family: unknown family ", family);
    }
    c.validate("probe");
    TrainingMode mode;
    LoraSettings lora;
    if (lora_rank > 0) {
      lora.rank = lora_rank;
      lora.alpha = lora_alpha > 0 ? lora_alpha : static_cast<double>(lora_rank);
      size_t start = 0;
      while (start <= lora_targets.size()) {
        const size_t comma = lora_targets.find(',', start);
        lora.targets.push_back(parse_linear_site(lora_targets.substr(start, comma - start)));
        if (comma == std::string::npos) break;
        start = comma + 1;
      }
      mode.freeze = FreezeMode::lora;
      mode.lora = lora;
    } else if (freeze == "backbone") {
      mode.freeze = FreezeMode::backbone;
    } else if (freeze == "layers") {
      mode.freeze = FreezeMode::layers;
      mode.frozen_layers = freeze_layers;
    }
    if (micro_batch == 0) micro_batch = batch;
    VP_REQUIRE(batch % micro_batch == 0, "batch must be a multiple of micro-batch");
    auto layout = std::make_shared<const ParameterLayout>(c, lora);
    auto split = make_trainable_split(layout, mode);
    const int segments = layout->num_segments();
    VP_REQUIRE(stages >= 1 && stages <= segments, "stages must be in [1, ", segments, "]");

    // Random parameters: larger than transformers' init so every path (softmax, LayerNorm) is exercised.
    FlatParameters all = FlatParameters::whole_model(layout);
    Rng rng(static_cast<uint64_t>(seed));
    for (const ParamSpec& spec : layout->specs()) {
      float* p = all.at(spec.offset);
      const bool norm_weight = spec.kind == ParamKind::norm_weight;
      const bool gain = norm_weight || spec.kind == ParamKind::layer_scale;
      for (int64_t i = 0; i < spec.numel; ++i) {
        p[i] = static_cast<float>(gain ? 1.0 + 0.2 * rng.normal() : 0.2 * rng.normal());
      }
    }
    Tensor images = Tensor::empty({batch, c.num_channels, c.input_size(), c.input_size()});
    for (int64_t i = 0; i < images.numel(); ++i) images.f32()[i] = static_cast<float>(rng.normal());
    Tensor targets;
    if (c.problem_type == ProblemType::multi_label) {
      targets = Tensor::empty({batch, labels});
      for (int64_t i = 0; i < targets.numel(); ++i) targets.f32()[i] = rng.uniform() < 0.3 ? 1.0f : 0.0f;
    } else {
      targets = Tensor::empty({batch}, DType::i64);
      for (int64_t i = 0; i < batch; ++i) targets.data<int64_t>()[i] = static_cast<int64_t>(rng.below(labels));
    }

    // Even split of the segments into stages, run sequentially: exercises every stage boundary.
    const bool seam = std::getenv("VITPIPE_PROBE_SEAM") != nullptr;
    // VITPIPE_PROBE_MODULE_LOOPBACK=1: every backend call crosses the CUDA module's C table (cuda_module_backend.h)
    // into the CPU backend behind cuda_module_loopback.h; the dump must equal the plain run's bit for bit.
    const bool loopback = std::getenv("VITPIPE_PROBE_MODULE_LOOPBACK") != nullptr;
    std::vector<std::unique_ptr<Backend>> backends;
    std::vector<std::unique_ptr<ViTStage>> pipeline;
    std::vector<std::unique_ptr<Optimizer>> optimizers;
    for (int s = 0; s < stages; ++s) {
      StageOptions o;
      o.first_segment = s * segments / stages;
      o.last_segment = (s + 1) * segments / stages - 1;
      o.precision = parse_precision(precision);
      o.recompute = recompute;
      o.split_backward = split_backward;
      o.slots = split_backward ? 2 : 1;  // a micro-batch's W inputs wait in its slot while the next one runs
      o.max_micro_batch = micro_batch;
      o.split = split;
      // VITPIPE_PROBE_SEAM=1: every tensor handed to the backend is closed to the host between calls (seam_backend.h).
      std::unique_ptr<Backend> backend =
          loopback ? make_cuda_module_backend(cuda_module_loopback(), 0, false) : make_cpu_backend();
      // VITPIPE_PROBE_CUDA_DEVICE=1: the real CUDA module on this process's GPU (the golden cases on a GPU,
      // tests/cuda/gpu/golden_on_gpu.py); refused with the reason where no CUDA backend can run.
      if (std::getenv("VITPIPE_PROBE_CUDA_DEVICE") != nullptr) backend = make_backend(select_device(DeviceChoice::cuda));
#ifdef VITPIPE_PROBE_CUDA_FAKES
      // This build (vit_gradient_probe_cuda_fakes): the CUDA module's own table (module_entry.cpp) and CudaBackend,
      // on host-memory fakes of the CUDA libraries, through the host adapter: the whole path but the GPU.
      backend = make_cuda_module_backend(*vitpipe_cuda_module(), 0, false);
#endif
      backends.push_back(seam ? make_seam_backend(std::move(backend)) : std::move(backend));
      pipeline.push_back(std::make_unique<ViTStage>(layout, *backends.back(), o));
      ViTStage& stage = *pipeline.back();
      stage.load_values(all);
      stage.zero_gradients();
      optimizers.push_back(
          make_optimizer(optimizer_config_named("adamw"), stage.parameters(), {}, backends.back().get()));
    }
    const int64_t global_elements = c.problem_type == ProblemType::multi_label ? batch * labels : batch;
    double loss_sum = 0.0;
    Tensor logits = Tensor::empty({batch, labels});
    auto compute_gradients = [&] {
      loss_sum = 0.0;
      for (auto& stage : pipeline) stage->zero_gradients();
      for (int64_t start = 0, k = 0; start < batch; start += micro_batch, ++k) {
        const int64_t b = micro_batch;
        const int slot = split_backward ? static_cast<int>(k % 2) : 0;
        // Stage tensors are their backend's memory: the harness moves them through host copies, as an executor does.
        pipeline.front()->backend().copy_from_host(images.slice(start, start + b), pipeline.front()->input(slot, b));
        for (int s = 0; s < stages; ++s) {
          pipeline[s]->forward(slot, b);
          if (s + 1 < stages) {
            pipeline[s + 1]->backend().copy_from_host(to_host(pipeline[s]->backend(), pipeline[s]->output(slot, b)),
                                                      pipeline[s + 1]->input(slot, b));
          }
        }
        ViTStage& last = *pipeline.back();
        logits.slice(start, start + b).copy_from(to_host(last.backend(), last.output(slot, b)));
        loss_sum += last.loss(slot, b, targets.slice(start, start + b), 1.0 / static_cast<double>(global_elements));
        for (int s = stages - 1; s >= 0; --s) {
          if (split_backward) {
            pipeline[s]->backward_input(slot, b);
          } else {
            pipeline[s]->backward(slot, b);
          }
          if (s > 0) {
            pipeline[s - 1]->backend().copy_from_host(to_host(pipeline[s]->backend(), pipeline[s]->grad(slot, b)),
                                                      pipeline[s - 1]->grad(slot, b));
          }
        }
        if (split_backward && k > 0) {
          for (auto& stage : pipeline) stage->backward_weight(1 - slot, b);  // the previous micro-batch's W
        }
        if (split_backward && start + micro_batch >= batch) {
          for (auto& stage : pipeline) stage->backward_weight(slot, b);
        }
      }
    };
    compute_gradients();
    if (loopback) {
      VP_REQUIRE(cuda_module_loopback_calls() > 0, "loopback: no call crossed the module table");
      std::fprintf(stderr, "loopback: %lld backend calls crossed the module table; ops:", cuda_module_loopback_calls());
      for (int op = 1; op < VITPIPE_OP_COUNT_PLUS_ONE; ++op) {
        if (cuda_module_loopback_calls(op) > 0) std::fprintf(stderr, " %s", backend_op_name(op).c_str());
      }
      std::fprintf(stderr, "\n");
    }
    if (seam && std::getenv("VITPIPE_PROBE_SEAM_TOUCH") != nullptr) {
      // tests/cuda/check_seam.py: one host read of a stage's output that should have been a copy, which the watch
      // must report.
      volatile const unsigned char first = *static_cast<const unsigned char*>(pipeline.back()->output(0, 1).raw());
      (void)first;
    }
    if (seam) {
      // What this harness and the layers under it (ViTStage, its loss and buffers) touched of the backend's tensors
      // between its calls; then the watch ends: the dump below reads them as a copy to the host would.
      const SeamReport r = seam_report();
      std::fprintf(stderr,
                   "seam: %lld page ranges closed between calls, %lld of %lld handed bytes; %lld host touches\n",
                   static_cast<long long>(r.regions), static_cast<long long>(r.watched_bytes),
                   static_cast<long long>(r.handed_bytes), static_cast<long long>(r.touches));
      seam_print_touches(stderr);
      seam_release();
      VP_REQUIRE(r.regions > 0, "seam: no tensor covered a whole page, so nothing was watched");
    }

    Dump dump;
    for (const ParamSpec& spec : layout->specs()) dump.add("param." + spec.name, all.tensor(spec));
    for (auto& stage : pipeline) {
      for (const ParamSpec* spec : stage->gradients().held_specs()) {
        dump.add("grad." + spec->name, to_host(stage->backend(), stage->gradients().tensor(*spec)));
      }
    }
    dump.add("images", images);
    if (c.problem_type == ProblemType::multi_label) {
      dump.add("targets", targets);
    } else {
      Tensor t = Tensor::empty({batch});
      for (int64_t i = 0; i < batch; ++i) t.f32()[i] = static_cast<float>(targets.data<int64_t>()[i]);
      dump.add("targets", t);
    }
    dump.add("logits", logits);
    Tensor loss = Tensor::empty({1});
    loss.f32()[0] = static_cast<float>(loss_sum / static_cast<double>(global_elements));
    dump.add("loss", loss);
    // Optimizer steps (AdamW as train's, same batch each step): the trajectory of what trains, and the frozen values
    // left as they were. The dumped gradients are the first step's.
    for (int64_t step = 0; step < steps; ++step) {
      if (step > 0) compute_gradients();
      for (size_t s = 0; s < pipeline.size(); ++s) {
        optimizers[s]->step(pipeline[s]->parameters(), pipeline[s]->gradients(), lr);
        pipeline[s]->parameters_changed();
      }
    }
    if (steps > 0) {
      for (auto& stage : pipeline) {
        const ViTStage& held = *stage;
        for (const FlatParameters* values : {&held.parameters(), &held.frozen_parameters()}) {
          for (const ParamSpec* spec : values->held_specs()) {
            dump.add("final." + spec->name, to_host(held.backend(), values->tensor(*spec)));
          }
        }
      }
    }
    // What the run was: the reference needs the family's options, not just shapes.
    dump.index["config"] = {{"model_type", c.model_type},
                            {"head", static_cast<int>(c.head)},
                            {"registers", c.num_register_tokens},
                            {"swiglu", c.swiglu},
                            {"layer_scale", c.layer_scale},
                            {"input_image", c.input_size()},
                            {"image", c.image_size},
                            {"lora_scale", lora.enabled() ? lora.scale() : 0.0}};
    dump.write(out);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
