#include "serve/dicom_storage_node.h"

// clang-format off
#include <dcmtk/config/osconfig.h>  // must come first
// clang-format on
#include <dcmtk/dcmdata/dcdeftag.h>
#include <dcmtk/dcmdata/dcfilefo.h>
#include <dcmtk/dcmdata/dcuid.h>
#include <dcmtk/dcmdata/dcxfer.h>
#include <dcmtk/dcmnet/assoc.h>
#include <dcmtk/dcmnet/dul.h>
#include <dcmtk/dcmnet/scpthrd.h>
#include <dcmtk/oflog/oflog.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <exception>
#include <list>
#include <mutex>
#include <optional>
#include <system_error>
#include <thread>

#include "data/dicom_decoder.h"
#include "serve/dicom_connection_gate.h"
#include "serve/dicom_identifiers.h"
#include "util/atomic_file.h"
#include "util/error.h"
#include "util/log.h"

namespace vitpipe {

namespace fs = std::filesystem;

const std::vector<std::string>& DicomStorageNode::accepted_sop_classes() {
  static const std::vector<std::string> classes = {
      UID_ComputedRadiographyImageStorage, UID_DigitalXRayImageStorageForPresentation,
      UID_DigitalXRayImageStorageForProcessing, UID_SecondaryCaptureImageStorage};
  return classes;
}

const std::vector<std::string>& DicomStorageNode::accepted_transfer_syntaxes() {
  // The order is our preference when a sender offers several in one presentation context: uncompressed first
  // (cheapest to decode; the sender's decompression is lossless). Offered in separate contexts, the sender picks.
  static const std::vector<std::string> syntaxes = {UID_LittleEndianExplicitTransferSyntax,
                                                    UID_LittleEndianImplicitTransferSyntax,
                                                    UID_BigEndianExplicitTransferSyntax,
                                                    UID_DeflatedExplicitVRLittleEndianTransferSyntax,
                                                    UID_JPEGProcess1TransferSyntax,
                                                    UID_JPEGProcess2_4TransferSyntax,
                                                    UID_JPEGProcess14TransferSyntax,
                                                    UID_JPEGProcess14SV1TransferSyntax,
                                                    UID_JPEGLSLosslessTransferSyntax,
                                                    UID_JPEGLSLossyTransferSyntax,
                                                    UID_RLELosslessTransferSyntax,
                                                    UID_JPEG2000LosslessOnlyTransferSyntax,
                                                    UID_JPEG2000TransferSyntax};
  return syntaxes;
}

namespace {

std::string trim_spaces(const std::string& text) {
  size_t first = text.find_first_not_of(' ');
  if (first == std::string::npos) return "";
  return text.substr(first, text.find_last_not_of(' ') - first + 1);
}

// dcmExternalSocketHandle is one for the process: whoever sets it holds this until it is unset.
std::mutex external_socket_mutex;

// What every association thread of one node shares; the Listener owning it joins them all before it goes.
struct NodeContext {
  DicomSpool spool;
  std::string ae_title;
  DicomStorageNode::ReceivedCallback on_received;
};

// One association, on a thread of its own; C-ECHO is DcmSCP's, C-STORE is ours.
class StorageAssociation : public DcmThreadSCP {
 public:
  explicit StorageAssociation(const NodeContext& context) : context_(context) {}

 protected:
  // DCMTK accepts any called AE title by default; a PACS that addresses another node must hear so.
  OFBool checkCalledAETitleAccepted(const OFString& called_ae) override {
    bool accepted = trim_spaces(called_ae.c_str()) == trim_spaces(context_.ae_title);
    if (!accepted) {
      warn("DICOM node: association for AE title '", called_ae.c_str(), "' rejected (we are '", context_.ae_title,
           "')");
    }
    return accepted;
  }

  OFCondition handleIncomingCommand(T_DIMSE_Message* message, const DcmPresentationContextInfo& context) override {
    if (message->CommandField == DIMSE_C_STORE_RQ) return handle_store(message->msg.CStoreRQ, context);
    return DcmThreadSCP::handleIncomingCommand(message, context);
  }

