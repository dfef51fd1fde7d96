// The DICOM node against DCMTK's own echoscu and storescu, on loopback; and the spool it writes to.
#include <dcmtk/dcmnet/assoc.h>
#include <dcmtk/dcmnet/dimse.h>
#include <dcmtk/dcmnet/dul.h>
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iostream>
#include <mutex>

#include "data/dicom_decoder.h"
#include "dicom_network_test_support.h"
#include "serve/dicom_identifiers.h"
#include "serve/dicom_spool.h"
#include "serve/dicom_storage_node.h"
#include "util/atomic_file.h"
#include "util/error.h"

namespace vitpipe {
namespace {

using namespace dicom_test;

constexpr const char* kNodeAeTitle = "VPTEST";

// A node on a free port with its spool in a temporary directory, recording what on_received saw.
class DicomStorageNodeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    port_ = free_port();
    DicomStorageNodeOptions options{
        .spool = DicomSpool(directory_.path() / "spool"), .port = port_, .ae_title = kNodeAeTitle};
    options.acse_timeout = std::chrono::seconds(5);
    options.dimse_timeout = std::chrono::seconds(5);
    node_ = std::make_unique<DicomStorageNode>(options);
    node_->start([this](const fs::path& file, const std::string& uid) {
      std::lock_guard lock(mutex_);
      received_.emplace_back(file, uid);
    });
  }
  void TearDown() override {
    node_->stop();
    if (HasFailure()) std::cerr << "tool output:\n" << read_log() << "\n";
  }

  std::string read_log() const {
    std::ifstream in(log());
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  fs::path log() const { return directory_.path() / "tools.log"; }
  fs::path received_dir() const { return directory_.path() / "spool" / "received"; }
  std::vector<std::pair<fs::path, std::string>> received() {
    std::lock_guard lock(mutex_);
    return received_;
  }
  int storescu(const std::string& called_ae, const fs::path& file) {
    return run_tool({"storescu", "-aec", called_ae, "127.0.0.1", std::to_string(port_), file.string()}, log());
  }

  TemporaryDirectory directory_;
  uint16_t port_ = 0;
  std::unique_ptr<DicomStorageNode> node_;
  std::mutex mutex_;
  std::vector<std::pair<fs::path, std::string>> received_;
};

TEST_F(DicomStorageNodeTest, AnswersEchoscu) {
  EXPECT_EQ(run_tool({"echoscu", "-aec", kNodeAeTitle, "127.0.0.1", std::to_string(port_)}, log()), 0);
}

TEST_F(DicomStorageNodeTest, StoresFromStorescuIntoReceivedWithTheSameDataset) {
  const std::string uid = "1.2.826.0.1.3680043.10.1234.1";
  fs::path original = directory_.path() / "dx.dcm";
  write_test_image(original, uid);
  ASSERT_EQ(storescu(kNodeAeTitle, original), 0);

  fs::path stored = received_dir() / (uid + ".dcm");
  ASSERT_TRUE(fs::exists(stored));
  auto calls = received();
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].first, stored);
  EXPECT_EQ(calls[0].second, uid);
  EXPECT_EQ(DicomSpool(directory_.path() / "spool").pending_received(), std::vector<fs::path>{stored});
  EXPECT_TRUE(fs::is_empty(directory_.path() / "spool" / "tmp"));

  DcmFileFormat sent, landed;
  ASSERT_TRUE(sent.loadFile(original.c_str()).good());
  ASSERT_TRUE(landed.loadFile(stored.c_str()).good());
  EXPECT_EQ(landed.getDataset()->compare(*sent.getDataset()), 0) << "received dataset differs from the one sent";
}

