// The index of a sharded checkpoint (model.safetensors.index.json, pytorch_model.bin.index.json):
// {"metadata": {"total_size": bytes}, "weight_map": {tensor name: shard file}}. One reader, validated once, for the
// safetensors and .bin loaders and the Hub downloader.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace vitpipe {

struct WeightIndex {
  std::map<std::string, std::vector<std::string>> tensors_by_shard;  // shard file -> tensor names, in file order
  std::optional<uint64_t> total_size;                                // metadata.total_size when given
};

// Throws naming the file and field: not JSON, no "weight_map" object, a shard that is not a plain file name in the
// index's directory, an empty map, a malformed "metadata".
WeightIndex read_weight_index(const std::filesystem::path& index_path);

// A file name with no directory part ("model-00001-of-00002.safetensors"; not "../x", "a/b" or "").
bool is_plain_file_name(const std::string& name);

}  // namespace vitpipe
