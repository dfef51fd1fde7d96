#include "train/run_world.h"

#include <algorithm>
#include <cstdlib>
#include <thread>

#include "parallel/local_communicator.h"
#include "parallel/mpi_communicator.h"
#include "util/log.h"
#include "util/threads.h"

namespace vitpipe {
namespace {

// Under mpirun, "every core" (--threads 0) means this rank's share of its node: mpirun binds more than 2 ranks to a
// whole socket, so each would start a thread per core and N ranks would oversubscribe the node N times (OpenMP's
// spinning threads then crawl: 4 ranks on 2 cores ran 47x slower than with one thread each).
int threads_per_mpi_rank(int requested) {
  if (requested > 0) return requested;
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  if (local == nullptr) local = std::getenv("MPI_LOCALNRANKS");  // MPICH's Hydra
  const int ranks_here = local ? std::max(1, std::atoi(local)) : 1;
  const int node_cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  return std::max(1, std::min(available_cores(), node_cores / ranks_here));
}

}  // namespace

bool launched_as_mpi_job() { return launched_by_mpirun(); }

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
  const int total = configure_threads(threads);
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
