#include "data/source_fingerprint.h"

#include <openssl/evp.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>

#include "util/digest_hex.h"
#include "util/error.h"

namespace vitpipe {
namespace {

class Sha256 {
 public:
  Sha256() : ctx_(EVP_MD_CTX_new(), EVP_MD_CTX_free) {
    VP_REQUIRE(ctx_ && EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr) == 1, "sha256: OpenSSL init failed");
  }
  void update(const void* data, size_t size) { EVP_DigestUpdate(ctx_.get(), data, size); }
  void update(const std::string& text) { update(text.data(), text.size() + 1); }  // with the NUL: unambiguous
  std::string hex() { return finish_digest_hex(ctx_.get()); }

 private:
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx_;
};

void hash_file_into(Sha256& hash, const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  VP_REQUIRE(in, "cannot open ", path.string(), ": ", std::strerror(errno));
  std::vector<char> buffer(1 << 20);
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    hash.update(buffer.data(), static_cast<size_t>(in.gcount()));
  }
  VP_REQUIRE(!in.bad(), "cannot read ", path.string());
}

}  // namespace

std::string sha256_hex(const void* data, size_t size) {
  Sha256 hash;
  hash.update(data, size);
  return hash.hex();
}

std::string sha256_file_hex(const std::filesystem::path& path) {
  Sha256 hash;
  hash_file_into(hash, path);
  return hash.hex();
}

SourceFingerprint fingerprint_source(const FileDataset::Source& source, const std::string& reading) {
  SourceFingerprint fp;
  Sha256 metadata;
  metadata.update(source.kind);
  if (!reading.empty()) metadata.update("reading:" + reading);
  for (const auto& [key, value] : source.listing_options) metadata.update(key + "=" + value);
  for (const auto& file : source.metadata_files) {
    metadata.update(file.filename().string());
    hash_file_into(metadata, file);
  }
  fp.metadata_sha256 = metadata.hex();

  Sha256 images;
  auto add_file = [&](const std::filesystem::path& path) {
    struct stat info {};
    VP_REQUIRE(::stat(path.c_str(), &info) == 0, "cannot stat ", path.string(), ": ", std::strerror(errno));
    int64_t record[3] = {static_cast<int64_t>(info.st_size), static_cast<int64_t>(info.st_mtim.tv_sec),
                         static_cast<int64_t>(info.st_mtim.tv_nsec)};
    images.update(record, sizeof(record));
  };
  // Images inside archives: the names listed, and each archive's name, size and time (never its members: that
  // would read 45 GB each time a cache is opened).
  for (const auto& archive : source.archives) {
    images.update("archive:" + archive.filename().string());
    add_file(archive);
  }
  for (size_t i = 0; i < source.entries.size(); ++i) {
    const auto& path = source.paths[i];
    if (path.empty()) {
      images.update("archived:" + source.entries[i].item.name);
      continue;
    }
    images.update(source.entries[i].item.name);
    add_file(path);
  }
  for (const auto& m : source.missing) images.update("missing:" + m.item.name);
  fp.images_sha256 = images.hex();
  fp.image_count = static_cast<int64_t>(source.entries.size());
  return fp;
}

}  // namespace vitpipe
