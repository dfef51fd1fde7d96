#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>

#include "io/hf_config.h"
#include "io/model_files.h"
#include "io/safetensors.h"
#include "model/initializer.h"
#include "model/position_interpolation.h"
#include "model/presets.h"
#include "util/atomic_file.h"
#include "util/error.h"

namespace vitpipe {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

fs::path temp_dir(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / concat("vitpipe_models_", ::getpid(), "_", name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

ViTConfig micro_config(std::vector<std::string> labels = {"cat", "dog", "eel"}) {
  ViTConfig config = preset_config("vit-micro");
  config.labels = std::move(labels);
  return config;
}

FlatParameters random_parameters(const ViTConfig& config, uint64_t seed) {
  FlatParameters p = FlatParameters::whole_model(std::make_shared<const ParameterLayout>(config));
  // Not the real initialisation: every value distinct, so a swapped or shifted tensor cannot pass.
  Rng rng(seed);
  for (int64_t i = 0; i < p.numel(); ++i) p.data()[i] = static_cast<float>(rng.normal());
  return p;
}

// A checkpoint directory with the given tensors (by checkpoint name) and config.json.
void write_checkpoint(const fs::path& dir, const TensorMap& tensors, const Json& config) {
  fs::create_directories(dir);
  write_safetensors(dir / "model.safetensors", tensors);
  write_text_file_atomically(dir / "config.json", config.dump(2));
}

TensorMap named(const FlatParameters& p, const std::function<std::string(const std::string&)>& rename = nullptr) {
  TensorMap tensors;
  for (const auto& spec : p.layout().specs()) {
    std::string name = rename ? rename(spec.name) : spec.name;
    if (!name.empty()) tensors.emplace(name, p.tensor(spec).clone());
  }
  return tensors;
}

void expect_equal(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.shape(), b.shape()) << what;
  ASSERT_EQ(a.dtype(), DType::f32);
  ASSERT_EQ(b.dtype(), DType::f32);
  EXPECT_EQ(0, std::memcmp(a.raw(), b.raw(), a.nbytes())) << what;
}

void expect_load_error(const fs::path& dir, const std::string& fragment, const LoadOptions& options = {}) {
  try {
    load_model(dir.string(), options);
    ADD_FAILURE() << "loaded " << dir << "; expected: " << fragment;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos)
        << "expected: " << fragment << "\n     got: " << e.what();
  }
}

TEST(ModelFiles, SaveThenLoadIsExact) {
  const ViTConfig config = micro_config();
  FlatParameters p = random_parameters(config, 1);
  fs::path dir = temp_dir("roundtrip");
  PreprocessorConfig pre = default_preprocessor_config(config.image_size);
  pre.image_mean = {0.1, 0.2, 0.3};
  save_model(dir, config, pre, p);
  EXPECT_TRUE(fs::exists(dir / "config.json"));
  EXPECT_TRUE(fs::exists(dir / "model.safetensors"));
  EXPECT_TRUE(fs::exists(dir / "preprocessor_config.json"));

  LoadedModel m = load_model(dir.string());
  EXPECT_FALSE(m.fresh_head);
  EXPECT_TRUE(m.has_preprocessor_file);
  EXPECT_EQ(m.weights_file, "model.safetensors");
  EXPECT_EQ(m.config.labels, config.labels);
  EXPECT_EQ(m.config.hidden_size, config.hidden_size);
  EXPECT_EQ(m.preprocessor.image_mean, pre.image_mean);
  ASSERT_EQ(m.parameters.numel(), p.numel());
  EXPECT_EQ(0, std::memcmp(m.parameters.data(), p.data(), p.numel() * sizeof(float)));
}

TEST(ModelFiles, ShardedSaveLoadsAndSavesReplaceEachOther) {
  const ViTConfig config = micro_config();
  FlatParameters p = random_parameters(config, 2);
  fs::path dir = temp_dir("sharded");
  SaveOptions options;
  options.max_shard_bytes = 40000;
  save_model(dir, config, default_preprocessor_config(32), p, options);
  EXPECT_FALSE(fs::exists(dir / "model.safetensors"));
  ASSERT_TRUE(fs::exists(dir / "model.safetensors.index.json"));
  int shards = 0;
  for (const auto& entry : fs::directory_iterator(dir)) shards += entry.path().extension() == ".safetensors";
  EXPECT_GE(shards, 8);  // 326 KB in 40 KB shards
  LoadedModel m = load_model(dir.string());
  EXPECT_EQ(m.weights_file, "model.safetensors.index.json");
  EXPECT_EQ(0, std::memcmp(m.parameters.data(), p.data(), p.numel() * sizeof(float)));

  // Saving unsharded over it removes the index and the shards; and back again removes model.safetensors.
  save_model(dir, config, default_preprocessor_config(32), p);
  EXPECT_FALSE(fs::exists(dir / "model.safetensors.index.json"));
  for (const auto& entry : fs::directory_iterator(dir)) {
    EXPECT_EQ(entry.path().filename().string().find("-of-"), std::string::npos) << entry.path();
  }
  options.max_shard_bytes = 100000;
  save_model(dir, config, default_preprocessor_config(32), p, options);
  EXPECT_FALSE(fs::exists(dir / "model.safetensors"));
  EXPECT_EQ(0, std::memcmp(load_model(dir.string()).parameters.data(), p.data(), p.numel() * sizeof(float)));
}

TEST(ModelFiles, LoadsABackboneWithAFreshHead) {
  // ViTModel: names without "vit.", a pooler, no classifier, no id2label.
  const ViTConfig config = micro_config({"LABEL_0", "LABEL_1"});
  FlatParameters p = random_parameters(config, 3);
  TensorMap tensors = named(p, [](const std::string& name) -> std::string {
    if (name.rfind("classifier.", 0) == 0) return "";
    return name.substr(4);
  });
  tensors.emplace("pooler.dense.weight", Tensor::zeros({64, 64}));
  tensors.emplace("pooler.dense.bias", Tensor::zeros({64}));
  Json json = hf_config_to_json(config);
  json.erase("id2label");
  json.erase("label2id");
  json["architectures"] = {"ViTModel"};
  fs::path dir = temp_dir("backbone");
  write_checkpoint(dir, tensors, json);

  expect_load_error(dir, "has no classifier (a ViTModel backbone)");

  LoadOptions options;
  options.allow_fresh_head = true;
  options.labels = {"Atelectasis", "Edema", "Mass", "Nodule"};
  options.seed = 11;
  LoadedModel m = load_model(dir.string(), options);
  EXPECT_TRUE(m.fresh_head);
  EXPECT_FALSE(m.has_preprocessor_file);
  EXPECT_EQ(m.preprocessor.height, 32);
  EXPECT_EQ(m.config.labels, options.labels);
  for (const auto& spec : m.parameters.layout().specs()) {
    if (spec.name.rfind("classifier.", 0) == 0) continue;
    expect_equal(m.parameters.tensor(spec), p.tensor(spec.name), spec.name);
  }
  Tensor weight = m.parameters.tensor("classifier.weight");
  EXPECT_EQ(weight.shape(), (Shape{4, 64}));
  double sq = 0;
  for (int64_t i = 0; i < weight.numel(); ++i) sq += weight.f32()[i] * weight.f32()[i];
  EXPECT_NEAR(std::sqrt(sq / weight.numel()), 0.02, 0.004);
  Tensor bias = m.parameters.tensor("classifier.bias");
  for (int64_t i = 0; i < bias.numel(); ++i) EXPECT_EQ(bias.f32()[i], 0.0f);
  // The fresh head depends only on the seed.
  FlatParameters again = FlatParameters::whole_model(m.parameters.layout_ptr());
  initialize_classifier(again, 11);
  expect_equal(again.tensor("classifier.weight"), weight, "classifier.weight");
}

TEST(ModelFiles, MapsDeitPrefixesOldLayerNormNamesAndHalfPrecision) {
  const ViTConfig config = micro_config();
  FlatParameters p = random_parameters(config, 4);
  TensorMap tensors;
  int i = 0;
  for (const auto& spec : p.layout().specs()) {
    std::string name = spec.name;
    if (name.rfind("vit.", 0) == 0) name = "deit." + name.substr(4);
    if (name.find("layernorm") != std::string::npos) {
      name = name.substr(0, name.rfind('.')) + (spec.kind == ParamKind::norm_weight ? ".gamma" : ".beta");
    }
    // Rotate through storage types; the expected fp32 values are what the stored values convert to.
    const DType dtypes[] = {DType::f32, DType::bf16, DType::f16, DType::f64};
    DType dtype = dtypes[i++ % 4];
    Tensor stored;
    if (dtype == DType::f64) {
      stored = Tensor::empty(spec.shape, DType::f64);
      for (int64_t k = 0; k < spec.numel; ++k) stored.data<double>()[k] = p.tensor(spec).f32()[k] + 1e-12;
      for (int64_t k = 0; k < spec.numel; ++k) p.tensor(spec).f32()[k] = static_cast<float>(stored.data<double>()[k]);
    } else {
      stored = p.tensor(spec).to(dtype);
      p.tensor(spec).copy_from(stored.to(DType::f32));
    }
    tensors.emplace(name, stored);
  }
  // A ViT-format checkpoint under the "deit." prefix (model_type "deit" itself is the distillation-token family,
  // tests/io/test_family_configs.cpp).
  Json json = hf_config_to_json(config);
  json["architectures"] = {"ViTForImageClassification"};
  fs::path dir = temp_dir("deit");
  write_checkpoint(dir, tensors, json);
  LoadedModel m = load_model(dir.string());
  EXPECT_FALSE(m.fresh_head);
  EXPECT_EQ(0, std::memcmp(m.parameters.data(), p.data(), p.numel() * sizeof(float)));
}

TEST(ModelFiles, QkvBiasFalseMeansNoQkvBiases) {
  ViTConfig config = micro_config();
  config.qkv_bias = false;
  FlatParameters p = random_parameters(config, 5);
  fs::path dir = temp_dir("noqkvbias");
  write_checkpoint(dir, named(p), hf_config_to_json(config));
  LoadedModel m = load_model(dir.string());
  EXPECT_FALSE(m.config.qkv_bias);
  EXPECT_EQ(0, std::memcmp(m.parameters.data(), p.data(), p.numel() * sizeof(float)));

  TensorMap with_bias = named(p);
  with_bias.emplace("vit.encoder.layer.0.attention.attention.query.bias", Tensor::zeros({64}));
  write_checkpoint(dir, with_bias, hf_config_to_json(config));
  expect_load_error(dir,
                    "unexpected tensor(s) vit.encoder.layer.0.attention.attention.query.bias that a vit model with");
}

TEST(ModelFiles, RefusesMissingExtraAndMisshapenTensors) {
  const ViTConfig config = micro_config();
  FlatParameters p = random_parameters(config, 6);
  fs::path dir = temp_dir("malformed");
  const Json json = hf_config_to_json(config);

  TensorMap missing = named(p);
  missing.erase("vit.encoder.layer.1.output.dense.bias");
  write_checkpoint(dir, missing, json);
  expect_load_error(dir, "model.safetensors: missing 1 parameter(s) that " + (dir / "config.json").string() +
                             " implies: vit.encoder.layer.1.output.dense.bias");

  TensorMap extra = named(p);
  extra.emplace("vit.embeddings.mask_token", Tensor::zeros({1, 1, 64}));
  write_checkpoint(dir, extra, json);
  expect_load_error(dir, "unexpected tensor(s) vit.embeddings.mask_token");

  TensorMap misshapen = named(p);
  misshapen["vit.encoder.layer.0.intermediate.dense.weight"] = Tensor::zeros({128, 63});
  write_checkpoint(dir, misshapen, json);
  expect_load_error(dir, "tensor 'vit.encoder.layer.0.intermediate.dense.weight' has shape [128, 63] but " +
                             (dir / "config.json").string() + " implies [128, 64]");

  // config.json and the weights disagree: a config says 4 layers, the weights hold 2.
  Json deeper = json;
  deeper["num_hidden_layers"] = 4;
  write_checkpoint(dir, named(p), deeper);
  expect_load_error(dir, "missing 32 parameter(s)");

  // ... or another label count than the classifier has.
  Json more_labels = json;
  more_labels["id2label"]["3"] = "fox";
  more_labels["label2id"]["fox"] = 3;
  write_checkpoint(dir, named(p), more_labels);
  expect_load_error(dir, "tensor 'classifier.weight' has shape [3, 64] but");

  TensorMap integer = named(p);
  integer["vit.layernorm.bias"] = Tensor::zeros({64}, DType::i32);
  write_checkpoint(dir, integer, json);
  expect_load_error(dir, "tensor 'vit.layernorm.bias' has dtype I32; parameters must be F32, F16, BF16 or F64");

  TensorMap both = named(p);
  both.emplace("vit.layernorm.gamma", Tensor::zeros({64}));
  write_checkpoint(dir, both, json);
  expect_load_error(dir,
                    "tensors 'vit.layernorm.gamma' and 'vit.layernorm.weight' both stand for parameter "
                    "'vit.layernorm.weight'");

  TensorMap distilled = named(p);
  distilled.emplace("deit.embeddings.distillation_token", Tensor::zeros({1, 1, 64}));
  write_checkpoint(dir, distilled, json);
  expect_load_error(dir, "unexpected tensor(s) deit.embeddings.distillation_token that a vit model with");
}

// The bad inputs for the other families: DINOv2 weights without LayerScale; a registers count that the
// register_tokens tensor contradicts.
TEST(ModelFiles, RefusesDinov2WithoutLayerScaleAndMiscountedRegisters) {
  ViTConfig dino = preset_config("dinov2-micro");
  dino.labels = {"cat", "dog"};
  const Json dino_json = hf_config_to_json(dino);
  dino = parse_hf_config_text(dino_json.dump(), "config.json").config;
  fs::path dir = temp_dir("no_layer_scale");
  TensorMap tensors = named(random_parameters(dino, 8));
  ASSERT_EQ(tensors.erase("dinov2.encoder.layer.0.layer_scale1.lambda1"), 1u);
  write_checkpoint(dir, tensors, dino_json);
  expect_load_error(dir, "no LayerScale parameter 'dinov2.encoder.layer.0.layer_scale1.lambda1'");

  Json registers_json = dino_json;
  registers_json["model_type"] = "dinov2_with_registers";
  registers_json["architectures"] = {"Dinov2WithRegistersForImageClassification"};
  registers_json["num_register_tokens"] = 2;
  const ViTConfig registers = parse_hf_config_text(registers_json.dump(), "config.json").config;
  ASSERT_EQ(registers.num_register_tokens, 2);
  TensorMap with_registers = named(random_parameters(registers, 9));
  ASSERT_EQ(with_registers.erase("dinov2_with_registers.embeddings.register_tokens"), 1u);
  with_registers.emplace("dinov2_with_registers.embeddings.register_tokens", Tensor::zeros({1, 3, 64}));
  dir = temp_dir("registers");
  write_checkpoint(dir, with_registers, registers_json);
  expect_load_error(dir, "has shape [1, 3, 64] (3 register tokens) but " + (dir / "config.json").string() +
                             " says \"num_register_tokens\": 2");
}

TEST(ModelFiles, RefusesDirectoriesWithoutUsableWeights) {
  fs::path dir = temp_dir("noweights");
  expect_load_error(dir, "no config.json in");
  write_text_file_atomically(dir / "config.json", hf_config_text(micro_config()));
  expect_load_error(dir, "no model weights in");
  write_text_file_atomically(dir / "pytorch_model.bin", "PK");
  expect_load_error(dir, "pytorch_model.bin: not a PyTorch checkpoint");  // read by io/pytorch_bin.h
  expect_load_error(dir / "nonexistent", "not a directory");
}

TEST(ModelFiles, NewLabelsMeanAFreshHeadSameLabelsKeepIt) {
  const ViTConfig config = micro_config();
  FlatParameters p = random_parameters(config, 7);
  fs::path dir = temp_dir("labels");
  save_model(dir, config, default_preprocessor_config(32), p);

  LoadOptions same;
  same.labels = config.labels;
  LoadedModel kept = load_model(dir.string(), same);
  EXPECT_FALSE(kept.fresh_head);
  expect_equal(kept.parameters.tensor("classifier.weight"), p.tensor("classifier.weight"), "classifier");

  LoadOptions renamed;
  renamed.labels = {"cat", "dog", "fox"};  // same count, another name
  expect_load_error(dir,
                    "differ from the checkpoint's 3 (\"cat\", \"dog\", \"eel\") and a fresh classifier is not "
                    "allowed here",
                    renamed);
  renamed.allow_fresh_head = true;
  LoadedModel fresh = load_model(dir.string(), renamed);
  EXPECT_TRUE(fresh.fresh_head);
  EXPECT_EQ(fresh.config.labels, renamed.labels);
  expect_equal(fresh.parameters.tensor("vit.layernorm.weight"), p.tensor("vit.layernorm.weight"), "layernorm");

  LoadOptions duplicate;
  duplicate.labels = {"a", "a"};
  expect_load_error(dir, "\"a\" appears twice", duplicate);

  LoadOptions single;
  single.problem_type = ProblemType::single_label;
  EXPECT_EQ(load_model(dir.string(), single).config.problem_type, ProblemType::single_label);
}

TEST(ModelFiles, WithoutProblemTypeAKeptHeadIsSingleLabelAFreshOneMultiLabel) {
  const ViTConfig config = micro_config();
  FlatParameters p = random_parameters(config, 10);
  fs::path dir = temp_dir("problem_type");
  Json json = hf_config_to_json(config);
  json.erase("problem_type");  // like google/vit-base-patch16-224
  write_checkpoint(dir, named(p), json);
  EXPECT_EQ(load_model(dir.string()).config.problem_type, ProblemType::single_label);
  LoadOptions fresh;
  fresh.labels = {"Edema", "Mass"};
  fresh.allow_fresh_head = true;
  EXPECT_EQ(load_model(dir.string(), fresh).config.problem_type, ProblemType::multi_label);
  LoadOptions forced;
  forced.problem_type = ProblemType::multi_label;
  EXPECT_EQ(load_model(dir.string(), forced).config.problem_type, ProblemType::multi_label);
}

TEST(ModelFiles, NewImageSizeInterpolatesPositionEmbeddings) {
  const ViTConfig config = micro_config();  // 32 / 8: a 4 x 4 grid
  FlatParameters p = random_parameters(config, 8);
  fs::path dir = temp_dir("resize");
  PreprocessorConfig pre = default_preprocessor_config(32);
  save_model(dir, config, pre, p);

  LoadOptions options;
  options.image_size = 48;  // 6 x 6
  LoadedModel m = load_model(dir.string(), options);
  EXPECT_EQ(m.config.image_size, 48);
  EXPECT_EQ(m.checkpoint_config.image_size, 32);
  EXPECT_EQ(m.preprocessor.height, 48);
  EXPECT_EQ(m.preprocessor.width, 48);
  Tensor expected = interpolate_position_embeddings(p.tensor("vit.embeddings.position_embeddings"), 6, 6);
  expect_equal(m.parameters.tensor("vit.embeddings.position_embeddings"), expected, "position_embeddings");
  expect_equal(m.parameters.tensor("vit.embeddings.patch_embeddings.projection.weight"),
               p.tensor("vit.embeddings.patch_embeddings.projection.weight"), "patch embeddings");
  expect_equal(m.parameters.tensor("classifier.weight"), p.tensor("classifier.weight"), "classifier");

  options.image_size = 36;  // not a multiple of the patch size
  expect_load_error(dir, "\"image_size\" (36) must be a multiple of \"patch_size\" (8)", options);
}

TEST(ModelFiles, SaveRefusesAConfigThatDoesNotMatchTheParameters) {
  const ViTConfig config = micro_config();
  FlatParameters p = random_parameters(config, 9);
  ViTConfig other = config;
  other.labels.push_back("fox");
  EXPECT_THROW(save_model(temp_dir("mismatch"), other, default_preprocessor_config(32), p), Error);
  FlatParameters stage(p.layout_ptr(), 0, 1);
  EXPECT_THROW(save_model(temp_dir("stage"), config, default_preprocessor_config(32), stage), Error);
}

TEST(ModelFiles, CanonicalNames) {
  EXPECT_EQ(canonical_parameter_name("encoder.layer.0.layernorm_before.gamma"),
            "vit.encoder.layer.0.layernorm_before.weight");
  EXPECT_EQ(canonical_parameter_name("deit.layernorm.beta"), "vit.layernorm.bias");
  EXPECT_EQ(canonical_parameter_name("embeddings.cls_token"), "vit.embeddings.cls_token");
  EXPECT_EQ(canonical_parameter_name("classifier.weight"), "classifier.weight");
  EXPECT_EQ(canonical_parameter_name("pooler.dense.weight"), "");
  EXPECT_EQ(canonical_parameter_name("vit.pooler.dense.bias"), "");
  EXPECT_EQ(canonical_parameter_name("decoder.0.weight"), "decoder.0.weight");
}

}  // namespace
}  // namespace vitpipe
