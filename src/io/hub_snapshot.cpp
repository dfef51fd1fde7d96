#include "io/hub_snapshot.h"

#include <nlohmann/json.hpp>
#include <set>

#include "io/hub_cache.h"
#include "io/hub_client.h"
#include "io/weight_index.h"
#include "util/atomic_file.h"
#include "util/error.h"
#include "util/log.h"

namespace vitpipe {
namespace {

constexpr const char* kWeightCandidates[] = {"model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                                             "pytorch_model.bin.index.json"};

// The shard file names an index's weight_map points at.
std::set<std::string> shards_of_index(const std::filesystem::path& index_path) {
  std::set<std::string> shards;
  for (const auto& [shard, names] : read_weight_index(index_path).tensors_by_shard) shards.insert(shard);
  return shards;
}

std::string revision_flag(const std::string& revision) {
  return revision == "main" ? std::string() : concat(" --revision ", revision);
}

}  // namespace

std::vector<std::string> missing_model_files(const std::filesystem::path& dir) {
  std::vector<std::string> missing;
  std::error_code error;
  auto has = [&](const std::string& name) { return std::filesystem::is_regular_file(dir / name, error); };
  if (!has("config.json") && has("adapter_config.json")) {  // a peft adapter: its base is another reference
    if (!has("adapter_model.safetensors") && !has("adapter_model.bin")) {
      missing.push_back("adapter_model.safetensors (or adapter_model.bin)");
    }
    return missing;
  }
  if (!has("config.json")) missing.push_back("config.json");
  const char* weights = nullptr;
  for (const char* candidate : kWeightCandidates) {
    if (has(candidate)) {
      weights = candidate;
      break;
    }
  }
  if (weights == nullptr) {
    missing.push_back("model.safetensors (or pytorch_model.bin)");
  } else if (std::string(weights).ends_with(".index.json")) {
    try {
      for (const std::string& shard : shards_of_index(dir / weights)) {
        if (!has(shard)) missing.push_back(shard);
      }
    } catch (const Error& e) {
      missing.push_back(concat("a readable ", weights, " (", e.what(), ")"));
    }
  }
  return missing;
}

std::optional<std::filesystem::path> find_cached_model(const std::string& repo_id, const std::string& revision,
                                                       const HubSettings& settings, std::string* why) {
  std::string reason;
  std::optional<std::filesystem::path> found;
  HubRepoCache cache(settings.cache_dir, repo_id);
  std::error_code error;
  if (!std::filesystem::is_directory(cache.folder(), error)) {
    reason = concat("there is no ", cache.folder().string());
  } else if (auto commit = cache.commit_for(revision); !commit) {
    reason = concat("there is no ", (cache.folder() / "refs" / revision).string(), " naming a commit");
  } else if (std::filesystem::path dir = cache.snapshot_dir(*commit); !std::filesystem::is_directory(dir, error)) {
    reason = concat("revision '", revision, "' is commit ", *commit, " but ", dir.string(), " does not exist");
  } else if (std::vector<std::string> missing = missing_model_files(dir); !missing.empty()) {
    std::string list;
    for (const std::string& name : missing) list += (list.empty() ? "" : ", ") + name;
    reason = concat(dir.string(), " lacks ", list);
  } else {
    found = dir;
  }
  if (why != nullptr) *why = reason;
  return found;
}

std::string model_not_cached_message(const std::string& repo_id, const std::string& revision, const std::string& why,
                                     const std::string& reason) {
  return concat("model '", repo_id, "' (revision '", revision, "') is not in the Hugging Face cache: ", why, ". ",
                reason, " Download it once while online with `vitpipe download ", repo_id, revision_flag(revision),
                "` (or `huggingface-cli download ", repo_id, revision_flag(revision),
                "`), or point HF_HUB_CACHE or HF_HOME at a cache that has it.");
}

std::filesystem::path download_model(const std::string& repo_id, const std::string& revision,
                                     const HubSettings& settings) {
  VP_REQUIRE(is_valid_repo_id(repo_id), "'", repo_id, "' is not a valid Hub repo id (expected org/name)");
  VP_REQUIRE(!revision.empty(), "--revision is empty");
  std::string why;
  if (settings.offline) {
    if (auto dir = find_cached_model(repo_id, revision, settings, &why)) return *dir;
    fail(model_not_cached_message(repo_id, revision, why,
                                  "HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) is set, so nothing is downloaded."));
  }
  HubClient client(settings);
  HubRepoCache cache(settings.cache_dir, repo_id);
  HubRepoInfo repo;
  try {
    repo = client.repo_info(repo_id, revision);
  } catch (const HttpTransferError& e) {
    if (auto dir = find_cached_model(repo_id, revision, settings, &why)) {
      warn("cannot reach the Hub (", e.what(), "); using the cached ", dir->string());
      return *dir;
    }
    fail("cannot reach the Hub at ", settings.endpoint, " (", e.what(), ") and model '", repo_id, "' (revision '",
         revision, "') is not in the cache: ", why, ". ",
         e.retryable() ? "Check the network connection, the proxy (https_proxy) and HF_ENDPOINT."
                       : "Check HF_ENDPOINT; behind a TLS-intercepting proxy, point CURL_CA_BUNDLE or SSL_CERT_FILE at "
                         "its CA certificate.");
  }
  const std::string& commit = repo.commit;
  std::set<std::string> files(repo.files.begin(), repo.files.end());
  auto listing = [&] {
    std::string text;
    int shown = 0;
    for (const std::string& file : repo.files) {
      if (shown++ == 20) {
        text += ", ...";
        break;
      }
      text += (text.empty() ? "" : ", ") + file;
    }
    return text.empty() ? std::string("none") : text;
  };
  if (!files.count("config.json") && files.count("adapter_config.json")) {
    // A peft adapter repository: its two files (its base resolves as a model of its own when loaded).
    const char* weights = files.count("adapter_model.safetensors") ? "adapter_model.safetensors"
                          : files.count("adapter_model.bin")       ? "adapter_model.bin"
                                                                   : nullptr;
    VP_REQUIRE(weights != nullptr, "repository '", repo_id,
               "' has adapter_config.json but no adapter_model.safetensors"
               " or adapter_model.bin at revision '",
               revision, "' (its files: ", listing(), ")");
    info("fetching the adapter ", repo_id, " (revision ", revision, ", commit ", commit.substr(0, 12), ") from ",
         settings.endpoint, " into ", cache.folder().string());
    for (const std::string file : {"adapter_config.json", weights}) client.download_file(cache, file, commit);
    if (revision != commit) cache.write_ref(revision, commit);
    return cache.snapshot_dir(commit);
  }
  VP_REQUIRE(files.count("config.json"), "repository '", repo_id, "' has no config.json at revision '", revision,
             "', so it is not a transformers model (its files: ", listing(), ")");

  std::vector<std::string> plan = {"config.json"};
  if (files.count("preprocessor_config.json")) {
    plan.push_back("preprocessor_config.json");
  } else {
    cache.mark_missing(commit, "preprocessor_config.json");  // as huggingface_hub records a 404
  }
  std::string weights;
  for (const char* candidate : kWeightCandidates) {
    if (files.count(candidate)) {
      weights = candidate;
      break;
    }
    cache.mark_missing(commit, candidate);
  }
  VP_REQUIRE(!weights.empty(), "repository '", repo_id, "' has no weights vitpipe can read at revision '", revision,
             "': expected model.safetensors, model.safetensors.index.json, pytorch_model.bin or "
             "pytorch_model.bin.index.json (its files: ",
             listing(), ")");
  plan.push_back(weights);

  info("fetching ", repo_id, " (revision ", revision, ", commit ", commit.substr(0, 12), ") from ", settings.endpoint,
       " into ", cache.folder().string());
  for (const std::string& file : plan) client.download_file(cache, file, commit);
  if (weights.ends_with(".index.json")) {
    for (const std::string& shard : shards_of_index(cache.snapshot_dir(commit) / weights)) {
      VP_REQUIRE(files.count(shard), "repository '", repo_id, "': ", weights, " names shard '", shard,
                 "', which the repository does not have at revision '", revision, "'");
      client.download_file(cache, shard, commit);
    }
  }
  if (revision != commit) cache.write_ref(revision, commit);

  std::filesystem::path dir = cache.snapshot_dir(commit);
  std::vector<std::string> missing = missing_model_files(dir);
  VP_REQUIRE(missing.empty(), dir.string(), " is still incomplete after downloading (lacks ", missing.front(), ")");
  return dir;
}

}  // namespace vitpipe
