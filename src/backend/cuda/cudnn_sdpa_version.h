// Whether the cuDNN loaded at run time is one that sdpa_executor.cpp's native SDPA graphs are written for. The build's
// guard is the headers' CUDNN_VERSION >= 91300, but the library that loads on the GPU machine (pip wheels) may be
// another: before 9.13.1 the native SDPA descriptors are missing or incomplete, and from 9.21 cudnn-frontend passes the
// stats through the softmax descriptor instead, so these graphs are unproven there. Outside the range, bf16 attention
// takes the fp32 flash kernels and says why. Plain C++ (no cuDNN header), checked by CudaBackend at construction.
#pragma once

#include <cstddef>
#include <string>

namespace vitpipe::cuda {

// cudnnGetVersion()'s encoding for cuDNN 9: major * 10000 + minor * 100 + patch (91301 = 9.13.1).
inline constexpr size_t kCudnnSdpaFirstVersion = 91301;  // the first version used
inline constexpr size_t kCudnnSdpaEndVersion = 92100;    // the first version past the range (9.21.0)

inline std::string cudnn_version_string(size_t v) {
  if (v < 90000) return std::to_string(v) + " (before cuDNN 9)";
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

// Empty when `loaded` is in the range, else why cuDNN's SDPA is not used.
inline std::string cudnn_sdpa_version_refusal(size_t loaded) {
  if (loaded >= kCudnnSdpaFirstVersion && loaded < kCudnnSdpaEndVersion) return "";
  return "cuDNN " + cudnn_version_string(loaded) + " is loaded; vitpipe uses cuDNN's native SDPA with " +
         cudnn_version_string(kCudnnSdpaFirstVersion) + " up to 9.20 only";
}

}  // namespace vitpipe::cuda
