// Where the grid goes on the hosts (plan/rank_placement.h): the cross-host bytes of each rank order, counted link by
// link, and the choice of the smaller; the topology's description (parallel/host_topology.h).
#include <gtest/gtest.h>

#include <cstdlib>

#include "parallel/host_topology.h"
#include "plan/rank_placement.h"
#include "util/error.h"

namespace vitpipe {
namespace {

HostTopology hosts_of(std::vector<int> host_of_rank) { return HostTopology{std::move(host_of_rank)}; }

GridTraffic traffic(int stages, double boundary, std::vector<double> gradients) {
  GridTraffic t;
  t.stages = stages;
  t.boundary_bytes = boundary;
  t.gradient_bytes = std::move(gradients);
  return t;
}

TEST(HostTopology, DescribesHostsAndTheirRanks) {
  EXPECT_EQ(hosts_of({0, 0, 1, 1}).describe(), "2 hosts x 2 ranks (host 0: ranks 0-1; host 1: ranks 2-3)");
  EXPECT_EQ(hosts_of({0, 1, 2, 3}).describe(),
            "4 hosts x 1 rank (host 0: rank 0; host 1: rank 1; host 2: rank 2; host 3: rank 3)");
  EXPECT_EQ(hosts_of({0, 1, 0, 1}).describe(), "2 hosts x 2 ranks (host 0: ranks 0,2; host 1: ranks 1,3)");
  EXPECT_EQ(hosts_of({0, 0, 0}).describe(), "1 host x 3 ranks");
  EXPECT_EQ(single_host_topology(2).hosts(), 1);
}

TEST(RankPlacement, TwoHostsOfTwoRanksTwoStagesCountEachOrdersLinks) {
  // 2 stages x 2 replicas on hosts {0, 1} and {2, 3}.
  const HostTopology topology = hosts_of({0, 0, 1, 1});
  const GridTraffic t = traffic(2, 1000.0, {5e6, 7e6});
  // Replica-major: each replica's pipeline is inside a host; each stage's 2-rank ring has both links across:
  // 2 links x 2 (r-1)/r x G = 2 G per stage.
  const CrossHostBytes replica_major = cross_host_bytes(topology, t, RankOrder::replica_major);
  EXPECT_EQ(replica_major.pipeline, 0.0);
  EXPECT_DOUBLE_EQ(replica_major.reduction, 2 * 5e6 + 2 * 7e6);
  // Stage-major: each stage's replicas share a host; both replicas' boundaries cross.
  const CrossHostBytes stage_major = cross_host_bytes(topology, t, RankOrder::stage_major);
  EXPECT_DOUBLE_EQ(stage_major.pipeline, 2 * 1000.0);
  EXPECT_EQ(stage_major.reduction, 0.0);
  const RankPlacement chosen = choose_rank_placement(topology, t);
  EXPECT_EQ(chosen.order, RankOrder::stage_major);
  EXPECT_DOUBLE_EQ(chosen.other.total(), replica_major.total());
  // Activations heavier than the gradients (a big batch of a small model): replica-major.
  EXPECT_EQ(choose_rank_placement(topology, traffic(2, 1e9, {5e6, 7e6})).order, RankOrder::replica_major);
}

TEST(RankPlacement, AFixedOrderIsTakenWithItsBytesAndABadOneRefused) {
  const HostTopology topology = hosts_of({0, 0, 1, 1});
  const RankPlacement chosen = choose_rank_placement(topology, traffic(2, 1000.0, {5e6, 7e6}));
  ASSERT_EQ(chosen.order, RankOrder::stage_major);
  unsetenv("VITPIPE_RANK_ORDER");
  EXPECT_EQ(with_fixed_rank_order(chosen).order, RankOrder::stage_major);
  setenv("VITPIPE_RANK_ORDER", "replica-major", 1);
  const RankPlacement fixed = with_fixed_rank_order(chosen);
  EXPECT_EQ(fixed.order, RankOrder::replica_major);
  EXPECT_DOUBLE_EQ(fixed.chosen.total(), chosen.other.total());
  EXPECT_DOUBLE_EQ(fixed.other.total(), chosen.chosen.total());
  setenv("VITPIPE_RANK_ORDER", "diagonal", 1);
  EXPECT_THROW(with_fixed_rank_order(chosen), Error);
  unsetenv("VITPIPE_RANK_ORDER");
}

TEST(RankPlacement, OneHostOrOneRankPerHostKeepTheDefaultOrderOnATie) {
  EXPECT_EQ(choose_rank_placement(hosts_of({0, 0, 0, 0}), traffic(2, 1000.0, {5e6, 7e6})).order,
            RankOrder::replica_major);
  // 4 hosts of 1 rank, 2 x 2: every link crosses whichever the order, so the totals tie.
  const HostTopology four = hosts_of({0, 1, 2, 3});
  const GridTraffic t = traffic(2, 1000.0, {5e6, 7e6});
  EXPECT_DOUBLE_EQ(cross_host_bytes(four, t, RankOrder::replica_major).total(),
                   cross_host_bytes(four, t, RankOrder::stage_major).total());
  EXPECT_EQ(choose_rank_placement(four, t).order, RankOrder::replica_major);
}

TEST(RankPlacement, InterleavedChunksCrossBackFromTheLastStage) {
  // 2 stages x 1 replica on 2 hosts, 2 chunks per rank: virtual stages 0 1 2 3 on ranks 0 1 0 1: 3 crossings.
  GridTraffic t = traffic(2, 10.0, {1.0, 1.0});
  t.virtual_stages = 2;
  EXPECT_DOUBLE_EQ(cross_host_bytes(hosts_of({0, 1}), t, RankOrder::replica_major).pipeline, 30.0);
}

TEST(RankPlacement, RefusesAGridTheRanksCannotHold) {
  EXPECT_THROW(cross_host_bytes(hosts_of({0, 0, 1}), traffic(2, 1.0, {1.0, 1.0}), RankOrder::replica_major), Error);
}

}  // namespace
}  // namespace vitpipe
