#include "data/image_archive.h"

#include <archive.h>
#include <archive_entry.h>

#include <algorithm>

#include "util/error.h"
#include "util/size_limits.h"

namespace vitpipe {

bool is_image_archive_name(const std::filesystem::path& path) {
  const std::string name = path.filename().string();
  return name.ends_with(".tar.gz") || name.ends_with(".tgz") || name.ends_with(".tar");
}

ImageArchiveReader::ImageArchiveReader(const std::filesystem::path& archive) : path_(archive) {
  archive_ = archive_read_new();
  VP_REQUIRE(archive_ != nullptr, path_.string(), ": libarchive could not allocate a reader");
  archive_read_support_filter_gzip(archive_);
  archive_read_support_filter_bzip2(archive_);
  archive_read_support_filter_xz(archive_);
  archive_read_support_format_tar(archive_);
  // 1 MiB reads: few system calls, and the decompressed window is libarchive's own, not a copy of the file.
  if (archive_read_open_filename(archive_, path_.c_str(), 1 << 20) != ARCHIVE_OK) {
    const std::string why = archive_error_string(archive_) ? archive_error_string(archive_) : "unknown error";
    archive_read_free(archive_);
    archive_ = nullptr;
    fail(path_.string(), ": cannot open as a tar archive (", why, ")");
  }
}

ImageArchiveReader::~ImageArchiveReader() {
  if (archive_) archive_read_free(archive_);
}

void ImageArchiveReader::broke(const std::string& where) {
  const char* why = archive_error_string(archive_);
  fail(path_.string(), ": corrupt or truncated ", where, " (", why ? why : "unknown error", ")");
}

bool ImageArchiveReader::next(Member* member) {
  archive_entry* entry = nullptr;
  const int status = archive_read_next_header(archive_, &entry);
  if (status == ARCHIVE_EOF) return false;
  if (status != ARCHIVE_OK && status != ARCHIVE_WARN)  // a header that does not parse: the break is before it
    broke(current_.empty() ? std::string("at its first member") : "after member " + current_);
  const char* name = archive_entry_pathname(entry);
  current_ = name ? name : "";
  member->path = current_;
  member->size = archive_entry_size_is_set(entry) ? archive_entry_size(entry) : 0;
  member->mtime = archive_entry_mtime_is_set(entry) ? archive_entry_mtime(entry) : 0;
  member->regular = archive_entry_filetype(entry) == AE_IFREG;
  current_size_ = member->size;
  return true;
}

void ImageArchiveReader::read(std::vector<uint8_t>* bytes) {
  // An image file larger than its decoded pixels could be is a broken header, not an image.
  const int64_t limit = std::max<int64_t>(max_image_pixels() * 8, 1 << 20);
  VP_REQUIRE(current_size_ >= 0 && current_size_ <= limit, path_.string(), ": member ", current_, " claims ",
             current_size_, " bytes (more than VITPIPE_MAX_IMAGE_PIXELS allows for an image)");
  bytes->resize(static_cast<size_t>(current_size_));
  size_t done = 0;
  while (done < bytes->size()) {
    const la_ssize_t n = archive_read_data(archive_, bytes->data() + done, bytes->size() - done);
    if (n < 0) broke("in member " + current_);
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  if (done != bytes->size()) broke("in member " + current_);
}

}  // namespace vitpipe
