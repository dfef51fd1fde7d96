// What `serve`'s prediction routes do with a request body, apart from HTTP: decode each image (PNG, JPEG or DICOM,
// by its bytes) on the caller's thread, preprocess it, let the batcher run it, and answer predict's JSON; STOW-RS
// bodies answer DICOM JSON. Errors carry the HTTP status they deserve (HttpError).
#pragma once

#include <future>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "explain/attention_maps.h"
#include "inference/image_classifier.h"
#include "serve/heatmap_renderer.h"
#include "serve/inference_batcher.h"
#include "util/decode_memory.h"
#include "util/error.h"

namespace vitpipe {

struct HttpError : Error {
  HttpError(int status, const std::string& message) : Error(message), status(status) {}
  int status;
};

// What ?heatmap=METHOD[&finding=NAME] asks for: the map of `label` (-1: each image's most probable label).
struct HeatmapRequest {
  ExplainMethod method = ExplainMethod::grad_rollout;
  int64_t label = -1;
};

class PredictionService {
 public:
  // Both must outlive the service. Images are decoded within `decode_memory_bytes` for all requests at once (see
  // util/decode_memory.h): an image needing more alone is answered 413, one that must wait for others 503.
  PredictionService(ImageClassifier& classifier, InferenceBatcher& batcher,
                    int64_t decode_memory_bytes = int64_t{1} << 30);

  // One image: predict's JSON line, plus {"heatmap": {"finding", "method", "probability", "png_base64"}} for the most
  // probable label (or heatmap->label) when `heatmap` is set. Throws HttpError 400 naming `name` when the bytes are not
  // an image vitpipe decodes or cannot be made the model's size.
  nlohmann::json predict_image(const std::string& name, std::string_view bytes,
                               std::optional<HeatmapRequest> heatmap = std::nullopt);
  // A POST /v1/predict body of one image (image/png, image/jpeg, application/dicom, application/octet-stream or
  // no type; the bytes decide the format): predict_image's answer. Another type: HttpError 415.
  nlohmann::json predict_body(std::string_view content_type, std::string_view body,
                              std::optional<HeatmapRequest> heatmap);
  // Several images (the parts of a multipart/form-data body): an array of predict_image's answers, in order.
  nlohmann::json predict_images(const std::vector<std::string>& names, const std::vector<std::string_view>& images,
                                std::optional<HeatmapRequest> heatmap);
  // A STOW-RS body (multipart/related; type="application/dicom"): the Store Instances Response (PS3.18 10.5.3) in
  // DICOM JSON, nothing stored so no RetrieveURL; each referenced instance carries its predictions in private
  // element (0009,1001) of creator "VITPIPE" (UT: predict's JSON line). `status` gets 200, 202 when some instances
  // failed, 409 when all did.
  nlohmann::json store_instances(std::string_view content_type, std::string_view body, int* status);

  const std::vector<std::string>& labels() const { return classifier_.labels(); }

 private:
  // An image decoded, preprocessed and queued for the model; the decoded pixels kept for a heatmap only.
  struct Pending {
    std::string name;
    DecodedImage image;
    std::future<ImagePrediction> prediction;
  };
  Pending queue_image(const std::string& name, std::string_view bytes, bool keep_image);
  nlohmann::json answer(Pending& pending, std::optional<HeatmapRequest> heatmap);
  int64_t window() const;  // images of one request queued at once

  ImageClassifier& classifier_;
  InferenceBatcher& batcher_;
  HeatmapRenderer heatmaps_;
  DecodeMemoryBudget decode_memory_;
};

}  // namespace vitpipe
