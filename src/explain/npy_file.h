// NumPy's .npy format (version 1.0), float32, C order: the raw heatmaps, which numpy.load reads as they are.
#pragma once

#include <cstdint>
#include <filesystem>
#include <vector>

namespace vitpipe {

// Writes `values` with shape `shape` (product must equal the size) atomically.
void write_npy_float32(const std::filesystem::path& path, const std::vector<int64_t>& shape,
                       const std::vector<float>& values);

}  // namespace vitpipe
