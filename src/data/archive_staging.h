// `data prepare` from image archives (NIH's images_0XX.tar.gz), without unpacking them, in two passes.
//
// First every archive is streamed: one decompression stream per archive, advanced by whichever thread is free, so
// up to one archive per thread is read at once and the other threads decode and resize the members read. Each
// image's processed pixels are appended to OUT/staging/ARCHIVE.records as soon as they are ready. Then the cache is
// written in the source's order from those records (packed_cache.cpp), and the staging folder is removed.
//
// The records are what makes a prepare resumable: a run that is killed, or stops at a corrupt archive, keeps every
// record written completely (a torn last one is cut off when the file is next opened), and the next run with the
// same settings skips the members it already holds (same name, size and time in the archive) instead of decoding
// them again. Memory stays bounded: a few compressed members per thread in flight, whatever the dataset's size.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace vitpipe {

class ArchiveStaging {
 public:
  // `dir` is created if absent, and emptied when it was written under other `settings` (what the pixels depend
  // on: size, resize, crop, how images are read). Every record holds record_pixels x channels bytes.
  ArchiveStaging(std::filesystem::path dir, const std::string& settings, size_t record_pixels);
  ~ArchiveStaging();
  ArchiveStaging(const ArchiveStaging&) = delete;
  ArchiveStaging& operator=(const ArchiveStaging&) = delete;

  // Opens (or creates) the records file of one archive and indexes its complete records. Returns its id.
  int open_part(const std::string& archive_name);
  // True when `name` is staged (from whatever member). Thread-safe.
  bool contains(const std::string& name) const;
  // True when `name` is staged from a member of this size and time. Thread-safe.
  bool holds(const std::string& name, int64_t member_size, int64_t member_mtime) const;
  // Appends one image's processed pixels (1 or 3 channels) to part `part`. Thread-safe.
  void append(int part, const std::string& name, int64_t member_size, int64_t member_mtime,
              const std::vector<uint8_t>& pixels, int channels);
  // The staged pixels of `name`; false when it is not staged. Thread-safe.
  bool load(const std::string& name, std::vector<uint8_t>* pixels, int* channels) const;
  size_t size() const;
  const std::filesystem::path& directory() const { return dir_; }
  // Deletes the folder (once the cache is written).
  void remove();

 private:
  struct Staged {
    int part = 0;
    uint64_t offset = 0;  // of the pixels
    int channels = 1;
    int64_t member_size = 0, member_mtime = 0;
  };
  struct Part {
    std::filesystem::path file;
    int fd = -1;
    uint64_t end = 0;
    std::mutex mutex;
  };
  std::filesystem::path dir_;
  size_t record_pixels_;
  std::vector<std::unique_ptr<Part>> parts_;
  mutable std::mutex index_mutex_;
  std::unordered_map<std::string, Staged> index_;
};

// Decodes one image file held in memory into processed pixels (1 or 3 channels); throws when unreadable.
using StagedImageProcessor = std::function<void(const uint8_t* bytes, size_t size, const std::string& name,
                                                std::vector<uint8_t>* pixels, int* channels)>;

struct ArchiveStagingResult {
  int64_t reused = 0;                             // staged by an earlier run
  int64_t decoded = 0;                            // staged by this one
  std::map<std::string, std::string> unreadable;  // image name -> why it could not be decoded
  std::vector<std::string> broken;                // per archive that broke: where and why
  std::string write_error;                        // the staging folder could not be written
};

// Streams `archives` and stages every regular member whose file name is in `wanted` (the first archive holding a
// name wins). stop_at_unreadable: an undecodable image stops the reading (what is in flight is still staged).
ArchiveStagingResult stage_image_archives(const std::vector<std::filesystem::path>& archives,
                                          const std::unordered_set<std::string>& wanted, ArchiveStaging& staging,
                                          const StagedImageProcessor& process, int threads, bool stop_at_unreadable,
                                          bool progress);

}  // namespace vitpipe
