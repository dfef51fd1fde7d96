#include "io/hub_push.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "io/http_retry.h"
#include "io/hub_push_errors.h"
#include "io/lfs_upload.h"
#include "io/upload_file.h"
#include "util/base64.h"
#include "util/error.h"
#include "util/json_error_detail.h"
#include "util/log.h"
#include "util/progress.h"

namespace vitpipe {
namespace fs = std::filesystem;
namespace {

constexpr size_t kFilesPerCall = 256;  // huggingface_hub's chunk size for preupload and LFS batch calls

std::string read_whole_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  VP_REQUIRE(in, "cannot read ", path.string());
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

nlohmann::json parse_json_answer(const HttpResponse& response, const std::string& what) {
  try {
    return nlohmann::json::parse(response.body);
  } catch (const nlohmann::json::exception& e) {
    fail("the answer of ", response.url, " to ", what, " is not JSON (", json_error_detail(e, response.body).substr(1),
         "); is HF_ENDPOINT a Hub?");
  }
}

class Pusher {
 public:
  Pusher(const HubPushOptions& options, const HubSettings& settings)
      : o_(options), settings_(settings), target_{options.repo_id, options.revision} {}

  HubPushResult push(const fs::path& folder) {
    std::vector<UploadFile> files = list_upload_files(folder);
    VP_REQUIRE(!files.empty(), folder.string(), " holds no files to push");
    create_repo();
    const std::string parent = head_commit();
    fetch_upload_modes(files);
    find_unchanged(files);

    HubPushResult result;
    result.unchanged = unchanged_.size();
    std::vector<const UploadFile*> lfs;
    for (const UploadFile& file : files) {
      if (skipped(file)) continue;
      ++result.files;
      if (lfs_paths_.count(file.path_in_repo)) lfs.push_back(&file);
    }
    if (result.files == 0) {  // as huggingface_hub does: no empty commit; the answer is the branch's head
      info("push: the ", files.size(), " files are on '", o_.revision, "' of ", o_.repo_id,
           " as they are here: no commit made");
      result.commit_oid = parent;
      result.commit_url = concat(settings_.endpoint, "/", o_.repo_id, "/commit/", parent);
      return result;
    }
    result.lfs_files = lfs.size();
    result.lfs_uploaded = upload_lfs_files(lfs);
    info("push: ", result.files, " changed files (", result.unchanged, " unchanged stay), ", result.lfs_files,
         " of them through LFS (", result.lfs_uploaded, " sent, ", result.lfs_files - result.lfs_uploaded,
         " on the Hub already); committing to ", o_.repo_id, " at '", o_.revision, "'",
         o_.create_pr ? " as a pull request" : "");
    commit(files, parent, folder, result);
    return result;
  }

 private:
  std::string api_prefix() const { return concat(settings_.endpoint, "/api/", o_.repo_type, "s/", o_.repo_id); }

  HttpRequest api_request(const std::string& method, const std::string& url) const {
    HttpRequest request;
    request.method = method;
    request.url = url;
    request.timeout_seconds = settings_.timeout_seconds;
    request.headers = hub_write_headers(settings_, url);
    return request;
  }

  void require_success(const HttpResponse& response, const std::string& doing) const {
    if (response.status < 200 || response.status >= 300) fail_push_response(response, target_, settings_, doing);
  }

  void create_repo() {
    HttpRequest request = api_request("POST", settings_.endpoint + "/api/repos/create");
    const size_t slash = o_.repo_id.find('/');
    nlohmann::json payload = {{"name", o_.repo_id.substr(slash + 1)},
                              {"organization", o_.repo_id.substr(0, slash)},
                              {"private", o_.private_repo}};
    if (o_.repo_type != "model") payload["type"] = o_.repo_type;
    request.headers.push_back("Content-Type: application/json");
    request.body = payload.dump();
    HttpResponse response = http_request_with_retries(request, "creating the repository");
    if (response.status == 409) return;  // it exists: push into it (its visibility is left as it is)
    require_success(response, "creating the repository");
    info("push: created ", o_.private_repo ? "private " : "", "repository ", o_.repo_id);
  }

  // The branch's head commit: the commit's parent, so a push that races another one fails instead of overwriting
  // it, and a missing branch is said before anything is uploaded.
  std::string head_commit() {
    HttpRequest request = api_request("GET", concat(settings_.endpoint, "/api/", o_.repo_type, "s/", o_.repo_id,
                                                    "/revision/", url_quote(o_.revision, "")));
    HttpResponse response = http_request_with_retries(request, "reading the branch");
    require_success(response, concat("reading revision '", o_.revision, "'"));
    nlohmann::json json = parse_json_answer(response, "a revision request");
    std::string sha = json.value("sha", std::string());
    VP_REQUIRE(is_commit_hash(sha), "the Hub's answer for revision '", o_.revision, "' of ", o_.repo_id,
               " has no valid \"sha\"");
    return sha;
  }

