#include "io/model_files.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <set>

#include "io/hf_config.h"
#include "io/peft_adapter.h"
#include "io/pytorch_bin.h"
#include "io/safetensors.h"
#include "model/initializer.h"
#include "model/model_family.h"
#include "model/position_interpolation.h"
#include "model/trainable_set.h"
#include "util/error.h"
#include "util/log.h"

namespace vitpipe {
namespace {

namespace fs = std::filesystem;

bool starts_with(const std::string& s, std::string_view prefix) { return s.rfind(prefix, 0) == 0; }
bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The checkpoint's tensors, whichever file(s) they came from; the mappings stay alive while tensors are read.
struct Checkpoint {
  TensorMap tensors;
  std::map<std::string, std::string> file_of;  // tensor -> file name (for messages)
  std::string weights_file;
  std::vector<std::shared_ptr<MappedFile>> mappings;
};

Checkpoint open_weights(const fs::path& directory) {
  Checkpoint checkpoint;
  if (fs::exists(directory / "model.safetensors")) {
    SafetensorsFile file = read_safetensors(directory / "model.safetensors");
    checkpoint.weights_file = "model.safetensors";
    for (const auto& [name, tensor] : file.tensors) checkpoint.file_of.emplace(name, checkpoint.weights_file);
    checkpoint.tensors = std::move(file.tensors);
    checkpoint.mappings.push_back(file.mapping);
    return checkpoint;
  }
  if (fs::exists(directory / "model.safetensors.index.json")) {
    ShardedSafetensors sharded = read_sharded_safetensors(directory / "model.safetensors.index.json");
    checkpoint.weights_file = "model.safetensors.index.json";
    checkpoint.tensors = std::move(sharded.tensors);
    checkpoint.file_of = std::move(sharded.source);
    checkpoint.mappings = std::move(sharded.mappings);
    return checkpoint;
  }
  // Legacy checkpoints, read without executing their pickle (io/pytorch_bin.h).
  if (fs::exists(directory / "pytorch_model.bin")) {
    checkpoint.weights_file = "pytorch_model.bin";
    checkpoint.tensors = read_pytorch_bin(directory / "pytorch_model.bin");
    for (const auto& [name, tensor] : checkpoint.tensors) checkpoint.file_of.emplace(name, checkpoint.weights_file);
    return checkpoint;
  }
  if (fs::exists(directory / "pytorch_model.bin.index.json")) {
    checkpoint.weights_file = "pytorch_model.bin.index.json";
    checkpoint.tensors = read_pytorch_bin_index(directory / "pytorch_model.bin.index.json", &checkpoint.file_of);
    return checkpoint;
  }
  for (const char* name : {"tf_model.h5", "flax_model.msgpack"}) {
    VP_REQUIRE(!fs::exists(directory / name), directory.string(), " holds only ", name,
               " (TensorFlow/Flax weights), which vitpipe does not read; it needs model.safetensors");
  }
  fail("no model weights in ", directory.string(),
       ": expected model.safetensors, model.safetensors.index.json with its shards, pytorch_model.bin or "
       "pytorch_model.bin.index.json");
}

bool is_float_dtype(DType dtype) {
  return dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f16 || dtype == DType::f64;
}

void convert_to_f32(const Tensor& source, float* destination) {
  const size_t count = static_cast<size_t>(source.numel());
  switch (source.dtype()) {
    case DType::f32:
      if (count > 0) std::memcpy(destination, source.raw(), count * sizeof(float));
      break;
    case DType::bf16:
      convert_bf16_to_f32(source.data<uint16_t>(), destination, count);
      break;
    case DType::f16:
      convert_f16_to_f32(source.data<uint16_t>(), destination, count);
      break;
    case DType::f64: {
      const double* values = source.data<double>();
      for (size_t i = 0; i < count; ++i) destination[i] = static_cast<float>(values[i]);
      break;
    }
    default:
      break;  // refused before copying
  }
}

std::string list_some(const std::vector<std::string>& names, size_t shown = 6) {
  std::string text;
  for (size_t i = 0; i < names.size() && i < shown; ++i) text += (i ? ", " : "") + names[i];
  if (names.size() > shown) text += concat(" and ", names.size() - shown, " more");
  return text;
}

std::string labels_summary(const std::vector<std::string>& labels) {
  std::vector<std::string> quoted;
  for (const auto& label : labels) quoted.push_back("\"" + label + "\"");
  return concat(labels.size(), " (", list_some(quoted, 4), ")");
}

void check_requested_labels(const std::vector<std::string>& labels) {
  std::set<std::string> seen;
  for (const auto& label : labels) {
    VP_REQUIRE(!label.empty(), "requested labels: a label name is empty");
    VP_REQUIRE(seen.insert(label).second, "requested labels: \"", label, "\" appears twice");
  }
}

// model.safetensors, model.safetensors.index.json or model-DDDDD-of-DDDDD.safetensors: a save's weight files.
bool is_weight_file_name(const std::string& name) {
  if (name == "model.safetensors" || name == "model.safetensors.index.json") return true;
  static constexpr std::string_view shape = "model-#####-of-#####.safetensors";
  if (name.size() != shape.size()) return false;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == '#' ? (name[i] < '0' || name[i] > '9') : name[i] != shape[i]) return false;
  }
  return true;
}

}  // namespace