TEST_F(DicomStorageNodeTest, KeepsTheTransferSyntaxStorescuSentIn) {
  fs::path original = directory_.path() / "dx.dcm";
  write_test_image(original, "1.2.826.0.1.3680043.10.1234.20");
  struct Conversion {
    std::vector<std::string> tool;
    std::string storescu_proposal;  // storescu proposes only uncompressed syntaxes unless told
    const char* transfer_syntax;
  };
  const std::vector<Conversion> conversions = {
      {{"dcmconv", "+tb"}, "-xb", UID_BigEndianExplicitTransferSyntax},
      {{"dcmconv", "+td"}, "-xd", UID_DeflatedExplicitVRLittleEndianTransferSyntax},
      {{"dcmcjpeg"}, "-xs", UID_JPEGProcess14SV1TransferSyntax},
      {{"dcmcjpls"}, "-xt", UID_JPEGLSLosslessTransferSyntax},
      {{"dcmcrle"}, "-xr", UID_RLELosslessTransferSyntax}};
  for (size_t i = 0; i < conversions.size(); ++i) {
    const Conversion& conversion = conversions[i];
    // The same image under another SOP Instance UID, so each lands in its own file.
    std::string uid = "1.2.826.0.1.3680043.10.1234.21." + std::to_string(i);
    fs::path source = directory_.path() / ("source" + std::to_string(i) + ".dcm");
    write_test_image(source, uid);
    fs::path converted = directory_.path() / ("converted" + std::to_string(i) + ".dcm");
    std::vector<std::string> command = conversion.tool;
    command.push_back(source.string());
    command.push_back(converted.string());
    ASSERT_EQ(run_tool(command, log()), 0) << conversion.tool[0];
    ASSERT_EQ(run_tool({"storescu", conversion.storescu_proposal, "-aec", kNodeAeTitle, "127.0.0.1",
                        std::to_string(port_), converted.string()},
                       log()),
              0)
        << conversion.transfer_syntax;
    DcmFileFormat landed;
    ASSERT_TRUE(landed.loadFile((received_dir() / (uid + ".dcm")).c_str()).good()) << conversion.transfer_syntax;
    OFString transfer_syntax;
    landed.getMetaInfo()->findAndGetOFString(DCM_TransferSyntaxUID, transfer_syntax);
    EXPECT_EQ(transfer_syntax, conversion.transfer_syntax);
    // ... and what landed is what the model's input path reads.
    std::string bytes = read_text_file(received_dir() / (uid + ".dcm"));
    DecodedImage image = decode_dicom(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), uid, {});
    EXPECT_EQ(image.width, 48);
    EXPECT_EQ(image.height, 32);
  }
  EXPECT_EQ(received().size(), conversions.size());
}

TEST_F(DicomStorageNodeTest, RejectsAssociationsCallingAnotherAeTitle) {
  fs::path original = directory_.path() / "dx.dcm";
  write_test_image(original, "1.2.826.0.1.3680043.10.1234.2");
  EXPECT_NE(run_tool({"echoscu", "-aec", "SOMEONE_ELSE", "127.0.0.1", std::to_string(port_)}, log()), 0);
  EXPECT_NE(storescu("SOMEONE_ELSE", original), 0);
  EXPECT_TRUE(fs::is_empty(received_dir()));
  EXPECT_TRUE(received().empty());
  // ... and still serves its own title.
  EXPECT_EQ(storescu(kNodeAeTitle, original), 0);
}

TEST_F(DicomStorageNodeTest, RefusesAnUnsupportedSopClass) {
  fs::path ct = directory_.path() / "ct.dcm";
  write_test_image(ct, "1.2.826.0.1.3680043.10.1234.3", UID_CTImageStorage);
  EXPECT_NE(storescu(kNodeAeTitle, ct), 0);
  EXPECT_TRUE(fs::is_empty(received_dir()));
  EXPECT_TRUE(received().empty());
}

TEST_F(DicomStorageNodeTest, ServesConcurrentStorescuProcesses) {
  std::vector<fs::path> files;
  for (int i = 0; i < 4; ++i) {
    files.push_back(directory_.path() / ("dx" + std::to_string(i) + ".dcm"));
    write_test_image(files.back(), "1.2.826.0.1.3680043.10.1234.10." + std::to_string(i));
  }
  // Two associations at once, each sending two instances.
  BackgroundTool first(
      {"storescu", "-aec", kNodeAeTitle, "127.0.0.1", std::to_string(port_), files[0].string(), files[1].string()},
      log());
  BackgroundTool second(
      {"storescu", "-aec", kNodeAeTitle, "127.0.0.1", std::to_string(port_), files[2].string(), files[3].string()},
      log());
  ASSERT_TRUE(first.started() && second.started());
  EXPECT_EQ(first.wait(), 0);
  EXPECT_EQ(second.wait(), 0);
  EXPECT_EQ(received().size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_TRUE(fs::exists(received_dir() / ("1.2.826.0.1.3680043.10.1234.10." + std::to_string(i) + ".dcm")));
  }
}

