#include "inference/image_classifier.h"

#include <cmath>

#include "backend/device_selection.h"
#include "util/error.h"

namespace vitpipe {

ImageClassifier::ImageClassifier(LoadedModel model, std::string model_name, const ImageReadOptions& reading,
                                 int64_t max_batch, Device device, bool allow_tf32)
    : model_(std::move(model)),
      model_name_(std::move(model_name)),
      reading_(reading),
      processor_(model_.preprocessor),
      max_batch_(max_batch) {
  const ViTConfig& c = model_.config;
  VP_REQUIRE(c.num_labels() > 0, model_name_, ": the model has no classifier labels to predict");
  VP_REQUIRE(max_batch_ >= 1 && max_batch_ <= 1024, "batch size: expected 1..1024, got ", max_batch_);
  const auto [fixed_w, fixed_h] = model_.preprocessor.fixed_output_size();
  VP_REQUIRE(fixed_w == 0 || (fixed_w == c.input_size() && fixed_h == c.input_size()), model_name_,
             ": preprocessor_config.json produces ", fixed_w, "x", fixed_h, " images (", model_.preprocessor.geometry(),
             ") but the model takes ", c.input_size(), "x", c.input_size(), " images");
  backend_ = make_backend(device, allow_tf32);
  StageOptions options;
  options.training = false;
  options.max_micro_batch = max_batch_;
  stage_ = std::make_unique<ViTStage>(model_.parameters.layout_ptr(), *backend_, options);
  stage_->load_values(model_.parameters);
}

int64_t ImageClassifier::input_floats() const {
  const int64_t side = model_.config.input_size();
  return model_.config.num_channels * side * side;
}

bool ImageClassifier::multi_label() const {
  // transformers' image-classification pipeline: sigmoid for multi-label or a single label (softmax over one logit
  // would always say 1), softmax otherwise.
  return model_.config.problem_type == ProblemType::multi_label || model_.config.num_labels() == 1;
}

void ImageClassifier::preprocess(const DecodedImage& image, const std::string& name, float* out) const {
  const int64_t side = model_.config.input_size();
  // Without a fixed output size the image keeps its own (or its aspect), which must then be the model's.
  const int64_t out_h = processor_.output_height(image.width, image.height);
  const int64_t out_w = processor_.output_width(image.width, image.height);
  VP_REQUIRE(out_h == side && out_w == side, name, ": the image is ", image.width, "x", image.height,
             " and preprocessor_config.json ",
             model_.preprocessor.do_resize
                 ? concat("(", model_.preprocessor.geometry(), ") makes it ", out_w, "x", out_h)
                 : std::string("has do_resize false"),
             ", but the model takes ", side, "x", side, " images");
  processor_.process(image, out);
}

std::vector<ImagePrediction> ImageClassifier::classify(const float* inputs, int64_t count) {
  VP_REQUIRE(count >= 1 && count <= max_batch_, "classify: expected 1..", max_batch_, " images, got ", count);
  const Tensor input = stage_->input(0, count);
  backend_->copy_from_host(Tensor::wrap(const_cast<float*>(inputs), input.shape(), DType::f32), input);
  stage_->forward(0, count);
  const Tensor logits = to_host(*backend_, stage_->output(0, count));
  const int64_t labels = model_.config.num_labels();
  const bool multi = multi_label();
  std::vector<ImagePrediction> out(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    const float* z = logits.f32() + i * labels;
    ImagePrediction& p = out[static_cast<size_t>(i)];
    p.logits.assign(z, z + labels);
    p.probabilities.resize(static_cast<size_t>(labels));
    if (multi) {
      for (int64_t l = 0; l < labels; ++l)
        p.probabilities[static_cast<size_t>(l)] = 1.0 / (1.0 + std::exp(-static_cast<double>(z[l])));
    } else {
      double max = z[0], sum = 0;
      for (int64_t l = 1; l < labels; ++l) max = std::max(max, static_cast<double>(z[l]));
      for (int64_t l = 0; l < labels; ++l) sum += std::exp(z[l] - max);
      for (int64_t l = 0; l < labels; ++l) p.probabilities[static_cast<size_t>(l)] = std::exp(z[l] - max) / sum;
    }
  }
  return out;
}

nlohmann::json prediction_json(const std::string& image, const ImagePrediction& prediction,
                               const std::vector<std::string>& labels) {
  nlohmann::json probabilities = nlohmann::json::object();
  for (size_t l = 0; l < labels.size(); ++l) probabilities[labels[l]] = prediction.probabilities[l];
  return {{"image", image}, {"logits", prediction.logits}, {"probabilities", probabilities}};
}

}  // namespace vitpipe
