#include "train/run_world.h"

#include "parallel/local_communicator.h"
#include "parallel/mpi_communicator.h"
#include "util/log.h"
#include "util/threads.h"

namespace vitpipe {

bool launched_as_mpi_job() { return launched_by_mpirun(); }

void run_on_world(int local_ranks, int threads, const std::function<void(Communicator& world)>& body) {
  if (launched_by_mpirun()) {
    configure_threads(threads);
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
