// pytorch_model.bin (torch.save of a state dict), read without executing anything: the pickle goes through
// restricted_unpickler.h, which refuses every global a state dict does not need.
// Formats: the zip format (torch >= 1.6) whatever its top-level folder is called ("archive/", "pytorch_model/"),
// the legacy format (_use_new_zipfile_serialization=False), and sharded checkpoints (pytorch_model.bin.index.json).
// Dtypes: float32, float16, bfloat16, float64, int64, int32, uint8, bool. Contiguous tensors are views of their
// storage (tensors that shared a storage in Python share it here); non-contiguous ones are materialised row-major.
#pragma once

#include <filesystem>

#include "io/named_tensors.h"

namespace vitpipe {

// Throws vitpipe::Error naming the file, the record and the rule broken (or the global refused).
TensorMap read_pytorch_bin(const std::filesystem::path& path);

// pytorch_model.bin.index.json = {"metadata": {...}, "weight_map": {tensor name: shard file}}; shards are read from
// the index's directory. Every tensor the index lists must be in its shard. `shard_of` (if given) receives each
// tensor's shard file name, for messages.
TensorMap read_pytorch_bin_index(const std::filesystem::path& index_path, StringMap* shard_of = nullptr);

}  // namespace vitpipe
