#include "io/weight_index.h"

#include <nlohmann/json.hpp>

#include "util/atomic_file.h"
#include "util/error.h"
#include "util/json_error_detail.h"

namespace vitpipe {

bool is_plain_file_name(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\\') == std::string::npos && name.find('\0') == std::string::npos;
}

WeightIndex read_weight_index(const std::filesystem::path& index_path) {
  const std::string file = index_path.string();
  nlohmann::json index;
  const std::string text = read_text_file(index_path);
  try {
    index = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail(file, ": not valid JSON", json_error_detail(e, text));
  }
  VP_REQUIRE(index.is_object(), file, ": expected a JSON object with \"weight_map\"");
  VP_REQUIRE(index.contains("weight_map") && index["weight_map"].is_object(), file,
             ": field \"weight_map\" must be an object {tensor name: shard file}");
  WeightIndex result;
  if (index.contains("metadata") && !index["metadata"].is_null()) {
    const nlohmann::json& metadata = index["metadata"];
    VP_REQUIRE(metadata.is_object(), file, ": field \"metadata\" must be an object");
    if (metadata.contains("total_size")) {
      // Some writers store it as a float; only its value matters.
      VP_REQUIRE(metadata["total_size"].is_number() && metadata["total_size"].get<double>() >= 0, file,
                 ": field \"metadata.total_size\" must be a non-negative number");
      result.total_size = static_cast<uint64_t>(metadata["total_size"].get<double>());
    }
  }
  for (const auto& [name, shard] : index["weight_map"].items()) {
    VP_REQUIRE(shard.is_string(), file, ": weight_map[\"", name, "\"] must be a file name string");
    const std::string shard_name = shard.get<std::string>();
    VP_REQUIRE(is_plain_file_name(shard_name), file, ": weight_map[\"", name, "\"] = \"", shard_name,
               "\" is not a file name in the index's directory");
    result.tensors_by_shard[shard_name].push_back(name);
  }
  VP_REQUIRE(!result.tensors_by_shard.empty(), file, ": weight_map lists no tensors");
  return result;
}

}  // namespace vitpipe
