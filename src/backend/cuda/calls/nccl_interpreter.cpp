#include "backend/cuda/calls/nccl_interpreter.h"

#include <stdexcept>
#include <string>

#include "backend/cuda/calls/host_elements.h"

namespace vitpipe::cuda {
namespace {

[[noreturn]] void refuse(size_t group, int rank, const std::string& what) {
  throw std::invalid_argument("NCCL group " + std::to_string(group) + ", rank " + std::to_string(rank) + ": " + what);
}

bool is_point_to_point(NcclOp op) { return op == NcclOp::send || op == NcclOp::recv; }

std::vector<const NcclCall*> filtered(const NcclGroup& g, bool point_to_point) {
  std::vector<const NcclCall*> out;
  for (const NcclCall& c : g.calls) {
    if (is_point_to_point(c.op) == point_to_point) out.push_back(&c);
  }
  return out;
}

void run_collective(size_t group, const std::vector<const NcclCall*>& calls) {
  const NcclCall& first = *calls[0];
  const int ranks = static_cast<int>(calls.size());
  for (int r = 0; r < ranks; ++r) {
    const NcclCall& c = *calls[static_cast<size_t>(r)];
    if (c.op != first.op || c.count != first.count || c.type != first.type || c.peer != first.peer) {
      refuse(group, r, describe(c) + " meets " + describe(first) + " on rank 0");
    }
    if (c.send == nullptr || c.recv == nullptr) refuse(group, r, describe(c) + " has a null buffer");
  }
  const bool rooted = first.op == NcclOp::reduce || first.op == NcclOp::broadcast;
  if (rooted && (first.peer < 0 || first.peer >= ranks)) refuse(group, 0, describe(first) + ": the root is no rank");
  if (first.op == NcclOp::reduce_scatter) {
    // Rank r receives block r of the element-wise sum of every rank's ranks x count send buffer.
    const int64_t n = static_cast<int64_t>(first.count);
    std::vector<double> sum(static_cast<size_t>(n * ranks), 0.0);
    for (int r = 0; r < ranks; ++r) {
      for (int64_t i = 0; i < n * ranks; ++i) sum[i] += load_element(calls[r]->send, first.type, i);
    }
    for (int r = 0; r < ranks; ++r) {
      for (int64_t i = 0; i < n; ++i) store_element(calls[r]->recv, first.type, i, sum[r * n + i]);
    }
    return;
  }
  const int64_t n = static_cast<int64_t>(first.count);
  std::vector<double> result(static_cast<size_t>(n), 0.0);
  if (first.op == NcclOp::broadcast) {
    for (int64_t i = 0; i < n; ++i) result[i] = load_element(calls[first.peer]->send, first.type, i);
  } else {
    for (int r = 0; r < ranks; ++r) {
      for (int64_t i = 0; i < n; ++i) result[i] += load_element(calls[r]->send, first.type, i);
    }
  }
  for (int r = 0; r < ranks; ++r) {
    if (first.op == NcclOp::reduce && r != first.peer) continue;  // only the root receives
    for (int64_t i = 0; i < n; ++i) store_element(calls[r]->recv, first.type, i, result[i]);
  }
}

void run_point_to_point(size_t group, const std::vector<std::vector<const NcclCall*>>& per_rank) {
  const int ranks = static_cast<int>(per_rank.size());
  std::vector<std::vector<bool>> matched(per_rank.size());
  for (int r = 0; r < ranks; ++r) matched[r].assign(per_rank[r].size(), false);
  for (int r = 0; r < ranks; ++r) {
    for (size_t i = 0; i < per_rank[r].size(); ++i) {
      const NcclCall& send = *per_rank[r][i];
      if (send.op != NcclOp::send) continue;
      if (send.peer < 0 || send.peer >= ranks || send.peer == r) refuse(group, r, describe(send) + ": no such peer");
      // The first unmatched recv from r on the peer: NCCL pairs a peer's sends and recvs in issue order.
      const NcclCall* recv = nullptr;
      for (size_t j = 0; j < per_rank[send.peer].size() && recv == nullptr; ++j) {
        const NcclCall& c = *per_rank[send.peer][j];
        if (c.op == NcclOp::recv && c.peer == r && !matched[send.peer][j]) {
          matched[send.peer][j] = true;
          recv = &c;
        }
      }
      if (recv == nullptr) refuse(group, r, describe(send) + " has no recv on its peer in the same group");
      if (recv->count != send.count || recv->type != send.type) {
        refuse(group, send.peer, describe(*recv) + " meets " + describe(send));
      }
      for (int64_t k = 0; k < static_cast<int64_t>(send.count); ++k) {
        store_element(recv->recv, recv->type, k, load_element(send.send, send.type, k));
      }
      matched[r][i] = true;
    }
  }
  for (int r = 0; r < ranks; ++r) {
    for (size_t i = 0; i < per_rank[r].size(); ++i) {
      if (!matched[r][i]) refuse(group, r, describe(*per_rank[r][i]) + " has no send on its peer in the same group");
    }
  }
}

}  // namespace

void interpret_nccl(const std::vector<std::vector<NcclGroup>>& programs) {
  const size_t ranks = programs.size();
  for (size_t r = 1; r < ranks; ++r) {
    if (programs[r].size() != programs[0].size()) {
      refuse(0, static_cast<int>(r),
             "issues " + std::to_string(programs[r].size()) + " groups, rank 0 issues " +
                 std::to_string(programs[0].size()));
    }
  }
  for (size_t g = 0; g < (ranks ? programs[0].size() : 0); ++g) {
    // Collectives: the k-th of every rank's group run together.
    std::vector<std::vector<const NcclCall*>> collectives(ranks), point(ranks);
    for (size_t r = 0; r < ranks; ++r) {
      collectives[r] = filtered(programs[r][g], false);
      point[r] = filtered(programs[r][g], true);
      if (collectives[r].size() != collectives[0].size()) {
        refuse(g, static_cast<int>(r), "a different number of collectives than rank 0");
      }
    }
    for (size_t k = 0; k < collectives[0].size(); ++k) {
      std::vector<const NcclCall*> calls(ranks);
      for (size_t r = 0; r < ranks; ++r) calls[r] = collectives[r][k];
      run_collective(g, calls);
    }
    run_point_to_point(g, point);
  }
}

}  // namespace vitpipe::cuda
