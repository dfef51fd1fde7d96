// vitpipe's own all-reduce of a float buffer: a ring reduce-scatter then a ring all-gather over non-blocking
// point-to-point messages. Each rank sends and receives (n - 1) / n of the buffer twice, both directions of every
// link busy at once: the bandwidth-optimal algorithm the planner models. Open MPI 4.1's non-blocking all-reduce
// takes a binomial tree below 4 ranks instead (a reduce to one rank, then a broadcast: each byte crosses a link
// twice, one direction at a time), which doubled a 2-host data-parallel step (docs/clusters.md).
//
// Deterministic: chunk c is summed in the same ring order on every run (starting at rank c + 1), and the all-gather
// copies the finished sums, so every rank ends with the same bits. Progress happens inside test() and wait(), like
// MPI's own non-blocking collectives; every wait is one of the communicator's point-to-point waits, each under its
// deadline (comm_deadline.h).
#pragma once

#include <cstddef>

#include "parallel/communicator.h"

namespace vitpipe {

// Starts the all-reduce of `count` floats at `data` (in place) over `comm`, whose messages it tags with `tag`:
// no other message between these ranks may use that tag until the request completes. Collective over `comm`.
CommRequest ring_allreduce_sum(Communicator& comm, float* data, size_t count, int tag);

}  // namespace vitpipe
