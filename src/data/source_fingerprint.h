// What a packed cache was made from, condensed to digests: if any of it changes, the cache is stale.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "data/file_dataset.h"

namespace vitpipe {

struct SourceFingerprint {
  std::string metadata_sha256;  // names and contents of the label / split files
  std::string images_sha256;    // every image's name, byte size and modification time (ns), in source order
  int64_t image_count = 0;

  bool operator==(const SourceFingerprint&) const = default;
};

// `reading` (how the images are turned into pixels: the image read options) is part of the metadata digest.
SourceFingerprint fingerprint_source(const FileDataset::Source& source, const std::string& reading = "");

std::string sha256_hex(const void* data, size_t size);
std::string sha256_file_hex(const std::filesystem::path& path);

}  // namespace vitpipe
