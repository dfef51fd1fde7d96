#include "io/upload_file.h"

#include <openssl/evp.h>

#include <algorithm>
#include <fstream>
#include <memory>

#include "io/hub_settings.h"
#include "util/digest_hex.h"
#include "util/error.h"
#include "util/output_folder.h"

namespace vitpipe {
namespace fs = std::filesystem;

std::string sha256_of_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  VP_REQUIRE(in, "cannot read ", path.string());
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> context(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  VP_REQUIRE(context && EVP_DigestInit_ex(context.get(), EVP_sha256(), nullptr) == 1, "cannot initialise sha256");
  std::vector<char> buffer(1 << 20);
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    if (in.gcount() > 0) EVP_DigestUpdate(context.get(), buffer.data(), static_cast<size_t>(in.gcount()));
  }
  VP_REQUIRE(in.eof(), "cannot read ", path.string());
  return finish_digest_hex(context.get());
}

std::string git_blob_sha1(const std::string& content) {
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> context(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  VP_REQUIRE(context && EVP_DigestInit_ex(context.get(), EVP_sha1(), nullptr) == 1, "cannot initialise sha1");
  const std::string header = concat("blob ", content.size());
  EVP_DigestUpdate(context.get(), header.c_str(), header.size() + 1);  // with its NUL
  EVP_DigestUpdate(context.get(), content.data(), content.size());
  return finish_digest_hex(context.get());
}

std::vector<UploadFile> list_upload_files(const fs::path& folder) {
  VP_REQUIRE(fs::is_directory(folder), folder.string(), " is not a directory");
  std::vector<UploadFile> files;
  for (auto it = fs::recursive_directory_iterator(folder, fs::directory_options::follow_directory_symlink);
       it != fs::recursive_directory_iterator(); ++it) {
    const std::string relative = fs::relative(it->path(), folder).generic_string();
    if (relative == ".git" || (relative == ".cache" && fs::exists(it->path() / "huggingface"))) {
      it.disable_recursion_pending();
      continue;
    }
    if (!it->is_regular_file() || relative == kOutputMarkerName) continue;  // vitpipe's own bookkeeping
    VP_REQUIRE(is_safe_repo_path(relative), "cannot upload ", it->path().string(), ": '", relative,
               "' is not a valid path inside a repository");
    UploadFile file;
    file.path_in_repo = relative;
    file.local = it->path();
    file.size = static_cast<int64_t>(it->file_size());
    file.sha256 = sha256_of_file(file.local);
    std::ifstream in(file.local, std::ios::binary);
    file.sample.resize(512);
    in.read(file.sample.data(), 512);
    file.sample.resize(static_cast<size_t>(in.gcount()));
    files.push_back(std::move(file));
  }
  std::sort(files.begin(), files.end(),
            [](const UploadFile& a, const UploadFile& b) { return a.path_in_repo < b.path_in_repo; });
  return files;
}

}  // namespace vitpipe
