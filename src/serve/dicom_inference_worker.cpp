#include "serve/dicom_inference_worker.h"

// clang-format off
#include <dcmtk/config/osconfig.h>  // must come first
// clang-format on
#include <dcmtk/dcmdata/dcdeftag.h>
#include <dcmtk/dcmdata/dcfilefo.h>

#include <fstream>
#include <iterator>

#include "data/dicom_decoder.h"
#include "data/image.h"
#include "serve/dicom_uid.h"
#include "serve/secondary_capture.h"
#include "serve/structured_report.h"
#include "util/atomic_file.h"
#include "util/error.h"
#include "util/log.h"

namespace vitpipe {
namespace {

// The image's identifiers, read from its header (values over 4 KB, the pixels, are left on disk).
struct ImageIdentity {
  std::string sop_instance_uid, study_instance_uid;
};

ImageIdentity read_identity(const std::filesystem::path& file) {
  DcmFileFormat format;
  const OFCondition status = format.loadFile(file.c_str(), EXS_Unknown, EGL_noChange, 4096);
  VP_REQUIRE(status.good(), file.string(), ": cannot be read as DICOM (", status.text(), ")");
  ImageIdentity identity;
  OFString value;
  format.getDataset()->findAndGetOFString(DCM_SOPInstanceUID, value);
  identity.sop_instance_uid = value.c_str();
  value.clear();
  format.getDataset()->findAndGetOFString(DCM_StudyInstanceUID, value);
  identity.study_instance_uid = value.c_str();
  VP_REQUIRE(!identity.sop_instance_uid.empty() && !identity.study_instance_uid.empty(), file.string(),
             ": lacks SOPInstanceUID or StudyInstanceUID");
  return identity;
}

std::string read_bytes(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  VP_REQUIRE(in, "cannot open ", file.string());
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

DicomInferenceWorker::DicomInferenceWorker(ImageClassifier& classifier, InferenceBatcher& batcher,
                                           HeatmapRenderer& heatmaps, DicomSpool spool, DicomInferenceOptions options,
                                           std::function<void()> on_outbox)
    : classifier_(classifier),
      batcher_(batcher),
      heatmaps_(heatmaps),
      spool_(std::move(spool)),
      options_(std::move(options)),
      on_outbox_(std::move(on_outbox)) {
  std::filesystem::create_directories(results_dir());
  std::filesystem::permissions(results_dir(), std::filesystem::perms::owner_all);  // patient data, as the spool
}

DicomInferenceWorker::~DicomInferenceWorker() { stop(); }

void DicomInferenceWorker::start() {
  {
    std::lock_guard lock(mutex_);
    for (const auto& file : spool_.pending_received()) queue_.push_back(file);
    if (!queue_.empty()) info("dicom: ", queue_.size(), " received instance(s) left from the last run, running them");
  }
  thread_ = std::thread([this] { run(); });
}

void DicomInferenceWorker::enqueue(const std::filesystem::path& received_file) {
  {
    std::lock_guard lock(mutex_);
    queue_.push_back(received_file);
  }
  wake_.notify_one();
}

void DicomInferenceWorker::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_one();
  if (thread_.joinable()) thread_.join();
}

void DicomInferenceWorker::run() {
  for (;;) {
    std::filesystem::path file;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      file = queue_.front();
      queue_.pop_front();
    }
    if (!std::filesystem::exists(file)) continue;  // queued twice (at start and by the node): done already
    try {
      process(file);
    } catch (const std::exception& e) {
      // Acknowledged to the PACS but not something the model can read: kept with the reason, not retried.
      warn("dicom: ", file.filename().string(), ": ", e.what(), " (moved to dead-letter/)");
      try {
        spool_.move_to_dead_letter(file, e.what());
      } catch (const std::exception& move_error) {
        warn("dicom: cannot move ", file.string(), " to dead-letter/: ", move_error.what());
      }
    }
  }
}

void DicomInferenceWorker::process(const std::filesystem::path& file) {
  const std::string name = file.filename().string();
  const std::string bytes = read_bytes(file);
  // Before DCMTK reads it: what a sender nested too deep for its recursion must not crash the service (and again at
  // every start, the file waiting in received/).
  check_dicom_file_nesting(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), name);
  const ImageIdentity identity = read_identity(file);
  const DecodedImage image = decode_image_memory_keep_gray(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(),
                                                           name, classifier_.reading());
  std::vector<float> input(static_cast<size_t>(classifier_.input_floats()));
  classifier_.preprocess(image, name, input.data());
  const ImagePrediction prediction = batcher_.submit(std::move(input)).get();

  if (!options_.write_reports) {
    nlohmann::json line = prediction_json(identity.sop_instance_uid, prediction, classifier_.labels());
    line["study_instance_uid"] = identity.study_instance_uid;
    const std::filesystem::path result = results_dir() / (identity.sop_instance_uid + ".json");
    write_text_file_atomically(result, line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
    std::filesystem::permissions(result, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
    info("dicom: ", identity.sop_instance_uid, ": results/", identity.sop_instance_uid, ".json");
    spool_.remove(file);
    return;
  }
  const std::string& model = options_.model_identity;
  StructuredReportContent report;
  for (size_t l = 0; l < classifier_.labels().size(); ++l)
    report.findings.push_back({classifier_.labels()[l], prediction.probabilities[l]});
  report.algorithm_name = options_.algorithm_name;
  report.algorithm_version = options_.algorithm_version;
  report.sop_instance_uid = derived_dicom_uid(concat("vitpipe sr\n", model, "\n", identity.sop_instance_uid));
  report.series_instance_uid =
      derived_dicom_uid(concat("vitpipe sr series\n", model, "\n", identity.study_instance_uid));
  const std::filesystem::path sr_temporary = spool_.new_temporary_path();
  write_structured_report(file, report, sr_temporary);
  spool_.commit_to_outbox(sr_temporary, report.sop_instance_uid);
  if (options_.send_heatmaps) {
    const RenderedHeatmap map = heatmaps_.render(image, name, prediction, options_.heatmap_method);
    const std::string sc_uid = derived_dicom_uid(concat("vitpipe heatmap\n", model, "\n", identity.sop_instance_uid));
    const std::string sc_series =
        derived_dicom_uid(concat("vitpipe heatmap series\n", model, "\n", identity.study_instance_uid));
    const std::filesystem::path sc_temporary = spool_.new_temporary_path();
    write_heatmap_secondary_capture(
        file, map.overlay,
        concat("vitpipe heatmap: ", map.finding, " (", explain_method_name(options_.heatmap_method), ")"), sc_uid,
        sc_series, sc_temporary);
    spool_.commit_to_outbox(sc_temporary, sc_uid);
  }
  info("dicom: ", identity.sop_instance_uid, ": SR ", report.sop_instance_uid, " queued for the PACS");
  spool_.remove(file);
  if (on_outbox_) on_outbox_();
}

}  // namespace vitpipe
