// Stop signals and the comm-deadline watchdog (util/stop_request.h, parallel/comm_deadline.h): a signal only sets the
// flag, the watchdog only writes its line, and the process goes on until its owner ends it; the watchdog is joined
// before exit. Also built under ThreadSanitizer (tests/tsan).
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "parallel/comm_deadline.h"
#include "util/stop_request.h"

namespace vitpipe {
namespace {

std::string read_all(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(StopRequest, SigtermDuringACommunicationLeavesTheExitToTheRun) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("vitpipe_stop_request_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  configure_comm_deadline(0, (dir / "failures.log").string());  // no deadline: only the SIGTERM line
  set_comm_deadline_rank(0);                                    // starts the watchdog
  install_stop_handlers();
  EXPECT_EQ(stop_signal(), 0);
  {
    BlockingCommunication blocked("a receive of 8 bytes from rank 1");
    std::raise(SIGTERM);
    std::this_thread::sleep_for(std::chrono::milliseconds(400));  // the watchdog looks 10 times a second
  }
  EXPECT_EQ(stop_signal(), SIGTERM);  // and this process is still here: nothing ended it
  std::raise(SIGUSR1);
  EXPECT_EQ(stop_signal(), SIGTERM);  // the first signal counts
  EXPECT_EQ(stop_exit_status(stop_signal()), 143);
  end_comm_watchdog();  // returns: the watchdog has ended
  const std::string log = read_all(dir / "failures.log");
  EXPECT_NE(log.find("error: rank 0: SIGTERM ("), std::string::npos) << log;
  EXPECT_NE(log.find("while waiting"), std::string::npos) << log;
  EXPECT_NE(log.find("a receive of 8 bytes from rank 1: stopping at the next step boundary"), std::string::npos) << log;
  EXPECT_EQ(log.find('\n'), log.size() - 1) << "one line: " << log;
  std::filesystem::remove_all(dir);
}

TEST(StopRequestDeathTest, ASecondSigintStopsAtOnce) {
  EXPECT_EXIT(
      {
        install_stop_handlers();
        std::raise(SIGINT);
        if (stop_signal() != SIGINT) std::_Exit(3);
        std::raise(SIGINT);
        std::_Exit(4);  // not reached
      },
      testing::ExitedWithCode(130), "SIGINT again: stopping now");
}

TEST(StopRequestDeathTest, ASecondSigtermChangesNothing) {
  EXPECT_EXIT(
      {
        install_stop_handlers();
        std::raise(SIGTERM);
        std::raise(SIGTERM);
        std::_Exit(stop_signal() == SIGTERM ? 7 : 3);
      },
      testing::ExitedWithCode(7), "SIGTERM: stopping at the next step");
}

}  // namespace
}  // namespace vitpipe
