#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "parallel/local_communicator.h"
#include "parallel/optimizer_shards.h"
#include "reference.h"
#include "train/grad_clip.h"
#include "train/optimizer.h"
#include "util/error.h"
#include "util/random.h"

namespace vitpipe {
namespace {

using testing::read_json_file;
using testing::run_reference_script;
using testing::ScratchDir;

// A small ViT whose hidden size (40) is not a multiple of 16 and whose ~62k parameters span several update chunks.
std::shared_ptr<const ParameterLayout> small_layout() {
  ViTConfig config;
  config.hidden_size = 40;
  config.num_hidden_layers = 3;
  config.num_attention_heads = 4;
  config.intermediate_size = 160;
  config.image_size = 16;
  config.patch_size = 4;
  config.labels = {"a", "b", "c", "d", "e"};
  return std::make_shared<const ParameterLayout>(config);
}

std::vector<float> read_f32(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  std::vector<float> values(std::filesystem::file_size(path) / sizeof(float));
  in.read(reinterpret_cast<char*>(values.data()), static_cast<std::streamsize>(values.size() * sizeof(float)));
  return values;
}

void fill(FlatParameters& flat, const float* values) { std::copy_n(values, flat.numel(), flat.data()); }

OptimizerConfig config_from(const nlohmann::json& c) {
  OptimizerConfig config = optimizer_config_named(c["optimizer"]);
  config.weight_decay = c["weight_decay"];
  config.beta1 = c["beta1"];
  config.beta2 = c["beta2"];
  config.eps = c["eps"];
  config.momentum = c["momentum"];
  config.dampening = c["dampening"];
  config.nesterov = c["nesterov"];
  config.layer_decay = c["layer_decay"];
  config.decay_all_parameters = c["decay_all"];
  return config;
}

// |got - want| <= rel * max(|want|, rms(want)): relative to the element, or to the array's typical magnitude where
// the element is a small difference of larger terms (one rounding of those terms is then large relative to it).
void expect_close(const float* got, const std::vector<float>& want, double rel, const std::string& what) {
  double rms = 0.0;
  for (float w : want) rms += double(w) * w;
  rms = std::sqrt(rms / std::max<size_t>(want.size(), 1));
  double worst = 0.0;
  size_t worst_at = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double excess = std::fabs(double(got[i]) - want[i]) - rel * std::max<double>(std::fabs(want[i]), rms);
    if (excess > worst) {
      worst = excess;
      worst_at = i;
    }
  }
  EXPECT_EQ(worst, 0.0) << what << ": element " << worst_at << " is " << got[worst_at] << ", reference "
                        << want[worst_at] << " (rms " << rms << ")";
}

class OptimizerReference : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new ScratchDir("optimizers");
    layout_ = small_layout();
    nlohmann::json specs = nlohmann::json::array();
    for (const ParamSpec& s : layout_->specs()) {
      specs.push_back(
          {{"name", s.name}, {"offset", s.offset}, {"numel", s.numel}, {"segment", s.segment}, {"decays", s.decays()}});
    }
    testing::write_json_file(
        dir_->path() / "layout.json",
        {{"specs", specs}, {"num_segments", layout_->num_segments()}, {"numel", layout_->numel()}});
    ok_ = run_reference_script("reference_optimizers.py", dir_->path());
  }
  static void TearDownTestSuite() {
    delete dir_;
    layout_.reset();
  }
  static ScratchDir* dir_;
  static std::shared_ptr<const ParameterLayout> layout_;
  static bool ok_;
};
ScratchDir* OptimizerReference::dir_ = nullptr;
std::shared_ptr<const ParameterLayout> OptimizerReference::layout_;
bool OptimizerReference::ok_ = false;

