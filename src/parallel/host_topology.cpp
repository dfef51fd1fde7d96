#include "parallel/host_topology.h"

#include <algorithm>
#include <map>

#include "parallel/communicator.h"
#include "util/error.h"

namespace vitpipe {

int HostTopology::hosts() const {
  return host_of_rank.empty() ? 0 : *std::max_element(host_of_rank.begin(), host_of_rank.end()) + 1;
}

int HostTopology::ranks_on(int host) const {
  return static_cast<int>(std::count(host_of_rank.begin(), host_of_rank.end(), host));
}

std::string HostTopology::describe() const {
  const int n = hosts();
  bool equal = true;
  for (int h = 1; h < n; ++h) equal = equal && ranks_on(h) == ranks_on(0);
  std::string text =
      equal ? concat(n, n == 1 ? " host x " : " hosts x ", ranks_on(0), ranks_on(0) == 1 ? " rank" : " ranks")
            : concat(n, " hosts of unequal rank counts");
  if (n <= 1) return text;
  text += " (";
  for (int h = 0; h < n; ++h) {
    std::string ranks;
    int run_start = -1, previous = -2;
    auto close_run = [&] {
      if (run_start < 0) return;
      ranks += concat(ranks.empty() ? "" : ",", run_start, previous > run_start ? concat("-", previous) : "");
    };
    for (int r = 0; r < this->ranks(); ++r) {
      if (host_of_rank[static_cast<size_t>(r)] != h) continue;
      if (r != previous + 1) {
        close_run();
        run_start = r;
      }
      previous = r;
    }
    close_run();
    text +=
        concat(h ? "; " : "", "host ", h, ": rank", ranks.find_first_of(",-") == std::string::npos ? " " : "s ", ranks);
  }
  return text + ")";
}

HostTopology learn_host_topology(Communicator& world) {
  std::unique_ptr<Communicator> local = world.split_shared_memory();
  // A host is named by its lowest world rank: the same on every rank of it.
  const double lowest = local->allreduce(static_cast<double>(world.rank()), ReduceOp::min);
  std::vector<double> lowest_of(static_cast<size_t>(world.size()), -1.0);
  lowest_of[static_cast<size_t>(world.rank())] = lowest;
  world.allreduce(lowest_of.data(), lowest_of.size(), ReduceOp::max);
  HostTopology topology;
  std::map<int, int> host_of_lowest;
  for (double value : lowest_of) {
    const int key = static_cast<int>(value);
    const auto [it, added] = host_of_lowest.emplace(key, static_cast<int>(host_of_lowest.size()));
    topology.host_of_rank.push_back(it->second);
  }
  return topology;
}

HostTopology single_host_topology(int ranks) {
  VP_REQUIRE(ranks >= 1, "a topology needs at least one rank, got ", ranks);
  return HostTopology{std::vector<int>(static_cast<size_t>(ranks), 0)};
}

}  // namespace vitpipe
