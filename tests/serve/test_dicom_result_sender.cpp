// The result sender against DCMTK's storescp (as a PACS that stores, or refuses) and against vitpipe's own node.
#include <gtest/gtest.h>

#include <fstream>
#include <iostream>

#include "dicom_network_test_support.h"
#include "serve/dicom_result_sender.h"
#include "serve/dicom_spool.h"
#include "serve/dicom_storage_node.h"
#include "util/atomic_file.h"
#include "util/error.h"

namespace vitpipe {
namespace {

using namespace dicom_test;

TEST(ParseDicomDestination, ReadsAeHostAndPort) {
  DicomDestination destination = parse_dicom_destination("PACS@pacs.example.org:104");
  EXPECT_EQ(destination.ae_title, "PACS");
  EXPECT_EQ(destination.host, "pacs.example.org");
  EXPECT_EQ(destination.port, 104);
  DicomDestination ipv6 = parse_dicom_destination("ARCHIVE@[::1]:11112");
  EXPECT_EQ(ipv6.host, "::1");
  EXPECT_EQ(ipv6.port, 11112);
  EXPECT_EQ(to_string(ipv6), "ARCHIVE@[::1]:11112");
}

TEST(ParseDicomDestination, RefusesMalformedTextNamingTheOption) {
  for (const char* text : {"", "pacs:104", "@pacs:104", "PACS@:104", "PACS@pacs", "PACS@pacs:", "PACS@pacs:0",
                           "PACS@pacs:65536", "PACS@pacs:10x", "SEVENTEEN_LETTERS@pacs:104"}) {
    try {
      parse_dicom_destination(text);
      ADD_FAILURE() << "accepted '" << text << "'";
    } catch (const Error& error) {
      std::string message = error.what();
      EXPECT_NE(message.find("--send-results-to"), std::string::npos) << message;
      EXPECT_NE(message.find("AE@HOST:PORT"), std::string::npos) << message;
    }
  }
}

class DicomResultSenderTest : public ::testing::Test {
 protected:
  void TearDown() override {
    if (sender_) sender_->stop();
    if (HasFailure()) std::cerr << "tool output:\n" << read_log() << "\n";
  }