 private:
  OFCondition handle_store(T_DIMSE_C_StoreRQ& request, const DcmPresentationContextInfo& context) {
    // Received to a file as sent, not parsed on the way in: DCMTK's reader recurses into nested sequences, and a
    // data set nested too deep for it (thousands of levels) overflowed the thread's stack and killed the service.
    // The file is checked first (data/dicom_nesting.h), then read.
    const fs::path raw = context_.spool.new_temporary_path();
    struct RemoveRaw {
      const fs::path& path;
      ~RemoveRaw() {
        std::error_code ignored;
        fs::remove(path, ignored);
      }
    } remove_raw{raw};
    // A broken stream fails here; DcmSCP then aborts the association, the node carries on.
    OFCondition received = receiveSTORERequest(request, context.presentationContextID, OFString(raw.c_str()));
    if (received.bad()) {
      warn("DICOM node: C-STORE from '", getPeerAETitle().c_str(), "' not received: ", received.text());
      return received;
    }
    DcmFileFormat file;
    try {
      const std::string bytes = read_text_file(raw);  // binary-safe
      check_dicom_file_nesting(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(),
                               concat("instance ", request.AffectedSOPInstanceUID));
      OFCondition loaded = file.loadFile(raw.c_str());
      if (loaded.good()) loaded = file.loadAllDataIntoMemory();
      VP_REQUIRE(loaded.good(), "its data set cannot be read: ", loaded.text());
    } catch (const std::exception& error) {
      warn("DICOM node: C-STORE from '", getPeerAETitle().c_str(), "' refused: ", error.what());
      return sendSTOREResponse(context.presentationContextID, request, STATUS_STORE_Error_CannotUnderstand);
    }
    fs::path stored;
    std::string sop_instance_uid = request.AffectedSOPInstanceUID;
    Uint16 status = store(request, context, file, sop_instance_uid, stored);
    // Queued before the sender hears success: once it has, the instance is both on disk and on its way. Were the
    // callback to fail, the file still waits in received/ for the next start.
    if (status == STATUS_Success && context_.on_received) {
      try {
        context_.on_received(stored, sop_instance_uid);
      } catch (const std::exception& error) {
        warn("DICOM node: queueing received instance ", sop_instance_uid, " failed: ", error.what());
      }
    }
    return sendSTOREResponse(context.presentationContextID, request, status);
  }

  // Returns the C-STORE response status; on success `stored` is the file in received/.
  Uint16 store(const T_DIMSE_C_StoreRQ& request, const DcmPresentationContextInfo& context, DcmFileFormat& file,
               const std::string& sop_instance_uid, fs::path& stored) {
    const std::string peer = getPeerAETitle().c_str();
    if (context.abstractSyntax != request.AffectedSOPClassUID) {
      warn("DICOM node: C-STORE of SOP class ", request.AffectedSOPClassUID, " on a context for ",
           context.abstractSyntax.c_str(), " from '", peer, "' refused");
      return STATUS_STORE_Refused_SOPClassNotSupported;
    }
    // The UID names the file in received/, so it must be a real UID, and the one the dataset carries.
    OFString dataset_uid;
    file.getDataset()->findAndGetOFString(DCM_SOPInstanceUID, dataset_uid);
    if (!is_valid_dicom_uid(sop_instance_uid) || dataset_uid != sop_instance_uid.c_str()) {
      warn("DICOM node: C-STORE from '", peer, "' refused: SOP Instance UID '", sop_instance_uid,
           "' of the request and '", dataset_uid.c_str(), "' of the dataset must be the same valid UID");
      return STATUS_STORE_Error_CannotUnderstand;
    }
    fs::path temporary = context_.spool.new_temporary_path();
    try {
      // The dataset is written in the transfer syntax it arrived in: compressed pixel data stays as sent.
      E_TransferSyntax syntax = DcmXfer(context.acceptedTransferSyntax.c_str()).getXfer();
      OFCondition saved = file.saveFile(temporary.c_str(), syntax);
      VP_REQUIRE(saved.good(), "cannot write ", temporary.string(), ": ", saved.text());
      stored = context_.spool.commit_received(temporary, sop_instance_uid);
    } catch (const std::exception& error) {
      std::error_code ignored;
      fs::remove(temporary, ignored);
      warn("DICOM node: instance ", sop_instance_uid, " from '", peer, "' refused (out of resources): ", error.what());
      return STATUS_STORE_Refused_OutOfResources;
    }
    info("DICOM node: received ", sop_instance_uid, " (", request.AffectedSOPClassUID, ") from '", peer, "'");
    return STATUS_Success;
  }

