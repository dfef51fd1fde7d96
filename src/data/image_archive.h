// One image archive (NIH ships ChestX-ray14 as images_001.tar.gz .. images_012.tar.gz) read front to back with
// libarchive: member headers and contents in memory, nothing unpacked to disk. tar, optionally gzip-, bzip2- or
// xz-compressed. Errors name the archive and the member where it broke.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

struct archive;

namespace vitpipe {

// NAME.tar.gz, NAME.tgz or NAME.tar.
bool is_image_archive_name(const std::filesystem::path& path);

class ImageArchiveReader {
 public:
  struct Member {
    std::string path;  // as stored ("images/00000001_000.png")
    int64_t size = 0;
    int64_t mtime = 0;  // seconds, as stored
    bool regular = false;
  };

  explicit ImageArchiveReader(const std::filesystem::path& archive);
  ~ImageArchiveReader();
  ImageArchiveReader(const ImageArchiveReader&) = delete;
  ImageArchiveReader& operator=(const ImageArchiveReader&) = delete;

  // The next member's header; false after the last. Throws naming the archive and the member it broke at.
  bool next(Member* member);
  // The current member's contents (once per member; members not read are skipped by next()).
  void read(std::vector<uint8_t>* bytes);
  const std::filesystem::path& path() const { return path_; }

 private:
  [[noreturn]] void broke(const std::string& where);
  ::archive* archive_ = nullptr;
  std::filesystem::path path_;
  std::string current_;  // member whose header was read last
  int64_t current_size_ = 0;
};

}  // namespace vitpipe