std::string canonical_parameter_name(const std::string& checkpoint_name, const ViTConfig& config) {
  std::string name = checkpoint_name;
  if (ends_with(name, ".gamma")) name = name.substr(0, name.size() - 6) + ".weight";
  if (ends_with(name, ".beta")) name = name.substr(0, name.size() - 5) + ".bias";
  const std::string prefix = model_prefix(config);
  if (config.model_type == "vit" && starts_with(name, "deit.")) name = "vit." + name.substr(5);
  if (starts_with(name, "pooler.") || starts_with(name, prefix + "pooler.")) return "";
  if (starts_with(name, "embeddings.") || starts_with(name, "encoder.") || starts_with(name, "layernorm.")) {
    name = prefix + name;
  }
  return name;
}

std::string canonical_parameter_name(const std::string& checkpoint_name) {
  return canonical_parameter_name(checkpoint_name, ViTConfig{});
}

LoadedModel load_model(const std::string& reference, const LoadOptions& options) {
  LoadedModel model;
  model.directory = resolve_model_reference(reference, options.reference);
  if (is_peft_adapter_directory(model.directory)) return load_peft_adapter_model(model.directory, options);
  const fs::path config_path = model.directory / "config.json";
  VP_REQUIRE(fs::exists(config_path), "no config.json in ", model.directory.string(),
             " (a Hugging Face model directory holds config.json and model.safetensors)");
  HfConfig hf = read_hf_config(config_path);
  const ViTConfig& source = hf.config;
  model.checkpoint_config = source;
  model.config_extra = hf.extra;

  Checkpoint checkpoint = open_weights(model.directory);
  model.weights_file = checkpoint.weights_file;
  const std::string weights_path = (model.directory / checkpoint.weights_file).string();
  auto file_of = [&](const std::string& name) { return (model.directory / checkpoint.file_of.at(name)).string(); };

  // Checkpoint names -> layout names.
  std::map<std::string, std::string> original_of;  // layout name -> checkpoint name
  std::vector<std::string> pooler;
  for (const auto& [name, tensor] : checkpoint.tensors) {
    std::string canonical = canonical_parameter_name(name, source);
    if (canonical.empty()) {
      pooler.push_back(name);
      continue;
    }
    auto [it, inserted] = original_of.emplace(canonical, name);
    VP_REQUIRE(inserted, weights_path, ": tensors '", it->second, "' and '", name, "' both stand for parameter '",
               canonical, "'");
  }
  if (!pooler.empty()) {
    info(weights_path, ": ignoring ", list_some(pooler), " (the backbone's pooler; ",
         classification_architecture(source), " does not use it)");
  }

  // Every parameter the config implies must be there with its shape; nothing else may be.
  const ParameterLayout source_layout(source);
  bool has_classifier = false;
  for (const auto& spec : source_layout.specs()) {
    has_classifier |= is_classifier_parameter(spec) && original_of.count(spec.name) != 0;
  }
  std::vector<std::string> missing;
  std::set<std::string> used;
  for (const auto& spec : source_layout.specs()) {
    const bool classifier = is_classifier_parameter(spec);
    auto found = original_of.find(spec.name);
    if (found == original_of.end()) {
      if (!(classifier && !has_classifier)) missing.push_back(spec.name);
      continue;
    }
    used.insert(spec.name);
    const std::string& original = found->second;
    const Tensor& tensor = checkpoint.tensors.at(original);
    VP_REQUIRE(is_float_dtype(tensor.dtype()), file_of(original), ": tensor '", original, "' has dtype ",
               dtype_name(tensor.dtype()), "; parameters must be F32, F16, BF16 or F64");
    if (ends_with(spec.name, "embeddings.register_tokens") && tensor.shape() != spec.shape) {
      fail(file_of(original), ": tensor '", original, "' has shape ", shape_string(tensor.shape()), " (",
           tensor.rank() == 3 ? tensor.dim(1) : -1, " register tokens) but ", config_path.string(),
           " says \"num_register_tokens\": ", source.num_register_tokens);
    }
    VP_REQUIRE(tensor.shape() == spec.shape, file_of(original), ": tensor '", original, "' has shape ",
               shape_string(tensor.shape()), " but ", config_path.string(), " implies ", shape_string(spec.shape),
               classifier ? concat(" (", source.num_labels(), " labels in id2label/num_labels)") : std::string());
  }
  if (source.layer_scale) {
    for (const auto& name : missing) {
      VP_REQUIRE(name.find(".layer_scale") == std::string::npos, weights_path, ": no LayerScale parameter '", name,
                 "': every ", source.model_type, " block has layer_scale1.lambda1 and layer_scale2.lambda1 (",
                 config_path.string(), " says model_type \"", source.model_type, "\")");
    }
  }
  VP_REQUIRE(missing.empty(), weights_path, ": missing ", missing.size(), " parameter(s) that ", config_path.string(),
             " implies: ", list_some(missing), source.qkv_bias ? "" : " (qkv_bias is false: no q/k/v biases expected)");
  std::vector<std::string> unexpected;
  for (const auto& [canonical, original] : original_of) {
    if (used.count(canonical) == 0) unexpected.push_back(original);
  }
  VP_REQUIRE(unexpected.empty(), weights_path, ": unexpected tensor(s) ", list_some(unexpected), " that a ",
             source.model_type, " model with ", config_path.string(), "'s settings does not have",
             source.qkv_bias ? "" : " (qkv_bias is false)");

  // The model to build: the requested labels, image size and problem type.
  ViTConfig target = source;
  if (!options.labels.empty()) {
    check_requested_labels(options.labels);
    target.labels = options.labels;
  }
  // Preprocessing: the file, or ViTImageProcessor's defaults.
  const fs::path preprocessor_path = model.directory / "preprocessor_config.json";
  model.has_preprocessor_file = fs::exists(preprocessor_path);
  if (model.has_preprocessor_file) {
    model.preprocessor = read_preprocessor_config(preprocessor_path);
  } else {
    model.preprocessor = default_preprocessor_config(source.image_size);
    info("no preprocessor_config.json in ", model.directory.string(), ": using ViTImageProcessor defaults");
  }
  const int64_t processed = model.preprocessor.fixed_output_size().second;
  if (source.position_interpolation == PositionInterpolation::at_load) {
    if (options.image_size != 0) target.image_size = options.image_size;
  } else {
    // DINOv2 interpolates its position embeddings to every input's grid: the checkpoint keeps its own, the model
    // runs at the requested size, else at what the preprocessor produces (facebook/dinov2-*: 224 from a 518 grid).
    target.input_image_size = options.image_size != 0 ? options.image_size : processed > 0 ? processed : 0;
    if (target.input_image_size == target.image_size) target.input_image_size = 0;
  }
  target.validate(concat(model.directory.string(), " with the requested settings"));

  if (!has_classifier) {
    VP_REQUIRE(options.allow_fresh_head, weights_path, " has no classifier (a ViTModel backbone); it needs ",
               "fine-tuning before it can classify");
    model.fresh_head = true;
    info(model.directory.string(), " is a backbone without a classifier: creating a fresh classifier for ",
         labels_summary(target.labels), " labels (normal, std ", target.initializer_range, ", bias 0)");
  } else if (target.labels != source.labels) {
    VP_REQUIRE(options.allow_fresh_head, "the requested labels ", labels_summary(target.labels),
               " differ from the checkpoint's ", labels_summary(source.labels),
               " and a fresh classifier is not allowed here");
    model.fresh_head = true;
    info("the requested labels ", labels_summary(target.labels), " differ from the checkpoint's ",
         labels_summary(source.labels), ": creating a fresh classifier (normal, std ", target.initializer_range,
         ", bias 0)");
  }

  // Without a problem_type: a kept classifier scores as transformers' image-classification pipeline would (softmax
  // for several labels, sigmoid for one); a fresh one is multi-label, as ChestX-ray14 findings are.
  if (options.problem_type) {
    target.problem_type = *options.problem_type;
  } else if (!hf.has_problem_type) {
    target.problem_type =
        model.fresh_head || target.num_labels() == 1 ? ProblemType::multi_label : ProblemType::single_label;
    info(config_path.string(), " has no problem_type; using ", problem_type_name(target.problem_type));
  }

  auto layout = std::make_shared<const ParameterLayout>(target);
  model.parameters = FlatParameters::whole_model(layout);
  std::vector<std::pair<const ParamSpec*, const Tensor*>> copies;
  for (const auto& spec : layout->specs()) {
    if (model.fresh_head && is_classifier_parameter(spec)) continue;
    const Tensor& tensor = checkpoint.tensors.at(original_of.at(spec.name));
    if (ends_with(spec.name, "embeddings.position_embeddings") && target.position_grid() != source.position_grid()) {
      Tensor source_f32 = Tensor::empty(tensor.shape());
      convert_to_f32(tensor, source_f32.f32());
      Tensor resized = interpolate_position_embeddings(source_f32, target.position_grid(), target.position_grid(),
                                                       source.positioned_prefix());
      model.parameters.tensor(spec).copy_from(resized.view(spec.shape));
      info("position embeddings: ", source.position_grid(), "x", source.position_grid(), " patch grid (image ",
           source.image_size, ") resized to ", target.position_grid(), "x", target.position_grid(), " (image ",
           target.image_size, ") by bicubic interpolation");
      continue;
    }
    VP_REQUIRE(tensor.shape() == spec.shape, "internal: shape of '", spec.name, "' changed");
    copies.emplace_back(&spec, &tensor);
  }
  // One conversion pass straight from the mapping into the flat buffer.
#pragma omp parallel for schedule(dynamic, 1)
  for (size_t i = 0; i < copies.size(); ++i) {
    convert_to_f32(*copies[i].second, model.parameters.at(copies[i].first->offset));
  }
  if (model.fresh_head) initialize_classifier(model.parameters, options.seed);
  model.config = target;

  // The preprocessing follows a change of image size.
  PreprocessorConfig& pre = model.preprocessor;
  if (options.image_size != 0 && options.image_size != processed) {
    pre = preprocessor_for_image_size(pre, options.image_size);
    info("preprocessing now produces ", options.image_size, "x", options.image_size, " images");
  }
  auto [processed_w, processed_h] = pre.fixed_output_size();
  if (processed_w > 0 && (processed_h != target.input_size() || processed_w != target.input_size())) {
    warn(preprocessor_path.string(), " produces ", processed_h, "x", processed_w, " images but the model expects ",
         target.input_size(), "x", target.input_size());
  }
  if (target.resamples_positions()) {
    info(model.directory.string(), ": images of ", target.input_size(), " px (", target.grid(), "x", target.grid(),
         " patches); the ", target.position_grid(), "x", target.position_grid(),
         " position embeddings are interpolated to that grid in every forward pass, as transformers does (bicubic",
         target.position_interpolation == PositionInterpolation::bicubic_antialias ? " with antialiasing" : "",
         ", by output size)");
  }
  return model;
}

