// The heatmap overlay of an image's most probable label (or of a chosen one), as `predict --heatmap` and `explain
// --finding` draw it: for `serve`'s ?heatmap=METHOD[&finding=NAME] answers and the Secondary Capture sent with
// --send-heatmaps. One at a time (a forward and backward pass in fp32): heatmaps are for looking, not throughput.
#pragma once

#include <mutex>
#include <string>

#include "data/image.h"
#include "explain/attention_maps.h"
#include "inference/image_classifier.h"

namespace vitpipe {

struct RenderedHeatmap {
  std::string finding;
  double probability = 0;
  DecodedImage overlay;  // RGB, at least kMinOverlaySide on its shorter side
};

class HeatmapRenderer {
 public:
  explicit HeatmapRenderer(const ImageClassifier& classifier) : classifier_(classifier) {}
  // `image` as decoded, `prediction` its classifier answer; `label`: the label to explain (-1: the most probable).
  // Thread-safe.
  RenderedHeatmap render(const DecodedImage& image, const std::string& name, const ImagePrediction& prediction,
                         ExplainMethod method, int64_t label = -1);

 private:
  const ImageClassifier& classifier_;
  std::mutex mutex_;
};

}  // namespace vitpipe
