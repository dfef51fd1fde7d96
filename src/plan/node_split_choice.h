// Which ranks x threads split of a node's cores a job runs with: the fastest by the per-operation core scaling
// (core_scaling.h) among the splits whose ranks fit their memory by the planner's memory model (layout_search.h).
// The profile comes from `--scaling FILE`, else from the profile cache (core_scaling.json, written there by the user
// from `vitpipe bench --scaling 1,2,... --json`); without one the caller keeps its split.
#pragma once

#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "plan/core_scaling.h"
#include "plan/layout_search.h"

namespace vitpipe {

// The file name the profile cache holds a node's core scaling under.
inline constexpr const char* kCoreScalingCacheFile = "core_scaling.json";

struct CoreScalingSource {
  CoreScaling scaling;
  std::string path;  // where it was read from
};

// Reads `path` (bench's --json output or the profile alone). Throws naming `flag`, the file and the field.
CoreScaling read_core_scaling_file(const std::string& path, const std::string& flag);

// `given` (--scaling FILE) when not empty, else `cache_dir`/core_scaling.json when it exists, else nullopt.
std::optional<CoreScalingSource> find_core_scaling(const std::string& given, const std::filesystem::path& cache_dir);

struct NodeSplitChoice {
  NodeSplit chosen;
  std::vector<NodeSplit> splits;   // every split of the cores, fastest first
  std::vector<int> refused_ranks;  // rank counts whose ranks do not fit their memory
  int cores = 1;
};

// The fastest split of `cores` for which `fits(ranks, threads)`. Throws when none fits, naming `memory_hint`.
NodeSplitChoice choose_node_split(const CoreScaling& scaling, int cores,
                                  const std::function<bool(int ranks, int threads)>& fits,
                                  const std::string& memory_hint);

// Whether some layout of `inputs` fits its memory per process: the planner's memory model, with stage boundaries
// balanced by layers (memory does not depend on the measured times), so no profile is needed.
bool some_layout_fits_memory(const PlanInputs& inputs);

// One line: "2 rank(s) x 1 thread(s) of 2 cores, predicted 10.3 images/s (1 x 2: 8.1; 4 x ..: refused, memory)".
std::string describe_node_split(const NodeSplitChoice& choice, const std::string& source);
nlohmann::json node_split_json(const NodeSplitChoice& choice, const std::string& source);

}  // namespace vitpipe
