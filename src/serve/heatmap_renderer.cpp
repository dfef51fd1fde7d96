#include "serve/heatmap_renderer.h"

#include <algorithm>

#include "explain/heatmap_overlay.h"
#include "explain/model_explainer.h"
#include "util/error.h"

namespace vitpipe {

RenderedHeatmap HeatmapRenderer::render(const DecodedImage& image, const std::string& name,
                                        const ImagePrediction& prediction, ExplainMethod method, int64_t label) {
  const int64_t labels = static_cast<int64_t>(prediction.probabilities.size());
  VP_REQUIRE(label >= -1 && label < labels, "heatmap: label ", label, " of ", labels);
  const auto top = label >= 0 ? label
                              : std::max_element(prediction.probabilities.begin(), prediction.probabilities.end()) -
                                    prediction.probabilities.begin();
  RenderedHeatmap out;
  out.finding = classifier_.labels()[static_cast<size_t>(top)];
  out.probability = prediction.probabilities[static_cast<size_t>(top)];
  std::lock_guard lock(mutex_);
  auto backend = make_cpu_backend();
  ModelExplainer explainer(classifier_.model(), *backend);
  classifier_.preprocess(image, name, explainer.pixels());
  const PatchMap map = explainer.explain(top, method);
  out.overlay = heatmap_overlay(image, map, OverlayCaption{out.finding, out.probability, explain_method_name(method)},
                                classifier_.processor().input_region(image.width, image.height));
  return out;
}

}  // namespace vitpipe
