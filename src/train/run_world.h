// Where a job's ranks come from: mpirun's processes (one call of `body` per process, on MPI's world), or, without
// mpirun, threads of this process on a local world (the same flags run in one process).
#pragma once

#include <functional>

#include "parallel/communicator.h"

namespace vitpipe {

// `local_ranks`: ranks to run as threads when not launched by mpirun. Under mpirun the world is MPI's and a
// failure on any rank aborts the job (parallel/communicator.h: run_or_abort); MPI is finalised at the end.
// `threads`: CPU threads for the whole process (0 = all cores, or SLURM_CPUS_PER_TASK inside a Slurm job), shared
// evenly by local ranks; under mpirun or srun, 0 means this rank's share of its node: SLURM_CPUS_PER_TASK if set, else
// the node's cores / the ranks the launcher started on it, at least 1 (parallel/launch_environment.h).
void run_on_world(int local_ranks, int threads, const std::function<void(Communicator& world)>& body);

bool launched_as_mpi_job();

// The CPU threads one process (not under mpirun) runs with for `requested` (--threads; 0 = every core it may use,
// or Slurm's CPUs per task inside a job): what run_on_world shares among its local ranks.
int threads_of_one_process(int requested);

}  // namespace vitpipe
