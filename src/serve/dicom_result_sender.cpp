#include "serve/dicom_result_sender.h"

// clang-format off
#include <dcmtk/config/osconfig.h>  // must come first
// clang-format on
#include <dcmtk/dcmdata/dcdeftag.h>
#include <dcmtk/dcmdata/dcfilefo.h>
#include <dcmtk/dcmdata/dcuid.h>
#include <dcmtk/dcmdata/dcxfer.h>
#include <dcmtk/dcmnet/assoc.h>
#include <dcmtk/dcmnet/dimse.h>
#include <dcmtk/dcmnet/diutil.h>
#include <dcmtk/dcmnet/dul.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "serve/dicom_identifiers.h"
#include "util/error.h"
#include "util/log.h"

namespace vitpipe {

namespace fs = std::filesystem;

DicomDestination parse_dicom_destination(const std::string& text) {
  auto refuse = [&](const std::string& why) {
    fail("--send-results-to '", text, "': ", why, "; expected AE@HOST:PORT, e.g. PACS@pacs.example.org:104");
  };
  size_t at = text.rfind('@');  // a host name has no '@'
  if (at == std::string::npos) refuse("no '@' between the AE title and the host");
  DicomDestination destination;
  destination.ae_title = text.substr(0, at);
  if (!is_valid_ae_title(destination.ae_title)) {
    refuse("the AE title must be 1 to 16 characters without backslash or control characters");
  }
  size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon < at) refuse("no ':' before the port");
  std::string host = text.substr(at + 1, colon - at - 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (host.empty()) refuse("the host is empty");
  destination.host = host;
  std::string port = text.substr(colon + 1);
  unsigned value = 0;
  auto [end, error] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (port.empty() || error != std::errc() || end != port.data() + port.size() || value == 0 || value > 65535) {
    refuse("the port must be a number from 1 to 65535");
  }
  destination.port = static_cast<uint16_t>(value);
  return destination;
}

std::string to_string(const DicomDestination& destination) {
  bool ipv6 = destination.host.find(':') != std::string::npos;
  return concat(destination.ae_title, "@", ipv6 ? "[" : "", destination.host, ipv6 ? "]" : "", ":", destination.port);
}

namespace {

enum class Outcome { sent, transient, ambiguous, permanent };

struct Attempt {
  Outcome outcome;
  std::string detail;  // why it failed, or the warning status it was sent with
};

std::string status_text(Uint16 status) {
  char hex[8];
  std::snprintf(hex, sizeof(hex), "0x%04X", static_cast<unsigned>(status));
  return concat(hex, " (", DU_cstoreStatusString(status), ")");
}

// One association per file: a PACS's answer to one file says nothing certain about the next.
class StoreAssociation {
 public:
  StoreAssociation(T_ASC_Network* network, const DicomResultSenderOptions& options)
      : network_(network), options_(options) {}
  ~StoreAssociation() {
    if (association_ != nullptr) {
      ASC_dropAssociation(association_);
      ASC_destroyAssociation(&association_);  // frees the parameters too
    } else if (parameters_ != nullptr) {
      ASC_destroyAssociationParameters(&parameters_);
    }
  }
  StoreAssociation(const StoreAssociation&) = delete;
  StoreAssociation& operator=(const StoreAssociation&) = delete;

