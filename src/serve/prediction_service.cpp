#include "serve/prediction_service.h"

#include <algorithm>
#include <cctype>
#include <future>

#include "data/dicom_decoder.h"
#include "data/image.h"
#include "data/png_encoder.h"
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

PredictionService::PredictionService(ImageClassifier& classifier, InferenceBatcher& batcher)
    : classifier_(classifier), batcher_(batcher), heatmaps_(classifier) {}

nlohmann::json PredictionService::predict_image(const std::string& name, std::string_view bytes,
                                                std::optional<ExplainMethod> heatmap) {
  DecodedImage image;
  std::vector<float> input(static_cast<size_t>(classifier_.input_floats()));
  try {
    image = decode_image_memory_keep_gray(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), name,
                                          classifier_.reading());
    classifier_.preprocess(image, name, input.data());
  } catch (const Error& e) {
    throw HttpError(400, e.what());
  }
  const ImagePrediction prediction = batcher_.submit(std::move(input)).get();
  nlohmann::json answer = prediction_json(name, prediction, classifier_.labels());
  if (heatmap) {
    const RenderedHeatmap map = heatmaps_.render(image, name, prediction, *heatmap);
    const std::vector<uint8_t> png = encode_png(map.overlay);
    answer["heatmap"] = {
        {"finding", map.finding},
        {"method", explain_method_name(*heatmap)},
        {"probability", map.probability},
        {"png_base64", base64(std::string_view(reinterpret_cast<const char*>(png.data()), png.size()))}};
  }
  return answer;
}

nlohmann::json PredictionService::predict_body(std::string_view content_type, std::string_view body,
                                               std::optional<ExplainMethod> heatmap) {
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
                                                 std::optional<ExplainMethod> heatmap) {
  if (images.empty()) throw HttpError(400, "multipart body: no parts (expected one image per part)");
  // Every image is decoded and queued before any answer is awaited, so a request's images share batches.
  std::vector<std::future<nlohmann::json>> answers;
  for (size_t i = 0; i < images.size(); ++i)
    answers.push_back(std::async(std::launch::async, [this, &names, &images, i, heatmap] {
      return predict_image(names[i], images[i], heatmap);
    }));
  nlohmann::json out = nlohmann::json::array();
  std::exception_ptr first_error;
  for (auto& a : answers) {
    try {
      out.push_back(a.get());
    } catch (...) {
      if (!first_error) first_error = std::current_exception();
    }
  }
  if (first_error) std::rethrow_exception(first_error);
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
  // Decoded and queued all at once, as predict_body's parts.
  std::vector<DicomFileIdentity> identities(instances.size());
  std::vector<std::future<nlohmann::json>> answers(instances.size());
  std::vector<std::string> failures(instances.size());
  for (size_t i = 0; i < instances.size(); ++i) {
    const std::string name = concat("instance ", i + 1);
    try {
      identities[i] =
          read_dicom_file_identity(reinterpret_cast<const uint8_t*>(instances[i].data()), instances[i].size(), name);
      answers[i] =
          std::async(std::launch::async, [this, &instances, i, name] { return predict_image(name, instances[i]); });
    } catch (const Error& e) {
      failures[i] = e.what();
    }
  }
  nlohmann::json referenced = nlohmann::json::array(), failed = nlohmann::json::array();
  for (size_t i = 0; i < instances.size(); ++i) {
    nlohmann::json prediction;
    if (failures[i].empty()) {
      try {
        prediction = answers[i].get();
      } catch (const std::exception& e) {
        failures[i] = e.what();
      }
    }
    nlohmann::json item = nlohmann::json::object();
    if (!identities[i].sop_class_uid.empty()) {
      item["00081150"] = dicom_json("UI", identities[i].sop_class_uid);
      item["00081155"] = dicom_json("UI", identities[i].sop_instance_uid);
    }
    if (!failures[i].empty()) {
      item["00081197"] = dicom_json("US", 0xC000);  // Error: cannot understand
      item["00090010"] = dicom_json("LO", "VITPIPE");
      item["00091002"] = dicom_json("UT", failures[i]);
      failed.push_back(item);
      continue;
    }
    item["00090010"] = dicom_json("LO", "VITPIPE");
    item["00091001"] = dicom_json("UT", prediction.dump());
    referenced.push_back(item);
  }
  nlohmann::json response = nlohmann::json::object();
  if (!referenced.empty()) response["00081199"] = {{"vr", "SQ"}, {"Value", referenced}};
  if (!failed.empty()) response["00081198"] = {{"vr", "SQ"}, {"Value", failed}};
  *status = failed.empty() ? 200 : referenced.empty() ? 409 : 202;
  return response;
}

}  // namespace vitpipe