long virtual_memory_kib() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmSize:", 0) == 0) return std::stol(line.substr(7));
  }
  return -1;
}

// Each association's thread is joined: DCMTK's DcmSCPPool left them unjoined, 8 MiB of address space each.
TEST_F(DicomStorageNodeTest, JoinsTheThreadOfEveryAssociation) {
  auto echo = [&] { return run_tool({"echoscu", "-aec", kNodeAeTitle, "127.0.0.1", std::to_string(port_)}, log()); };
  ASSERT_EQ(echo(), 0);
  long before = virtual_memory_kib();
  for (int i = 0; i < 30; ++i) ASSERT_EQ(echo(), 0);
  long grown_mib = (virtual_memory_kib() - before) / 1024;
  EXPECT_LT(grown_mib, 64) << "30 associations left " << grown_mib << " MiB of address space behind";
}

TEST_F(DicomStorageNodeTest, KeepsServingAfterGarbageOnTheWire) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(port_);
  ASSERT_EQ(::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)), 0);
  // An A-ASSOCIATE-RQ type byte followed by a length that lies and bytes that are no PDU.
  const unsigned char garbage[] = {0x01, 0x00, 0x7f, 0xff, 0xff, 0xff, 0xde, 0xad, 0xbe, 0xef, 0x00, 0x01};
  ASSERT_EQ(::write(fd, garbage, sizeof(garbage)), static_cast<ssize_t>(sizeof(garbage)));
  ::close(fd);
  EXPECT_EQ(run_tool({"echoscu", "-aec", kNodeAeTitle, "127.0.0.1", std::to_string(port_)}, log()), 0);
}

// A C-STORE whose dataset bytes DCMTK cannot parse: the command goes through DIMSE, the bytes as a raw PDV.
TEST_F(DicomStorageNodeTest, KeepsServingAfterAnUnparsableDataset) {
  T_ASC_Network* network = nullptr;
  ASSERT_TRUE(ASC_initializeNetwork(NET_REQUESTOR, 0, 5, &network).good());
  T_ASC_Parameters* parameters = nullptr;
  ASSERT_TRUE(ASC_createAssociationParameters(&parameters, ASC_DEFAULTMAXPDU).good());
  ASC_setAPTitles(parameters, "GARBAGE", kNodeAeTitle, nullptr);
  std::string address = "127.0.0.1:" + std::to_string(port_);
  ASC_setPresentationAddresses(parameters, "localhost", address.c_str());
  const char* syntaxes[] = {UID_LittleEndianExplicitTransferSyntax};
  ASC_addPresentationContext(parameters, 1, UID_DigitalXRayImageStorageForPresentation, syntaxes, 1);
  T_ASC_Association* association = nullptr;
  ASSERT_TRUE(ASC_requestAssociation(network, parameters, &association).good());
  T_ASC_PresentationContextID context =
      ASC_findAcceptedPresentationContextID(association, UID_DigitalXRayImageStorageForPresentation);
  ASSERT_NE(context, 0);

  // The C-STORE-RQ command set, encoded by hand (DIMSE will not announce a dataset it does not send).
  DcmDataset command;
  command.putAndInsertString(DCM_AffectedSOPClassUID, UID_DigitalXRayImageStorageForPresentation);
  command.putAndInsertUint16(DCM_CommandField, DIMSE_C_STORE_RQ);
  command.putAndInsertUint16(DCM_MessageID, 1);
  command.putAndInsertUint16(DCM_Priority, 0);
  command.putAndInsertUint16(DCM_CommandDataSetType, 0x0000);  // a dataset follows
  command.putAndInsertString(DCM_AffectedSOPInstanceUID, "1.2.3");
  fs::path command_file = directory_.path() / "command.bin";
  ASSERT_TRUE(command.saveFile(command_file.c_str(), EXS_LittleEndianImplicit, EET_ExplicitLength, EGL_withGL).good());
  std::string command_bytes = read_text_file(command_file);
  DUL_PDV command_pdv{command_bytes.size(), context, DUL_COMMANDPDV, OFTrue, command_bytes.data()};
  // (0008,0016) UI of 6 bytes, then (7FE0,0010) OB claiming 1 MiB with 10 bytes present.
  unsigned char garbage[] = {0x08, 0x00, 0x16, 0x00, 'U',  'I',  0x06, 0x00, '1',  '.',  '2',  '.',
                             '3',  0x00, 0xe0, 0x7f, 0x10, 0x00, 'O',  'B',  0x00, 0x00, 0x00, 0x00,
                             0x10, 0x00, 0xde, 0xad, 0xbe, 0xef, 0xde, 0xad, 0xbe, 0xef, 0xff, 0xff};
  DUL_PDV pdv[] = {command_pdv, {sizeof(garbage), context, DUL_DATASETPDV, OFTrue, garbage}};
  DUL_PDVLIST pdvs{};
  pdvs.count = 2;
  pdvs.pdv = pdv;
  ASSERT_TRUE(DUL_WritePDVs(&association->DULassociation, &pdvs).good());
  T_ASC_PresentationContextID response_context = context;
  T_DIMSE_Message response{};
  OFCondition answered = DIMSE_receiveCommand(association, DIMSE_NONBLOCKING, 5, &response_context, &response, nullptr);
  // The node either aborts the association or answers a failure; it never stores the garbage.
  EXPECT_TRUE(answered.bad() || response.msg.CStoreRSP.DimseStatus != STATUS_Success);
  ASC_abortAssociation(association);
  ASC_destroyAssociation(&association);
  ASC_dropNetwork(&network);

  EXPECT_TRUE(fs::is_empty(received_dir()));
  EXPECT_TRUE(received().empty());
  EXPECT_EQ(run_tool({"echoscu", "-aec", kNodeAeTitle, "127.0.0.1", std::to_string(port_)}, log()), 0);
}