  Attempt send(const fs::path& file) {
    DcmFileFormat dicom;
    OFCondition loaded = dicom.loadFile(file.c_str());
    if (loaded.bad()) return {Outcome::permanent, concat("cannot read the file: ", loaded.text())};
    DcmDataset* dataset = dicom.getDataset();
    OFString sop_class, sop_instance;
    dataset->findAndGetOFString(DCM_SOPClassUID, sop_class);
    dataset->findAndGetOFString(DCM_SOPInstanceUID, sop_instance);
    if (!is_valid_dicom_uid(sop_class.c_str()) || !is_valid_dicom_uid(sop_instance.c_str())) {
      return {Outcome::permanent, "the file lacks a valid SOP Class UID or SOP Instance UID"};
    }

    // Propose the file's own transfer syntax (no conversion needed) and the two every PACS takes.
    std::vector<const char*> syntaxes;
    const char* own_syntax = DcmXfer(dataset->getOriginalXfer()).getXferID();
    if (own_syntax != nullptr && *own_syntax != '\0') syntaxes.push_back(own_syntax);
    for (const char* uid : {UID_LittleEndianExplicitTransferSyntax, UID_LittleEndianImplicitTransferSyntax}) {
      if (std::none_of(syntaxes.begin(), syntaxes.end(), [&](const char* s) { return std::strcmp(s, uid) == 0; })) {
        syntaxes.push_back(uid);
      }
    }
    const DicomDestination& to = options_.destination;
    std::string peer_address = concat(to.host, ":", to.port);
    char own_host[256] = "localhost";
    ::gethostname(own_host, sizeof(own_host) - 1);
    const T_ASC_PresentationContextID context_id = 1;
    OFCondition cond = ASC_createAssociationParameters(&parameters_, ASC_DEFAULTMAXPDU);
    if (cond.good())
      cond = ASC_setAPTitles(parameters_, options_.calling_ae_title.c_str(), to.ae_title.c_str(), nullptr);
    if (cond.good()) cond = ASC_setPresentationAddresses(parameters_, own_host, peer_address.c_str());
    if (cond.good()) {
      cond = ASC_addPresentationContext(parameters_, context_id, sop_class.c_str(), syntaxes.data(),
                                        static_cast<int>(syntaxes.size()));
    }
    if (cond.bad()) return {Outcome::transient, concat("cannot prepare the association: ", cond.text())};

    cond = ASC_requestAssociation(network_, parameters_, &association_);
    if (cond == DUL_ASSOCIATIONREJECTED) {
      T_ASC_RejectParameters rejection;
      ASC_getRejectParameters(parameters_, &rejection);
      OFString why;
      ASC_printRejectParameters(why, &rejection);
      bool permanent = rejection.result == ASC_RESULT_REJECTEDPERMANENT;
      return {permanent ? Outcome::permanent : Outcome::transient,
              concat("association rejected (", permanent ? "permanent" : "transient", "): ", one_line(why.c_str()))};
    }
    if (cond.bad()) return {Outcome::transient, concat("cannot connect: ", one_line(cond.text()))};

    T_ASC_PresentationContextID accepted_id = ASC_findAcceptedPresentationContextID(association_, sop_class.c_str());
    T_ASC_PresentationContext accepted;
    if (accepted_id == 0 || ASC_findAcceptedPresentationContext(parameters_, accepted_id, &accepted).bad()) {
      release();
      return {Outcome::permanent,
              concat("the PACS accepted no presentation context for SOP class ", sop_class.c_str())};
    }
    E_TransferSyntax accepted_syntax = DcmXfer(accepted.acceptedTransferSyntax).getXfer();
    if (!dataset->canWriteXfer(accepted_syntax, dataset->getOriginalXfer())) {
      release();
      return {Outcome::permanent, concat("the PACS accepted transfer syntax ", accepted.acceptedTransferSyntax,
                                         ", which this file cannot be converted to")};
    }

    T_DIMSE_C_StoreRQ request;
    std::memset(&request, 0, sizeof(request));
    request.MessageID = association_->nextMsgID++;
    OFStandard::strlcpy(request.AffectedSOPClassUID, sop_class.c_str(), sizeof(request.AffectedSOPClassUID));
    OFStandard::strlcpy(request.AffectedSOPInstanceUID, sop_instance.c_str(), sizeof(request.AffectedSOPInstanceUID));
    request.DataSetType = DIMSE_DATASET_PRESENT;
    request.Priority = DIMSE_PRIORITY_MEDIUM;
    T_DIMSE_C_StoreRSP response;
    std::memset(&response, 0, sizeof(response));
    DcmDataset* status_detail = nullptr;
    cond = DIMSE_storeUser(association_, accepted_id, &request, nullptr, dataset, nullptr, nullptr, DIMSE_NONBLOCKING,
                           static_cast<int>(options_.dimse_timeout.count()), &response, &status_detail);
    delete status_detail;
    if (cond.bad()) {
      ASC_abortAssociation(association_);
      if (cond == DUL_PEERABORTEDASSOCIATION) return {Outcome::ambiguous, "the PACS aborted the association (A-ABORT)"};
      return {Outcome::ambiguous, concat("no C-STORE response: ", one_line(cond.text()))};
    }
    release();
    Uint16 status = response.DimseStatus;
    if (DICOM_SUCCESS_STATUS(status)) return {Outcome::sent, ""};
    if (DICOM_WARNING_STATUS(status)) return {Outcome::sent, concat("warning ", status_text(status))};
    return {Outcome::permanent, concat("the PACS answered C-STORE with ", status_text(status))};
  }

 private:
  static std::string one_line(std::string text) {
    std::replace(text.begin(), text.end(), '\n', ' ');
    return text;
  }
  void release() {
    if (ASC_releaseAssociation(association_).bad()) ASC_abortAssociation(association_);
  }

  T_ASC_Network* network_;
  const DicomResultSenderOptions& options_;
  T_ASC_Parameters* parameters_ = nullptr;
  T_ASC_Association* association_ = nullptr;
};

}  // namespace

struct DicomResultSender::Worker {
  explicit Worker(const DicomResultSenderOptions& sender_options) : options(sender_options) {}

  // Waits `duration` (or until stop(), or notify() when `wake_on_notify`); true if stopping.
  bool wait(std::chrono::milliseconds duration, bool wake_on_notify) {
    std::unique_lock lock(mutex);
    wake.wait_for(lock, duration, [&] { return stopping || (wake_on_notify && notified); });
    return stopping;
  }
  bool stop_requested() {
    std::lock_guard lock(mutex);
    return stopping;
  }

