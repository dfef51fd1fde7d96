// Sharded safetensors checkpoints, as transformers' save_pretrained(max_shard_size=...) writes them:
// `model-00001-of-00003.safetensors` ... plus `model.safetensors.index.json` =
// {"metadata": {"total_size": bytes}, "weight_map": {tensor name: shard file}}.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "io/named_tensors.h"
#include "util/mapped_file.h"

namespace vitpipe {

// transformers' default max_shard_size, "5GB" = 5 * 10^9 bytes.
inline constexpr uint64_t kDefaultMaxShardBytes = 5'000'000'000ull;

// Tensors in the order they should be saved (a state dict's order decides how shards are cut).
using NamedTensorList = std::vector<std::pair<std::string, Tensor>>;

struct ShardedSafetensors {
  TensorMap tensors;                          // views into the shards' mappings
  std::map<std::string, std::string> source;  // tensor name -> shard file name (for messages)
  std::vector<std::shared_ptr<MappedFile>> mappings;
};

// Reads an index file and every shard it names (each shard validated by read_safetensors). Throws naming the file
// when the index is malformed, names a shard outside its directory or one that is missing, a listed tensor is not
// in its shard, or a shard holds a tensor the index does not list.
ShardedSafetensors read_sharded_safetensors(const std::filesystem::path& index_path);

// Which tensors go into which shard, exactly like huggingface_hub's split_state_dict_into_shards: walk the tensors
// in order, start a new shard when the next tensor would push the current one past max_shard_bytes; a tensor
// larger than max_shard_bytes alone gets a shard of its own (emitted as soon as it is met).
std::vector<std::vector<size_t>> plan_shards(const std::vector<uint64_t>& tensor_bytes, uint64_t max_shard_bytes);

// Writes `<stem>.safetensors` when everything fits in one shard, else `<stem>-0000i-of-0000N.safetensors` and
// `<stem>.safetensors.index.json` (keys sorted, indent 2, like transformers). Every file is written atomically.
// Returns the file names written (the index last).
std::vector<std::string> write_sharded_safetensors(const std::filesystem::path& directory,
                                                   const NamedTensorList& tensors,
                                                   uint64_t max_shard_bytes = kDefaultMaxShardBytes,
                                                   const StringMap& metadata = {}, const std::string& stem = "model");

}  // namespace vitpipe
