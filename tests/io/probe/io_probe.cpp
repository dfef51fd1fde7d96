// io_probe: a thin command line over vitpipe's io layer, so the Python reference tests (tests/io/*.py) can drive
// the C++ reader, writer, loader and interpolation and check the results with independent implementations.
//   io_probe dump FILE                      FILE (.safetensors or .safetensors.index.json) as JSON, data in hex
//   io_probe write SPEC.json OUT            write the tensors SPEC lists ({"metadata", "tensors": [{name, dtype,
//                                           shape, hex}]}) with write_safetensors
//   io_probe load MODEL OUT [options]       load_model then save_model (OUT "-": no save); prints a JSON summary
//       --labels A,B  --image-size N  --problem-type multi|single  --allow-fresh-head  --seed N
//       --max-shard-bytes N
//   io_probe interpolate IN OUT             for every "grid_K" [C, h, w] F32 and "size_K" I64 [2] in IN, writes
//                                           "out_K" = bicubic_resize(grid_K) to size_K
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "io/model_files.h"
#include "io/safetensors.h"
#include "io/safetensors_sharded.h"
#include "model/position_interpolation.h"
#include "util/atomic_file.h"
#include "util/error.h"

using namespace vitpipe;
using Json = nlohmann::json;

namespace {

std::string to_hex(const void* data, size_t size) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  out.reserve(size * 2);
  const auto* bytes = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < size; ++i) {
    out.push_back(digits[bytes[i] >> 4]);
    out.push_back(digits[bytes[i] & 15]);
  }
  return out;
}

std::vector<unsigned char> from_hex(const std::string& hex) {
  VP_REQUIRE(hex.size() % 2 == 0, "odd hex length");
  std::vector<unsigned char> out(hex.size() / 2);
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = static_cast<unsigned char>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  return out;
}

int dump(const std::string& path) {
  Json out;
  Json tensors = Json::object();
  auto add = [&](const std::string& name, const Tensor& t) {
    tensors[name] = {{"dtype", dtype_name(t.dtype())}, {"shape", t.shape()}, {"hex", to_hex(t.raw(), t.nbytes())}};
  };
  if (path.size() > 5 && path.substr(path.size() - 5) == ".json") {
    ShardedSafetensors file = read_sharded_safetensors(path);
    for (const auto& [name, t] : file.tensors) add(name, t);
    out["source"] = file.source;
  } else {
    SafetensorsFile file = read_safetensors(path);
    for (const auto& [name, t] : file.tensors) add(name, t);
    out["metadata"] = file.metadata;
  }
  out["tensors"] = tensors;
  std::cout << out.dump() << "\n";
  return 0;
}

int write(const std::string& spec_path, const std::string& out_path) {
  Json spec = Json::parse(read_text_file(spec_path));
  TensorMap tensors;
  for (const Json& entry : spec["tensors"]) {
    DType dtype;
    VP_REQUIRE(parse_dtype(entry["dtype"].get<std::string>(), &dtype), "bad dtype");
    Tensor t = Tensor::empty(entry["shape"].get<Shape>(), dtype);
    std::vector<unsigned char> bytes = from_hex(entry["hex"].get<std::string>());
    VP_REQUIRE(bytes.size() == t.nbytes(), "hex size mismatch for ", entry["name"].get<std::string>());
    if (!bytes.empty()) std::memcpy(t.raw(), bytes.data(), bytes.size());
    tensors.emplace(entry["name"].get<std::string>(), t);
  }
  StringMap metadata;
  if (spec.contains("metadata")) metadata = spec["metadata"].get<StringMap>();
  write_safetensors(out_path, tensors, metadata);
  return 0;
}

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    size_t comma = text.find(',', start);
    out.push_back(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) return out;
    start = comma + 1;
  }
}

int load(int argc, char** argv) {
  VP_REQUIRE(argc >= 4, "usage: io_probe load MODEL OUT [options]");
  LoadOptions options;
  SaveOptions save;
  for (int i = 4; i < argc; ++i) {
    std::string flag = argv[i];
    auto value = [&]() -> std::string {
      VP_REQUIRE(i + 1 < argc, flag, " needs a value");
      return argv[++i];
    };
    if (flag == "--labels") {
      options.labels = split(value());
    } else if (flag == "--image-size") {
      options.image_size = std::stoll(value());
    } else if (flag == "--problem-type") {
      options.problem_type = value() == "single" ? ProblemType::single_label : ProblemType::multi_label;
    } else if (flag == "--allow-fresh-head") {
      options.allow_fresh_head = true;
    } else if (flag == "--seed") {
      options.seed = std::stoull(value());
    } else if (flag == "--max-shard-bytes") {
      save.max_shard_bytes = std::stoull(value());
    } else {
      fail("unknown option ", flag);
    }
  }
  const auto start = std::chrono::steady_clock::now();
  LoadedModel model = load_model(argv[2], options);
  const double load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  save.config_extra = model.config_extra;
  if (std::string(argv[3]) != "-") save_model(argv[3], model.config, model.preprocessor, model.parameters, save);
  Json summary = {{"fresh_head", model.fresh_head},
                  {"labels", model.config.labels},
                  {"image_size", model.config.image_size},
                  {"checkpoint_image_size", model.checkpoint_config.image_size},
                  {"weights_file", model.weights_file},
                  {"has_preprocessor_file", model.has_preprocessor_file},
                  {"problem_type", problem_type_name(model.config.problem_type)},
                  {"load_seconds", load_seconds}};
  std::cout << summary.dump() << "\n";
  return 0;
}

int interpolate(const std::string& in, const std::string& out) {
  SafetensorsFile file = read_safetensors(in);
  TensorMap results;
  for (const auto& [name, grid] : file.tensors) {
    if (name.rfind("grid_", 0) != 0) continue;
    const std::string key = name.substr(5);
    const Tensor& size = file.tensors.at("size_" + key);
    const int64_t out_h = size.data<int64_t>()[0], out_w = size.data<int64_t>()[1];
    Tensor result = Tensor::empty({grid.dim(0), out_h, out_w});
    bicubic_resize(grid.f32(), grid.dim(0), grid.dim(1), grid.dim(2), result.f32(), out_h, out_w);
    results.emplace("out_" + key, result);
  }
  write_safetensors(out, results);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    VP_REQUIRE(argc >= 2, "usage: io_probe dump|write|load|interpolate ...");
    std::string command = argv[1];
    if (command == "dump" && argc == 3) return dump(argv[2]);
    if (command == "write" && argc == 4) return write(argv[2], argv[3]);
    if (command == "load") return load(argc, argv);
    if (command == "interpolate" && argc == 4) return interpolate(argv[2], argv[3]);
    fail("unknown command or wrong arguments: ", command);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
