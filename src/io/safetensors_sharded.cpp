#include "io/safetensors_sharded.h"

#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "io/safetensors.h"
#include "io/weight_index.h"
#include "util/atomic_file.h"
#include "util/error.h"
#include "util/log.h"

namespace vitpipe {
namespace {

using Json = nlohmann::json;

// A shard must sit next to its index: no directories, no "..", nothing absolute.
}  // namespace

ShardedSafetensors read_sharded_safetensors(const std::filesystem::path& index_path) {
  const std::string file = index_path.string();
  const WeightIndex index = read_weight_index(index_path);
  const std::optional<uint64_t> total_size = index.total_size;
  const auto& by_shard = index.tensors_by_shard;

  ShardedSafetensors result;
  const std::filesystem::path directory = index_path.parent_path();
  std::map<std::string, SafetensorsFile> shards;
  for (const auto& [shard_name, names] : by_shard) {
    const std::filesystem::path shard_path = directory / shard_name;
    VP_REQUIRE(std::filesystem::exists(shard_path), file, ": shard ", shard_name, " (holding '", names.front(), "'",
               names.size() > 1 ? concat(" and ", names.size() - 1, " more") : std::string(), ") is missing from ",
               directory.string());
    shards.emplace(shard_name, read_safetensors(shard_path));
  }
  // First what the index promises, then what it forgot: a tensor listed in the wrong shard is reported as such.
  uint64_t bytes = 0;
  for (const auto& [shard_name, names] : by_shard) {
    const SafetensorsFile& shard = shards.at(shard_name);
    for (const auto& name : names) {
      auto found = shard.tensors.find(name);
      VP_REQUIRE(found != shard.tensors.end(), file, ": tensor '", name, "' is listed in shard ", shard_name,
                 " but that shard does not hold it");
      bytes += found->second.nbytes();
      result.tensors.emplace(name, found->second);
      result.source.emplace(name, shard_name);
    }
  }
  for (const auto& [shard_name, shard] : shards) {
    for (const auto& [name, tensor] : shard.tensors) {
      VP_REQUIRE(result.source.count(name) != 0 && result.source.at(name) == shard_name,
                 (directory / shard_name).string(), ": holds tensor '", name, "' which ", file,
                 " does not list for this shard");
    }
    result.mappings.push_back(shard.mapping);
  }
  if (total_size && *total_size != bytes) {
    info(file, ": metadata.total_size is ", *total_size, " but the listed tensors hold ", bytes, " bytes");
  }
  return result;
}

std::vector<std::vector<size_t>> plan_shards(const std::vector<uint64_t>& tensor_bytes, uint64_t max_shard_bytes) {
  std::vector<std::vector<size_t>> shards;
  std::vector<size_t> current;
  uint64_t current_bytes = 0;
  for (size_t i = 0; i < tensor_bytes.size(); ++i) {
    const uint64_t size = tensor_bytes[i];
    if (size > max_shard_bytes) {
      shards.push_back({i});
      continue;
    }
    if (current_bytes + size > max_shard_bytes && !current.empty()) {
      shards.push_back(std::move(current));
      current.clear();
      current_bytes = 0;
    }
    current.push_back(i);
    current_bytes += size;
  }
  if (!current.empty() || shards.empty()) shards.push_back(std::move(current));
  return shards;
}

std::vector<std::string> write_sharded_safetensors(const std::filesystem::path& directory,
                                                   const NamedTensorList& tensors, uint64_t max_shard_bytes,
                                                   const StringMap& metadata, const std::string& stem) {
  VP_REQUIRE(max_shard_bytes > 0, "max shard size must be positive");
  std::vector<uint64_t> sizes;
  std::set<std::string> names;
  for (const auto& [name, tensor] : tensors) {
    VP_REQUIRE(names.insert(name).second, "cannot save two tensors named '", name, "'");
    sizes.push_back(tensor.nbytes());
  }
  const auto shards = plan_shards(sizes, max_shard_bytes);
  std::vector<std::string> written;
  if (shards.size() == 1) {
    TensorMap all(tensors.begin(), tensors.end());
    write_safetensors(directory / (stem + ".safetensors"), all, metadata);
    written.push_back(stem + ".safetensors");
    return written;
  }
  nlohmann::json weight_map = nlohmann::json::object();
  uint64_t total = 0;
  for (size_t s = 0; s < shards.size(); ++s) {
    char suffix[32];
    std::snprintf(suffix, sizeof(suffix), "-%05zu-of-%05zu", s + 1, shards.size());
    const std::string shard_name = stem + suffix + ".safetensors";
    TensorMap shard;
    for (size_t index : shards[s]) {
      shard.emplace(tensors[index].first, tensors[index].second);
      weight_map[tensors[index].first] = shard_name;
      total += sizes[index];
    }
    write_safetensors(directory / shard_name, shard, metadata);
    written.push_back(shard_name);
  }
  nlohmann::json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  const std::string index_name = stem + ".safetensors.index.json";
  write_text_file_atomically(directory / index_name, index.dump(2) + "\n");
  written.push_back(index_name);
  return written;
}

}  // namespace vitpipe
