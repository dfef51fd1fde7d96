// The spool holds patient data: private directories and files whatever the umask, and a dead-letter folder that
// cannot grow without bound.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "serve/dicom_spool.h"
#include "util/error.h"

namespace vitpipe {
namespace {

namespace fs = std::filesystem;

fs::path fresh_directory(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / concat("vitpipe-spool-", name, "-", ::getpid());
  fs::remove_all(dir);
  return dir;
}

fs::perms mode_of(const fs::path& path) { return fs::status(path).permissions() & fs::perms::all; }

void write_bytes(const fs::path& path, size_t bytes) {
  std::ofstream out(path, std::ios::binary);
  out << std::string(bytes, 'x');
}

// Restores the umask however the test ends.
struct Umask {
  explicit Umask(mode_t mask) : previous(::umask(mask)) {}
  ~Umask() { ::umask(previous); }
  mode_t previous;
};

TEST(DicomSpool, DirectoriesAndFilesArePrivateWhateverTheUmask) {
  const Umask open_umask(0);
  const fs::path root = fresh_directory("private");
  fs::create_directories(root / "received");
  write_bytes(root / "received" / "1.2.3.dcm", 10);  // left readable by an earlier version
  fs::permissions(root / "received" / "1.2.3.dcm", fs::perms::all);
  const DicomSpool spool(root);
  for (const fs::path& dir : {root, spool.received_dir(), spool.outbox_dir(), spool.dead_letter_dir(), spool.tmp_dir()})
    EXPECT_EQ(mode_of(dir), fs::perms::owner_all) << dir;
  EXPECT_EQ(mode_of(root / "received" / "1.2.3.dcm"), fs::perms::owner_read | fs::perms::owner_write);

  const fs::path temporary = spool.new_temporary_path();
  write_bytes(temporary, 10);
  const fs::path outbox = spool.commit_to_outbox(temporary, "1.2.4");
  EXPECT_EQ(mode_of(outbox), fs::perms::owner_read | fs::perms::owner_write);
  const fs::path dead = spool.move_to_dead_letter(outbox, "refused");
  fs::path reason = dead;
  reason += ".reason.txt";
  EXPECT_EQ(mode_of(dead), fs::perms::owner_read | fs::perms::owner_write);
  EXPECT_EQ(mode_of(reason), fs::perms::owner_read | fs::perms::owner_write);
  fs::remove_all(root);
}

TEST(DicomSpool, DeadLetterDropsTheOldestPastItsLimit) {
  const fs::path root = fresh_directory("dead-letter");
  const DicomSpool spool(root, 2500);  // room for two 1,000-byte results with their reasons, not three
  std::vector<fs::path> dead;
  for (const char* uid : {"1.1", "1.2", "1.3", "1.4"}) {
    const fs::path temporary = spool.new_temporary_path();
    write_bytes(temporary, 1000);
    dead.push_back(spool.move_to_dead_letter(spool.commit_to_outbox(temporary, uid), "refused by PACS"));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // distinct modification times
  }
  EXPECT_FALSE(fs::exists(dead[0]));
  EXPECT_FALSE(fs::exists(dead[1]));
  EXPECT_TRUE(fs::exists(dead[2]));
  EXPECT_TRUE(fs::exists(dead[3]));
  fs::path dropped_reason = dead[0];
  dropped_reason += ".reason.txt";
  EXPECT_FALSE(fs::exists(dropped_reason)) << "a dropped result leaves its reason behind";

  // One result larger than the limit alone is still kept: the newest is never dropped.
  const DicomSpool tiny(root, 10);
  const fs::path temporary = tiny.new_temporary_path();
  write_bytes(temporary, 1000);
  const fs::path newest = tiny.move_to_dead_letter(tiny.commit_to_outbox(temporary, "1.5"), "refused");
  EXPECT_TRUE(fs::exists(newest));
  EXPECT_FALSE(fs::exists(dead[3]));
  fs::remove_all(root);
}

}  // namespace
}  // namespace vitpipe
