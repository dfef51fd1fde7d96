#include "plan/rank_placement.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>

#include "util/error.h"

namespace vitpipe {

CrossHostBytes cross_host_bytes(const HostTopology& topology, const GridTraffic& t, RankOrder order) {
  const int world = topology.ranks();
  VP_REQUIRE(t.stages >= 1 && world % t.stages == 0 && static_cast<int>(t.gradient_bytes.size()) == t.stages,
             "cross_host_bytes: ", world, " ranks cannot hold ", t.stages, " stages (", t.gradient_bytes.size(),
             " gradient sizes)");
  const ProcessGrid grid(world, 0, t.stages, order);
  const int replicas = grid.replicas();
  CrossHostBytes bytes;
  // Virtual stage j sends to j + 1: stage j % P to stage (j + 1) % P of the same replica.
  for (int replica = 0; replica < replicas; ++replica) {
    for (int j = 0; j + 1 < t.stages * t.virtual_stages; ++j) {
      const int from = grid.rank_of(j % t.stages, replica), to = grid.rank_of((j + 1) % t.stages, replica);
      if (!topology.same_host(from, to)) bytes.pipeline += t.boundary_bytes;
    }
  }
  // A ring all-reduce over r ranks sends 2 (r - 1) / r of the buffer over each of its r links.
  if (replicas > 1) {
    for (int stage = 0; stage < t.stages; ++stage) {
      const double per_link = 2.0 * (replicas - 1) / replicas * t.gradient_bytes[static_cast<size_t>(stage)];
      for (int k = 0; k < replicas; ++k) {
        if (!topology.same_host(grid.rank_of(stage, k), grid.rank_of(stage, (k + 1) % replicas))) {
          bytes.reduction += per_link;
        }
      }
    }
  }
  return bytes;
}

std::string RankPlacement::describe() const {
  char text[200];
  const RankOrder second = order == RankOrder::stage_major ? RankOrder::replica_major : RankOrder::stage_major;
  std::snprintf(text, sizeof(text), "%s, %.1f MB per step between hosts (%s: %.1f MB)", rank_order_name(order),
                chosen.total() / 1e6, rank_order_name(second), other.total() / 1e6);
  return text;
}

RankPlacement choose_rank_placement(const HostTopology& topology, const GridTraffic& traffic) {
  const CrossHostBytes replica_major = cross_host_bytes(topology, traffic, RankOrder::replica_major);
  const CrossHostBytes stage_major = cross_host_bytes(topology, traffic, RankOrder::stage_major);
  RankPlacement placement;
  const bool stage_first = stage_major.total() < replica_major.total();
  placement.order = stage_first ? RankOrder::stage_major : RankOrder::replica_major;
  placement.chosen = stage_first ? stage_major : replica_major;
  placement.other = stage_first ? replica_major : stage_major;
  return placement;
}

RankPlacement with_fixed_rank_order(RankPlacement placement) {
  const char* fixed = std::getenv("VITPIPE_RANK_ORDER");
  if (fixed == nullptr || *fixed == '\0') return placement;
  const std::string name = fixed;
  VP_REQUIRE(name == "replica-major" || name == "stage-major",
             "VITPIPE_RANK_ORDER: expected replica-major or stage-major, got \"", name, "\"");
  const RankOrder order = name == "stage-major" ? RankOrder::stage_major : RankOrder::replica_major;
  if (order != placement.order) std::swap(placement.chosen, placement.other);
  placement.order = order;
  return placement;
}

}  // namespace vitpipe
