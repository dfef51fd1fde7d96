#include "data/archive_staging.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <thread>

#include "data/image_archive.h"
#include "util/atomic_file.h"
#include "util/error.h"
#include "util/log.h"
#include "util/progress.h"

namespace vitpipe {
namespace {

namespace fs = std::filesystem;

constexpr uint32_t kRecordMagic = 0x31525056;  // "VPR1"
constexpr uint32_t kMaxNameBytes = 4096;
constexpr const char* kSettingsName = "settings.txt";

// A record: this header, the image name, then its pixels. Native byte order: a staging folder never leaves the
// machine that wrote it.
struct RecordHeader {
  uint32_t magic = kRecordMagic;
  uint32_t name_bytes = 0;
  int64_t member_size = 0;
  int64_t member_mtime = 0;
  uint32_t channels = 0;
  uint32_t crc = 0;  // of the name and the pixels: a record cut short by a kill is recognised
};

uint32_t record_crc(const std::string& name, const uint8_t* pixels, size_t size) {
  uLong crc = crc32(0, reinterpret_cast<const Bytef*>(name.data()), static_cast<uInt>(name.size()));
  return static_cast<uint32_t>(crc32(crc, pixels, static_cast<uInt>(size)));
}

bool read_exactly(int fd, void* data, size_t size, uint64_t offset) {
  auto* p = static_cast<uint8_t*>(data);
  while (size > 0) {
    const ssize_t n = ::pread(fd, p, size, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
  return true;
}

}  // namespace

ArchiveStaging::ArchiveStaging(fs::path dir, const std::string& settings, size_t record_pixels)
    : dir_(std::move(dir)), record_pixels_(record_pixels) {
  std::error_code ec;
  const fs::path settings_file = dir_ / kSettingsName;
  if (fs::exists(settings_file, ec) && read_text_file(settings_file) != settings) {
    info(dir_.string(), ": staged images were made with other settings; starting again");
    fs::remove_all(dir_, ec);
  }
  fs::create_directories(dir_, ec);
  VP_REQUIRE(!ec, dir_.string(), ": cannot create the staging folder (", ec.message(), ")");
  if (!fs::exists(settings_file)) write_text_file_atomically(settings_file, settings);
}

ArchiveStaging::~ArchiveStaging() {
  for (auto& part : parts_)
    if (part->fd >= 0) ::close(part->fd);
}

int ArchiveStaging::open_part(const std::string& archive_name) {
  auto part = std::make_unique<Part>();
  part->file = dir_ / (archive_name + ".records");
  part->fd = ::open(part->file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  VP_REQUIRE(part->fd >= 0, "cannot open ", part->file.string(), ": ", std::strerror(errno));
  const int id = static_cast<int>(parts_.size());
  // Index the complete records; the first one that is not (a kill mid-write) and all after it are cut off.
  const auto file_size = static_cast<uint64_t>(::lseek(part->fd, 0, SEEK_END));
  uint64_t offset = 0;
  std::vector<uint8_t> pixels;
  std::string name;
  std::lock_guard lock(index_mutex_);
  while (offset + sizeof(RecordHeader) <= file_size) {
    RecordHeader header;
    if (!read_exactly(part->fd, &header, sizeof header, offset)) break;
    if (header.magic != kRecordMagic || header.name_bytes == 0 || header.name_bytes > kMaxNameBytes ||
        (header.channels != 1 && header.channels != 3))
      break;
    const uint64_t pixel_bytes = record_pixels_ * header.channels;
    const uint64_t record_end = offset + sizeof header + header.name_bytes + pixel_bytes;
    if (record_end > file_size) break;
    name.resize(header.name_bytes);
    pixels.resize(pixel_bytes);
    if (!read_exactly(part->fd, name.data(), name.size(), offset + sizeof header) ||
        !read_exactly(part->fd, pixels.data(), pixels.size(), offset + sizeof header + header.name_bytes) ||
        record_crc(name, pixels.data(), pixels.size()) != header.crc)
      break;
    index_.try_emplace(name, Staged{id, offset + sizeof header + header.name_bytes, static_cast<int>(header.channels),
                                    header.member_size, header.member_mtime});
    offset = record_end;
  }
  if (offset < file_size) {
    warn(part->file.string(), ": cutting off ", file_size - offset, " bytes after its last complete record");
    VP_REQUIRE(::ftruncate(part->fd, static_cast<off_t>(offset)) == 0, "cannot truncate ", part->file.string(), ": ",
               std::strerror(errno));
  }
  part->end = offset;
  parts_.push_back(std::move(part));
  return id;
}

bool ArchiveStaging::contains(const std::string& name) const {
  std::lock_guard lock(index_mutex_);
  return index_.contains(name);
}

bool ArchiveStaging::holds(const std::string& name, int64_t member_size, int64_t member_mtime) const {
  std::lock_guard lock(index_mutex_);
  const auto it = index_.find(name);
  return it != index_.end() && it->second.member_size == member_size && it->second.member_mtime == member_mtime;
}

void ArchiveStaging::append(int part_id, const std::string& name, int64_t member_size, int64_t member_mtime,
                            const std::vector<uint8_t>& pixels, int channels) {
  VP_REQUIRE((channels == 1 || channels == 3) && pixels.size() == record_pixels_ * static_cast<size_t>(channels) &&
                 !name.empty() && name.size() <= kMaxNameBytes,
             "staging ", name, ": unexpected record (", pixels.size(), " bytes, ", channels, " channels)");
  RecordHeader header;
  header.name_bytes = static_cast<uint32_t>(name.size());
  header.member_size = member_size;
  header.member_mtime = member_mtime;
  header.channels = static_cast<uint32_t>(channels);
  header.crc = record_crc(name, pixels.data(), pixels.size());
  std::vector<uint8_t> record(sizeof header + name.size() + pixels.size());
  std::memcpy(record.data(), &header, sizeof header);
  std::memcpy(record.data() + sizeof header, name.data(), name.size());
  std::memcpy(record.data() + sizeof header + name.size(), pixels.data(), pixels.size());

  Part& part = *parts_.at(static_cast<size_t>(part_id));
  uint64_t offset = 0;
  {
    std::lock_guard lock(part.mutex);
    offset = part.end;
    size_t done = 0;
    while (done < record.size()) {
      const ssize_t n =
          ::pwrite(part.fd, record.data() + done, record.size() - done, static_cast<off_t>(offset + done));
      if (n < 0 && errno == EINTR) continue;
      VP_REQUIRE(n > 0, "cannot write ", part.file.string(), ": ", std::strerror(errno));
      done += static_cast<size_t>(n);
    }
    part.end += record.size();
  }
  std::lock_guard lock(index_mutex_);
  index_.insert_or_assign(name,
                          Staged{part_id, offset + sizeof header + name.size(), channels, member_size, member_mtime});
}

bool ArchiveStaging::load(const std::string& name, std::vector<uint8_t>* pixels, int* channels) const {
  Staged staged;
  {
    std::lock_guard lock(index_mutex_);
    const auto it = index_.find(name);
    if (it == index_.end()) return false;
    staged = it->second;
  }
  const Part& part = *parts_[static_cast<size_t>(staged.part)];
  pixels->resize(record_pixels_ * static_cast<size_t>(staged.channels));
  VP_REQUIRE(read_exactly(part.fd, pixels->data(), pixels->size(), staged.offset), "cannot read ", part.file.string(),
             ": ", std::strerror(errno));
  *channels = staged.channels;
  return true;
}

size_t ArchiveStaging::size() const {
  std::lock_guard lock(index_mutex_);
  return index_.size();
}

void ArchiveStaging::remove() {
  for (auto& part : parts_)
    if (part->fd >= 0) {
      ::close(part->fd);
      part->fd = -1;
    }
  std::error_code ec;
  fs::remove_all(dir_, ec);
}

ArchiveStagingResult stage_image_archives(const std::vector<fs::path>& archives,
                                          const std::unordered_set<std::string>& wanted, ArchiveStaging& staging,
                                          const StagedImageProcessor& process, int threads, bool stop_at_unreadable,
                                          bool progress) {
  struct Job {
    std::string name, where;  // image name; "ARCHIVE:MEMBER" for messages
    int part = 0;
    int64_t size = 0, mtime = 0;
    std::vector<uint8_t> bytes;
  };
  struct Stream {
    fs::path path;
    int part = 0;
    std::unique_ptr<ImageArchiveReader> reader;
    bool busy = false, done = false;
  };
  std::vector<Stream> streams(archives.size());
  for (size_t a = 0; a < archives.size(); ++a) {
    streams[a].path = archives[a];
    streams[a].part = staging.open_part(archives[a].filename().string());
  }
  ArchiveStagingResult result;
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<Job> jobs;                    // read, waiting for a thread to decode them
  std::unordered_set<std::string> claimed;  // names met in this run (the first archive holding one wins)
  const size_t max_jobs = static_cast<size_t>(2 * threads + 2);  // bounds the compressed bytes held in memory
  bool stop_reading = false;
  int busy = 0;
  size_t next_stream = 0;
  // The bar counts what is left to decode, so that its rate and ETA are this run's, not inflated by what an earlier
  // run staged.
  int64_t staged_before = 0;
  for (const auto& name : wanted) staged_before += staging.contains(name) ? 1 : 0;
  ProgressBar bar("decode archives", static_cast<int64_t>(wanted.size()) - staged_before, "img");
  auto report = [&] {  // under the lock
    if (progress)
      bar.update(result.decoded + static_cast<int64_t>(result.unreadable.size()),
                 staged_before > 0 ? concat(result.reused, " kept from an earlier run") : "");
  };
  auto idle_stream = [&]() -> int {
    for (size_t k = 0; k < streams.size(); ++k) {
      const size_t a = (next_stream + k) % streams.size();
      if (!streams[a].busy && !streams[a].done) return static_cast<int>(a);
    }
    return -1;
  };
  auto all_read = [&] {
    for (const auto& s : streams)
      if (!s.done) return false;
    return true;
  };

  // Reads members of stream `s` up to the next one to decode. Outside the lock: the stream is this thread's.
  auto read_member = [&](Stream& s, Job* job) -> bool {
    if (!s.reader) s.reader = std::make_unique<ImageArchiveReader>(s.path);
    ImageArchiveReader::Member member;
    while (s.reader->next(&member)) {
      if (!member.regular) continue;
      std::string name = fs::path(member.path).filename().string();
      if (!wanted.contains(name)) continue;
      {
        std::lock_guard lock(mutex);
        if (!claimed.insert(name).second) continue;
        if (staging.holds(name, member.size, member.mtime)) {
          result.reused++;
          report();
          continue;
        }
      }
      job->name = std::move(name);
      job->where = s.path.filename().string() + ":" + member.path;
      job->part = s.part;
      job->size = member.size;
      job->mtime = member.mtime;
      s.reader->read(&job->bytes);
      return true;
    }
    return false;
  };

  auto worker = [&] {
    std::vector<uint8_t> pixels;
    std::unique_lock lock(mutex);
    while (true) {
      changed.wait(lock, [&] {
        return !jobs.empty() || (!stop_reading && idle_stream() >= 0) || (busy == 0 && (stop_reading || all_read()));
      });
      const int a = stop_reading || jobs.size() >= max_jobs ? -1 : idle_stream();
      if (a >= 0) {  // advance a stream
        Stream& s = streams[static_cast<size_t>(a)];
        s.busy = true;
        ++busy;
        next_stream = static_cast<size_t>(a) + 1;
        lock.unlock();
        Job job;
        bool got = false;
        std::string error;
        try {
          got = read_member(s, &job);
        } catch (const std::exception& e) {
          error = e.what();
        }
        if (!got) s.reader.reset();  // at its end or broken: its memory goes back at once
        lock.lock();
        s.busy = false;
        --busy;
        if (!got) s.done = true;
        if (!error.empty()) result.broken.push_back(error);
        if (got) jobs.push_back(std::move(job));
        changed.notify_all();
      } else if (!jobs.empty()) {  // decode one read member
        Job job = std::move(jobs.back());
        jobs.pop_back();
        changed.notify_all();
        lock.unlock();
        int channels = 0;
        std::string unreadable, write_error;
        try {
          process(job.bytes.data(), job.bytes.size(), job.where, &pixels, &channels);
          try {
            staging.append(job.part, job.name, job.size, job.mtime, pixels, channels);
          } catch (const std::exception& e) {
            write_error = e.what();
          }
        } catch (const std::exception& e) {
          unreadable = e.what();
          if (unreadable.empty()) unreadable = job.where + ": unreadable";
        }
        lock.lock();
        if (!write_error.empty()) {
          if (result.write_error.empty()) result.write_error = write_error;
          stop_reading = true;
        } else if (!unreadable.empty()) {
          result.unreadable.emplace(job.name, unreadable);
          if (stop_at_unreadable) stop_reading = true;
        } else {
          result.decoded++;
        }
        report();
        changed.notify_all();
      } else if (busy == 0 && (stop_reading || all_read())) {
        return;
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 0; t < std::max(1, threads); ++t) pool.emplace_back(worker);
  for (auto& t : pool) t.join();
  if (progress && result.broken.empty() && result.write_error.empty() && result.unreadable.empty())
    bar.finish(staged_before > 0 ? concat(result.reused, " kept from an earlier run") : "");
  return result;
}

}  // namespace vitpipe
