#include "train/training_checkpoint.h"

#include <fcntl.h>
#include <linux/fs.h>
#include <stdio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ios>
#include <string>
#include <vector>

#include "io/hf_config.h"
#include "io/model_files.h"
#include "io/preprocessor_config.h"
#include "io/safetensors.h"
#include "util/atomic_file.h"
#include "util/error.h"
#include "util/json_error_detail.h"
#include "util/json_integer.h"

namespace vitpipe {
namespace fs = std::filesystem;

constexpr const char* kTrainableFileName = "trainable.safetensors";

nlohmann::json TrainerState::to_json() const {
  nlohmann::json j = {
      {"step", step},           {"epoch", epoch},    {"batch_in_epoch", batch_in_epoch}, {"total_steps", total_steps},
      {"best_step", best_step}, {"options", options}};
  j["best_metric"] = best_metric ? nlohmann::json(*best_metric) : nlohmann::json(nullptr);
  return j;
}

TrainerState TrainerState::from_json(const nlohmann::json& j, const std::string& source) {
  TrainerState s;
  try {
    s.step = json_integer<int64_t>(j.at("step"), source + " field \"step\"");
    s.epoch = json_integer<int64_t>(j.at("epoch"), source + " field \"epoch\"");
    s.batch_in_epoch = json_integer<int64_t>(j.at("batch_in_epoch"), source + " field \"batch_in_epoch\"");
    s.total_steps = json_integer<int64_t>(j.at("total_steps"), source + " field \"total_steps\"");
    s.best_step = json_integer<int64_t>(j.at("best_step"), source + " field \"best_step\"");
    if (!j.at("best_metric").is_null()) s.best_metric = j.at("best_metric").get<double>();
    s.options = j.at("options");
  } catch (const nlohmann::json::exception& e) {
    fail(source, ": not a vitpipe trainer state (", e.what(), ")");
  }
  VP_REQUIRE(s.step >= 0 && s.epoch >= 0 && s.batch_in_epoch >= 0, source, ": negative step or position");
  return s;
}

namespace {

fs::path checkpoints_dir(const fs::path& output_dir) { return output_dir / "checkpoints"; }

std::string step_name(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof(name), "step-%08lld", static_cast<long long>(step));
  return name;
}

void fsync_directory(const fs::path& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

}  // namespace

fs::path write_training_checkpoint(const fs::path& output_dir, const TrainingCheckpoint& c, int64_t keep) {
  VP_REQUIRE(keep >= 1, "internal: keep at least the newest checkpoint (got ", keep, ")");
  const fs::path root = checkpoints_dir(output_dir);
  fs::create_directories(root);
  const std::string name = step_name(c.state.step);
  const fs::path final_dir = root / name;
  const fs::path staging = root / concat(name, ".tmp-", ::getpid());
  std::error_code ignored;
  fs::remove_all(staging, ignored);
  fs::create_directories(staging);
  try {
    if (!c.subset()) {
      save_model(staging, c.config, c.preprocessor, c.model);
    } else {
      VP_REQUIRE(!c.trainable.empty(), "internal: a subset checkpoint without trainable parameters");
      const StringMap metadata = {{"format", "pt"},
                                  {"base_model", c.base_model},
                                  {"frozen_fingerprint", concat(std::hex, c.frozen_fingerprint)}};
      write_safetensors(staging / kTrainableFileName, c.trainable, metadata);
      write_hf_config(staging / "config.json", c.config);
      write_preprocessor_config(staging / "preprocessor_config.json", c.preprocessor);
    }
    if (!c.optimizer_state.empty())
      write_safetensors(staging / "optimizer.safetensors", c.optimizer_state, c.optimizer_metadata);
    write_text_file_atomically(staging / "trainer_state.json", c.state.to_json().dump(2) + "\n");
    fsync_directory(staging);
    fs::remove_all(final_dir, ignored);  // a checkpoint of the same step from an interrupted earlier run
    VP_REQUIRE(::rename(staging.c_str(), final_dir.c_str()) == 0, "cannot rename ", staging.string(), " to ",
               final_dir.string(), ": ", std::strerror(errno));
    fsync_directory(root);
  } catch (...) {
    fs::remove_all(staging, ignored);
    throw;
  }
  write_text_file_atomically(root / "latest", name + "\n");
  // Keep the newest `keep` complete checkpoints, and the best model's: `export CHECKPOINT` and --adapter need it.
  const std::string best = c.state.best_step >= 0 ? step_name(c.state.best_step) : std::string();
  std::vector<fs::path> complete;
  for (const auto& entry : fs::directory_iterator(root)) {
    const std::string n = entry.path().filename().string();
    if (entry.is_directory() && n.rfind("step-", 0) == 0 && n.find(".tmp-") == std::string::npos) {
      complete.push_back(entry.path());
    }
  }
  std::sort(complete.begin(), complete.end());
  for (size_t i = 0; i + static_cast<size_t>(keep) < complete.size(); ++i) {
    if (complete[i].filename() != best) fs::remove_all(complete[i], ignored);
  }
  return final_dir;
}

std::optional<fs::path> latest_checkpoint(const fs::path& output_dir) {
  const fs::path root = checkpoints_dir(output_dir);
  const fs::path pointer = root / "latest";
  if (!fs::exists(pointer)) return std::nullopt;
  std::string name = read_text_file(pointer);
  while (!name.empty() && (name.back() == '\n' || name.back() == '\r')) name.pop_back();
  // What write_training_checkpoint writes: a step-N directory beside the pointer, nothing else (not "../x").
  const bool plain = name.starts_with("step-") && name.size() < 64 && name.find('/') == std::string::npos;
  VP_REQUIRE(plain, pointer.string(), " names '", name.substr(0, 64), name.size() > 64 ? "...'" : "'",
             ", which is not a checkpoint directory (step-NNNNNNNN)");
  const fs::path dir = root / name;
  std::error_code unusable;
  VP_REQUIRE(fs::is_directory(dir, unusable) && fs::exists(dir / "trainer_state.json", unusable), pointer.string(),
             " names ", name, ", which is not a complete checkpoint");
  return dir;
}

std::optional<fs::path> best_model_checkpoint(const fs::path& output_dir) {
  const auto latest = latest_checkpoint(output_dir);
  if (!latest) return std::nullopt;
  const fs::path state_path = *latest / "trainer_state.json";
  nlohmann::json state_json;
  const std::string state_text = read_text_file(state_path);
  try {
    state_json = nlohmann::json::parse(state_text);
  } catch (const nlohmann::json::exception& e) {
    fail(state_path.string(), ": invalid JSON", json_error_detail(e, state_text));
  }
  const TrainerState state = TrainerState::from_json(state_json, state_path.string());
  if (state.best_step < 0) return latest;
  const fs::path best = checkpoints_dir(output_dir) / step_name(state.best_step);
  std::error_code error;
  if (!fs::exists(best / "trainer_state.json", error)) return std::nullopt;
  return best;
}

TrainingCheckpoint read_training_checkpoint(const fs::path& directory) {
  TrainingCheckpoint c;
  const fs::path state_path = directory / "trainer_state.json";
  VP_REQUIRE(fs::exists(state_path), directory.string(), ": not a training checkpoint (no trainer_state.json)");
  nlohmann::json state_json;
  const std::string state_text = read_text_file(state_path);
  try {
    state_json = nlohmann::json::parse(state_text);
  } catch (const nlohmann::json::exception& e) {
    fail(state_path.string(), ": invalid JSON", json_error_detail(e, state_text));
  }
  c.state = TrainerState::from_json(state_json, state_path.string());
  const fs::path trainable_path = directory / kTrainableFileName;
  if (fs::exists(trainable_path)) {
    // Only what trains: the base model comes from the run's --model.
    SafetensorsFile file = read_safetensors(trainable_path);
    for (auto& [name, tensor] : file.tensors) {
      VP_REQUIRE(tensor.dtype() == DType::f32, trainable_path.string(), ": tensor '", name, "' must be F32");
      c.trainable[name] = tensor.clone();
    }
    auto base = file.metadata.find("base_model");
    auto fingerprint = file.metadata.find("frozen_fingerprint");
    VP_REQUIRE(base != file.metadata.end() && fingerprint != file.metadata.end(), trainable_path.string(),
               ": metadata lacks base_model or frozen_fingerprint");
    c.base_model = base->second;
    c.frozen_fingerprint = std::stoull(fingerprint->second, nullptr, 16);
    c.config = read_hf_config(directory / "config.json").config;
    c.preprocessor = read_preprocessor_config(directory / "preprocessor_config.json");
  } else {
    LoadOptions options;
    options.reference.allow_download = false;
    LoadedModel model = load_model(directory.string(), options);
    c.config = model.config;
    c.preprocessor = model.preprocessor;
    c.model = model.parameters;
  }
  const fs::path optimizer_path = directory / "optimizer.safetensors";
  if (fs::exists(optimizer_path)) {
    SafetensorsFile file = read_safetensors(optimizer_path);
    int64_t numel = -1;
    for (auto& [name, tensor] : file.tensors) {
      VP_REQUIRE(tensor.dtype() == DType::f32 && tensor.rank() == 1 && (numel < 0 || tensor.numel() == numel),
                 optimizer_path.string(), ": tensor '", name, "' must be F32 [n] like the others");
      numel = tensor.numel();
      c.optimizer_state[name] = tensor.clone();
    }
    c.optimizer_metadata = file.metadata;
  }
  return c;
}

uint64_t parameter_fingerprint(const FlatParameters& values) {
  uint64_t hash = 0xcbf29ce484222325ull;
  const auto* words = reinterpret_cast<const uint32_t*>(values.data());
  for (int64_t i = 0; i < values.numel(); ++i) hash = (hash ^ words[i]) * 0x100000001b3ull;
  return hash;
}

void remove_stale_temporaries(const fs::path& output_dir) {
  auto remove_matching = [](const fs::path& dir, const std::vector<std::string>& prefixes) {
    std::error_code error;
    if (!fs::is_directory(dir, error)) return;
    std::vector<fs::path> stale;
    for (const auto& entry : fs::directory_iterator(dir, error)) {
      const std::string name = entry.path().filename().string();
      const size_t tmp = name.find(".tmp-");
      if (tmp == std::string::npos) continue;
      const std::string stem = name.substr(0, tmp);
      const bool ours = std::any_of(prefixes.begin(), prefixes.end(), [&](const std::string& prefix) {
        return prefix.back() == '-' ? stem.rfind(prefix, 0) == 0 : stem == prefix;
      });
      if (ours) stale.push_back(entry.path());
    }
    for (const auto& path : stale) fs::remove_all(path, error);
  };
  remove_matching(output_dir, {"model", "metrics.jsonl", "train_options.json"});
  remove_matching(checkpoints_dir(output_dir), {"step-", "latest"});
}

void replace_directory_atomically(const fs::path& target, const std::function<void(const fs::path&)>& write) {
  const fs::path parent = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  fs::create_directories(parent);
  const fs::path staging = parent / concat(target.filename().string(), ".tmp-", ::getpid());
  std::error_code ignored;
  fs::remove_all(staging, ignored);
  fs::create_directories(staging);
  try {
    write(staging);
    fsync_directory(staging);
    if (fs::exists(target)) {
      // Swap in one step; the old contents end up in `staging` and are removed.
      VP_REQUIRE(::renameat2(AT_FDCWD, staging.c_str(), AT_FDCWD, target.c_str(), RENAME_EXCHANGE) == 0,
                 "cannot replace ", target.string(), ": ", std::strerror(errno));
      fs::remove_all(staging, ignored);
    } else {
      VP_REQUIRE(::rename(staging.c_str(), target.c_str()) == 0, "cannot rename ", staging.string(), " to ",
                 target.string(), ": ", std::strerror(errno));
    }
    fsync_directory(parent);
  } catch (...) {
    fs::remove_all(staging, ignored);
    throw;
  }
}

}  // namespace vitpipe
