#include "parallel/launch_environment.h"

#include <algorithm>
#include <cstdlib>
#include <limits>

#include "util/error.h"

namespace vitpipe {
namespace {

int parse_count(const std::string& text, const char* name, int minimum) {
  size_t used = 0;
  long value = -1;
  try {
    value = std::stol(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size() || value < minimum || value > std::numeric_limits<int>::max()) {
    fail("environment variable ", name, ": expected an integer >= ", minimum, ", got '", text, "'");
  }
  return static_cast<int>(value);
}

int variable(const std::function<const char*(const char*)>& lookup, const char* name, int minimum, int fallback) {
  const char* text = lookup(name);
  return text == nullptr ? fallback : parse_count(text, name, minimum);
}

}  // namespace

int tasks_on_node(const std::string& compressed, int node, const char* name) {
  VP_REQUIRE(node >= 0, "environment variable ", name, ": node index ", node, " is negative");
  int first = 0;  // index of the first node the current item covers
  size_t at = 0;
  while (at < compressed.size()) {
    const size_t comma = std::min(compressed.find(',', at), compressed.size());
    const std::string item = compressed.substr(at, comma - at);
    int tasks = 0;
    int repeat = 1;
    if (const size_t open = item.find("(x"); open != std::string::npos) {
      if (item.back() != ')')
        fail("environment variable ", name, ": expected counts like 2(x3),1, got '", compressed, "'");
      tasks = parse_count(item.substr(0, open), name, 0);
      repeat = parse_count(item.substr(open + 2, item.size() - open - 3), name, 1);
    } else {
      tasks = parse_count(item, name, 0);
    }
    if (node < first + repeat) return tasks;
    first += repeat;
    at = comma + 1;
  }
  fail("environment variable ", name, ": '", compressed, "' counts ", first, " node(s), this is node ", node);
}

LaunchEnvironment read_launch_environment(const std::function<const char*(const char*)>& lookup) {
  LaunchEnvironment launch;
  launch.cpus_per_task = variable(lookup, "SLURM_CPUS_PER_TASK", 1, 0);
  launch.srun_tasks = variable(lookup, "SLURM_STEP_NUM_TASKS", 1, 0);
  if (lookup("OMPI_COMM_WORLD_LOCAL_RANK") != nullptr) {
    launch.local_source = "Open MPI";
    launch.local_rank = variable(lookup, "OMPI_COMM_WORLD_LOCAL_RANK", 0, 0);
    launch.local_ranks = variable(lookup, "OMPI_COMM_WORLD_LOCAL_SIZE", 1, 1);
  } else if (lookup("MPI_LOCALRANKID") != nullptr) {
    launch.local_source = "MPICH";
    launch.local_rank = variable(lookup, "MPI_LOCALRANKID", 0, 0);
    launch.local_ranks = variable(lookup, "MPI_LOCALNRANKS", 1, 1);
  } else if (lookup("SLURM_LOCALID") != nullptr) {
    launch.local_source = "Slurm";
    launch.local_rank = variable(lookup, "SLURM_LOCALID", 0, 0);
    const char* per_node = lookup("SLURM_STEP_TASKS_PER_NODE");
    const char* per_node_name = "SLURM_STEP_TASKS_PER_NODE";
    if (per_node == nullptr) {
      per_node = lookup("SLURM_TASKS_PER_NODE");
      per_node_name = "SLURM_TASKS_PER_NODE";
    }
    if (per_node != nullptr) {
      launch.local_ranks = std::max(1, tasks_on_node(per_node, variable(lookup, "SLURM_NODEID", 0, 0), per_node_name));
    }
  }
  VP_REQUIRE(launch.local_rank < launch.local_ranks, "environment: ", launch.local_source, "'s local rank ",
             launch.local_rank, " is not below its ranks on this node (", launch.local_ranks, ")");
  return launch;
}

const LaunchEnvironment& launch_environment() {
  static const LaunchEnvironment launch = read_launch_environment([](const char* name) { return std::getenv(name); });
  return launch;
}

void refuse_srun_tasks_without_mpi(const LaunchEnvironment& launch, bool launched_by_mpi) {
  VP_REQUIRE(launched_by_mpi || launch.srun_tasks <= 1, "srun started ", launch.srun_tasks,
             " tasks (SLURM_STEP_NUM_TASKS) but MPI did not start (no PMIX_RANK): launch with `srun --mpi=pmix` (or "
             "MpiDefault=pmix in slurm.conf), or mpirun inside the allocation; as they are, each task would train "
             "alone into the same output directory");
}

int default_threads_per_rank(const LaunchEnvironment& launch, int node_cores, int affinity_cores) {
  if (launch.cpus_per_task > 0) return launch.cpus_per_task;
  const int share = std::max(1, node_cores) / std::max(1, launch.local_ranks);
  return std::max(1, std::min(std::max(1, affinity_cores), share));
}

}  // namespace vitpipe
