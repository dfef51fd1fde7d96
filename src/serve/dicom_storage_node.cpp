#include "serve/dicom_storage_node.h"

// clang-format off
#include <dcmtk/config/osconfig.h>  // must come first
// clang-format on
#include <dcmtk/dcmdata/dcdeftag.h>
#include <dcmtk/dcmdata/dcfilefo.h>
#include <dcmtk/dcmdata/dcuid.h>
#include <dcmtk/dcmdata/dcxfer.h>
#include <dcmtk/dcmnet/scppool.h>
#include <dcmtk/dcmnet/scpthrd.h>
#include <dcmtk/oflog/oflog.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <exception>
#include <thread>

#include "serve/dicom_identifiers.h"
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
  // The order is our preference when a sender proposes several: uncompressed first (cheapest to decode).
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

// What every worker thread of one node shares; outlives the pool (members of the same Listener, declared first).
struct NodeContext {
  DicomSpool spool;
  std::string ae_title;
  DicomStorageNode::ReceivedCallback on_received;
};

// One association at a time on a DCMTK worker thread; C-ECHO is DcmSCP's, C-STORE is ours.
class StorageWorker : public DcmBaseSCPPool::DcmBaseSCPWorker, private DcmThreadSCP {
 public:
  StorageWorker(DcmBaseSCPPool& pool, const NodeContext& context) : DcmBaseSCPWorker(pool), context_(context) {}

  OFCondition setSharedConfig(const DcmSharedSCPConfig& config) override {
    return DcmThreadSCP::setSharedConfig(config);
  }
  OFBool busy() override { return DcmThreadSCP::isConnected(); }

 protected:
  OFCondition workerListen(T_ASC_Association* const association) override { return DcmThreadSCP::run(association); }

  // DCMTK accepts any called AE title by default; a PACS that addresses another node must hear so.
  OFBool checkCalledAETitleAccepted(const OFString& called_ae) override {
    bool accepted = trim_spaces(called_ae.c_str()) == context_.ae_title;
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
    DcmFileFormat file;
    DcmDataset* dataset = file.getDataset();  // received in place: no copy of a large image
    // An unparsable dataset fails here; DcmSCP then aborts the association, the node carries on.
    OFCondition received = receiveSTORERequest(request, context.presentationContextID, dataset);
    if (received.bad()) {
      warn("DICOM node: C-STORE from '", getPeerAETitle().c_str(), "' not received: ", received.text());
      return received;
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

class StoragePool : public DcmBaseSCPPool {
 public:
  explicit StoragePool(const NodeContext& context) : context_(context) {}

 protected:
  DcmBaseSCPWorker* createSCPWorker() override { return new StorageWorker(*this, context_); }

 private:
  const NodeContext& context_;
};

// 0 if nothing listens on the port, else the errno of binding it. SO_REUSEADDR as DCMTK sets it, so that only a
// listening socket counts (not connections in TIME_WAIT) and our probe never blocks DCMTK's own bind.
int bind_error(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno;
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_ANY);
  address.sin_port = htons(port);
  int result = ::bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) == 0 ? 0 : errno;
  ::close(fd);
  return result;
}

}  // namespace

struct DicomStorageNode::Listener {
  explicit Listener(NodeContext node_context) : context(std::move(node_context)), pool(context) {}

  NodeContext context;
  StoragePool pool;
  std::thread thread;
  std::atomic<bool> finished{false};
  std::string result;  // listen()'s condition, written before `finished`
};

DicomStorageNode::DicomStorageNode(DicomStorageNodeOptions options) : options_(std::move(options)) {}

DicomStorageNode::~DicomStorageNode() { stop(); }

bool DicomStorageNode::running() const { return listener_ != nullptr; }

void DicomStorageNode::start(ReceivedCallback on_received) {
  VP_REQUIRE(!listener_, "the DICOM node already listens on port ", options_.port);
  VP_REQUIRE(is_valid_ae_title(options_.ae_title), "DICOM AE title '", options_.ae_title,
             "' is not valid: 1 to 16 characters, no backslash or control characters");
  VP_REQUIRE(options_.max_associations > 0, "the DICOM node needs max_associations of at least 1");
  int in_use = bind_error(options_.port);
  VP_REQUIRE(in_use == 0, "cannot listen for DICOM associations on port ", options_.port, ": ", std::strerror(in_use));

  // DCMTK's network layer logs every association at INFO; our own lines say what matters, its warnings stay.
  OFLog::getLogger("dcmtk.dcmnet").setLogLevel(OFLogger::WARN_LOG_LEVEL);

  auto listener = std::make_unique<Listener>(NodeContext{options_.spool, options_.ae_title, std::move(on_received)});
  DcmSCPConfig& config = listener->pool.getConfig();
  config.setPort(options_.port);
  config.setAETitle(options_.ae_title.c_str());
  config.setRespondWithCalledAETitle(OFFalse);
  config.setHostLookupEnabled(OFFalse);  // no DNS lookup per association
  // Non-blocking accept with a 1 s timeout: the listen loop notices stop() within a second.
  config.setConnectionBlockingMode(DUL_NOBLOCK);
  config.setConnectionTimeout(1);
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
  listener->pool.setMaxThreads(options_.max_associations);

  Listener* running = listener.get();
  running->thread = std::thread([running] {
    OFCondition result = running->pool.listen();
    running->result = result.text();
    running->finished = true;
  });

  // Ready once DCMTK's socket listens: then our probe can no longer bind the port.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (bind_error(options_.port) != EADDRINUSE) {
    if (running->finished || std::chrono::steady_clock::now() > deadline) {
      running->pool.stopAfterCurrentAssociations();
      running->thread.join();
      fail("cannot listen for DICOM associations on port ", options_.port, ": ",
           running->finished ? running->result : std::string("not listening after 10 s"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  listener_ = std::move(listener);
  info("DICOM node: AE title '", options_.ae_title, "' listening on port ", options_.port, " (spool ",
       options_.spool.root().string(), ")");
}

void DicomStorageNode::stop() {
  if (!listener_) return;
  listener_->pool.stopAfterCurrentAssociations();
  listener_->thread.join();
  listener_.reset();
  info("DICOM node: port ", options_.port, " closed");
}

}  // namespace vitpipe
