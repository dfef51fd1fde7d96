// The SR's algorithm name (issue 45, defect 7): the model card's title or the model's folder, and its weights' hash.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "serve/algorithm_name.h"

namespace fs = std::filesystem;

namespace {

struct ModelFolder {
  fs::path root = fs::temp_directory_path() / ("vitpipe_algorithm_name_" + std::to_string(::getpid()));
  ModelFolder() { fs::create_directories(root / "runs" / "base" / "model"); }
  ~ModelFolder() { fs::remove_all(root); }
  fs::path write(const fs::path& relative, const std::string& text) {
    const fs::path path = root / relative;
    std::ofstream(path) << text;
    return path;
  }
};

}  // namespace

TEST(AlgorithmName, NamesARunsModelByRunAndHash) {
  ModelFolder m;
  const fs::path dir = m.root / "runs" / "base" / "model";
  const fs::path weights = m.write("runs/base/model/model.safetensors", "abc");
  // sha256("abc") = ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad
  EXPECT_EQ(vitpipe::algorithm_name(dir.string(), dir, weights), "base/model (sha256 ba7816bf8f01)");
  EXPECT_EQ(vitpipe::algorithm_name(dir.string() + "/", fs::path(dir.string() + "/"), weights),
            "base/model (sha256 ba7816bf8f01)");
}

TEST(AlgorithmName, TakesTheModelCardsTitleAfterItsFrontMatter) {
  ModelFolder m;
  const fs::path dir = m.root / "runs" / "base" / "model";
  const fs::path weights = m.write("runs/base/model/model.safetensors", "abc");
  m.write("runs/base/model/README.md", "---\nlicense: mit\n# not: a title\n---\n\n#  ChestX-ray14 ViT-B/16 \nText\n");
  EXPECT_EQ(vitpipe::algorithm_name(dir.string(), dir, weights), "ChestX-ray14 ViT-B/16 (sha256 ba7816bf8f01)");
}

TEST(AlgorithmName, KeepsAHubRepoId) {
  ModelFolder m;
  const fs::path weights = m.write("runs/base/model/model.safetensors", "abc");
  EXPECT_EQ(vitpipe::algorithm_name("org/chest-vit", weights.parent_path(), weights),
            "org/chest-vit (sha256 ba7816bf8f01)");
}
