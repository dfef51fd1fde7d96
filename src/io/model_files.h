// A Hugging Face model directory (config.json, preprocessor_config.json, model.safetensors or sharded
// model-0000i-of-0000N.safetensors + index; for reading also pytorch_model.bin or its sharded index) <-> ViTConfig +
// PreprocessorConfig + FlatParameters (whole model, fp32).
//
// Loading maps checkpoint names onto ParameterLayout's names (the family's ...ForImageClassification,
// model/model_family.h):
//   - ...ForImageClassification files use them as they are; model_type "vit" files that say "deit." mean "vit.";
//   - a backbone (ViTModel, DeiTModel, Dinov2Model, e.g. google/vit-base-patch16-224-in21k, microsoft/rad-dino)
//     has them without the model prefix, perhaps an unused "pooler.dense.*" (ignored, said at info level) and no
//     classifier;
//   - old files say "gamma"/"beta" for LayerNorm weight/bias.
// F16, BF16 and F64 tensors are converted to fp32. Every layout parameter must be present with the shape the config
// implies (except the classifier when a fresh one is allowed); anything else is an error naming the tensors.
// A fresh classifier (normal, std initializer_range, bias 0) is made when the checkpoint has none or the requested
// labels differ from its labels (a message says so). When the requested image size differs, ViT and DeiT position
// embeddings are resized once by bicubic interpolation (model/position_interpolation.h; CLS and distillation entries
// kept); DINOv2 keeps its own and the model interpolates them in every pass (ViTConfig::input_image_size, by
// default what the preprocessor produces).
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "io/model_reference.h"
#include "io/preprocessor_config.h"
#include "io/safetensors_sharded.h"
#include "model/parameter_layout.h"
#include "model/vit_config.h"

namespace vitpipe {

struct LoadOptions {
  std::vector<std::string> labels;          // empty: keep the checkpoint's labels (and its classifier)
  int64_t image_size = 0;                   // 0: keep the checkpoint's image size
  std::optional<ProblemType> problem_type;  // unset: config.json's; when it has none, single-label for a kept
                                            // classifier with several labels (transformers' pipeline applies
                                            // softmax then), multi-label for a fresh head or a single label
  uint64_t seed = 0;                        // for a fresh classifier (model/initializer.h streams)
  bool allow_fresh_head = false;            // fine-tuning: true; predict/eval: false (a random head is an error)
  ModelReferenceOptions reference;          // passed to resolve_model_reference
};

struct LoadedModel {
  std::filesystem::path directory;  // where the files were read from
  ViTConfig config;                 // the model as loaded: requested labels, image size, problem type applied
  ViTConfig checkpoint_config;      // config.json as it was
  PreprocessorConfig preprocessor;  // from preprocessor_config.json, or ViTImageProcessor defaults; resized along
                                    // with the image size
  FlatParameters parameters;        // whole model (all segments), fp32, ParameterLayout(config)
  bool fresh_head = false;          // the classifier was initialised here, not loaded
  bool has_preprocessor_file = false;
  std::string weights_file;                                // "model.safetensors", "pytorch_model.bin", or an index
  nlohmann::json config_extra = nlohmann::json::object();  // config.json keys vitpipe does not read; save_model
                                                           // writes them back when given in SaveOptions
};

// `reference`: a directory or Hub repo id (resolve_model_reference). Throws vitpipe::Error naming the file and
// tensor for missing/unexpected/wrongly-shaped tensors, config/weights disagreements, a pytorch_model.bin whose
// pickle needs more than a state dict (refused, never executed), or a fresh head that options do not allow.
LoadedModel load_model(const std::string& reference, const LoadOptions& options = {});

struct SaveOptions {
  uint64_t max_shard_bytes = kDefaultMaxShardBytes;        // above it: model-0000i-of-0000N.safetensors + index
  nlohmann::json config_extra = nlohmann::json::object();  // e.g. LoadedModel::config_extra
};

// Writes config.json, model.safetensors (or shards + index) and preprocessor_config.json into `directory`
// (created if needed), each file atomically; removes weight files of an earlier save that the new one replaces.
// `parameters` must hold the whole model with the layout `config` implies.
void save_model(const std::filesystem::path& directory, const ViTConfig& config, const PreprocessorConfig& preprocessor,
                const FlatParameters& parameters, const SaveOptions& options = {});

// The preprocessing load_model(reference, {image_size}) would use, without reading the weights (data prepare).
PreprocessorConfig read_model_preprocessor(const std::string& reference, int64_t image_size = 0,
                                           const ModelReferenceOptions& options = {});

// The layout name a checkpoint tensor name stands for ("encoder.layer.0.layernorm_before.gamma" ->
// "vit.encoder.layer.0.layernorm_before.weight"); "" for the pooler (pooler.* / <prefix>pooler.*). Names that match no
// rule are returned unchanged (and later reported as unexpected).
std::string canonical_parameter_name(const std::string& checkpoint_name, const ViTConfig& config);
std::string canonical_parameter_name(const std::string& checkpoint_name);  // for a ViT

}  // namespace vitpipe
