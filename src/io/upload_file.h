// A local file about to be committed to a Hub repository: what huggingface_hub's UploadInfo holds (size, sha256, the
// first 512 bytes the Hub's preupload call reads to choose regular or LFS).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace vitpipe {

struct UploadFile {
  std::string path_in_repo;  // "/"-separated, relative to the folder
  std::filesystem::path local;
  int64_t size = 0;
  std::string sha256;  // 64 lowercase hex digits
  std::string sample;  // the first 512 bytes
};

// Every regular file under `folder` (links followed), sorted by path; like huggingface_hub's upload_folder it leaves
// out .git/ and .cache/huggingface/ (git's and the download cache's own files), and vitpipe's .vitpipe-output marker.
std::vector<UploadFile> list_upload_files(const std::filesystem::path& folder);

// The file's sha256 as 64 lowercase hex digits.
std::string sha256_of_file(const std::filesystem::path& path);

// git's object id of a blob with this content: sha1 of "blob <size>\0<content>" (what the Hub names a regular file by).
std::string git_blob_sha1(const std::string& content);

}  // namespace vitpipe
