// `vitpipe push`'s helpers that need no server: where the token goes, git's blob ids, what a folder uploads.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "io/hub_push.h"
#include "io/hub_push_errors.h"
#include "io/upload_file.h"
#include "util/error.h"

namespace vitpipe {
namespace {

namespace fs = std::filesystem;

bool has_token(const std::vector<std::string>& headers) {
  for (const std::string& header : headers) {
    if (header == "Authorization: Bearer hf_secret") return true;
  }
  return false;
}

TEST(HubPush, TokenGoesOnlyToTheEndpointsOrigin) {
  HubSettings settings;
  settings.endpoint = "https://hub.example.org:8443/mirror";
  settings.token = "hf_secret";
  EXPECT_TRUE(has_token(hub_write_headers(settings, "https://hub.example.org:8443/mirror/api/repos/create")));
  EXPECT_TRUE(has_token(hub_write_headers(settings,
                                          "https://HUB.example.org:8443/mirror/org/x.git/info/lfs/objects/"
                                          "verify")));
  EXPECT_FALSE(has_token(hub_write_headers(settings, "https://hub.example.org/mirror/api/repos/create")));  // :443
  EXPECT_FALSE(has_token(hub_write_headers(settings, "http://hub.example.org:8443/mirror/api/repos/create")));
  EXPECT_FALSE(has_token(hub_write_headers(settings, "https://hub.example.org:8443/other/upload")));
  EXPECT_FALSE(has_token(hub_write_headers(settings, "https://hub.example.org:8443/mirrorx/api")));
  EXPECT_FALSE(has_token(hub_write_headers(settings, "https://storage.example.org/upload/abc?X-Amz-Signature=1")));
  settings.token.clear();
  EXPECT_FALSE(has_token(hub_write_headers(settings, "https://hub.example.org:8443/mirror/api/repos/create")));
}

TEST(HubPush, GitBlobIdsAreGits) {  // `git hash-object` of the same bytes
  EXPECT_EQ(git_blob_sha1(""), "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391");
  EXPECT_EQ(git_blob_sha1("hello\n"), "ce013625030ba8dba906f756967f9e9ca394464a");
}

TEST(HubPush, FolderFilesSortedWithoutGitCacheOrMarker) {
  fs::path root = fs::temp_directory_path() / ("vitpipe-push-files-" + std::to_string(::getpid()));
  fs::remove_all(root);
  fs::create_directories(root / "sub");
  fs::create_directories(root / ".git");
  fs::create_directories(root / ".cache" / "huggingface");
  auto write = [&](const fs::path& path, const std::string& text) { std::ofstream(root / path) << text; };
  write("config.json", "{}");
  write("sub/notes.txt", std::string(600, 'x'));
  write(".git/HEAD", "ref: refs/heads/main\n");
  write(".cache/huggingface/upload.lock", "");
  write(".vitpipe-output", "{}");
  write(".gitattributes", "*.bin filter=lfs\n");
  std::vector<UploadFile> files = list_upload_files(root);
  ASSERT_EQ(files.size(), 3u);
  EXPECT_EQ(files[0].path_in_repo, ".gitattributes");
  EXPECT_EQ(files[1].path_in_repo, "config.json");
  EXPECT_EQ(files[2].path_in_repo, "sub/notes.txt");
  EXPECT_EQ(files[2].size, 600);
  EXPECT_EQ(files[2].sample, std::string(512, 'x'));
  EXPECT_EQ(files[1].sha256, "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a");  // sha256("{}")
  fs::remove_all(root);
}

TEST(HubPush, RequestsRefusedBeforeAnyCall) {
  HubSettings settings;
  settings.token = "hf_secret";
  HubPushOptions options;
  options.repo_id = "acme/model";
  EXPECT_NO_THROW(check_push_request(options, settings));
  for (const char* bad : {"model", "acme/", "acme/a/b", "acme/--x", ""}) {
    options.repo_id = bad;
    EXPECT_THROW(check_push_request(options, settings), Error) << bad;
  }
  options.repo_id = "acme/model";
  options.revision = "0123456789abcdef0123456789abcdef01234567";
  EXPECT_THROW(check_push_request(options, settings), Error);
  options.revision = "main";
  settings.offline = true;
  EXPECT_THROW(check_push_request(options, settings), Error);
  settings.offline = false;
  settings.token.clear();
  try {
    check_push_request(options, settings);
    FAIL() << "no token accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("needs a Hub token with write access"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace vitpipe
