// Which ranks of a job share a host, learned from MPI's shared-memory split (MPI_Comm_split_type with
// MPI_COMM_TYPE_SHARED: the ranks that can share memory), never from hostnames: network namespaces and cloned VMs
// share a hostname. Ranks that share a host talk through shared memory; the others over the network, usually the
// slower link: rank_placement.h puts the smaller traffic there.
#pragma once

#include <string>
#include <vector>

namespace vitpipe {

class Communicator;

struct HostTopology {
  std::vector<int> host_of_rank;  // world rank -> host, hosts numbered in the order of their lowest rank

  int ranks() const { return static_cast<int>(host_of_rank.size()); }
  int hosts() const;
  int ranks_on(int host) const;
  bool same_host(int a, int b) const { return host_of_rank.at(a) == host_of_rank.at(b); }
  // "2 hosts x 2 ranks (host 0: ranks 0-1; host 1: ranks 2-3)"; unequal hosts listed rank by rank.
  std::string describe() const;
};

// Collective over `world`: every rank learns every rank's host.
HostTopology learn_host_topology(Communicator& world);

// Every rank on one host: what the threads of one process are.
HostTopology single_host_topology(int ranks);

}  // namespace vitpipe