TEST_F(OptimizerReference, MatchTorchAndDocumentedLamb) {
  ASSERT_TRUE(ok_);
  const nlohmann::json expected = read_json_file(dir_->path() / "expected.json");
  const std::vector<float> params0 = read_f32(dir_->path() / "params0.f32");
  const std::vector<float> grads = read_f32(dir_->path() / "grads.f32");
  const int64_t n = layout_->numel();
  ASSERT_EQ(static_cast<int64_t>(params0.size()), n);
  ASSERT_GE(expected["cases"].size(), 10u);
  for (const auto& c : expected["cases"]) {
    const std::string name = c["config"]["name"];
    SCOPED_TRACE(name);
    auto optimizer = make_optimizer(config_from(c["config"]), layout_, 0, layout_->num_segments() - 1);
    FlatParameters params = FlatParameters::whole_model(layout_), g = FlatParameters::whole_model(layout_);
    fill(params, params0.data());
    for (int step = 0; step < expected["steps"].get<int>(); ++step) {
      fill(g, grads.data() + step * n);
      optimizer->step(params, g, expected["lrs"][step].get<double>());
    }
    EXPECT_EQ(optimizer->step_count(), expected["steps"].get<int>());
    expect_close(params.data(), read_f32(dir_->path() / c["files"]["params"].get<std::string>()), 1e-6,
                 name + " params");
    TensorMap state = optimizer->state_tensors();
    EXPECT_EQ(state.size() + 1, c["files"].size()) << "state tensors";
    for (const auto& [key, tensor] : state) {
      ASSERT_TRUE(c["files"].contains(key)) << key;
      expect_close(tensor.f32(), read_f32(dir_->path() / c["files"][key].get<std::string>()), 1e-6, name + " " + key);
    }
  }
}

TEST_F(OptimizerReference, ClippingMatchesTorch) {
  ASSERT_TRUE(ok_);
  const nlohmann::json expected = read_json_file(dir_->path() / "expected.json");
  const std::vector<float> grads = read_f32(dir_->path() / "grads.f32");
  for (const auto& c : expected["clip"]) {
    FlatParameters g = FlatParameters::whole_model(layout_);
    fill(g, grads.data());
    scale(g, c["factor"].get<double>());
    const double norm = clip_grad_norm(g, c["max_norm"].get<double>());
    EXPECT_NEAR(norm, c["norm"].get<double>(), 1e-6 * c["norm"].get<double>());
    EXPECT_NEAR(norm, c["norm64"].get<double>(), 1e-12 * c["norm64"].get<double>());  // we sum in double
    expect_close(g.data(), read_f32(dir_->path() / c["clipped"].get<std::string>()), 1e-6, "clipped grads");
  }
}

// Random parameters and gradients for tests that do not need a reference.
void randomise(FlatParameters& flat, uint64_t seed, double stddev) {
  Rng rng(seed);
  for (int64_t i = 0; i < flat.numel(); ++i) flat.data()[i] = static_cast<float>(rng.normal(0.0, stddev));
}

// The range [first, last] of a whole-model buffer, copied into its own FlatParameters.
FlatParameters sub_range(const FlatParameters& whole, int first, int last) {
  FlatParameters part(whole.layout_ptr(), first, last);
  std::copy_n(whole.at(part.begin()), part.numel(), part.data());
  return part;
}

OptimizerConfig config_for(const std::string& name) {
  OptimizerConfig config = optimizer_config_named(name);
  config.weight_decay = 0.05;
  config.layer_decay = 0.8;
  config.momentum = name == "sgd" ? 0.9 : 0.0;
  return config;
}

