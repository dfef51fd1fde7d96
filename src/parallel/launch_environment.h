// What the launcher tells a rank about its node through the environment: Open MPI's mpirun
// (OMPI_COMM_WORLD_LOCAL_RANK/_SIZE), MPICH's Hydra (MPI_LOCALRANKID/MPI_LOCALNRANKS) or Slurm's srun (SLURM_LOCALID,
// SLURM_STEP_TASKS_PER_NODE at SLURM_NODEID), and Slurm's CPUs per task. The MPI launcher comes first: `mpirun`
// inside a Slurm allocation starts its daemons with srun, one task per node, so every rank sees SLURM_LOCALID=0.
// Rank, size and hosts themselves come from MPI (PMIx), not from here.
#pragma once

#include <functional>
#include <string>

namespace vitpipe {

struct LaunchEnvironment {
  int local_rank = 0;        // this rank among its node's ranks (0 without a launcher)
  int local_ranks = 1;       // the ranks the launcher started on this node
  int cpus_per_task = 0;     // Slurm's --cpus-per-task (SLURM_CPUS_PER_TASK), 0 when not given
  int srun_tasks = 0;        // the tasks of the srun step this process is one of (SLURM_STEP_NUM_TASKS), 0 outside
  std::string local_source;  // which variables local_rank/local_ranks came from: "Open MPI", "MPICH", "Slurm", ""
};

// `lookup` returns a variable's value or nullptr. A variable that is set but malformed is refused with one line
// naming it and what was expected.
LaunchEnvironment read_launch_environment(const std::function<const char*(const char*)>& lookup);

// From this process's environment (read once).
const LaunchEnvironment& launch_environment();

// Slurm's compressed task counts ("2(x3),1": 2 tasks on each of 3 nodes, then 1) at node `node`; `name` is the
// variable's, for the message.
int tasks_on_node(const std::string& compressed, int node, const char* name);

// Refuses a process that srun started as one of several tasks while MPI did not start (`launched_by_mpi` false: no
// PMIx): `srun --mpi=none` or a cluster whose MpiDefault is not pmix. Each task would train alone, every one into the
// same output directory.
void refuse_srun_tasks_without_mpi(const LaunchEnvironment& launch, bool launched_by_mpi);

// CPU threads for one rank when --threads is 0 ("every core this rank may use"): Slurm's CPUs per task if given
// (so ranks x threads never oversubscribe a node), else the node's cores shared by its ranks, capped at the cores in
// this rank's affinity mask; at least 1.
int default_threads_per_rank(const LaunchEnvironment& launch, int node_cores, int affinity_cores);

}  // namespace vitpipe
