// Ranks as threads of one process: P stages x R replicas without mpirun, and the communicator tests without MPI.
// Sends are buffered (they complete at once); receives and collectives complete when their partners arrive, the
// last arriving member doing the copy or the reduction. If a rank fails, abort() wakes every waiting thread with
// CommAborted, and a wait that can never be satisfied (every rank waiting or finished) fails as a deadlock.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "parallel/communicator.h"

namespace vitpipe {

class LocalWorld {
 public:
  static std::shared_ptr<LocalWorld> create(int size);
  virtual ~LocalWorld() = default;

  virtual int size() const = 0;
  // The communicator of world rank `rank`; call once per rank, from the thread that will use it.
  virtual std::unique_ptr<Communicator> communicator(int rank) = 0;
  // Every pending and future operation of every rank fails with CommAborted(reason). The first reason sticks.
  virtual void abort(const std::string& reason) = 0;
  virtual bool aborted() const = 0;
  // A rank that returns stops counting as able to make progress (for deadlock detection).
  virtual void mark_finished(int rank) = 0;
};

// Runs fn(communicator) for ranks 0..size-1, each on its own thread, and joins them. If any rank throws, the world
// is aborted so the others wake up and stop; then the first failing rank's own exception (not the CommAborted
// echoes of the others) is rethrown, its message prefixed with "rank R: ".
void run_local_ranks(int size, const std::function<void(Communicator&)>& fn);

}  // namespace vitpipe