TEST_F(DicomStorageNodeTest, RefusesWithOutOfResourcesWhenTheSpoolCannotTakeTheInstance) {
  // received/ replaced by a plain file: the rename into it fails, as on a full or read-only disk.
  fs::remove_all(received_dir());
  std::ofstream(received_dir()) << "not a directory";
  fs::path original = directory_.path() / "dx.dcm";
  write_test_image(original, "1.2.826.0.1.3680043.10.1234.4");
  // storescu reports the failure status by its exit code; the sender's tests read the 0xA700 itself.
  EXPECT_NE(storescu(kNodeAeTitle, original), 0);
  EXPECT_TRUE(received().empty());
  EXPECT_TRUE(fs::is_empty(directory_.path() / "spool" / "tmp"));
  EXPECT_EQ(run_tool({"echoscu", "-aec", kNodeAeTitle, "127.0.0.1", std::to_string(port_)}, log()), 0);
}

TEST(DicomStorageNode, RefusesAPortInUseAndABadAeTitle) {
  TemporaryDirectory directory;
  uint16_t port = free_port();
  DicomStorageNode first({.spool = DicomSpool(directory.path()), .port = port, .ae_title = kNodeAeTitle});
  first.start(nullptr);
  DicomStorageNode second({.spool = DicomSpool(directory.path()), .port = port, .ae_title = kNodeAeTitle});
  EXPECT_THROW(second.start(nullptr), Error);
  first.stop();
  DicomStorageNode bad_title({.spool = DicomSpool(directory.path()), .port = port, .ae_title = "A\\B"});
  EXPECT_THROW(bad_title.start(nullptr), Error);
}

