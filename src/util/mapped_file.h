// A read-only memory map of a whole file. Shared so tensors viewing the mapping keep it alive.
#pragma once

#include <cstddef>
#include <filesystem>
#include <memory>

namespace vitpipe {

class MappedFile {
 public:
  static std::shared_ptr<MappedFile> open(const std::filesystem::path& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  const std::filesystem::path& path() const { return path_; }

 private:
  MappedFile() = default;
  std::filesystem::path path_;
  const std::byte* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace vitpipe