  const NodeContext& context_;
};

}  // namespace

// DCMTK's DcmSCPPool never joins a worker thread that ends while it listens, so each association would leak a
// thread stack (8 MiB of address space) until the process runs out of mappings. This accept loop does what the pool
// does, with threads it joins, behind a gate that hands over only connections whose request is already in.
struct DicomStorageNode::Listener {
  struct Session {
    std::thread thread;
    std::atomic<bool> finished{false};
  };

  Listener(NodeContext node_context, const DcmSCPConfig& scp_config, const DicomStorageNodeOptions& node_options)
      : context(std::move(node_context)),
        config(scp_config),
        options(node_options),
        gate(node_options.host, node_options.port,
             DicomConnectionLimits{.request_timeout = node_options.acse_timeout}) {}

  // DCMTK reads an association request from the socket in dcmExternalSocketHandle instead of accepting one (its
  // inetd mode). The handle is process-wide, hence the lock; the read is quick, the request being already in.
  OFCondition receive(int socket, T_ASC_Association** association) {
    std::lock_guard lock(external_socket_mutex);
    dcmExternalSocketHandle.set(socket);
    OFCondition cond = ASC_receiveAssociation(network, association, config->getMaxReceivePDULength(), nullptr, nullptr,
                                              OFFalse, DUL_NOBLOCK, static_cast<int>(options.acse_timeout.count()));
    dcmExternalSocketHandle.set(-1);
    return cond;
  }

  bool caller_allowed(const std::string& calling_ae, const std::string& address) const {
    if (options.allowed_callers.empty()) return true;
    for (const DicomCaller& caller : options.allowed_callers)
      if (trim_spaces(calling_ae) == caller.ae_title &&
          (caller.addresses.empty() ||
           std::find(caller.addresses.begin(), caller.addresses.end(), address) != caller.addresses.end()))
        return true;
    return false;
  }

  void reject(T_ASC_Association* association, T_ASC_RejectParameters rejection) {
    ASC_rejectAssociation(association, &rejection);
    ASC_dropAssociation(association);
    ASC_destroyAssociation(&association);
  }

  void accept_until_stopped() {
    while (!stopping) {
      reap_finished_sessions();
      // Waiting for a request costs no thread: a silent connection cannot hold up the next (gate's deadline).
      std::optional<DicomConnectionGate::Ready> ready = gate.next(std::chrono::milliseconds(500));
      if (!ready) continue;
      T_ASC_Association* association = nullptr;
      OFCondition cond = receive(ready->socket, &association);
      if (cond.bad()) {
        warn("DICOM node: an association request from ", ready->address, " could not be read: ", cond.text());
        if (association) {
          ASC_dropAssociation(association);
          ASC_destroyAssociation(&association);
        } else {
          ::close(ready->socket);
        }
        continue;
      }
      const std::string calling_ae = association->params->DULparams.callingAPTitle;
      if (!caller_allowed(calling_ae, ready->address)) {
        warn("DICOM node: association from '", calling_ae, "' at ", ready->address,
             " rejected: not in --allowed-callers");
        reject(association,
               {ASC_RESULT_REJECTEDPERMANENT, ASC_SOURCE_SERVICEUSER, ASC_REASON_SU_CALLINGAETITLENOTRECOGNIZED});
      } else if (sessions.size() >= options.max_associations) {
        warn("DICOM node: association from '", calling_ae, "' rejected: ", options.max_associations,
             " associations already running");
        reject(association, {ASC_RESULT_REJECTEDTRANSIENT, ASC_SOURCE_SERVICEPROVIDER_PRESENTATION_RELATED,
                             ASC_REASON_SP_PRES_LOCALLIMITEXCEEDED});
      } else {
        Session& session = sessions.emplace_back();
        try {
          session.thread = std::thread([this, &session, association] {
            {
              StorageAssociation scp(context);
              scp.setSharedConfig(config);
              scp.run(association);
            }  // DcmSCP's destructor drops and frees the association
            session.finished = true;
          });
        } catch (const std::system_error& error) {  // no thread to be had: the sender may retry later
          sessions.pop_back();
          warn("DICOM node: association aborted, no thread for it: ", error.what());
          ASC_abortAssociation(association);
          ASC_dropAssociation(association);
          ASC_destroyAssociation(&association);
        }
      }
    }
    for (Session& session : sessions) session.thread.join();
    sessions.clear();
  }

