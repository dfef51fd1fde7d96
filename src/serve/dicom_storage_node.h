// `vitpipe serve`'s DICOM node: a Storage SCP (DIMSE over TCP) a PACS sends studies to.
//
// Accepts C-ECHO and C-STORE of CR, DX (for presentation and for processing) and Secondary Capture images in the
// transfer syntaxes vitpipe decodes (data/dicom_decoder.h), from associations calling our AE title; any other called
// AE title is rejected (permanent, "called AE title not recognized"). Each instance is written to the spool's
// received/ directory and fsynced before the success status goes back, so nothing acknowledged is lost if the
// process dies; one that cannot be written gets 0xA700 (out of resources) and the node keeps serving. A dataset
// DCMTK cannot parse ends its association (A-ABORT), not the node. Associations run concurrently, each on a thread
// of its own (a DcmThreadSCP), at most max_associations at once; more are rejected as transient. Connections are
// accepted by a gate (serve/dicom_connection_gate.h) on the address asked, and callers outside allowed_callers are
// rejected (permanent, "calling AE title not recognized").
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "serve/dicom_callers.h"
#include "serve/dicom_spool.h"

namespace vitpipe {

struct DicomStorageNodeOptions {
  DicomSpool spool;
  std::string host = "127.0.0.1";  // the address listened on ("0.0.0.0" or "::" for all)
  uint16_t port = 104;
  std::string ae_title = "VITPIPE";
  uint16_t max_associations = 8;
  // Who may associate (calling AE title, and address when given); empty: anyone who reaches the port.
  std::vector<DicomCaller> allowed_callers{};
  // From connect to the whole A-ASSOCIATE-RQ (a connection waits for it without holding a thread), and for the
  // association's negotiation and release messages.
  std::chrono::seconds acse_timeout{10};
  std::chrono::seconds dimse_timeout{60};  // an idle association is aborted after this; stop() may wait as long
};

class DicomStorageNode {
 public:
  // Called on the association's worker thread once the instance is in received/, before the success status goes
  // back (the caller queues the model run). Must be thread-safe and quick (the sender waits for its response); an
  // exception it throws is logged and does not reach the sender: the file stays in received/ for the next start.
  using ReceivedCallback =
      std::function<void(const std::filesystem::path& received_file, const std::string& sop_instance_uid)>;

  explicit DicomStorageNode(DicomStorageNodeOptions options);
  ~DicomStorageNode();  // stop()
  DicomStorageNode(const DicomStorageNode&) = delete;
  DicomStorageNode& operator=(const DicomStorageNode&) = delete;

  // Listens on options.host:port on a thread of its own; returns once the port accepts associations.
  // Throws vitpipe::Error if the AE title is invalid, the node already runs, or the port cannot be bound.
  void start(ReceivedCallback on_received);
  // Stops accepting associations, waits for the running ones to end (each is bounded by the DIMSE timeout) and
  // joins the listening thread. Idempotent.
  void stop();
  bool running() const;

  // What the node accepts: SOP classes (besides Verification) and transfer syntaxes, by UID.
  static const std::vector<std::string>& accepted_sop_classes();
  static const std::vector<std::string>& accepted_transfer_syntaxes();

 private:
  struct Listener;
  DicomStorageNodeOptions options_;
  std::unique_ptr<Listener> listener_;
};

}  // namespace vitpipe