  std::string query() const { return o_.create_pr ? "?create_pr=1" : ""; }

  void fetch_upload_modes(const std::vector<UploadFile>& files) {
    std::set<std::string> answered;
    for (size_t begin = 0; begin < files.size(); begin += kFilesPerCall) {
      nlohmann::json listed = nlohmann::json::array();
      for (size_t i = begin; i < std::min(files.size(), begin + kFilesPerCall); ++i) {
        listed.push_back(
            {{"path", files[i].path_in_repo}, {"sample", base64(files[i].sample)}, {"size", files[i].size}});
      }
      HttpRequest request =
          api_request("POST", concat(api_prefix(), "/preupload/", url_quote(o_.revision, ""), query()));
      request.headers.push_back("Content-Type: application/json");
      request.body = nlohmann::json{{"files", listed}}.dump();
      HttpResponse response = http_request_with_retries(request, "asking the Hub how to upload");
      require_success(response, "asking the Hub which files go through LFS");
      nlohmann::json json = parse_json_answer(response, "a preupload request");
      VP_REQUIRE(json.contains("files") && json.at("files").is_array(), "the preupload answer of ", response.url,
                 " has no \"files\" list");
      for (const nlohmann::json& entry : json.at("files")) {
        const std::string path = entry.value("path", std::string());
        const std::string mode = entry.value("uploadMode", std::string());
        VP_REQUIRE(!path.empty() && (mode == "lfs" || mode == "regular"), "the preupload answer of ", response.url,
                   " is improperly formatted: ", entry.dump().substr(0, 200));
        answered.insert(path);
        if (mode == "lfs") lfs_paths_.insert(path);
        if (entry.value("shouldIgnore", false)) ignored_.insert(path);
        if (entry.contains("oid") && entry.at("oid").is_string()) remote_oids_[path] = entry.at("oid");
      }
    }
    // Empty files cannot go through LFS (the storage refuses them): regular, as huggingface_hub does.
    for (const UploadFile& file : files) {
      if (file.size == 0) lfs_paths_.erase(file.path_in_repo);
    }
    for (const UploadFile& file : files) {
      VP_REQUIRE(answered.count(file.path_in_repo), "the Hub's preupload answer does not mention ", file.path_in_repo);
    }
  }

  // Files the branch holds already with the same content (the preupload answer's "oid": the sha256 of an LFS file,
  // the git blob sha1 of a regular one) are left out of the commit, as huggingface_hub's create_commit does.
  void find_unchanged(const std::vector<UploadFile>& files) {
    for (const UploadFile& file : files) {
      auto remote = remote_oids_.find(file.path_in_repo);
      if (remote == remote_oids_.end() || ignored_.count(file.path_in_repo)) continue;
      const std::string local =
          lfs_paths_.count(file.path_in_repo) ? file.sha256 : git_blob_sha1(read_whole_file(file.local));
      if (local == remote->second) unchanged_.insert(file.path_in_repo);
    }
  }

  bool skipped(const UploadFile& file) const {
    return ignored_.count(file.path_in_repo) || unchanged_.count(file.path_in_repo);
  }

  size_t upload_lfs_files(const std::vector<const UploadFile*>& lfs) {
    size_t sent = 0;
    for (size_t begin = 0; begin < lfs.size(); begin += kFilesPerCall) {
      std::vector<const UploadFile*> chunk(
          lfs.begin() + static_cast<long>(begin),
          lfs.begin() + static_cast<long>(std::min(lfs.size(), begin + kFilesPerCall)));
      std::map<std::string, const UploadFile*> by_oid;
      for (const UploadFile* file : chunk) by_oid.emplace(file->sha256, file);
      for (const LfsBatchObject& object : lfs_batch_upload(settings_, target_, chunk)) {
        auto file = by_oid.find(object.oid);
        VP_REQUIRE(file != by_oid.end(), "the LFS batch answer names object ", object.oid, " that was not asked for");
        if (!object.upload) continue;  // on the Hub already
        lfs_upload(settings_, target_, *file->second, object);
        ++sent;
      }
    }
    return sent;
  }

