#include "plan/node_split_choice.h"

#include <algorithm>
#include <cstdio>
#include <fstream>

#include "util/error.h"

namespace vitpipe {

CoreScaling read_core_scaling_file(const std::string& path, const std::string& flag) {
  std::ifstream in(path);
  VP_REQUIRE(in.good(), flag, " ", path, ": cannot open the file (write it with `vitpipe bench --scaling 1,2 --json`)");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail(flag, " ", path, ": invalid JSON (", e.what(), ")");
  }
  return CoreScaling::from_json(j, path);
}

std::optional<CoreScalingSource> find_core_scaling(const std::string& given, const std::filesystem::path& cache_dir) {
  if (!given.empty()) return CoreScalingSource{read_core_scaling_file(given, "--scaling"), given};
  if (cache_dir.empty()) return std::nullopt;
  const std::filesystem::path cached = cache_dir / kCoreScalingCacheFile;
  std::error_code error;
  if (!std::filesystem::is_regular_file(cached, error)) return std::nullopt;
  return CoreScalingSource{read_core_scaling_file(cached.string(), "the profile cache's"), cached.string()};
}

NodeSplitChoice choose_node_split(const CoreScaling& scaling, int cores,
                                  const std::function<bool(int ranks, int threads)>& fits,
                                  const std::string& memory_hint) {
  NodeSplitChoice choice;
  choice.cores = cores;
  choice.splits = rank_node_splits(scaling, cores);
  bool found = false;
  for (const NodeSplit& split : choice.splits) {
    if (!fits(split.ranks, split.threads)) {
      choice.refused_ranks.push_back(split.ranks);
    } else if (!found) {
      choice.chosen = split;
      found = true;
    }
  }
  VP_REQUIRE(found, "no split of ", cores, " core(s) into ranks x threads fits its memory per rank (", memory_hint,
             "): give --memory-per-process, a smaller --batch-size or --image-size");
  return choice;
}

bool some_layout_fits_memory(const PlanInputs& inputs) {
  // Memory depends on the stage boundaries only through which segments a stage holds; a block weighs what a block
  // weighs, the embeddings and the head a fraction of one.
  ProfilePoint point;
  point.micro_batch = 1;
  point.block = PassTimes{1.0, 2.0, 1.0, 1.0};
  point.classifier_block = point.block;
  point.embeddings = PassTimes{0.1, 0.2, 0.1, 0.1};
  point.head = point.embeddings;
  ModelProfile uniform;
  uniform.points = {point};
  if (candidate_micro_batches(inputs).empty()) return false;
  return !plan_layouts(inputs, uniform).ranked.empty();
}

std::string describe_node_split(const NodeSplitChoice& c, const std::string& source) {
  std::string others;
  for (const NodeSplit& s : c.splits) {
    if (s.ranks == c.chosen.ranks) continue;
    const bool refused = std::find(c.refused_ranks.begin(), c.refused_ranks.end(), s.ranks) != c.refused_ranks.end();
    char text[96];
    if (refused) {
      std::snprintf(text, sizeof text, "%d x %d: does not fit its memory", s.ranks, s.threads);
    } else {
      std::snprintf(text, sizeof text, "%d x %d: %.1f", s.ranks, s.threads, s.images_per_s);
    }
    others += (others.empty() ? "" : "; ") + std::string(text);
  }
  char head[160];
  std::snprintf(head, sizeof head, "node split: %d rank(s) x %d thread(s) of %d core(s), predicted %.1f images/s",
                c.chosen.ranks, c.chosen.threads, c.cores, c.chosen.images_per_s);
  return concat(head, others.empty() ? "" : concat(" (", others, ")"), "; core scaling from ", source);
}

nlohmann::json node_split_json(const NodeSplitChoice& c, const std::string& source) {
  nlohmann::json rows = nlohmann::json::array();
  for (const NodeSplit& s : c.splits) {
    rows.push_back(
        {{"ranks", s.ranks},
         {"threads", s.threads},
         {"step_seconds", s.step_seconds},
         {"allreduce_seconds", s.allreduce_seconds},
         {"images_per_s", s.images_per_s},
         {"fits_memory", std::find(c.refused_ranks.begin(), c.refused_ranks.end(), s.ranks) == c.refused_ranks.end()}});
  }
  return {{"cores", c.cores},
          {"ranks", c.chosen.ranks},
          {"threads", c.chosen.threads},
          {"images_per_s", c.chosen.images_per_s},
          {"scaling", source},
          {"splits", rows}};
}

}  // namespace vitpipe
