// `data prepare` from image archives (issue 46), through the library: the bundled sample packed into three .tar.gz
// archives (written here with libarchive, members images/NAME.png as NIH's) prepares into the same pixels.u8 and
// index.json as the unpacked folder, at 1 and 3 threads; a truncated archive fails naming it and its member, keeps the
// images decoded before the break, and the next run decodes only the rest. Also built into test_threads_tsan, so the
// archive streams and the decode threads run under ThreadSanitizer.
#include <archive.h>
#include <archive_entry.h>

#include <algorithm>
#include <cstdio>

#include "data/file_dataset.h"
#include "data/image_archive.h"
#include "data/packed_cache.h"
#include "test_helpers.h"
#include "util/atomic_file.h"
#include "util/log.h"

namespace vitpipe {
namespace {

using testing::copy_sample;
using testing::expect_error;
using testing::sample_dir;
using testing::TempDir;
using testing::write_file;
namespace fs = std::filesystem;

void write_tar_gz(const fs::path& target, const std::vector<fs::path>& files) {
  archive* out = archive_write_new();
  ASSERT_EQ(archive_write_add_filter_gzip(out), ARCHIVE_OK);
  ASSERT_EQ(archive_write_set_format_pax_restricted(out), ARCHIVE_OK);
  ASSERT_EQ(archive_write_open_filename(out, target.c_str()), ARCHIVE_OK);
  for (const auto& file : files) {
    const std::string bytes = read_text_file(file);
    archive_entry* entry = archive_entry_new();
    archive_entry_set_pathname(entry, ("images/" + file.filename().string()).c_str());
    archive_entry_set_size(entry, static_cast<la_int64_t>(bytes.size()));
    archive_entry_set_filetype(entry, AE_IFREG);
    archive_entry_set_perm(entry, 0644);
    archive_entry_set_mtime(entry, 1500000000, 0);
    ASSERT_EQ(archive_write_header(out, entry), ARCHIVE_OK);
    ASSERT_EQ(archive_write_data(out, bytes.data(), bytes.size()), static_cast<la_ssize_t>(bytes.size()));
    archive_entry_free(entry);
  }
  ASSERT_EQ(archive_write_close(out), ARCHIVE_OK);
  archive_write_free(out);
}

PrepareCacheOptions quiet(int threads) {
  PrepareCacheOptions options;
  options.image_size = 16;
  options.threads = threads;
  options.progress = false;
  return options;
}

void expect_same_cache(const fs::path& a, const fs::path& b) {
  for (const char* name : {"pixels.u8", "index.json"})
    EXPECT_TRUE(read_text_file(a / name) == read_text_file(b / name)) << name << " of " << a << " and " << b;
}

class ArchivePrepare : public ::testing::Test {
 protected:
  void SetUp() override {
    copy_sample(dir_ / "folder");
    prepare_packed_cache(*open_chestxray14_dataset(dir_ / "folder", DatasetOptions{}), dir_ / "from_folder", quiet(2));
    fs::create_directories(dir_ / "packed");
    for (const char* name : {"Data_Entry_2017_v2020.csv", "train_val_list.txt", "test_list.txt"})
      fs::copy_file(sample_dir() / name, dir_ / "packed" / name);
    std::vector<fs::path> images;
    for (const auto& e : fs::directory_iterator(sample_dir() / "images")) images.push_back(e.path());
    std::sort(images.begin(), images.end());
    for (size_t a = 0; a < 3; ++a) {
      const auto begin = images.begin() + static_cast<std::ptrdiff_t>(a * images.size() / 3);
      const auto end = images.begin() + static_cast<std::ptrdiff_t>((a + 1) * images.size() / 3);
      parts_.emplace_back(begin, end);
      write_tar_gz(archive(a), parts_.back());
    }
  }
  fs::path archive(size_t a) const { return dir_ / "packed" / ("images_00" + std::to_string(a + 1) + ".tar.gz"); }
  TempDir dir_;
  std::vector<std::vector<fs::path>> parts_;
};

TEST_F(ArchivePrepare, EqualsTheFolderWhateverTheThreads) {
  auto packed = open_chestxray14_dataset(dir_ / "packed", DatasetOptions{});
  ASSERT_EQ(packed->source().archives.size(), 3u);
  for (int threads : {1, 3}) {
    const fs::path out = dir_ / ("from_archives_" + std::to_string(threads));
    const PrepareCacheReport report = prepare_packed_cache(*packed, out, quiet(threads));
    EXPECT_EQ(report.images, 1000);
    expect_same_cache(dir_ / "from_folder", out);
    EXPECT_FALSE(fs::exists(out / "staging"));
  }
  // Training reads the cache, never the archives.
  expect_error([&] { packed->load(0); }, {"inside the .tar.gz archives", "data prepare"});
}

TEST_F(ArchivePrepare, TruncatedArchiveKeepsWhatWasDecodedAndTheNextRunFinishes) {
  const std::string whole = read_text_file(archive(1));
  write_file(archive(1), whole.substr(0, whole.size() / 2));
  auto packed = open_chestxray14_dataset(dir_ / "packed", DatasetOptions{});
  const fs::path out = dir_ / "resumed";
  set_log_enabled(false);
  expect_error([&] { prepare_packed_cache(*packed, out, quiet(2)); },
               {"images_002.tar.gz: corrupt or truncated", "member images/", "decoded so far are kept"});
  EXPECT_FALSE(fs::exists(out / "manifest.json"));
  // The other two archives and the first part of the broken one were staged.
  const auto staged = fs::file_size(out / "staging" / "images_001.tar.gz.records") +
                      fs::file_size(out / "staging" / "images_002.tar.gz.records") +
                      fs::file_size(out / "staging" / "images_003.tar.gz.records");
  EXPECT_GT(fs::file_size(out / "staging" / "images_002.tar.gz.records"), 0u);
  EXPECT_GT(staged, 2 * parts_[0].size() * 16 * 16);

  write_file(archive(1), whole);
  packed = open_chestxray14_dataset(dir_ / "packed", DatasetOptions{});
  const PrepareCacheReport report = prepare_packed_cache(*packed, out, quiet(2));
  set_log_enabled(true);
  EXPECT_EQ(report.images, 1000);
  expect_same_cache(dir_ / "from_folder", out);
  EXPECT_FALSE(fs::exists(out / "staging"));
}

// Hostile or broken files: one error naming the file, never a crash or a huge allocation.
TEST(ImageArchiveReader, RefusesWhatIsNotAnArchiveOrLies) {
  TempDir dir;
  write_file(dir / "images_001.tar.gz", std::string(5000, 'x'));
  expect_error(
      [&] {
        ImageArchiveReader reader(dir / "images_001.tar.gz");
        ImageArchiveReader::Member member;
        while (reader.next(&member)) {
        }
      },
      {"images_001.tar.gz"});

  // A member whose header claims more bytes than any image may have (8 GiB - 1, the most a ustar header holds), written
  // by hand: libarchive's writer would pad the member out to its size.
  std::string header(512, '\0');
  auto field = [&](size_t at, const std::string& text) { header.replace(at, text.size(), text); };
  field(0, "images/huge.png");
  field(100, "0000644");
  field(108, "0000000");
  field(116, "0000000");
  field(124, "77777777777");
  field(136, "13000000000");
  field(156, "0");
  field(257, std::string("ustar\0", 6) + "00");
  field(148, "        ");
  unsigned sum = 0;
  for (unsigned char c : header) sum += c;
  char checksum[8];
  std::snprintf(checksum, sizeof checksum, "%06o", sum);
  field(148, std::string(checksum, 6) + std::string("\0 ", 2));
  write_file(dir / "images_002.tar", header + std::string(4096, 'p'));
  ImageArchiveReader reader(dir / "images_002.tar");
  ImageArchiveReader::Member member;
  ASSERT_TRUE(reader.next(&member));
  EXPECT_EQ(member.path, "images/huge.png");
  std::vector<uint8_t> bytes;
  expect_error([&] { reader.read(&bytes); }, {"images_002.tar", "images/huge.png", "VITPIPE_MAX_IMAGE_PIXELS"});
  EXPECT_TRUE(bytes.empty());
}

}  // namespace
}  // namespace vitpipe