TEST(Optimizer, StagesStepLikeTheWholeModel) {
  auto layout = small_layout();
  const int last = layout->num_segments() - 1;
  for (const std::string name : {"adamw", "adamw-nobc", "lamb", "sgd"}) {
    SCOPED_TRACE(name);
    FlatParameters whole = FlatParameters::whole_model(layout), whole_grads = FlatParameters::whole_model(layout);
    randomise(whole, 1, 0.02);
    FlatParameters stage_a = sub_range(whole, 0, 1), stage_b = sub_range(whole, 2, last);
    auto opt_whole = make_optimizer(config_for(name), whole);
    auto opt_a = make_optimizer(config_for(name), stage_a);
    auto opt_b = make_optimizer(config_for(name), stage_b);
    for (int step = 0; step < 3; ++step) {
      randomise(whole_grads, 100 + step, 1.0);
      FlatParameters grads_a = sub_range(whole_grads, 0, 1), grads_b = sub_range(whole_grads, 2, last);
      opt_whole->step(whole, whole_grads, 1e-3);
      opt_a->step(stage_a, grads_a, 1e-3);
      opt_b->step(stage_b, grads_b, 1e-3);
    }
    // Bit for bit: the same pieces, the same sums, whichever range holds them.
    for (const FlatParameters* stage : {&stage_a, &stage_b}) {
      for (int64_t i = 0; i < stage->numel(); ++i) {
        ASSERT_EQ(stage->data()[i], whole.at(stage->begin())[i]) << "element " << stage->begin() + i;
      }
    }
  }
}

// ZeRO-1: R replicas (threads on a local communicator) each update their shard of a stage; put together, the shards
// are the unsharded update: bit for bit for the element-wise rules, and LAMB's trust ratios from whole-tensor norms
// summed across the shards (summation order differs, so to within rounding).
TEST(Optimizer, ShardsStepLikeTheWholeRange) {
  auto layout = small_layout();
  const int last = layout->num_segments() - 1;
  for (const std::string name : {"adamw", "lamb", "sgd"}) {
    for (int replicas : {2, 3, 4}) {
      SCOPED_TRACE(name + " x" + std::to_string(replicas));
      FlatParameters whole = FlatParameters::whole_model(layout), grads = FlatParameters::whole_model(layout);
      randomise(whole, 1, 0.02);
      FlatParameters start = sub_range(whole, 0, last);
      auto opt_whole = make_optimizer(config_for(name), whole);
      std::vector<FlatParameters> step_grads;
      for (int step = 0; step < 3; ++step) {
        randomise(grads, 100 + step, 1.0);
        step_grads.push_back(sub_range(grads, 0, last));
        opt_whole->step(whole, step_grads.back(), 1e-3);
      }
      // A stage of segments 1..last (not starting at 0): shards on the optimizers' chunk grid.
      const int64_t begin = layout->segment_begin(1), end = layout->numel();
      const auto shards = shard_ranges(begin, end, replicas, kUpdateChunk);
      FlatParameters result = sub_range(start, 0, last);
      std::vector<size_t> state_bytes(static_cast<size_t>(replicas));
      run_local_ranks(replicas, [&](Communicator& group) {
        const ElementRange mine = shards[static_cast<size_t>(group.rank())];
        FlatParameters params = sub_range(start, 1, last);
        OptimizerShard shard{mine.begin, mine.end, [&group](std::span<double> sums) {
                               group.allreduce(sums.data(), sums.size(), ReduceOp::sum);
                             }};
        auto opt = make_optimizer(config_for(name), params, shard);
        state_bytes[static_cast<size_t>(group.rank())] = opt->state_bytes();
        for (const FlatParameters& g : step_grads) opt->step(params, sub_range(g, 1, last), 1e-3);
        std::copy(params.at(mine.begin), params.at(mine.end), result.at(mine.begin));
      });
      const double tolerance = name == "lamb" ? 1e-6 : 0.0;
      for (int64_t i = begin; i < end; ++i) {
        const float want = whole.data()[i], got = result.data()[i];
        ASSERT_LE(std::fabs(got - want), tolerance * std::fabs(want)) << "element " << i;
      }
      // The moments are split: together the shards hold what one unsharded optimizer holds.
      size_t total = 0;
      for (size_t bytes : state_bytes) total += bytes;
      const size_t buffers = name == "sgd" ? 1 : 2;
      EXPECT_EQ(total, buffers * static_cast<size_t>(end - begin) * sizeof(float));
    }
  }
}

