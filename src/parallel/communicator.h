// The one interface the executor talks to for moving data between ranks: non-blocking point-to-point messages
// (activations and their gradients), a non-blocking in-place all-reduce (gradient buckets), and a few small blocking
// collectives (loss sums, grad-norm parts, broadcast, barrier, gather to rank 0). Two implementations:
// MPI across processes (mpi_communicator.h) and threads of one process (local_communicator.h).
//
// Rules shared by both (they are MPI's):
// - A buffer handed to a non-blocking call must stay alive and untouched until its request completes.
// - Messages between two ranks with the same tag arrive in the order they were sent. Tags are in [0, kMaxUserTag).
// - A receive must be posted with exactly the size that was sent; a mismatch fails the request.
// - Collectives are called by every member of the communicator, in the same order.
// - Failures throw vitpipe::Error. When a rank fails, the others must not hang: MPI brings the job down with
//   abort(); the local world wakes every waiting thread with CommAborted.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "util/error.h"

namespace vitpipe {

constexpr int kMaxUserTag = 32000;  // tags above are reserved for the communicators' own messages

// Thrown in the ranks that did not fail, when another rank brought the job down.
class CommAborted : public Error {
 public:
  using Error::Error;
};

// A pending non-blocking operation; move-only. An empty request counts as complete.
class CommRequest {
 public:
  class State {
   public:
    virtual ~State() = default;
    virtual bool test() = 0;  // true once complete; throws vitpipe::Error when it failed
    virtual void wait() = 0;
    // Called when the handle is destroyed while the operation is pending: finish it, or (during stack unwinding,
    // `unwinding` true) give it up without blocking.
    virtual void abandon(bool unwinding) = 0;
  };

  CommRequest() = default;
  explicit CommRequest(std::unique_ptr<State> state) : state_(std::move(state)) {}
  CommRequest(CommRequest&&) noexcept = default;
  CommRequest& operator=(CommRequest&& other) noexcept;
  ~CommRequest();

  bool test();  // true when complete (also drives MPI's progress)
  void wait();
  bool pending() const { return state_ != nullptr; }

 private:
  void release();
  std::unique_ptr<State> state_;
};

void wait_all(std::span<CommRequest> requests);

enum class ReduceOp { sum, max, min };

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const char* kind() const = 0;  // "mpi" or "local"

  // Point to point, non-blocking; `peer` is a rank of this communicator.
  virtual CommRequest isend_bytes(const void* data, size_t bytes, int peer, int tag) = 0;
  virtual CommRequest irecv_bytes(void* data, size_t bytes, int peer, int tag) = 0;
  CommRequest isend(std::span<const float> data, int peer, int tag) {
    return isend_bytes(data.data(), data.size_bytes(), peer, tag);
  }
  CommRequest irecv(std::span<float> data, int peer, int tag) {
    return irecv_bytes(data.data(), data.size_bytes(), peer, tag);
  }
  // bf16/f16 tensors travel as their raw 16-bit patterns.
  CommRequest isend(std::span<const uint16_t> data, int peer, int tag) {
    return isend_bytes(data.data(), data.size_bytes(), peer, tag);
  }
  CommRequest irecv(std::span<uint16_t> data, int peer, int tag) {
    return irecv_bytes(data.data(), data.size_bytes(), peer, tag);
  }

  // Sums `count` floats in place across all members, non-blocking. Every member ends with the same values.
  virtual CommRequest iallreduce_sum(float* data, size_t count) = 0;
  // Sums `count` floats into root's buffer, in place, non-blocking; the other members' buffers are left as they
  // were. A sharded optimizer's reduce-scatter, one bucket (owned by one replica) at a time.
  virtual CommRequest ireduce_sum(float* data, size_t count, int root) = 0;
  // Copies root's floats into every member's buffer, non-blocking. The all-gather of sharded parameters, a bucket
  // (owned by one replica) at a time.
  virtual CommRequest ibroadcast(float* data, size_t count, int root) = 0;
  // Small blocking reductions (loss sums, grad-norm parts, counters), in place.
  virtual void allreduce(double* data, size_t count, ReduceOp op) = 0;
  double allreduce(double value, ReduceOp op = ReduceOp::sum) {
    allreduce(&value, 1, op);
    return value;
  }
  // Copies root's bytes into every member's buffer (same size everywhere).
  virtual void broadcast_bytes(void* data, size_t bytes, int root) = 0;
  void broadcast(std::span<float> data, int root) { broadcast_bytes(data.data(), data.size_bytes(), root); }
  virtual void barrier() = 0;
  // Variable-length gather: root receives every member's bytes, indexed by rank; the others get an empty vector.
  virtual std::vector<std::vector<std::byte>> gather_bytes(std::span<const std::byte> mine, int root) = 0;
  std::vector<std::vector<float>> gather(std::span<const float> mine, int root);

  // Collective: members calling with the same color form a new communicator, ranked by (key, old rank); a negative
  // color takes part without joining (returns nullptr). E.g. the data-parallel group: split(stage, replica).
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;

  // Collective: the members that share this one's host (memory), ranked as here. MPI: MPI_Comm_split_type with
  // MPI_COMM_TYPE_SHARED; threads of one process all share it.
  virtual std::unique_ptr<Communicator> split_shared_memory() = 0;

  // Brings the whole job down with `reason` printed first: MPI_Abort for MPI; for the local world every thread's
  // next (or current) wait throws CommAborted, and this call throws Error(reason).
  [[noreturn]] virtual void abort(const std::string& reason) = 0;
};

// The communicator of every rank of this job: MPI's world when launched by mpirun (initialising MPI once), else a
// one-rank local communicator. Threads of one process use run_local_ranks (local_communicator.h) instead.
std::unique_ptr<Communicator> make_world_communicator();

// Runs fn; if it throws, the job is brought down through world.abort(what) (MPI: printed, then MPI_Abort), so a
// rank that fails never leaves the others hanging. Under the local communicator the error is rethrown.
void run_or_abort(Communicator& world, const std::function<void()>& fn);

}  // namespace vitpipe