  void run() {
    T_ASC_Network* network = nullptr;
    OFCondition cond =
        ASC_initializeNetwork(NET_REQUESTOR, 0, static_cast<int>(options.acse_timeout.count()), &network);
    if (cond.bad()) {
      warn("DICOM sender: cannot initialise the network, results stay in ", options.spool.outbox_dir().string(), ": ",
           cond.text());
      return;
    }
    std::chrono::milliseconds backoff = options.initial_backoff;
    while (!stop_requested()) {
      {
        std::lock_guard lock(mutex);
        notified = false;
      }
      bool retry_later = false;
      try {
        for (const fs::path& file : options.spool.pending_outbox()) {
          if (stop_requested()) break;
          if (!handle(network, file)) {
            retry_later = true;
            break;
          }
          backoff = options.initial_backoff;  // the PACS answered
        }
      } catch (const std::exception& error) {
        warn("DICOM sender: ", error.what());
        retry_later = true;
      }
      if (retry_later) {
        if (wait(backoff, false)) break;
        backoff = std::min(backoff * 2, options.max_backoff);
      } else if (wait(options.rescan_interval, true)) {
        break;
      }
    }
    ASC_dropNetwork(&network);
  }

  // Sends one file and files it by outcome; false if it stays in the outbox to be retried after a back-off.
  bool handle(T_ASC_Network* network, const fs::path& file) {
    const std::string name = file.filename().string();
    const std::string to = to_string(options.destination);
    Attempt attempt = StoreAssociation(network, options).send(file);
    switch (attempt.outcome) {
      case Outcome::sent:
        options.spool.remove(file);
        ambiguous_attempts.erase(name);
        info("DICOM sender: ", name, " sent to ", to, attempt.detail.empty() ? "" : " with ", attempt.detail);
        return true;
      case Outcome::permanent:
        dead_letter(file, attempt.detail);
        return true;
      case Outcome::ambiguous: {
        int attempts = ++ambiguous_attempts[name];
        if (attempts >= options.max_attempts) {
          dead_letter(file, concat(attempt.detail, " (", attempts, " attempts)"));
          return true;
        }
        warn("DICOM sender: ", name, " to ", to, ": ", attempt.detail, "; attempt ", attempts, " of ",
             options.max_attempts);
        return false;
      }
      case Outcome::transient:
        warn("DICOM sender: ", name, " to ", to, ": ", attempt.detail, "; will retry");
        return false;
    }
    return false;
  }

  void dead_letter(const fs::path& file, const std::string& reason) {
    const std::string name = file.filename().string();
    ambiguous_attempts.erase(name);
    fs::path moved =
        options.spool.move_to_dead_letter(file, concat("refused by ", to_string(options.destination), ": ", reason));
    warn("DICOM sender: ", name, " refused by ", to_string(options.destination), ": ", reason, "; moved to ",
         moved.string());
  }

  const DicomResultSenderOptions& options;
  std::mutex mutex;
  std::condition_variable wake;
  bool stopping = false;
  bool notified = false;
  std::map<std::string, int> ambiguous_attempts;  // by file name; only the sending thread touches it
  std::thread thread;
};

DicomResultSender::DicomResultSender(DicomResultSenderOptions options) : options_(std::move(options)) {}

DicomResultSender::~DicomResultSender() { stop(); }

void DicomResultSender::start() {
  VP_REQUIRE(!worker_, "the DICOM result sender already runs");
  VP_REQUIRE(is_valid_ae_title(options_.calling_ae_title), "DICOM AE title '", options_.calling_ae_title,
             "' is not valid: 1 to 16 characters, no backslash or control characters");
  VP_REQUIRE(is_valid_ae_title(options_.destination.ae_title) && !options_.destination.host.empty() &&
                 options_.destination.port != 0,
             "DICOM destination '", to_string(options_.destination), "' is incomplete");
  VP_REQUIRE(options_.max_attempts >= 1 && options_.initial_backoff.count() > 0 &&
                 options_.max_backoff >= options_.initial_backoff,
             "DICOM sender: max_attempts must be at least 1 and 0 < initial_backoff <= max_backoff");
  dcmConnectionTimeout.set(static_cast<Sint32>(options_.connect_timeout.count()));
  worker_ = std::make_unique<Worker>(options_);
  worker_->thread = std::thread([worker = worker_.get()] { worker->run(); });
  info("DICOM sender: sending results from ", options_.spool.outbox_dir().string(), " to ",
       to_string(options_.destination), " as '", options_.calling_ae_title, "'");
}

void DicomResultSender::notify() {
  if (!worker_) return;
  {
    std::lock_guard lock(worker_->mutex);
    worker_->notified = true;
  }
  worker_->wake.notify_all();
}

void DicomResultSender::stop() {
  if (!worker_) return;
  {
    std::lock_guard lock(worker_->mutex);
    worker_->stopping = true;
  }
  worker_->wake.notify_all();
  worker_->thread.join();
  worker_.reset();
}

}  // namespace vitpipe