TEST(Optimizer, ResultDoesNotDependOnThreadCount) {
  auto layout = small_layout();
  std::vector<std::vector<float>> results;
  const int saved = omp_get_max_threads();
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    FlatParameters p = FlatParameters::whole_model(layout), g = FlatParameters::whole_model(layout);
    randomise(p, 5, 0.02);
    auto opt = make_optimizer(config_for("lamb"), p);
    for (int step = 0; step < 2; ++step) {
      randomise(g, 50 + step, 1.0);
      opt->step(p, g, 1e-2);
    }
    results.emplace_back(p.data(), p.data() + p.numel());
    results.back().push_back(static_cast<float>(sum_of_squares(g)));
  }
  omp_set_num_threads(saved);
  EXPECT_EQ(results[0], results[1]);
  EXPECT_EQ(results[0], results[2]);
}

TEST(Optimizer, WeightDecayAndLayerDecayFollowTheSpecs) {
  // Zero gradients isolate the decay: AdamW with m = v = 0 moves p only by p *= 1 - lr*scale*wd.
  auto layout = small_layout();
  OptimizerConfig config = optimizer_config_named("adamw");
  config.weight_decay = 0.5;
  config.layer_decay = 0.5;
  FlatParameters p = FlatParameters::whole_model(layout), g = FlatParameters::whole_model(layout);
  std::fill_n(p.data(), p.numel(), 1.0f);
  auto opt = make_optimizer(config, p);
  opt->step(p, g, 0.1);
  const int last = layout->num_segments() - 1;
  for (const ParamSpec& spec : layout->specs()) {
    const double scale = std::pow(0.5, last - spec.segment);
    const float want = spec.decays() ? static_cast<float>(1.0 - 0.1 * scale * 0.5) : 1.0f;
    EXPECT_EQ(p.tensor(spec).f32()[0], want) << spec.name;
  }
  EXPECT_EQ(layer_lr_scales(4, 0.5), (std::vector<double>{0.125, 0.25, 0.5, 1.0}));
}

TEST(Optimizer, StateRoundTripsAndRefusesAMismatch) {
  auto layout = small_layout();
  const int last = layout->num_segments() - 1;
  for (const std::string name : {"adamw", "lamb", "sgd"}) {
    SCOPED_TRACE(name);
    FlatParameters p = sub_range(FlatParameters::whole_model(layout), 1, last), g(layout, 1, last);
    randomise(p, 3, 0.02);
    auto opt = make_optimizer(config_for(name), p);
    for (int step = 0; step < 2; ++step) {
      randomise(g, 30 + step, 1.0);
      opt->step(p, g, 1e-3);
    }
    // A checkpoint: cloned tensors (as read back from a file) and the metadata.
    TensorMap saved;
    for (const auto& [key, tensor] : opt->state_tensors()) saved[key] = tensor.clone();
    StringMap meta = opt->state_metadata();
    EXPECT_EQ(meta.at("step"), "2");
    EXPECT_EQ(meta.at("first_segment"), "1");
    EXPECT_EQ(meta.at("optimizer"), name);
    FlatParameters p2 = sub_range(p, 1, last);
    auto resumed = make_optimizer(config_for(name), p2);
    resumed->load_state(saved, meta);
    EXPECT_EQ(resumed->step_count(), 2);
    randomise(g, 99, 1.0);
    opt->step(p, g, 1e-3);
    resumed->step(p2, g, 1e-3);
    for (int64_t i = 0; i < p.numel(); ++i) ASSERT_EQ(p.data()[i], p2.data()[i]);

    auto message = [&](const TensorMap& tensors, const StringMap& metadata, int first = 1) {
      auto fresh = make_optimizer(config_for(name), layout, first, last);
      try {
        fresh->load_state(tensors, metadata, "ckpt/optimizer.safetensors");
      } catch (const Error& e) {
        return std::string(e.what());
      }
      return std::string("no error");
    };
    EXPECT_NE(message(saved, meta, 2).find("covers segments [1, " + std::to_string(last) + "]"), std::string::npos);
    StringMap other = meta;
    other["optimizer"] = name == "sgd" ? "adamw" : "sgd";
    EXPECT_NE(message(saved, other).find("holds the state of optimizer"), std::string::npos);
    other = meta;
    other["step"] = "two";
    EXPECT_NE(message(saved, other).find("expected an integer"), std::string::npos);
    other = meta;
    other.erase("numel");
    EXPECT_NE(message(saved, other).find("lacks \"numel\""), std::string::npos);
    other = meta;
    other["model_numel"] = "12";
    EXPECT_NE(message(saved, other).find("model of 12 parameters"), std::string::npos);
    const std::string first_key = saved.begin()->first;
    TensorMap missing = saved;
    missing.erase(first_key);
    EXPECT_NE(message(missing, meta).find("lacks tensor \"" + first_key + "\""), std::string::npos);
    TensorMap misshapen = saved;
    misshapen[first_key] = Tensor::zeros({3});
    EXPECT_NE(message(misshapen, meta).find("expected F32"), std::string::npos);
  }
}

