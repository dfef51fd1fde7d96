// Test driver for read_pytorch_bin: writes every tensor's bytes (row-major) and a manifest for Python to compare.
//   hub_dump_pytorch_bin CHECKPOINT OUT_DIR     (CHECKPOINT: pytorch_model.bin or pytorch_model.bin.index.json)
// OUT_DIR/manifest.json = {name: {"dtype": "F32", "shape": [...], "file": "3.raw", "shares_storage_with": ...}}
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "io/pytorch_bin.h"
#include "util/error.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s CHECKPOINT OUT_DIR\n", argv[0]);
    return 2;
  }
  try {
    std::string path = argv[1];
    vitpipe::TensorMap tensors =
        path.ends_with(".index.json") ? vitpipe::read_pytorch_bin_index(path) : vitpipe::read_pytorch_bin(path);
    std::filesystem::path out = argv[2];
    std::filesystem::create_directories(out);
    nlohmann::json manifest = nlohmann::json::object();
    int index = 0;
    for (const auto& [name, tensor] : tensors) {
      std::string file = std::to_string(index++) + ".raw";
      std::ofstream(out / file, std::ios::binary)
          .write(static_cast<const char*>(tensor.raw()), static_cast<std::streamsize>(tensor.nbytes()));
      manifest[name] = {{"dtype", vitpipe::dtype_name(tensor.dtype())},
                        {"shape", tensor.shape()},
                        {"file", file},
                        {"address", reinterpret_cast<uintptr_t>(tensor.raw())},
                        {"nbytes", tensor.nbytes()}};
    }
    std::ofstream(out / "manifest.json") << manifest.dump(1);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
