// `vitpipe serve --model M`: the model behind HTTP (predict, DICOMweb STOW-RS, model info, health, metrics) and,
// with --dicom-port, a DICOM node a PACS sends studies to (serve/). SIGTERM or SIGINT: the requests in flight are
// answered, then it exits 0.
#include <pthread.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <thread>

#include "cli/commands.h"
#include "cli/data_flags.h"
#include "data/source_fingerprint.h"
#include "inference/image_classifier.h"
#include "serve/algorithm_name.h"
#include "serve/card_summary.h"
#include "serve/dicom_callers.h"
#include "serve/dicom_identifiers.h"
#include "serve/dicom_inference_worker.h"
#include "serve/dicom_result_sender.h"
#include "serve/dicom_storage_node.h"
#include "serve/heatmap_renderer.h"
#include "serve/http_service.h"
#include "serve/inference_batcher.h"
#include "serve/prediction_service.h"
#include "serve/serve_metrics.h"
#include "serve/served_thresholds.h"
#include "util/log.h"
#include "util/threads.h"

namespace vitpipe::cli {
namespace {

struct ServeOptions {
  std::string model;
  std::string revision = "main";
  std::string labels;
  int64_t image_size = 0;
  int threads = 0;
  ImageReadFlags read;
  std::string host = "127.0.0.1";
  int port = 8080;
  int64_t max_batch = 16;
  double max_delay_ms = 5;
  int64_t max_queue = 64;
  std::string max_body = "64M";
  std::string decode_memory = "1G";
  std::string dead_letter_max = "1G";
  int http_threads = 0;
  int max_connections = 1024;
  int max_connections_per_address = 128;
  int max_requests_per_address = 0;
  double header_timeout = 10;
  std::string token_file;
  std::string thresholds;  // operating points for the try-it page (default: found by served_thresholds.h)
  int dicom_port = 0;
  std::string dicom_host;
  std::string allowed_callers;
  std::string ae_title = "VITPIPE";
  std::string spool;
  std::string send_results_to;
  bool send_heatmaps = false;
  int max_associations = 8;
};

// "1048576", "512K", "64M", "1G" (powers of 1024).
size_t parse_byte_size(const std::string& text, const char* flag) {
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  const std::string suffix = text.substr(digits);
  VP_REQUIRE(digits > 0 && digits <= 12 && (suffix.empty() || suffix == "K" || suffix == "M" || suffix == "G"), flag,
             ": expected a byte count such as 1048576, 512K, 64M or 1G, got \"", text, "\"");
  const size_t shift = suffix == "K" ? 10 : suffix == "M" ? 20 : suffix == "G" ? 30 : 0;
  return static_cast<size_t>(std::stoull(text.substr(0, digits))) << shift;
}

// A Hub id as given; a local directory by its last component (its absolute path stays on this machine).
std::string model_name(const std::string& reference) {
  if (!std::filesystem::exists(reference)) return reference;
  std::filesystem::path path = std::filesystem::absolute(reference).lexically_normal();
  if (!path.has_filename()) path = path.parent_path();
  return path.filename().string();
}

nlohmann::json model_info(const ImageClassifier& classifier, const std::string& reference,
                          const std::optional<ServedThresholds>& thresholds) {
  const LoadedModel& m = classifier.model();
  return {{"labels", m.config.labels},
          // For the try-it page (GET /): what the model card says the model is, and where findings are flagged.
          {"card", card_summary_of(m.directory)},
          {"operating_points", served_thresholds_json(thresholds, m.config.labels)},
          {"family", m.config.model_type},
          {"problem_type", problem_type_name(m.config.problem_type)},
          {"image_size", m.config.input_size()},
          {"preprocessing", nlohmann::json::parse(preprocessor_config_text(m.preprocessor))},
          {"image_reading",
           {{"intensity", intensity_policy_name(classifier.reading().intensity)},
            {"dicom_window", dicom_window_name(classifier.reading().dicom_window)}}},
          // The model's name and the weights' hash, not where they lie on this machine (no path is disclosed).
          {"weights",
           {{"name", model_name(reference)},
            {"file", m.weights_file},
            {"sha256", sha256_file_hex(m.directory / m.weights_file)}}},
          {"max_batch", classifier.max_batch()},
          {"vitpipe_version", "0.1.0"}};
}

// What the derived SR UIDs depend on besides the image: the weights file, its size and modification time (a model
// trained again makes new instances, the same model the same ones).
std::string model_identity(const LoadedModel& model) {
  const std::filesystem::path weights = model.directory / model.weights_file;
  std::error_code error;
  const auto size = std::filesystem::file_size(weights, error);
  const auto time = std::filesystem::last_write_time(weights, error);
  return concat(std::filesystem::absolute(weights).string(), "\n", error ? 0 : size, "\n",
                error ? 0 : time.time_since_epoch().count());
}

void run_serve(const ServeOptions& o) {
  // SIGTERM and SIGINT are taken by one thread (sigwait), so every other thread, started below, keeps them blocked.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  VP_REQUIRE(o.dicom_port >= 0 && o.dicom_port <= 65535, "--dicom-port: expected 1..65535, got ", o.dicom_port);
  VP_REQUIRE(o.dicom_port > 0 || (o.spool.empty() && o.send_results_to.empty() && !o.send_heatmaps),
             "--spool, --send-results-to and --send-heatmaps belong to the DICOM node: give --dicom-port too");
  VP_REQUIRE(o.dicom_port == 0 || !o.spool.empty(),
             "--dicom-port: give --spool DIR too (where received instances "
             "are kept until their results are sent)");
  VP_REQUIRE(!o.send_heatmaps || !o.send_results_to.empty(), "--send-heatmaps: give --send-results-to too");
  VP_REQUIRE(o.max_associations >= 1 && o.max_associations <= 256, "--max-associations: expected 1..256, got ",
             o.max_associations);
  std::optional<DicomDestination> destination;
  if (!o.send_results_to.empty()) destination = parse_dicom_destination(o.send_results_to);
  VP_REQUIRE(o.dicom_port == 0 || is_valid_ae_title(o.ae_title), "--ae-title: \"", o.ae_title,
             "\" is not an AE title (1 to 16 characters, no backslash or control characters)");
  VP_REQUIRE(o.max_delay_ms >= 0 && o.max_delay_ms <= 10000, "--max-delay-ms: expected 0..10000, got ", o.max_delay_ms);
  configure_threads(o.threads);
  ImageClassifier classifier = load_image_classifier(o.model, o.revision, o.image_size, o.labels, o.read, o.max_batch);
  const std::optional<ServedThresholds> thresholds = find_served_thresholds(classifier.model().directory, o.thresholds);

  HttpServiceOptions http;
  http.host = o.host;
  http.port = o.port;
  http.max_queue = o.max_queue;
  http.max_body = parse_byte_size(o.max_body, "--max-body");
  http.threads = o.http_threads;
  VP_REQUIRE(o.header_timeout >= 0.1 && o.header_timeout <= 3600, "--header-timeout: expected 0.1..3600 seconds, got ",
             o.header_timeout);
  http.connections.max_connections = o.max_connections;
  http.connections.max_connections_per_address = o.max_connections_per_address;
  http.connections.max_requests_per_address = o.max_requests_per_address;
  http.connections.header_timeout = std::chrono::milliseconds(static_cast<int64_t>(o.header_timeout * 1000));
  if (!o.token_file.empty()) http.token.emplace(o.token_file);

  ServeMetrics metrics;
  InferenceBatcher batcher(
      classifier, {o.max_batch, std::chrono::microseconds(static_cast<int64_t>(o.max_delay_ms * 1000))}, &metrics);
  PredictionService predictions(classifier, batcher,
                                static_cast<int64_t>(parse_byte_size(o.decode_memory, "--decode-memory")));
  HttpService service(predictions, metrics, model_info(classifier, o.model, thresholds), std::move(http));
  service.bind();

  // The DICOM side: node -> worker (model, SR into the outbox) -> sender.
  std::optional<DicomSpool> spool;
  std::unique_ptr<DicomResultSender> sender;
  std::unique_ptr<DicomInferenceWorker> worker;
  std::unique_ptr<DicomStorageNode> node;
  HeatmapRenderer heatmaps(classifier);
  if (o.dicom_port > 0) {
    spool.emplace(o.spool, parse_byte_size(o.dead_letter_max, "--dead-letter-max"));
    spool->remove_abandoned_temporaries();
    if (destination) {
      DicomResultSenderOptions send{.spool = *spool, .destination = *destination, .calling_ae_title = o.ae_title};
      sender = std::make_unique<DicomResultSender>(send);
    }
    DicomInferenceOptions inference;
    inference.write_reports = destination.has_value();
    inference.send_heatmaps = o.send_heatmaps;
    inference.algorithm_name = algorithm_name(o.model, classifier.model().directory,
                                              classifier.model().directory / classifier.model().weights_file);
    inference.algorithm_version = "vitpipe 0.1.0";
    inference.model_identity = model_identity(classifier.model());
    DicomResultSender* notify = sender.get();
    worker = std::make_unique<DicomInferenceWorker>(classifier, batcher, heatmaps, *spool, inference, [notify] {
      if (notify) notify->notify();
    });
    DicomStorageNodeOptions listen{*spool};
    listen.host = o.dicom_host.empty() ? o.host : o.dicom_host;
    listen.port = static_cast<uint16_t>(o.dicom_port);
    // By default only the PACS results go to may send: anyone else could file reports under any PatientID.
    if (!o.allowed_callers.empty() && o.allowed_callers != "any")
      listen.allowed_callers = parse_dicom_callers(o.allowed_callers, "--allowed-callers");
    else if (o.allowed_callers.empty() && destination)
      listen.allowed_callers =
          parse_dicom_callers(concat(destination->ae_title, "@", destination->host), "--send-results-to");
    else
      warn("DICOM node: any caller that reaches ", listen.host, ":", o.dicom_port,
           " may associate (give --allowed-callers AE@HOST,...)");
    listen.ae_title = o.ae_title;
    listen.max_associations = static_cast<uint16_t>(o.max_associations);
    node = std::make_unique<DicomStorageNode>(listen);
  }

  std::thread http_thread([&] { service.serve(); });
  // Whatever fails from here on (a DICOM port in use, say) stops the HTTP side before the error is reported: a
  // joinable thread left behind would abort the process instead of the one-line error and exit 1.
  struct StopHttpOnExit {
    HttpService& service;
    std::thread& thread;
    ~StopHttpOnExit() {
      if (!thread.joinable()) return;
      service.stop();
      thread.join();
    }
  } stop_http_on_exit{service, http_thread};
  // Warm-up: one full batch, so the first requests do not pay for oneDNN's kernel creation.
  const std::vector<float> zeros(static_cast<size_t>(classifier.input_floats() * o.max_batch), 0.0f);
  {
    std::vector<std::future<ImagePrediction>> warm;
    for (int64_t i = 0; i < o.max_batch; ++i)
      warm.push_back(batcher.submit(std::vector<float>(zeros.begin(), zeros.begin() + classifier.input_floats())));
    for (auto& w : warm) w.get();
  }
  if (sender) sender->start();  // first what the outbox kept from the last run
  if (worker) worker->start();  // first what received/ kept from the last run
  if (node) {
    DicomInferenceWorker* queue = worker.get();
    node->start([queue](const std::filesystem::path& file, const std::string&) { queue->enqueue(file); });
    std::fprintf(stderr, "DICOM node %s listening on %s port %d%s\n", o.ae_title.c_str(),
                 (o.dicom_host.empty() ? o.host : o.dicom_host).c_str(), o.dicom_port,
                 destination ? concat(", results to ", to_string(*destination)).c_str() : "");
  }
  service.set_ready(true);
  std::fprintf(stderr, "serving %s on http://%s:%d (max batch %lld, ready)\n", o.model.c_str(), o.host.c_str(),
               service.port(), static_cast<long long>(o.max_batch));

  int signal_number = 0;
  sigwait(&stop_signals, &signal_number);
  std::fprintf(stderr, "%s: finishing the requests in flight\n", signal_number == SIGTERM ? "SIGTERM" : "SIGINT");
  service.set_ready(false);
  if (node) node->stop();  // no new instances; the ones acknowledged are in received/
  service.stop();
  http_thread.join();
  if (worker) worker->stop();  // runs what was received
  if (sender) sender->stop();  // what is unsent stays in the outbox for the next start
  batcher.stop();
  std::fprintf(stderr, "stopped\n");
}

}  // namespace

void add_serve_command(CLI::App& app) {
  auto o = std::make_shared<ServeOptions>();
  auto* cmd = app.add_subcommand(
      "serve",
      "Serve a model over HTTP (a page to try it at /, predict, DICOMweb STOW-RS) and as a DICOM node a PACS sends "
      "images to");
  cmd->add_option("--model", o->model, "Model directory, Hugging Face repo id or peft adapter")->required();
  cmd->add_option("--revision", o->revision, "Hub revision (branch, tag or commit) of a repo id");
  cmd->add_option("--image-size", o->image_size, "Run at another resolution (position embeddings resized bicubically)");
  cmd->add_option("--labels", o->labels,
                  "NAME,NAME,...: the labels of a peft adapter's classifier when no config.json names them");
  cmd->add_option("--threads", o->threads, "CPU threads for the model (0 = all cores)");
  add_image_read_flags(cmd, &o->read);
  cmd->add_option("--host", o->host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", o->port, "HTTP port (0: any free port; the ready line on stderr says which)")
      ->capture_default_str();
  cmd->add_option("--max-batch", o->max_batch, "Images per forward pass at most")->capture_default_str();
  cmd->add_option("--max-delay-ms", o->max_delay_ms, "How long the first queued image waits for others to batch with")
      ->capture_default_str();
  cmd->add_option("--max-queue", o->max_queue, "Prediction requests admitted at once; more are answered 503")
      ->capture_default_str();
  cmd->add_option("--max-body", o->max_body, "Largest request body (bytes, or with K, M, G); larger is answered 413")
      ->capture_default_str();
  cmd->add_option("--decode-memory", o->decode_memory,
                  "Memory for decoding images, shared by the requests at once (bytes, or with K, M, G); an image "
                  "needing more is answered 413, one that must wait 503")
      ->capture_default_str();
  cmd->add_option("--http-threads", o->http_threads, "Requests answered at once (0: max-queue + 8)");
  cmd->add_option("--max-connections", o->max_connections,
                  "Open HTTP connections at most (idle ones cost no thread); more get a fast 503")
      ->capture_default_str();
  cmd->add_option("--max-connections-per-address", o->max_connections_per_address,
                  "Open HTTP connections from one client address at most (behind a proxy: its address)")
      ->capture_default_str();
  cmd->add_option("--max-requests-per-address", o->max_requests_per_address,
                  "Requests from one client address answered at once; more wait for one of its own to end, so slow "
                  "senders from one address cannot hold every thread (0: half of --http-threads; behind a proxy: "
                  "--http-threads)")
      ->capture_default_str();
  cmd->add_option("--header-timeout", o->header_timeout,
                  "Seconds a request's line and headers may take in all; slower is answered 408 and closed")
      ->capture_default_str();
  cmd->add_option("--token-file", o->token_file,
                  "Require 'Authorization: Bearer TOKEN' (the file's first line) "
                  "on every route but /healthz");
  cmd->add_option("--thresholds", o->thresholds,
                  "Operating points the page at / flags findings at (a run's thresholds.json; default: the model "
                  "directory's, else that of the run its model card names)");
  cmd->add_option("--dicom-port", o->dicom_port,
                  "Also listen as a DICOM node (C-ECHO, C-STORE of CR, DX and "
                  "Secondary Capture images) on this port");
  cmd->add_option("--dicom-host", o->dicom_host, "Address the DICOM node listens on (default: --host)");
  cmd->add_option("--allowed-callers", o->allowed_callers,
                  "AE@HOST,AE,...: who may associate with the DICOM node (default: the PACS of --send-results-to; "
                  "'any' for anyone)");
  cmd->add_option("--ae-title", o->ae_title,
                  "The node's AE title: associations calling another are rejected; also "
                  "the calling AE title when sending results")
      ->capture_default_str();
  cmd->add_option("--spool", o->spool,
                  "Where received instances and unsent results are kept (fsynced before a "
                  "C-STORE is acknowledged; what is left is resumed at the next start)");
  cmd->add_option("--send-results-to", o->send_results_to,
                  "AE@HOST:PORT: send each image's findings back as a DICOM Comprehensive SR by C-STORE (without it, "
                  "SPOOL/results/UID.json)");
  cmd->add_flag("--send-heatmaps", o->send_heatmaps,
                "Also send the most probable label's heatmap as a Secondary "
                "Capture image");
  cmd->add_option("--dead-letter-max", o->dead_letter_max,
                  "Size limit of SPOOL/dead-letter/ (bytes, or with K, M, G): past it the oldest entries are "
                  "dropped, each logged")
      ->capture_default_str();
  cmd->add_option("--max-associations", o->max_associations, "Concurrent DICOM associations at most")
      ->capture_default_str();
  cmd->callback([o] { run_serve(*o); });
}

}  // namespace vitpipe::cli
