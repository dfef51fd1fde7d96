// safetensors: read (mmap, zero-copy, validated like the reference reader) and write (atomic, "format": "pt").
// Sharded checkpoints (model-0000i-of-0000N.safetensors + model.safetensors.index.json): io/safetensors_sharded.h.
//
// The reader refuses, naming the file, the tensor and the rule: a file under 8 bytes; a header length over
// 100,000,000 bytes or past the end of the file; a header that is not UTF-8, not JSON, not an object, or nests
// deeper than the format does; duplicate keys anywhere; an entry without exactly {dtype, shape, data_offsets};
// an unknown dtype; a shape that is not non-negative integers or whose element count overflows; data_offsets that
// are not [begin, end] with begin <= end inside the data section; a byte size other than elements x width;
// offsets (sorted by begin) that leave a gap, overlap, or stop before the end of the file (trailing bytes);
// `__metadata__` that is not an object of string to string.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "io/named_tensors.h"
#include "util/mapped_file.h"

namespace vitpipe {

inline constexpr uint64_t kSafetensorsMaxHeaderBytes = 100'000'000;

struct SafetensorsFile {
  TensorMap tensors;  // views into `mapping`; stay valid while any copy of the Tensor lives
  StringMap metadata;
  std::shared_ptr<MappedFile> mapping;
};

// Throws vitpipe::Error naming the file and the rule broken. Never reads outside the file.
// Tensors are zero-copy views, except one whose data is not aligned to its element size (possible in files from
// other writers), which is copied so that typed access stays well-defined.
SafetensorsFile read_safetensors(const std::filesystem::path& path);

// The same validation on bytes in memory; the views point into `data`, which `keep_alive` (may be null) owns.
// `name_for_errors` starts every message. Used by read_safetensors and by the fuzz tests.
SafetensorsFile read_safetensors_memory(const void* data, size_t size, const std::string& name_for_errors,
                                        std::shared_ptr<const void> keep_alive = nullptr);

// Writes atomically (temporary file + rename). Metadata always holds "format" ("pt" unless the caller gives one).
// Data is little-endian, row-major, ordered like the reference writer (wider dtypes first, then by name) so every
// tensor is aligned to its element size; the header is padded with spaces to a multiple of 8 bytes.
void write_safetensors(const std::filesystem::path& path, const TensorMap& tensors, const StringMap& metadata = {});

// The exact bytes write_safetensors would write (small files: tests, fuzzing).
std::string serialize_safetensors(const TensorMap& tensors, const StringMap& metadata = {});

}  // namespace vitpipe
