// A loaded model ready to classify images: the model's image processor and one inference stage, shared by
// `vitpipe predict` and `vitpipe serve` so both give the same fields and values for the same image.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "data/image.h"
#include "data/image_processor.h"
#include "data/image_read_options.h"
#include "io/model_files.h"
#include "model/vit_stage.h"

namespace vitpipe {

struct ImagePrediction {
  std::vector<float> logits;
  std::vector<double> probabilities;  // sigmoid (multi-label, or a single label) or softmax, as transformers' pipeline
};

class ImageClassifier {
 public:
  // `model_name` is for messages. Throws vitpipe::Error when the model has no classifier or its preprocessor does
  // not produce the size the model takes.
  // `device`: where the forward pass runs (backend/device_selection.h's make_backend).
  ImageClassifier(LoadedModel model, std::string model_name, const ImageReadOptions& reading, int64_t max_batch,
                  Device device = Device::cpu, bool allow_tf32 = false);

  const LoadedModel& model() const { return model_; }
  const std::string& model_name() const { return model_name_; }
  const ImageReadOptions& reading() const { return reading_; }
  const ImageProcessor& processor() const { return processor_; }
  const std::vector<std::string>& labels() const { return model_.config.labels; }
  int64_t max_batch() const { return max_batch_; }
  int64_t input_floats() const;  // per preprocessed image
  bool multi_label() const;

  // Preprocesses `image` into `out` (input_floats() floats). Thread-safe. Throws vitpipe::Error naming `name` when
  // the preprocessor cannot make it the model's size.
  void preprocess(const DecodedImage& image, const std::string& name, float* out) const;

  // Runs `count` (1..max_batch) preprocessed images, laid out one after another. One caller at a time.
  std::vector<ImagePrediction> classify(const float* inputs, int64_t count);

 private:
  LoadedModel model_;
  std::string model_name_;
  ImageReadOptions reading_;
  ImageProcessor processor_;
  int64_t max_batch_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<ViTStage> stage_;
};

// One line of `vitpipe predict --format json`: {"image", "logits", "probabilities": {label: p}}.
nlohmann::json prediction_json(const std::string& image, const ImagePrediction& prediction,
                               const std::vector<std::string>& labels);

}  // namespace vitpipe