  std::string read_log() const {
    std::ifstream in(log());
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  fs::path log() const { return directory_.path() / "tools.log"; }
  fs::path pacs_dir() const { return directory_.path() / "pacs"; }

  // A result in the outbox, as the SR writer leaves it.
  fs::path put_in_outbox(const std::string& uid) {
    fs::path temporary = spool_.new_temporary_path();
    write_test_image(temporary, uid, UID_SecondaryCaptureImageStorage);
    return spool_.commit_to_outbox(temporary, uid);
  }

  // storescp as the PACS; returns once it listens.
  std::unique_ptr<BackgroundTool> start_storescp(const std::vector<std::string>& extra_options = {}) {
    fs::create_directories(pacs_dir());
    std::vector<std::string> arguments = {"storescp", "-aet", "PACS", "-od", pacs_dir().string()};
    arguments.insert(arguments.end(), extra_options.begin(), extra_options.end());
    arguments.push_back(std::to_string(pacs_port_));
    auto storescp = std::make_unique<BackgroundTool>(arguments, log());
    EXPECT_TRUE(storescp->started());
    EXPECT_TRUE(wait_until([&] { return port_listening(pacs_port_); }, std::chrono::seconds(10)));
    return storescp;
  }

  void start_sender(const std::string& called_ae = "PACS") {
    DicomResultSenderOptions options{.spool = spool_, .destination = {called_ae, "127.0.0.1", pacs_port_}};
    options.calling_ae_title = "VPSENDER";
    options.initial_backoff = std::chrono::milliseconds(100);
    options.max_backoff = std::chrono::milliseconds(400);
    options.max_attempts = 3;
    options.connect_timeout = std::chrono::seconds(2);
    options.acse_timeout = std::chrono::seconds(5);
    options.dimse_timeout = std::chrono::seconds(5);
    options.rescan_interval = std::chrono::seconds(60);  // only notify() or a retry wakes it in these tests
    sender_ = std::make_unique<DicomResultSender>(options);
    sender_->start();
  }

  size_t files_in(const fs::path& dir) const {
    return fs::exists(dir) ? static_cast<size_t>(std::distance(fs::directory_iterator(dir), {})) : 0;
  }
  bool outbox_empty() const { return spool_.pending_outbox().empty(); }
  // Waits for the result to reach dead-letter/ (its reason file is written before it moves) and returns the reason.
  std::string wait_for_dead_letter(const std::string& uid) {
    fs::path dead = spool_.dead_letter_dir() / (uid + ".dcm");
    if (!wait_until([&] { return fs::exists(dead); }, std::chrono::seconds(15))) return "(not dead-lettered)";
    return read_text_file(spool_.dead_letter_dir() / (uid + ".dcm.reason.txt"));
  }

  TemporaryDirectory directory_;
  DicomSpool spool_{directory_.path() / "spool"};
  uint16_t pacs_port_ = free_port();
  std::unique_ptr<DicomResultSender> sender_;
};

TEST_F(DicomResultSenderTest, SendsWhatTheOutboxHeldAtStartToStorescp) {
  put_in_outbox("1.2.826.0.1.3680043.10.5678.1");
  auto storescp = start_storescp();
  start_sender();
  ASSERT_TRUE(wait_until([&] { return outbox_empty(); }, std::chrono::seconds(15)));
  EXPECT_EQ(files_in(pacs_dir()), 1u);
  EXPECT_EQ(files_in(spool_.dead_letter_dir()), 0u);
}

TEST_F(DicomResultSenderTest, NotifyWakesTheSenderForANewResult) {
  auto storescp = start_storescp();
  start_sender();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // idle now, with a 60 s rescan interval
  put_in_outbox("1.2.826.0.1.3680043.10.5678.2");
  sender_->notify();
  ASSERT_TRUE(wait_until([&] { return outbox_empty(); }, std::chrono::seconds(15)));
  EXPECT_EQ(files_in(pacs_dir()), 1u);
}

TEST_F(DicomResultSenderTest, KeepsTheResultWhileNothingListensAndSendsItOnceThePacsIsUp) {
  put_in_outbox("1.2.826.0.1.3680043.10.5678.3");
  start_sender();
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // several refused connections, with back-off
  EXPECT_EQ(spool_.pending_outbox().size(), 1u);
  EXPECT_EQ(files_in(spool_.dead_letter_dir()), 0u);
  auto storescp = start_storescp();
  ASSERT_TRUE(wait_until([&] { return outbox_empty(); }, std::chrono::seconds(15)));
  EXPECT_EQ(files_in(pacs_dir()), 1u);
  EXPECT_EQ(files_in(spool_.dead_letter_dir()), 0u);
}

TEST_F(DicomResultSenderTest, DeadLettersWhatAPacsRefusesWithAReason) {
  put_in_outbox("1.2.826.0.1.3680043.10.5678.4");
  auto storescp = start_storescp({"--refuse"});
  start_sender();
  std::string reason = wait_for_dead_letter("1.2.826.0.1.3680043.10.5678.4");
  EXPECT_TRUE(outbox_empty());
  EXPECT_NE(reason.find("rejected (permanent)"), std::string::npos) << reason;
  EXPECT_NE(reason.find("PACS@127.0.0.1"), std::string::npos) << reason;
}

TEST_F(DicomResultSenderTest, RetriesAPacsThatAbortsThenDeadLetters) {
  put_in_outbox("1.2.826.0.1.3680043.10.5678.9");
  auto storescp = start_storescp({"--abort-after"});
  start_sender();  // max_attempts = 3
  std::string reason = wait_for_dead_letter("1.2.826.0.1.3680043.10.5678.9");
  EXPECT_TRUE(outbox_empty());
  EXPECT_NE(reason.find("A-ABORT"), std::string::npos) << reason;
  EXPECT_NE(reason.find("3 attempts"), std::string::npos) << reason;
}

TEST_F(DicomResultSenderTest, DeadLettersWhenTheCalledAeTitleIsNotThePacs) {
  DicomStorageNode node(
      {.spool = DicomSpool(directory_.path() / "node-spool"), .port = pacs_port_, .ae_title = "REALPACS"});
  node.start(nullptr);
  put_in_outbox("1.2.826.0.1.3680043.10.5678.5");
  start_sender("WRONGPACS");
  std::string reason = wait_for_dead_letter("1.2.826.0.1.3680043.10.5678.5");
  EXPECT_NE(reason.find("Called AE Title Not Recognized"), std::string::npos) << reason;
  sender_->stop();
  node.stop();
}

TEST_F(DicomResultSenderTest, DeadLettersAFailureStatus) {
  // vitpipe's own node as the PACS, unable to store (received/ is a plain file): it answers 0xA700.
  DicomSpool node_spool(directory_.path() / "node-spool");
  fs::remove_all(node_spool.received_dir());
  std::ofstream(node_spool.received_dir()) << "not a directory";
  DicomStorageNode node({.spool = node_spool, .port = pacs_port_, .ae_title = "PACS"});
  node.start(nullptr);
  put_in_outbox("1.2.826.0.1.3680043.10.5678.6");
  start_sender();
  std::string reason = wait_for_dead_letter("1.2.826.0.1.3680043.10.5678.6");
  EXPECT_NE(reason.find("0xA700"), std::string::npos) << reason;
  sender_->stop();
  node.stop();
}

TEST_F(DicomResultSenderTest, DeadLettersAFileTheNodeCannotRead) {
  fs::path temporary = spool_.new_temporary_path();
  std::ofstream(temporary) << "not DICOM";
  spool_.commit_to_outbox(temporary, "1.2.826.0.1.3680043.10.5678.7");
  auto storescp = start_storescp();
  start_sender();
  std::string reason = wait_for_dead_letter("1.2.826.0.1.3680043.10.5678.7");
  EXPECT_NE(reason.find("cannot read"), std::string::npos) << reason;
}

TEST_F(DicomResultSenderTest, StopsPromptlyDuringABackOff) {
  put_in_outbox("1.2.826.0.1.3680043.10.5678.8");
  DicomResultSenderOptions options{.spool = spool_, .destination = {"PACS", "127.0.0.1", pacs_port_}};
  options.initial_backoff = std::chrono::seconds(30);
  options.max_backoff = std::chrono::seconds(60);
  DicomResultSender sender(options);
  sender.start();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the first attempt failed: now in a 30 s back-off
  auto before = std::chrono::steady_clock::now();
  sender.stop();
  EXPECT_LT(std::chrono::steady_clock::now() - before, std::chrono::seconds(2));
  EXPECT_EQ(spool_.pending_outbox().size(), 1u);
}

}  // namespace
}  // namespace vitpipe