TEST(DicomStorageNode, RejectsAssociationsBeyondMaxAssociations) {
  TemporaryDirectory directory;
  uint16_t port = free_port();
  DicomStorageNodeOptions options{.spool = DicomSpool(directory.path()), .port = port, .ae_title = kNodeAeTitle};
  options.max_associations = 1;
  DicomStorageNode node(options);
  node.start(nullptr);
  auto echo = [&] {
    return run_tool({"echoscu", "-aec", kNodeAeTitle, "127.0.0.1", std::to_string(port)}, directory.path() / "log");
  };

  // One association held open takes the only place.
  T_ASC_Network* network = nullptr;
  ASSERT_TRUE(ASC_initializeNetwork(NET_REQUESTOR, 0, 5, &network).good());
  T_ASC_Parameters* parameters = nullptr;
  ASSERT_TRUE(ASC_createAssociationParameters(&parameters, ASC_DEFAULTMAXPDU).good());
  ASC_setAPTitles(parameters, "HOLDER", kNodeAeTitle, nullptr);
  std::string address = "127.0.0.1:" + std::to_string(port);
  ASC_setPresentationAddresses(parameters, "localhost", address.c_str());
  const char* syntaxes[] = {UID_LittleEndianImplicitTransferSyntax};
  ASC_addPresentationContext(parameters, 1, UID_VerificationSOPClass, syntaxes, 1);
  T_ASC_Association* held = nullptr;
  ASSERT_TRUE(ASC_requestAssociation(network, parameters, &held).good());
  EXPECT_NE(echo(), 0);

  ASC_releaseAssociation(held);
  ASC_destroyAssociation(&held);
  ASC_dropNetwork(&network);
  EXPECT_TRUE(wait_until([&] { return echo() == 0; }, std::chrono::seconds(5)));
}

TEST(DicomIdentifiers, UidsAndAeTitles) {
  EXPECT_TRUE(is_valid_dicom_uid("1.2.840.10008.5.1.4.1.1.1.1"));
  EXPECT_FALSE(is_valid_dicom_uid(""));
  EXPECT_FALSE(is_valid_dicom_uid("1..2"));
  EXPECT_FALSE(is_valid_dicom_uid(".1"));
  EXPECT_FALSE(is_valid_dicom_uid("1.2."));
  EXPECT_FALSE(is_valid_dicom_uid("../etc/passwd"));
  EXPECT_FALSE(is_valid_dicom_uid(std::string(65, '1')));
  EXPECT_TRUE(is_valid_ae_title("PACS"));
  EXPECT_TRUE(is_valid_ae_title("VITPIPE 1"));
  EXPECT_FALSE(is_valid_ae_title(""));
  EXPECT_FALSE(is_valid_ae_title("    "));
  EXPECT_FALSE(is_valid_ae_title("SEVENTEEN_LETTERS"));
  EXPECT_FALSE(is_valid_ae_title("A\\B"));
}

TEST(DicomSpool, CommitsListsDeadLettersAndCleansUp) {
  TemporaryDirectory directory;
  DicomSpool spool(directory.path() / "spool");
  for (const char* dir : {"received", "outbox", "dead-letter", "tmp"}) {
    EXPECT_TRUE(fs::is_directory(directory.path() / "spool" / dir)) << dir;
  }
  auto write_temporary = [&](const std::string& text) {
    fs::path temporary = spool.new_temporary_path();
    std::ofstream(temporary) << text;
    return temporary;
  };
  EXPECT_NE(spool.new_temporary_path(), spool.new_temporary_path());

  fs::path older = spool.commit_received(write_temporary("a"), "1.2.3");
  fs::path newer = spool.commit_received(write_temporary("b"), "1.2.4");
  fs::last_write_time(older, fs::last_write_time(newer) - std::chrono::seconds(10));
  EXPECT_EQ(older, spool.received_dir() / "1.2.3.dcm");
  EXPECT_EQ(spool.pending_received(), (std::vector<fs::path>{older, newer}));
  EXPECT_THROW(spool.commit_received(write_temporary("c"), "../escape"), Error);
  spool.remove(older);
  EXPECT_EQ(spool.pending_received(), std::vector<fs::path>{newer});

  fs::path result = spool.commit_to_outbox(write_temporary("sr"), "1.2.5");
  EXPECT_EQ(spool.pending_outbox(), std::vector<fs::path>{result});
  fs::path dead = spool.move_to_dead_letter(result, "refused with 0xA700");
  EXPECT_TRUE(spool.pending_outbox().empty());
  EXPECT_TRUE(fs::exists(dead));
  std::string reason = read_text_file(spool.dead_letter_dir() / "1.2.5.dcm.reason.txt");
  EXPECT_NE(reason.find("refused with 0xA700"), std::string::npos);
  EXPECT_NE(reason.find("Z "), std::string::npos) << "the reason says when (UTC): " << reason;

  write_temporary("half-written");
  spool.remove_abandoned_temporaries();
  EXPECT_TRUE(fs::is_empty(spool.tmp_dir()));
}

}  // namespace
}  // namespace vitpipe