PreprocessorConfig read_model_preprocessor(const std::string& reference, int64_t image_size,
                                           const ModelReferenceOptions& options) {
  const fs::path directory = resolve_model_reference(reference, options);
  if (is_peft_adapter_directory(directory)) {
    const PeftBaseReference base = peft_base_reference(directory);
    ModelReferenceOptions base_options = options;
    base_options.revision = base.revision;
    return read_model_preprocessor(base.reference, image_size, base_options);
  }
  const fs::path preprocessor_path = directory / "preprocessor_config.json";
  PreprocessorConfig pre =
      fs::exists(preprocessor_path)
          ? read_preprocessor_config(preprocessor_path)
          : default_preprocessor_config(read_hf_config(directory / "config.json").config.image_size);
  if (image_size != 0 && image_size != pre.fixed_output_size().second)
    pre = preprocessor_for_image_size(pre, image_size);
  return pre;
}

void save_model(const fs::path& directory, const ViTConfig& config, const PreprocessorConfig& preprocessor,
                const FlatParameters& parameters, const SaveOptions& options) {
  const ParameterLayout& layout = parameters.layout();
  VP_REQUIRE(parameters.first_segment() == 0 && parameters.last_segment() == layout.num_segments() - 1,
             "save_model: the parameters hold segments ", parameters.first_segment(), "..", parameters.last_segment(),
             ", not the whole model");
  const ParameterLayout expected(config);
  VP_REQUIRE(expected.specs().size() == layout.specs().size(),
             "save_model: the config implies another set of parameters than the ones given");
  for (size_t i = 0; i < expected.specs().size(); ++i) {
    const ParamSpec& want = expected.specs()[i];
    const ParamSpec& have = layout.specs()[i];
    VP_REQUIRE(want.name == have.name && want.shape == have.shape, "save_model: the config implies ", want.name, " ",
               shape_string(want.shape), " but the parameters hold ", have.name, " ", shape_string(have.shape));
  }
  std::error_code error;
  fs::create_directories(directory, error);
  VP_REQUIRE(fs::is_directory(directory), "cannot create directory ", directory.string(), ": ", error.message());

  NamedTensorList tensors;
  for (const auto& name : layout.state_dict_order()) tensors.emplace_back(name, parameters.tensor(name));
  const std::vector<std::string> written = write_sharded_safetensors(directory, tensors, options.max_shard_bytes);

  // A previous save's weights must not shadow the new ones (model.safetensors wins over an index when loading).
  const std::set<std::string> keep(written.begin(), written.end());
  for (const auto& entry : fs::directory_iterator(directory)) {
    const std::string name = entry.path().filename().string();
    if (keep.count(name) == 0 && is_weight_file_name(name)) fs::remove(entry.path(), error);
  }
  write_hf_config(directory / "config.json", config, options.config_extra);
  write_preprocessor_config(directory / "preprocessor_config.json", preprocessor);
}

}  // namespace vitpipe
