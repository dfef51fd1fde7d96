// vitpipe's own reduce-to-one-rank and broadcast of a float buffer, for the sharded optimizer's buckets (each
// owned by one replica): a chain along the ranks in ring order, the buffer cut into pieces so that every link of
// the chain carries a piece at once. Each link moves the buffer once, in one direction; with owners taking turns
// bucket by bucket, both directions of every link are busy, as the planner's ring model assumes. Open MPI 4.1's
// non-blocking reduce and broadcast (libnbc) made a 2-host sharded step 1.8 x its prediction (docs/clusters.md), as its
// binomial all-reduce did before vitpipe's ring.
//
// Deterministic: the sum runs in the chain's order (from rank root + 1 to the root), the same on every run. Progress
// happens inside test() and wait(); every wait is one of the communicator's point-to-point waits, each under its
// deadline (comm_deadline.h).
#pragma once

#include <cstddef>

#include "parallel/communicator.h"

namespace vitpipe {

// Starts the sum of every rank's `count` floats at `data` into the root's buffer; the other ranks' buffers are left
// as they were. Messages are tagged with `tag`: no other message between these ranks may use it until the request
// completes. Collective over `comm`.
CommRequest chain_reduce_sum(Communicator& comm, float* data, size_t count, int root, int tag);

// Starts copying the root's `count` floats at `data` into every other rank's buffer. Tags as above.
CommRequest chain_broadcast(Communicator& comm, float* data, size_t count, int root, int tag);

}  // namespace vitpipe
