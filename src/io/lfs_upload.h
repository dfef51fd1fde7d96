// Git LFS uploads to the Hub (huggingface_hub's lfs.py):
//   POST {endpoint}/{repo}.git/info/lfs/objects/batch   Accept/Content-Type: application/vnd.git-lfs+json
//        {"operation": "upload", "transfers": ["basic", "multipart"], "hash_algo": "sha256",
//         "ref": {"name": revision}, "objects": [{"oid": sha256, "size": n}]}
//     -> {"objects": [{"oid", "size", "actions": {"upload": {"href", "header"}, "verify": {"href", "header"}}}]}
//        An object without "actions" is on the Hub already: nothing to send. One with "error" is refused.
//   basic:     PUT the file to upload.href (a signed storage URL: no token).
//   multipart: upload.header has "chunk_size" and one signed URL per part under "1", "2", ...; PUT each chunk, keep
//              each answer's ETag, then POST {"oid", "parts": [{"partNumber", "etag"}]} to upload.href.
//   verify:    POST {"oid", "size"} to verify.href (on the Hub: with the token).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "io/hub_push_errors.h"
#include "io/hub_settings.h"
#include "io/upload_file.h"

namespace vitpipe {

struct LfsAction {
  std::string href;
  std::map<std::string, std::string> header;
};

struct LfsBatchObject {
  std::string oid;
  int64_t size = 0;
  std::optional<LfsAction> upload;  // absent: the Hub has this object already
  std::optional<LfsAction> verify;
};

// One batch call for `files` (all LFS); the answer's objects, validated.
std::vector<LfsBatchObject> lfs_batch_upload(const HubSettings& settings, const HubPushTarget& target,
                                             const std::vector<const UploadFile*>& files);

// Sends `file` as `object` says (basic or multipart), then verifies it; progress on stderr.
void lfs_upload(const HubSettings& settings, const HubPushTarget& target, const UploadFile& file,
                const LfsBatchObject& object);

}  // namespace vitpipe
