#include "serve/heatmap_renderer.h"

#include <algorithm>

#include "explain/heatmap_overlay.h"
#include "explain/model_explainer.h"

namespace vitpipe {

RenderedHeatmap HeatmapRenderer::render(const DecodedImage& image, const std::string& name,
                                        const ImagePrediction& prediction, ExplainMethod method) {
  const auto top = std::max_element(prediction.probabilities.begin(), prediction.probabilities.end()) -
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
