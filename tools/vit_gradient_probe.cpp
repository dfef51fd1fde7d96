// Test tool: runs one training step of a small random ViT (optionally split into pipeline stages run in sequence,
// optionally with gradient accumulation over micro-batches) and dumps parameters, inputs, logits, loss and every
// parameter gradient, so tests/model/reference_vit.py can compare them with a PyTorch reference.
// Dump format: <out>/index.json {name: {"shape": [...], "offset": n}} + <out>/data.f32 (float32, little-endian).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "model/parameter_layout.h"
#include "model/vit_stage.h"
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
  bool recompute = false;
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
    c.validate("probe");
    if (micro_batch == 0) micro_batch = batch;
    VP_REQUIRE(batch % micro_batch == 0, "batch must be a multiple of micro-batch");
    auto layout = std::make_shared<const ParameterLayout>(c);
    const int segments = layout->num_segments();
    VP_REQUIRE(stages >= 1 && stages <= segments, "stages must be in [1, ", segments, "]");

    // Random parameters: larger than transformers' init so every path (softmax, LayerNorm) is exercised.
    FlatParameters all = FlatParameters::whole_model(layout);
    Rng rng(static_cast<uint64_t>(seed));
    for (const ParamSpec& spec : layout->specs()) {
      float* p = all.at(spec.offset);
      const bool norm_weight = spec.kind == ParamKind::norm_weight;
      for (int64_t i = 0; i < spec.numel; ++i) {
        p[i] = static_cast<float>(norm_weight ? 1.0 + 0.2 * rng.normal() : 0.2 * rng.normal());
      }
    }
    Tensor images = Tensor::empty({batch, c.num_channels, c.image_size, c.image_size});
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
    std::vector<std::unique_ptr<Backend>> backends;
    std::vector<std::unique_ptr<ViTStage>> pipeline;
    for (int s = 0; s < stages; ++s) {
      StageOptions o;
      o.first_segment = s * segments / stages;
      o.last_segment = (s + 1) * segments / stages - 1;
      o.precision = parse_precision(precision);
      o.recompute = recompute;
      o.split_backward = split_backward;
      o.slots = split_backward ? 2 : 1;  // a micro-batch's W inputs wait in its slot while the next one runs
      o.max_micro_batch = micro_batch;
      backends.push_back(make_cpu_backend());
      pipeline.push_back(std::make_unique<ViTStage>(layout, *backends.back(), o));
      ViTStage& stage = *pipeline.back();
      std::copy(all.at(stage.parameters().begin()), all.at(stage.parameters().begin()) + stage.parameters().numel(),
                stage.parameters().data());
      stage.parameters_changed();
      stage.zero_gradients();
    }
    const int64_t global_elements = c.problem_type == ProblemType::multi_label ? batch * labels : batch;
    double loss_sum = 0.0;
    Tensor logits = Tensor::empty({batch, labels});
    for (int64_t start = 0, k = 0; start < batch; start += micro_batch, ++k) {
      const int64_t b = micro_batch;
      const int slot = split_backward ? static_cast<int>(k % 2) : 0;
      pipeline.front()->input(slot, b).copy_from(images.slice(start, start + b));
      for (int s = 0; s < stages; ++s) {
        pipeline[s]->forward(slot, b);
        if (s + 1 < stages) pipeline[s + 1]->input(slot, b).copy_from(pipeline[s]->output(slot, b));
      }
      ViTStage& last = *pipeline.back();
      logits.slice(start, start + b).copy_from(last.output(slot, b));
      loss_sum += last.loss(slot, b, targets.slice(start, start + b), 1.0 / static_cast<double>(global_elements));
      for (int s = stages - 1; s >= 0; --s) {
        if (split_backward) {
          pipeline[s]->backward_input(slot, b);
        } else {
          pipeline[s]->backward(slot, b);
        }
        if (s > 0) pipeline[s - 1]->grad(slot, b).copy_from(pipeline[s]->grad(slot, b));
      }
      if (split_backward && k > 0) {
        for (auto& stage : pipeline) stage->backward_weight(1 - slot, b);  // the previous micro-batch's W
      }
      if (split_backward && start + micro_batch >= batch) {
        for (auto& stage : pipeline) stage->backward_weight(slot, b);
      }
    }

    Dump dump;
    for (const ParamSpec& spec : layout->specs()) dump.add("param." + spec.name, all.tensor(spec));
    for (auto& stage : pipeline) {
      for (const ParamSpec* spec : stage->gradients().held_specs()) {
        dump.add("grad." + spec->name, stage->gradients().tensor(*spec));
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
    dump.write(out);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
