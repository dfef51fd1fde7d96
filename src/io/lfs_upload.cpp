#include "io/lfs_upload.h"

#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>

#include "io/http_retry.h"
#include "util/error.h"
#include "util/json_error_detail.h"
#include "util/progress.h"

namespace vitpipe {
namespace {

const char* const kLfsAccept = "Accept: application/vnd.git-lfs+json";
const char* const kLfsContentType = "Content-Type: application/vnd.git-lfs+json";

std::optional<LfsAction> parse_action(const nlohmann::json& actions, const char* name, const std::string& url) {
  if (!actions.contains(name)) return std::nullopt;
  const nlohmann::json& action = actions.at(name);
  VP_REQUIRE(action.is_object() && action.contains("href") && action.at("href").is_string(), "the LFS batch answer of ",
             url, " has an improperly formatted '", name, "' action");
  LfsAction parsed;
  parsed.href = action.at("href").get<std::string>();
  if (action.contains("header") && !action.at("header").is_null()) {
    VP_REQUIRE(action.at("header").is_object(), "the LFS batch answer of ", url, ": '", name,
               "' header is not an object");
    for (const auto& [key, value] : action.at("header").items()) {
      parsed.header[key] = value.is_string() ? value.get<std::string>() : value.dump();
    }
  }
  return parsed;
}

bool is_digits(const std::string& text) {
  return !text.empty() && std::all_of(text.begin(), text.end(), [](unsigned char c) { return std::isdigit(c); });
}

void require_success(const HttpResponse& response, const HubPushTarget& target, const HubSettings& settings,
                     const std::string& doing) {
  if (response.status < 200 || response.status >= 300) fail_push_response(response, target, settings, doing);
}

}  // namespace

std::vector<LfsBatchObject> lfs_batch_upload(const HubSettings& settings, const HubPushTarget& target,
                                             const std::vector<const UploadFile*>& files) {
  nlohmann::json objects = nlohmann::json::array();
  for (const UploadFile* file : files) objects.push_back({{"oid", file->sha256}, {"size", file->size}});
  nlohmann::json payload = {{"operation", "upload"},
                            {"transfers", {"basic", "multipart"}},
                            {"objects", objects},
                            {"hash_algo", "sha256"},
                            {"ref", {{"name", target.revision}}}};
  HttpRequest request;
  request.method = "POST";
  request.url = concat(settings.endpoint, "/", target.repo_id, ".git/info/lfs/objects/batch");
  request.timeout_seconds = settings.timeout_seconds;
  request.headers = hub_write_headers(settings, request.url);
  request.headers.push_back(kLfsAccept);
  request.headers.push_back(kLfsContentType);
  request.body = payload.dump();
  HttpResponse response = http_request_with_retries(request, "asking the Hub where to upload");
  require_success(response, target, settings, "asking the Hub where to upload the LFS files");

  std::vector<LfsBatchObject> answer;
  try {
    nlohmann::json json = nlohmann::json::parse(response.body);
    VP_REQUIRE(json.contains("objects") && json.at("objects").is_array(), "the LFS batch answer of ", request.url,
               " has no \"objects\" list");
    for (const nlohmann::json& object : json.at("objects")) {
      LfsBatchObject parsed;
      VP_REQUIRE(object.contains("oid") && object.at("oid").is_string() && object.contains("size") &&
                     object.at("size").is_number_integer(),
                 "the LFS batch answer of ", request.url, " has an object without \"oid\" and \"size\"");
      parsed.oid = object.at("oid").get<std::string>();
      parsed.size = object.at("size").get<int64_t>();
      if (object.contains("error")) {
        const nlohmann::json& error = object.at("error");
        fail("the Hub refused the LFS upload of object ", parsed.oid, " (", error.value("code", 0), ": ",
             error.value("message", std::string("no message")), "); nothing was committed to ", target.repo_id);
      }
      if (object.contains("actions") && object.at("actions").is_object()) {
        parsed.upload = parse_action(object.at("actions"), "upload", request.url);
        parsed.verify = parse_action(object.at("actions"), "verify", request.url);
      }
      answer.push_back(std::move(parsed));
    }
  } catch (const nlohmann::json::exception& e) {
    fail("the answer of ", request.url, " is not an LFS batch answer (", json_error_detail(e, response.body).substr(1),
         ")");
  }
  return answer;
}

void lfs_upload(const HubSettings& settings, const HubPushTarget& target, const UploadFile& file,
                const LfsBatchObject& object) {
  VP_REQUIRE(object.upload.has_value(), "no upload action for ", file.path_in_repo);
  const LfsAction& upload = *object.upload;
  const std::string doing = concat("uploading ", file.path_in_repo);
  ProgressBar progress(file.path_in_repo, file.size, "B");

  // One PUT of a byte range of the file to a signed URL (no token), retried; returns the answer.
  auto put_range = [&](const std::string& url, int64_t offset, int64_t length) {
    HttpRequest request;
    request.method = "PUT";
    request.url = url;
    request.timeout_seconds = settings.timeout_seconds;
    request.headers = {"Accept-Encoding: identity"};
    request.body_file = file.local;
    request.body_offset = offset;
    request.body_length = length;
    request.on_upload_progress = [&](int64_t sent) { progress.update(offset + sent); };
    HttpResponse response = http_request_with_retries(request, doing);
    require_success(response, target, settings, doing);
    return response;
  };

  auto chunk = upload.header.find("chunk_size");
  if (chunk == upload.header.end()) {
    put_range(upload.href, 0, file.size);
  } else {
    int64_t chunk_size = 0;
    try {
      chunk_size = std::stoll(chunk->second);
    } catch (const std::exception&) {
    }
    VP_REQUIRE(chunk_size > 0, "the LFS batch answer for ", file.path_in_repo, " has a malformed chunk_size '",
               chunk->second, "'");
    std::vector<std::pair<long long, std::string>> parts;
    for (const auto& [key, url] : upload.header) {
      if (is_digits(key)) parts.emplace_back(std::stoll(key), url);
    }
    std::sort(parts.begin(), parts.end());
    const int64_t expected = (file.size + chunk_size - 1) / chunk_size;
    VP_REQUIRE(static_cast<int64_t>(parts.size()) == expected, "the LFS batch answer for ", file.path_in_repo,
               " lists ", parts.size(), " part URLs for ", expected, " chunks of ", chunk_size, " bytes");
    nlohmann::json completed = nlohmann::json::array();
    for (size_t i = 0; i < parts.size(); ++i) {
      const int64_t offset = static_cast<int64_t>(i) * chunk_size;
      HttpResponse response = put_range(parts[i].second, offset, std::min(chunk_size, file.size - offset));
      const std::string etag = response.header("etag");
      VP_REQUIRE(!etag.empty(), "the storage host returned no ETag for part ", i + 1, " of ", file.path_in_repo);
      completed.push_back({{"partNumber", i + 1}, {"etag", etag}});
    }
    HttpRequest completion;
    completion.method = "POST";
    completion.url = upload.href;  // signed: no token, as huggingface_hub sends it
    completion.timeout_seconds = settings.timeout_seconds;
    completion.headers = {"Accept-Encoding: identity", kLfsAccept, kLfsContentType};
    completion.body = nlohmann::json{{"oid", file.sha256}, {"parts", completed}}.dump();
    HttpResponse response = http_request_with_retries(completion, concat("completing ", file.path_in_repo));
    require_success(response, target, settings, concat("completing the multipart upload of ", file.path_in_repo));
  }

  if (object.verify) {
    HttpRequest verify;
    verify.method = "POST";
    verify.url = object.verify->href;
    verify.timeout_seconds = settings.timeout_seconds;
    verify.headers = hub_write_headers(settings, verify.url);
    verify.headers.push_back("Content-Type: application/json");
    verify.body = nlohmann::json{{"oid", file.sha256}, {"size", file.size}}.dump();
    HttpResponse response = http_request_with_retries(verify, concat("verifying ", file.path_in_repo));
    require_success(response, target, settings, concat("verifying the upload of ", file.path_in_repo));
  }
  if (ProgressBar::stderr_is_terminal()) progress.finish();  // in a log the last update said it all
}

}  // namespace vitpipe
