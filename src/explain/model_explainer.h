// Runs a loaded model on one preprocessed image and turns its forward and backward pass into a patch-grid map for
// one label (explain/attention_maps.h). Always fp32, one image at a time: explanations are for looking, not speed.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "explain/attention_maps.h"
#include "io/model_files.h"
#include "model/vit_stage.h"

namespace vitpipe {

struct PatchMap {
  int64_t grid_height = 0;
  int64_t grid_width = 0;
  std::vector<float> values;  // grid_height * grid_width, row-major, the method's raw relevance (>= 0)
};

class ModelExplainer {
 public:
  // `model` must outlive the explainer.
  ModelExplainer(const LoadedModel& model, Backend& backend);

  // The pixel buffer of stage input (num_channels x S x S floats) to fill with the preprocessed image.
  float* pixels();
  // Per-label probabilities of the image in pixels() (sigmoid for multi-label or one label, softmax otherwise).
  std::vector<double> probabilities();
  // The map of `label` for the image in pixels(): dlogit_label / d(...) from a forward and backward pass.
  // `rollout` applies to ExplainMethod::rollout only.
  PatchMap explain(int64_t label, ExplainMethod method, const RolloutOptions& rollout = {});

 private:
  void forward();                         // pixels() into the stage, then its forward pass
  Tensor on_host(const Tensor& t) const;  // a stage tensor as the host can read it (a copy where it must)

  const LoadedModel& model_;
  std::unique_ptr<ViTStage> stage_;
  Tensor pixels_;  // host memory: the image is preprocessed here and copied into the stage
};

}  // namespace vitpipe