  void commit(const std::vector<UploadFile>& files, const std::string& parent, const fs::path& folder,
              HubPushResult& result) {
    std::string message =
        o_.message.empty()
            ? concat("Upload ", fs::absolute(folder).lexically_normal().filename().string(), " with vitpipe")
            : o_.message;
    std::string body = nlohmann::json{{"key", "header"},
                                      {"value", {{"summary", message}, {"description", ""}, {"parentCommit", parent}}}}
                           .dump() +
                       "\n";
    for (const UploadFile& file : files) {
      if (skipped(file)) continue;
      nlohmann::json line;
      if (lfs_paths_.count(file.path_in_repo)) {
        line = {
            {"key", "lfsFile"},
            {"value", {{"path", file.path_in_repo}, {"algo", "sha256"}, {"oid", file.sha256}, {"size", file.size}}}};
      } else {
        const std::string content = read_whole_file(file.local);
        VP_REQUIRE(static_cast<int64_t>(content.size()) == file.size, file.local.string(),
                   " changed while it was being pushed");
        line = {{"key", "file"},
                {"value", {{"path", file.path_in_repo}, {"content", base64(content)}, {"encoding", "base64"}}}};
      }
      body += line.dump() + "\n";
    }
    HttpRequest request = api_request("POST", concat(api_prefix(), "/commit/", url_quote(o_.revision, ""), query()));
    request.headers.push_back("Content-Type: application/x-ndjson");
    request.body = std::move(body);
    HttpResponse response = http_request_with_retries(request, "committing");
    require_success(response, "committing");
    nlohmann::json json = parse_json_answer(response, "the commit");
    result.commit_oid = json.value("commitOid", std::string());
    result.commit_url = json.value("commitUrl", std::string());
    if (json.contains("pullRequestUrl") && json.at("pullRequestUrl").is_string()) {
      result.pull_request_url = json.at("pullRequestUrl").get<std::string>();
    }
    VP_REQUIRE(!result.commit_oid.empty(), "the Hub's answer to the commit has no \"commitOid\"");
  }

  const HubPushOptions& o_;
  const HubSettings& settings_;
  HubPushTarget target_;
  std::set<std::string> lfs_paths_;
  std::set<std::string> ignored_;
  std::set<std::string> unchanged_;
  std::map<std::string, std::string> remote_oids_;
};

}  // namespace

void check_push_request(const HubPushOptions& options, const HubSettings& settings) {
  VP_REQUIRE(is_valid_repo_id(options.repo_id) && options.repo_id.find('/') != std::string::npos, "--repo '",
             options.repo_id, "' is not a Hub repo id of the form ORG/NAME (letters, digits, '-', '_', '.')");
  VP_REQUIRE(options.repo_type == "model", "--repo-type '", options.repo_type,
             "': vitpipe pushes model repositories only (a model or adapter folder)");
  VP_REQUIRE(!options.revision.empty() && !is_commit_hash(options.revision) &&
                 options.revision.find("..") == std::string::npos,
             "--revision '", options.revision, "' must name a branch (a commit id cannot be pushed to)");
  VP_REQUIRE(!settings.offline, "cannot push to ", options.repo_id,
             ": HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) is set");
  VP_REQUIRE(!settings.token.empty(), "pushing to ", options.repo_id,
             " needs a Hub token with write access: set HF_TOKEN or run `huggingface-cli login` (it writes ",
             settings.token_path.string(), ")");
}

void check_push_folder(const fs::path& folder) {
  std::error_code error;
  VP_REQUIRE(fs::exists(folder, error), "push: ", folder.string(),
             " does not exist (expected a model or adapter folder)");
  VP_REQUIRE(fs::is_directory(folder, error), "push: ", folder.string(),
             " is not a directory (expected a model or adapter folder)");
  const auto has_any = [&](std::initializer_list<const char*> names) {
    return std::any_of(names.begin(), names.end(),
                       [&](const char* name) { return fs::is_regular_file(folder / name); });
  };
  if (has_any({"config.json"})) {
    VP_REQUIRE(has_any({"model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                        "pytorch_model.bin.index.json"}),
               "push: ", folder.string(),
               " has config.json but no weights (expected model.safetensors, "
               "model.safetensors.index.json or pytorch_model.bin)");
  } else if (has_any({"adapter_config.json"})) {
    VP_REQUIRE(has_any({"adapter_model.safetensors", "adapter_model.bin"}), "push: ", folder.string(),
               " has adapter_config.json but no adapter_model.safetensors (or adapter_model.bin)");
  } else {
    fail("push: ", folder.string(),
         " is not a model or adapter folder (it has neither config.json nor adapter_config.json)");
  }
}

HubPushResult push_folder(const fs::path& folder, const HubPushOptions& options, const HubSettings& settings) {
  check_push_folder(folder);  // local inputs first: a mistyped folder is named before a missing token
  check_push_request(options, settings);
  return Pusher(options, settings).push(folder);
}

}  // namespace vitpipe
