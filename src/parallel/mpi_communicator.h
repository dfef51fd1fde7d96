// The communicator across processes: OpenMPI. MPI is initialised only when the process was launched by mpirun
// (MPI_THREAD_FUNNELED: every MPI call from the thread that initialised it), so plain runs never touch it.
// Errors come back as return codes (MPI_ERRORS_RETURN) and become vitpipe::Error; a fatal error calls abort(),
// which prints the reason and MPI_Aborts the whole job within seconds. Every blocking wait is under the deadline of
// comm_deadline.h (a peer that stops answering is silence, not an error), and names its peer by world rank and host.
#pragma once

#include <memory>

#include "parallel/communicator.h"

namespace vitpipe {

// True when mpirun (or another PMI launcher) started this process: OMPI_COMM_WORLD_SIZE, PMIX_RANK or PMI_RANK.
bool launched_by_mpirun();

// MPI_COMM_WORLD; initialises MPI on the first call. Throws when MPI cannot start.
std::unique_ptr<Communicator> mpi_world();

// Ends MPI after a successful run; every rank calls it, once, after its last communication. A process that exits
// with MPI initialised but not finalised brings the whole job down (MPI_Abort): its peers could otherwise wait for
// it forever. Does nothing if MPI was never initialised.
void finalize_mpi();

}  // namespace vitpipe
