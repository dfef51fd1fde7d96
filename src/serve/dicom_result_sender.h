// Sends the spool's outbox (the SR documents `vitpipe serve` writes) to a PACS by C-STORE, on a thread of its own.
//
// Outcomes, per file:
//   sent       status 0x0000, or a warning (0xB000 coercion, 0xB006 elements discarded, 0xB007 dataset does not
//              match the SOP class, 0x0001, 0x0107, 0x0116): the PACS kept the object, so the file is removed.
//   transient  connection refused or timed out, association rejected-transient: the PACS is down or busy. Retried
//              with exponential back-off (initial_backoff doubling up to max_backoff) forever: a PACS may be down
//              overnight. The rest of the outbox waits behind it, in order.
//   ambiguous  the association ended without a C-STORE response (A-ABORT, connection lost, DIMSE timeout): a PACS
//              that refuses often aborts rather than answering. Retried with back-off up to max_attempts times,
//              then dead-lettered. The count is kept in memory: a restart gives a file max_attempts more.
//   permanent  association rejected-permanent, presentation context not accepted, a failure status (0xA7xx,
//              0xA9xx, 0xCxxx, 0x01xx, 0x02xx), or a file that cannot be read: moved to dead-letter/ with a reason.
// Files are sent oldest first, so what was left unsent at the last run goes first.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "serve/dicom_spool.h"

namespace vitpipe {

struct DicomDestination {
  std::string ae_title;
  std::string host;
  uint16_t port = 0;
};

// `--send-results-to AE@HOST:PORT` (HOST may be an IPv6 address in brackets). Throws vitpipe::Error naming the
// option and the expected form.
DicomDestination parse_dicom_destination(const std::string& text);
std::string to_string(const DicomDestination& destination);  // "AE@HOST:PORT"

struct DicomResultSenderOptions {
  DicomSpool spool;
  DicomDestination destination;
  std::string calling_ae_title = "VITPIPE";
  std::chrono::milliseconds initial_backoff{1000};
  std::chrono::milliseconds max_backoff{60000};
  int max_attempts = 5;  // for ambiguous failures
  // TCP connect timeout. DCMTK keeps it process-wide (dcmConnectionTimeout): start() sets it.
  std::chrono::seconds connect_timeout{10};
  std::chrono::seconds acse_timeout{30};
  std::chrono::seconds dimse_timeout{60};
  // How often an idle sender lists the outbox without notify() (files put there by hand).
  std::chrono::milliseconds rescan_interval{10000};
};

class DicomResultSender {
 public:
  explicit DicomResultSender(DicomResultSenderOptions options);
  ~DicomResultSender();  // stop()
  DicomResultSender(const DicomResultSender&) = delete;
  DicomResultSender& operator=(const DicomResultSender&) = delete;

  // Starts the sending thread; it begins with what the outbox already holds. Throws vitpipe::Error on a bad AE
  // title, an incomplete destination, back-offs or attempts out of range, or if already started.
  void start();
  // Wakes an idle sender: call after committing a file to the outbox. Does not cut a back-off short.
  void notify();
  // Stops at the next file boundary or back-off wait (a transfer under way ends first, bounded by the timeouts)
  // and joins. Unsent files stay in the outbox for the next start. Idempotent.
  void stop();

 private:
  struct Worker;
  DicomResultSenderOptions options_;
  std::unique_ptr<Worker> worker_;
};

}  // namespace vitpipe