TEST(Optimizer, RefusesBadConfigurationAndMismatchedRanges) {
  auto layout = small_layout();
  auto message = [](auto&& fn) {
    try {
      fn();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([] { optimizer_config_named("adam"); }).find("unknown optimizer 'adam'"), std::string::npos);
  OptimizerConfig bad = optimizer_config_named("adamw");
  bad.beta2 = 1.0;
  EXPECT_NE(message([&] { make_optimizer(bad, layout, 0, 1); }).find("beta2"), std::string::npos);
  bad = optimizer_config_named("sgd");
  bad.nesterov = true;
  EXPECT_NE(message([&] { make_optimizer(bad, layout, 0, 1); }).find("Nesterov"), std::string::npos);
  bad = optimizer_config_named("lamb");
  bad.layer_decay = 0.0;
  EXPECT_NE(message([&] { make_optimizer(bad, layout, 0, 1); }).find("layer decay"), std::string::npos);
  auto opt = make_optimizer(optimizer_config_named("adamw"), layout, 0, 1);
  FlatParameters p(layout, 0, 2), g(layout, 0, 2);
  EXPECT_NE(message([&] { opt->step(p, g, 1e-3); }).find("given parameters of segments [0, 2]"), std::string::npos);
  FlatParameters p01(layout, 0, 1), g01(layout, 0, 1);
  EXPECT_NE(message([&] { opt->step(p01, g01, std::nan("")); }).find("learning rate"), std::string::npos);
  EXPECT_EQ(opt->step_count(), 0);
}

TEST(GradClip, StagesSumToTheWholeAndScaleIsTheClipFactor) {
  auto layout = small_layout();
  const int last = layout->num_segments() - 1;
  FlatParameters whole = FlatParameters::whole_model(layout);
  randomise(whole, 8, 1.0);
  FlatParameters a = sub_range(whole, 0, 2), b = sub_range(whole, 3, last);
  double direct = 0.0;
  for (int64_t i = 0; i < whole.numel(); ++i) direct += double(whole.data()[i]) * whole.data()[i];
  EXPECT_NEAR(sum_of_squares(a) + sum_of_squares(b), direct, 1e-12 * direct);
  EXPECT_NEAR(sum_of_squares(whole), direct, 1e-12 * direct);
  const double norm = std::sqrt(sum_of_squares(a) + sum_of_squares(b));
  const double factor = clip_factor(norm, 1.0);
  EXPECT_DOUBLE_EQ(factor, 1.0 / (norm + 1e-6));
  EXPECT_EQ(clip_factor(0.5, 1.0), 1.0);
  EXPECT_EQ(clip_factor(std::numeric_limits<double>::infinity(), 1.0), 1.0);
  EXPECT_THROW(clip_factor(1.0, 0.0), Error);
  scale(a, factor);
  EXPECT_EQ(a.data()[5], whole.data()[5] * static_cast<float>(factor));
  FlatParameters empty_like(layout, last, last);
  EXPECT_EQ(sum_of_squares(empty_like), 0.0);
}

}  // namespace
}  // namespace vitpipe
