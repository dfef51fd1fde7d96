// What the DICOM node and sender tests share: free loopback ports, temporary spools, DCMTK's command-line tools
// run as processes, and small DX images written with DCMTK.
#pragma once

// clang-format off
#include <dcmtk/config/osconfig.h>  // must come first
// clang-format on
#include <dcmtk/dcmdata/dcdeftag.h>
#include <dcmtk/dcmdata/dcfilefo.h>
#include <dcmtk/dcmdata/dcmetinf.h>
#include <dcmtk/dcmdata/dcuid.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace vitpipe::dicom_test {

namespace fs = std::filesystem;

// A port nobody listens on now: bound to 0, read, closed. Another process could take it meanwhile; unlikely.
inline uint16_t free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  ::bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address));
  socklen_t length = sizeof(address);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  ::close(fd);
  return ntohs(address.sin_port);
}

// True once something listens on the port (a SO_REUSEADDR bind then fails with EADDRINUSE).
inline bool port_listening(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_ANY);
  address.sin_port = htons(port);
  bool in_use = ::bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0 && errno == EADDRINUSE;
  ::close(fd);
  return in_use;
}

inline bool wait_until(const std::function<bool()>& condition, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!condition()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

class TemporaryDirectory {
 public:
  TemporaryDirectory() {
    std::string pattern = (fs::temp_directory_path() / "vitpipe-dicom-test-XXXXXX").string();
    path_ = ::mkdtemp(pattern.data());
  }
  ~TemporaryDirectory() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  TemporaryDirectory(const TemporaryDirectory&) = delete;
  TemporaryDirectory& operator=(const TemporaryDirectory&) = delete;
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// A DCMTK tool run to completion; its output goes to `log` (read it when a test fails). Returns the exit code.
inline int run_tool(const std::vector<std::string>& arguments, const fs::path& log) {
  std::string command;
  for (const std::string& argument : arguments) command += "'" + argument + "' ";
  command += ">>'" + log.string() + "' 2>&1";
  int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// A DCMTK tool running in the background (storescp as a PACS, storescu in parallel), killed when destroyed.
class BackgroundTool {
 public:
  BackgroundTool(const std::vector<std::string>& arguments, const fs::path& log) {
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    std::vector<char*> argv;
    for (const std::string& argument : arguments) argv.push_back(const_cast<char*>(argument.c_str()));
    argv.push_back(nullptr);
    if (::posix_spawnp(&pid_, argv[0], &actions, nullptr, argv.data(), environ) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&actions);
  }
  ~BackgroundTool() {
    if (pid_ > 0 && !exited_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  BackgroundTool(const BackgroundTool&) = delete;
  BackgroundTool& operator=(const BackgroundTool&) = delete;
  bool started() const { return pid_ > 0; }
  // Waits for the process to exit by itself; its exit code (-1 if killed by a signal).
  int wait() {
    int status = 0;
    ::waitpid(pid_, &status, 0);
    exited_ = true;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

 private:
  pid_t pid_ = -1;
  bool exited_ = false;
};

// A small 16-bit monochrome image of the given SOP class (DX for presentation by default), explicit VR LE.
inline void write_test_image(const fs::path& path, const std::string& sop_instance_uid,
                             const std::string& sop_class_uid = UID_DigitalXRayImageStorageForPresentation) {
  DcmFileFormat file;
  DcmDataset* dataset = file.getDataset();
  dataset->putAndInsertString(DCM_SOPClassUID, sop_class_uid.c_str());
  dataset->putAndInsertString(DCM_SOPInstanceUID, sop_instance_uid.c_str());
  dataset->putAndInsertString(DCM_StudyInstanceUID, (sop_instance_uid + ".1").c_str());
  dataset->putAndInsertString(DCM_SeriesInstanceUID, (sop_instance_uid + ".2").c_str());
  dataset->putAndInsertString(DCM_PatientID, "TEST-0001");
  dataset->putAndInsertString(DCM_PatientName, "Test^Patient");
  dataset->putAndInsertString(DCM_Modality, "DX");
  dataset->putAndInsertString(DCM_PhotometricInterpretation, "MONOCHROME2");
  dataset->putAndInsertUint16(DCM_SamplesPerPixel, 1);
  const Uint16 rows = 32, columns = 48;
  dataset->putAndInsertUint16(DCM_Rows, rows);
  dataset->putAndInsertUint16(DCM_Columns, columns);
  dataset->putAndInsertUint16(DCM_BitsAllocated, 16);
  dataset->putAndInsertUint16(DCM_BitsStored, 12);
  dataset->putAndInsertUint16(DCM_HighBit, 11);
  dataset->putAndInsertUint16(DCM_PixelRepresentation, 0);
  std::vector<Uint16> pixels(rows * columns);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<Uint16>((i * 37) % 4096);
  dataset->putAndInsertUint16Array(DCM_PixelData, pixels.data(), static_cast<unsigned long>(pixels.size()));
  file.saveFile(path.c_str(), EXS_LittleEndianExplicit);
}

}  // namespace vitpipe::dicom_test
