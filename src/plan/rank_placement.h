// Where a grid of pipeline stages x data-parallel replicas goes on the hosts (parallel/host_topology.h): the rank
// order (parallel/process_grid.h) decides whether a pipeline's stages or a stage's replicas are neighbouring ranks,
// and so which traffic crosses between hosts. The order whose cross-host bytes are fewer is chosen: for ViT's
// gradients (twice a stage's parameters per step) against its activations (tokens x hidden per micro-batch and
// boundary) that is usually stages across the hosts and replicas inside them.
#pragma once

#include <string>
#include <vector>

#include "parallel/host_topology.h"
#include "parallel/process_grid.h"

namespace vitpipe {

struct GridTraffic {
  int stages = 1;
  int virtual_stages = 1;
  double boundary_bytes = 0;           // per step and replica, one boundary: activations and their gradients
  std::vector<double> gradient_bytes;  // per stage: its trainable gradient (fp32) bytes
};

struct CrossHostBytes {
  double pipeline = 0;   // activations and their gradients between stages on different hosts
  double reduction = 0;  // the gradient ring's links between hosts
  double total() const { return pipeline + reduction; }
};

// Bytes per step between hosts with the ranks in `order` (a ring all-reduce in replica order per stage).
CrossHostBytes cross_host_bytes(const HostTopology& topology, const GridTraffic& traffic, RankOrder order);

struct RankPlacement {
  RankOrder order = RankOrder::replica_major;
  CrossHostBytes chosen, other;  // the other order's, for the record
  std::string describe() const;  // "stage-major: 0.2 MB per step between hosts (replica-major: 343.0 MB)"
};

// The order with fewer bytes between hosts; replica-major (the default) on a tie, e.g. on one host.
RankPlacement choose_rank_placement(const HostTopology& topology, const GridTraffic& traffic);

// VITPIPE_RANK_ORDER (replica-major or stage-major), when set, fixes the order, for comparisons: the trainer and
// the planner read it alike, so a fixed order is predicted as it runs. A bad value throws, naming it.
RankPlacement with_fixed_rank_order(RankPlacement placement);

}  // namespace vitpipe
