// safetensors: read (mmap, zero-copy, validated like the reference reader) and write (atomic, "format": "pt").
// Sharded checkpoints: model-0000i-of-0000N.safetensors + model.safetensors.index.json.
#pragma once

#include <cstddef>
#include <filesystem>
#include <memory>

#include "io/named_tensors.h"
#include "util/mapped_file.h"

namespace vitpipe {

struct SafetensorsFile {
  TensorMap tensors;  // views into `mapping`; stay valid while any copy of the Tensor lives
  StringMap metadata;
  std::shared_ptr<MappedFile> mapping;
};

// Throws vitpipe::Error naming the file and the rule broken. Never reads outside the file.
SafetensorsFile read_safetensors(const std::filesystem::path& path);

// Writes atomically (temporary file + rename); adds "format": "pt" to the metadata unless given.
void write_safetensors(const std::filesystem::path& path, const TensorMap& tensors, const StringMap& metadata = {});

}  // namespace vitpipe