  void reap_finished_sessions() {
    for (auto it = sessions.begin(); it != sessions.end();) {
      if (it->finished) {
        it->thread.join();
        it = sessions.erase(it);
      } else {
        ++it;
      }
    }
  }

  NodeContext context;
  DcmSharedSCPConfig config;
  DicomStorageNodeOptions options;
  DicomConnectionGate gate;  // binds in the constructor: a port in use is reported by start()
  T_ASC_Network* network = nullptr;
  std::list<Session> sessions;  // only the accepting thread touches it
  std::atomic<bool> stopping{false};
  std::thread thread;
};

DicomStorageNode::DicomStorageNode(DicomStorageNodeOptions options) : options_(std::move(options)) {}

DicomStorageNode::~DicomStorageNode() { stop(); }

bool DicomStorageNode::running() const { return listener_ != nullptr; }

void DicomStorageNode::start(ReceivedCallback on_received) {
  VP_REQUIRE(!listener_, "the DICOM node already listens on port ", options_.port);
  VP_REQUIRE(is_valid_ae_title(options_.ae_title), "DICOM AE title '", options_.ae_title,
             "' is not valid: 1 to 16 characters, no backslash or control characters");
  VP_REQUIRE(options_.max_associations > 0, "the DICOM node needs max_associations of at least 1");
  // DCMTK's network layer logs every association at INFO; our own lines say what matters, its warnings stay.
  OFLog::getLogger("dcmtk.dcmnet").setLogLevel(OFLogger::WARN_LOG_LEVEL);

  DcmSCPConfig config;
  config.setPort(options_.port);
  config.setAETitle(options_.ae_title.c_str());
  config.setRespondWithCalledAETitle(OFFalse);
  config.setACSETimeout(static_cast<Uint32>(options_.acse_timeout.count()));
  config.setDIMSEBlockingMode(DIMSE_NONBLOCKING);  // blocking mode would ignore the DIMSE timeout
  config.setDIMSETimeout(static_cast<Uint32>(options_.dimse_timeout.count()));
  OFList<OFString> echo_syntaxes;
  for (const char* uid : {UID_LittleEndianExplicitTransferSyntax, UID_LittleEndianImplicitTransferSyntax,
                          UID_BigEndianExplicitTransferSyntax}) {
    echo_syntaxes.push_back(uid);
  }
  OFCondition added = config.addPresentationContext(UID_VerificationSOPClass, echo_syntaxes);
  OFList<OFString> image_syntaxes;
  for (const std::string& uid : accepted_transfer_syntaxes()) image_syntaxes.push_back(uid.c_str());
  for (const std::string& sop_class : accepted_sop_classes()) {
    if (added.good()) added = config.addPresentationContext(sop_class.c_str(), image_syntaxes);
  }
  VP_REQUIRE(added.good(), "cannot configure the DICOM node's presentation contexts: ", added.text());
  auto listener = std::make_unique<Listener>(NodeContext{options_.spool, options_.ae_title, std::move(on_received)},
                                             config, options_);
  // A network without a listening socket of DCMTK's own (dcmExternalSocketHandle set while it is made): the gate
  // listens and DCMTK reads each request from the socket it is handed.
  OFCondition network;
  {
    std::lock_guard lock(external_socket_mutex);
    dcmExternalSocketHandle.set(0x7fffffff);
    network = ASC_initializeNetwork(NET_ACCEPTOR, options_.port, static_cast<int>(options_.acse_timeout.count()),
                                    &listener->network);
    dcmExternalSocketHandle.set(-1);
  }
  VP_REQUIRE(network.good(), "cannot set up the DICOM network layer: ", network.text());
  Listener* running = listener.get();
  running->thread = std::thread([running] { running->accept_until_stopped(); });
  listener_ = std::move(listener);
  info("DICOM node: AE title '", options_.ae_title, "' listening on ", options_.host, " port ", options_.port,
       options_.allowed_callers.empty() ? " (any caller" : " (allowed callers only", "; spool ",
       options_.spool.root().string(), ")");
}

void DicomStorageNode::stop() {
  if (!listener_) return;
  listener_->stopping = true;
  listener_->thread.join();
  ASC_dropNetwork(&listener_->network);
  listener_.reset();
  info("DICOM node: port ", options_.port, " closed");
}

}  // namespace vitpipe
