// Hub helpers that need no server: settings from the environment, repo ids, URLs, the cache's paths and refs.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "io/hub_cache.h"
#include "io/hub_client.h"
#include "io/hub_http.h"
#include "io/hub_settings.h"
#include "io/hub_snapshot.h"
#include "util/error.h"

namespace vitpipe {
namespace {

class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    if (value) {
      ::setenv(name, value, 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (had_) {
      ::setenv(name_.c_str(), old_.c_str(), 1);
    } else {
      ::unsetenv(name_.c_str());
    }
  }

 private:
  std::string name_, old_;
  bool had_ = false;
};

std::filesystem::path temp_dir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("vitpipe-hub-" + name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

TEST(HubSettings, FollowsHuggingFaceHubEnvironment) {
  ScopedEnv a("HF_ENDPOINT", "http://mirror.example:8080/"), b("HF_HOME", "/tmp/hfhome"), c("HF_HUB_CACHE", nullptr),
      d("HUGGINGFACE_HUB_CACHE", nullptr), e("HF_HUB_OFFLINE", "yes"), f("HF_TOKEN", " hf_abc \n"),
      g("TRANSFORMERS_OFFLINE", nullptr), h("HF_TOKEN_PATH", nullptr);
  HubSettings settings = HubSettings::from_environment();
  EXPECT_EQ(settings.endpoint, "http://mirror.example:8080");
  EXPECT_EQ(settings.cache_dir, "/tmp/hfhome/hub");
  EXPECT_TRUE(settings.offline);
  EXPECT_EQ(settings.token, "hf_abc");
  EXPECT_EQ(settings.token_origin, "HF_TOKEN");
  EXPECT_EQ(settings.token_path, "/tmp/hfhome/token");
  {
    ScopedEnv cache("HF_HUB_CACHE", "/data/hub"), offline("HF_HUB_OFFLINE", "0"), tf("TRANSFORMERS_OFFLINE", "1");
    HubSettings other = HubSettings::from_environment();
    EXPECT_EQ(other.cache_dir, "/data/hub");
    EXPECT_TRUE(other.offline);
  }
  ScopedEnv no_home("HF_HOME", nullptr), xdg("XDG_CACHE_HOME", "/xdg"), off("HF_HUB_OFFLINE", "false");
  HubSettings defaults = HubSettings::from_environment();
  EXPECT_EQ(defaults.cache_dir, "/xdg/huggingface/hub");
  EXPECT_FALSE(defaults.offline);
}

TEST(HubSettings, ValidatesRepoIdsLikeHuggingFaceHub) {
  for (const char* id : {"google/vit-base-patch16-224-in21k", "bert-base-uncased", "a/b", "Org_1/model.v2"}) {
    EXPECT_TRUE(is_valid_repo_id(id)) << id;
  }
  for (const char* id : {"", "a/b/c", "/a", "a/", "a--b/c", "a/b..c", "-a/b", "a/b.", "a b/c", "a/b!", "../etc"}) {
    EXPECT_FALSE(is_valid_repo_id(id)) << id;
  }
  EXPECT_TRUE(is_commit_hash("0123456789abcdef0123456789abcdef01234567"));
  EXPECT_FALSE(is_commit_hash("0123456789ABCDEF0123456789abcdef01234567"));
  EXPECT_FALSE(is_commit_hash("main"));
  EXPECT_TRUE(is_safe_repo_path("sub/dir/file.bin"));
  for (const char* path : {"", "/etc/passwd", "../x", "a/../b", "a//b", "a/./b", "a\\b"}) {
    EXPECT_FALSE(is_safe_repo_path(path)) << path;
  }
}

TEST(HubHttp, QuotesAndJoinsUrlsLikePython) {
  EXPECT_EQ(url_quote("refs/pr/1", ""), "refs%2Fpr%2F1");
  EXPECT_EQ(url_quote("sub dir/file+1.bin", "/"), "sub%20dir/file%2B1.bin");
  EXPECT_EQ(url_origin("https://huggingface.co/a/b"), "https://huggingface.co:443");
  EXPECT_EQ(url_origin("HTTP://User:pw@Host:8080/x?y"), "http://host:8080");
  EXPECT_NE(url_origin("http://127.0.0.1:1000/a"), url_origin("http://127.0.0.1:2000/a"));
  EXPECT_EQ(url_join("http://h:1/a/resolve/main/x", "/api/resolve-cache/m"), "http://h:1/api/resolve-cache/m");
  EXPECT_EQ(url_join("http://h:1/a/b?q", "c"), "http://h:1/a/c");
  EXPECT_EQ(url_join("http://h:1/a", "https://cdn/x?sig=1"), "https://cdn/x?sig=1");
  EXPECT_EQ(url_join("https://h/a", "//cdn/x"), "https://cdn/x");
  EXPECT_EQ(normalize_etag("W/\"abc\""), "abc");
  EXPECT_EQ(normalize_etag("\"abc\""), "abc");
  EXPECT_EQ(normalize_etag("abc"), "abc");
}

TEST(HubCache, PathsRefsAndSnapshotLinks) {
  auto root = temp_dir("cache");
  HubRepoCache cache(root, "google/vit-base");
  EXPECT_EQ(cache.folder(), root / "models--google--vit-base");
  EXPECT_EQ(cache.lock_path("e1"), root / ".locks" / "models--google--vit-base" / "e1.lock");
  const std::string commit(40, 'a');
  EXPECT_FALSE(cache.commit_for("main"));
  EXPECT_EQ(cache.commit_for(commit), commit);
  cache.write_ref("main", commit);
  EXPECT_EQ(cache.commit_for("main"), commit);
  std::ifstream ref(cache.folder() / "refs" / "main");
  std::string text((std::istreambuf_iterator<char>(ref)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, commit);  // no newline
  EXPECT_THROW(cache.write_ref("../escape", commit), Error);

  std::filesystem::create_directories(cache.blob_path("e1").parent_path());
  std::ofstream(cache.blob_path("e1")) << "{}";
  EXPECT_FALSE(cache.cached_file(commit, "config.json"));
  auto pointer = cache.link_snapshot_file(commit, "config.json", "e1");
  EXPECT_EQ(std::filesystem::read_symlink(pointer), std::filesystem::path("../../blobs/e1"));
  EXPECT_EQ(cache.cached_file(commit, "config.json"), pointer);
  auto nested = cache.link_snapshot_file(commit, "sub/x.json", "e1");
  EXPECT_EQ(std::filesystem::read_symlink(nested), std::filesystem::path("../../../blobs/e1"));
  cache.link_snapshot_file(commit, "config.json", "e1");  // relinking is harmless

  cache.mark_missing(commit, "preprocessor_config.json");
  EXPECT_TRUE(cache.is_marked_missing(commit, "preprocessor_config.json"));
  EXPECT_FALSE(cache.is_marked_missing(commit, "config.json"));

  // A ref holding garbage is ignored, not trusted as a path.
  std::ofstream(cache.folder() / "refs" / "bad") << "../../../etc";
  EXPECT_FALSE(cache.commit_for("bad"));
  std::filesystem::remove_all(root);
}

TEST(HubSnapshot, MissingModelFiles) {
  auto dir = temp_dir("snapshot");
  EXPECT_EQ(missing_model_files(dir),
            (std::vector<std::string>{"config.json", "model.safetensors (or pytorch_model.bin)"}));
  std::ofstream(dir / "config.json") << "{}";
  std::ofstream(dir / "pytorch_model.bin.index.json")
      << R"({"weight_map": {"a": "pytorch_model-00001-of-00002.bin", "b": "pytorch_model-00002-of-00002.bin"}})";
  std::ofstream(dir / "pytorch_model-00001-of-00002.bin") << "x";
  EXPECT_EQ(missing_model_files(dir), (std::vector<std::string>{"pytorch_model-00002-of-00002.bin"}));
  std::ofstream(dir / "model.safetensors") << "x";  // preferred when present
  EXPECT_TRUE(missing_model_files(dir).empty());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace vitpipe
