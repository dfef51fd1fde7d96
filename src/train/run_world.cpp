#include "train/run_world.h"

#include <algorithm>
#include <cstdlib>
#include <thread>

#include "parallel/launch_environment.h"
#include "parallel/local_communicator.h"
#include "parallel/mpi_communicator.h"
#include "util/log.h"
#include "util/threads.h"

namespace vitpipe {
namespace {

// Under mpirun or srun, "every core" (--threads 0) means this rank's share of its node: Slurm's CPUs per task, else
// the node's cores over the launcher's ranks on it. mpirun binds more than 2 ranks to a whole socket, so each would
// start a thread per core and N ranks would oversubscribe the node N times (OpenMP's spinning threads then crawl:
// 4 ranks on 2 cores ran 47x slower than with one thread each).
int threads_per_mpi_rank(int requested) {
  if (requested > 0) return requested;
  const int node_cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  return default_threads_per_rank(launch_environment(), node_cores, available_cores());
}

// One process: every core it may use, or Slurm's CPUs per task inside a job (task/none binds nothing).
int threads_per_process(int requested) {
  if (requested > 0) return requested;
  LaunchEnvironment one_process;
  one_process.cpus_per_task = launch_environment().cpus_per_task;
  return default_threads_per_rank(one_process, available_cores(), available_cores());
}

}  // namespace

bool launched_as_mpi_job() { return launched_by_mpirun(); }

int threads_of_one_process(int requested) { return threads_per_process(requested); }

void run_on_world(int local_ranks, int threads, const std::function<void(Communicator& world)>& body) {
  if (launched_by_mpirun()) {
    configure_threads(threads_per_mpi_rank(threads));
    auto world = make_world_communicator();
    set_log_enabled(world->rank() == 0);
    run_or_abort(*world, [&] { body(*world); });
    set_log_enabled(true);
    finalize_mpi();
    return;
  }
  refuse_srun_tasks_without_mpi(launch_environment(), false);
  const int total = configure_threads(threads_per_process(threads));
  if (local_ranks <= 1) {
    auto world = make_world_communicator();
    body(*world);
    return;
  }
  const int per_rank = std::max(1, total / local_ranks);
  run_local_ranks(local_ranks, [&](Communicator& world) {
    configure_threads(per_rank);
    set_thread_log_enabled(world.rank() == 0);  // rank 0's thread speaks for the job
    body(world);
  });
}

}  // namespace vitpipe
