// What the DICOM node received, run through the model on a thread of its own: received/<uid>.dcm is decoded,
// batched with the HTTP requests, and its findings become a Comprehensive SR in outbox/ (with --send-heatmaps also
// the overlay as a Secondary Capture) for the sender, or, with no PACS to send to, results/<uid>.json. Only then is
// the received file removed, so a crash at any point leaves it to be run again at the next start; the SR's UIDs are
// derived from the image's and the model's, so running it again makes the same instance.
#pragma once

#include <condition_variable>
#include <deque>
#include <filesystem>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "inference/image_classifier.h"
#include "serve/dicom_spool.h"
#include "serve/heatmap_renderer.h"
#include "serve/inference_batcher.h"

namespace vitpipe {

struct DicomInferenceOptions {
  bool write_reports = false;  // SR into outbox/ (a destination was given); else results/<uid>.json
  bool send_heatmaps = false;  // also the most probable label's overlay as a Secondary Capture
  ExplainMethod heatmap_method = ExplainMethod::grad_rollout;
  std::string algorithm_name;     // the SR's (111001, DCM, "Algorithm Name")
  std::string algorithm_version;  // (111003, DCM, "Algorithm Version")
  std::string model_identity;     // part of the derived UIDs: another model makes other instances
};

class DicomInferenceWorker {
 public:
  // `on_outbox` is called after files were committed to outbox/ (the sender's notify). All references must outlive
  // the worker.
  DicomInferenceWorker(ImageClassifier& classifier, InferenceBatcher& batcher, HeatmapRenderer& heatmaps,
                       DicomSpool spool, DicomInferenceOptions options, std::function<void()> on_outbox);
  ~DicomInferenceWorker();

  // Starts the thread; it begins with what received/ already holds (acknowledged before the last stop).
  void start();
  void enqueue(const std::filesystem::path& received_file);
  // Runs what is queued, then joins.
  void stop();
  std::filesystem::path results_dir() const { return spool_.root() / "results"; }

 private:
  void run();
  void process(const std::filesystem::path& received_file);

  ImageClassifier& classifier_;
  InferenceBatcher& batcher_;
  HeatmapRenderer& heatmaps_;
  DicomSpool spool_;
  DicomInferenceOptions options_;
  std::function<void()> on_outbox_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::filesystem::path> queue_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace vitpipe
