#include "serve/prediction_service.h"

#include <algorithm>
#include <cctype>
#include <future>
#include <optional>

#include "data/dicom_decoder.h"
#include "data/image.h"
#include "data/png_encoder.h"
#include "serve/dicom_identifiers.h"
#include "serve/dicom_storage_node.h"
#include "serve/multipart_reader.h"
#include "util/base64.h"

namespace vitpipe {
namespace {

std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool single_image_type(const std::string& type) {
  // application/x-www-form-urlencoded: what curl --data-binary sends unless told otherwise; the bytes decide.
  return type.empty() || type == "application/x-www-form-urlencoded" || type == "image/png" || type == "image/jpeg" ||
         type == "application/dicom" || type == "application/octet-stream";
}

// A DICOM JSON attribute (PS3.18 F.2) with one value.
nlohmann::json dicom_json(const char* vr, const nlohmann::json& value) {
  return {{"vr", vr}, {"Value", nlohmann::json::array({value})}};
}

}  // namespace

PredictionService::PredictionService(ImageClassifier& classifier, InferenceBatcher& batcher,
                                     int64_t decode_memory_bytes)
    : classifier_(classifier), batcher_(batcher), heatmaps_(classifier), decode_memory_(decode_memory_bytes) {}

PredictionService::Pending PredictionService::queue_image(const std::string& name, std::string_view bytes,
                                                          bool keep_image) {
  Pending pending;
  pending.name = name;
  std::vector<float> input(static_cast<size_t>(classifier_.input_floats()));
  try {
    // Decoding reserves what it will allocate from the shared budget first; given back once preprocessed.
    const DecodeMemoryScope decoding(decode_memory_);
    DecodedImage image = decode_image_memory_keep_gray(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(),
                                                       name, classifier_.reading());
    classifier_.preprocess(image, name, input.data());
    if (keep_image) pending.image = std::move(image);
  } catch (const DecodeMemoryRefused& e) {
    throw HttpError(e.transient ? 503 : 413, e.what());
  } catch (const HttpError&) {
    throw;
  } catch (const Error& e) {
    throw HttpError(400, e.what());
  }
  pending.prediction = batcher_.submit(std::move(input));
  return pending;
}

nlohmann::json PredictionService::answer(Pending& pending, std::optional<HeatmapRequest> heatmap) {
  const ImagePrediction prediction = pending.prediction.get();
  nlohmann::json answer = prediction_json(pending.name, prediction, classifier_.labels());
  if (heatmap) {
    const RenderedHeatmap map =
        heatmaps_.render(pending.image, pending.name, prediction, heatmap->method, heatmap->label);
    const std::vector<uint8_t> png = encode_png(map.overlay);
    answer["heatmap"] = {
        {"finding", map.finding},
        {"method", explain_method_name(heatmap->method)},
        {"probability", map.probability},
        {"png_base64", base64(std::string_view(reinterpret_cast<const char*>(png.data()), png.size()))}};
  }
  return answer;
}

int64_t PredictionService::window() const { return 2 * batcher_.max_batch(); }

nlohmann::json PredictionService::predict_image(const std::string& name, std::string_view bytes,
                                                std::optional<HeatmapRequest> heatmap) {
  Pending pending = queue_image(name, bytes, heatmap.has_value());
  return answer(pending, heatmap);
}

nlohmann::json PredictionService::predict_body(std::string_view content_type, std::string_view body,
                                               std::optional<HeatmapRequest> heatmap) {
  MediaType type;
  if (!content_type.empty()) {
    try {
      type = parse_media_type(content_type);
    } catch (const Error& e) {
      throw HttpError(400, e.what());
    }
  }
  const std::string essence = content_type.empty() ? "" : lower(type.type + "/" + type.subtype);
  if (single_image_type(essence)) {
    if (body.empty()) throw HttpError(400, "the request body is empty (expected a PNG, JPEG or DICOM image)");
    return predict_image("body", body, heatmap);
  }
  throw HttpError(415, concat("Content-Type ", std::string(content_type),
                              ": expected image/png, image/jpeg, application/dicom or multipart/form-data"));
}

nlohmann::json PredictionService::predict_images(const std::vector<std::string>& names,
                                                 const std::vector<std::string_view>& images,
                                                 std::optional<HeatmapRequest> heatmap) {
  if (images.empty()) throw HttpError(400, "multipart body: no parts (expected one image per part)");
  // A window of images is decoded and queued before any answer is awaited, so they share batches; the window
  // bounds what one request holds in memory (preprocessed images are 600 KB each at 224 px).
  nlohmann::json out = nlohmann::json::array();
  for (size_t start = 0; start < images.size(); start += static_cast<size_t>(window())) {
    const size_t end = std::min(images.size(), start + static_cast<size_t>(window()));
    std::vector<Pending> pending;
    for (size_t i = start; i < end; ++i) pending.push_back(queue_image(names[i], images[i], heatmap.has_value()));
    for (Pending& p : pending) out.push_back(answer(p, heatmap));
  }
  return out;
}

nlohmann::json PredictionService::store_instances(std::string_view content_type, std::string_view body, int* status) {
  std::vector<std::string_view> instances;
  try {
    instances = dicom_parts_of_stow_request(content_type, body);
  } catch (const Error& e) {
    const bool wrong_type = lower(content_type).rfind("multipart/related", 0) != 0;
    throw HttpError(wrong_type ? 415 : 400, e.what());
  }
  if (instances.empty()) throw HttpError(400, "STOW-RS body: no application/dicom parts");
  // In windows, as predict_images; an instance that cannot be read or decoded is listed as failed, not fatal.
  nlohmann::json referenced = nlohmann::json::array(), failed = nlohmann::json::array();
  for (size_t start = 0; start < instances.size(); start += static_cast<size_t>(window())) {
    const size_t end = std::min(instances.size(), start + static_cast<size_t>(window()));
    std::vector<DicomFileIdentity> identities(end - start);
    std::vector<std::optional<Pending>> pending(end - start);
    std::vector<std::string> failures(end - start);
    for (size_t i = start; i < end; ++i) {
      const std::string name = concat("instance ", i + 1);
      try {
        DicomFileIdentity identity =
            read_dicom_file_identity(reinterpret_cast<const uint8_t*>(instances[i].data()), instances[i].size(), name);
        // One policy for both doors: what the DICOM node refuses at association is refused here too.
        if (!is_valid_dicom_uid(identity.sop_class_uid) || !is_valid_dicom_uid(identity.sop_instance_uid))
          throw HttpError(400, concat(name, ": SOP Class or Instance UID is not a valid UID (digits and dots)"));
        identities[i - start] = identity;
        const auto& accepted = DicomStorageNode::accepted_sop_classes();
        if (std::find(accepted.begin(), accepted.end(), identity.sop_class_uid) == accepted.end())
          throw HttpError(400, concat(name, ": SOP Class ", identity.sop_class_uid,
                                      " is not one this node classifies (CR, DX or Secondary Capture)"));
        pending[i - start] = queue_image(name, instances[i], false);
      } catch (const std::exception& e) {
        failures[i - start] = e.what();
      }
    }
    for (size_t k = 0; k < end - start; ++k) {
      nlohmann::json prediction;
      if (pending[k]) {
        try {
          prediction = answer(*pending[k], std::nullopt);
        } catch (const std::exception& e) {
          failures[k] = e.what();
        }
      }
      nlohmann::json item = nlohmann::json::object();
      if (is_valid_dicom_uid(identities[k].sop_class_uid) && is_valid_dicom_uid(identities[k].sop_instance_uid)) {
        item["00081150"] = dicom_json("UI", identities[k].sop_class_uid);
        item["00081155"] = dicom_json("UI", identities[k].sop_instance_uid);
      }
      item["00090010"] = dicom_json("LO", "VITPIPE");
      if (!failures[k].empty()) {
        item["00081197"] = dicom_json("US", 0xC000);  // Error: cannot understand
        item["00091002"] = dicom_json("UT", failures[k]);
        failed.push_back(item);
      } else {
        item["00091001"] = dicom_json("UT", prediction.dump());
        referenced.push_back(item);
      }
    }
  }
  nlohmann::json response = nlohmann::json::object();
  if (!referenced.empty()) response["00081199"] = {{"vr", "SQ"}, {"Value", referenced}};
  if (!failed.empty()) response["00081198"] = {{"vr", "SQ"}, {"Value", failed}};
  *status = failed.empty() ? 200 : referenced.empty() ? 409 : 202;
  return response;
}

}  // namespace vitpipe
