#include "parallel/chain_collectives.h"

#include <algorithm>
#include <vector>

#include "util/error.h"

namespace vitpipe {
namespace {

// A piece small enough that a chain of several ranks keeps its links busy together, large enough that a message's
// fixed cost is noise.
constexpr size_t kPieceFloats = size_t{1} << 18;  // 1 MiB

// One rank's part of a chain: receive each piece from the previous rank (adding it to its own for a reduce,
// storing it for a broadcast), then send it on to the next. The chain's first rank only sends, its last only
// receives. Every piece's receive is posted at the start (a reduce receives into a buffer of its own, as large as
// the ring all-reduce's), so that MPI moves them all without waiting for this rank to test each in turn.
class ChainCollective : public CommRequest::State {
 public:
  ChainCollective(Communicator& comm, float* data, size_t count, int root, int tag, bool reduce)
      : comm_(comm), data_(data), count_(count), tag_(tag), reduce_(reduce) {
    const int n = comm.size();
    // Reduce: root + 1, root + 2, ..., root. Broadcast: root, root + 1, ..., root - 1.
    const int position = ((comm.rank() - root - (reduce ? 1 : 0)) % n + n) % n;
    previous_ = position == 0 ? -1 : (comm.rank() - 1 + n) % n;
    next_ = position == n - 1 ? -1 : (comm.rank() + 1) % n;
    pieces_ = std::max<size_t>(1, (count + kPieceFloats - 1) / kPieceFloats);
    if (previous_ < 0) {
      for (size_t k = 0; k < pieces_; ++k) send(k);  // the buffer is already what goes on
      received_ = pieces_;
      return;
    }
    if (reduce_) incoming_.resize(count);
    for (size_t k = 0; k < pieces_; ++k) {
      float* into = (reduce_ ? incoming_.data() : data_) + begin(k);
      receives_.push_back(comm_.irecv_bytes(into, size(k) * sizeof(float), previous_, tag_));
    }
  }

  bool test() override {
    while (received_ < pieces_) {
      if (!receives_[received_].test()) return false;
      finish_receive();
    }
    for (CommRequest& s : sends_) {
      if (!s.test()) return false;
    }
    return true;
  }

  void wait() override {
    while (received_ < pieces_) {
      receives_[received_].wait();
      finish_receive();
    }
    for (CommRequest& s : sends_) s.wait();
  }

  // Unwinding: the pending sends and receives abandon themselves as they are destroyed.
  void abandon(bool unwinding) override {
    if (!unwinding) wait();
  }

 private:
  size_t begin(size_t piece) const { return std::min(count_, piece * kPieceFloats); }
  size_t size(size_t piece) const { return begin(piece + 1) - begin(piece); }

  // What goes on: a reduce's partial sums lie in its own buffer, except on the chain's first rank.
  void send(size_t piece) {
    if (next_ < 0) return;
    const float* from = (reduce_ && previous_ >= 0 ? incoming_.data() : data_) + begin(piece);
    sends_.push_back(comm_.isend_bytes(from, size(piece) * sizeof(float), next_, tag_));
  }

  void finish_receive() {
    const size_t piece = received_++;
    if (reduce_) {
      // The previous ranks' partial sum plus this rank's: the chain's order, whatever the timing. Only the root's
      // buffer takes the sum; the others' stay as they were.
      float* partial = incoming_.data() + begin(piece);
      float* mine = data_ + begin(piece);
      float* sum = next_ < 0 ? mine : partial;
      const size_t n = size(piece);
      for (size_t i = 0; i < n; ++i) sum[i] = partial[i] + mine[i];
    }
    send(piece);
  }

  Communicator& comm_;
  float* data_;
  size_t count_;
  int tag_;
  bool reduce_;
  int previous_ = -1, next_ = -1;
  size_t pieces_ = 1, received_ = 0;
  std::vector<float> incoming_;
  std::vector<CommRequest> receives_, sends_;
};

CommRequest start(Communicator& comm, float* data, size_t count, int root, int tag, bool reduce) {
  VP_REQUIRE(root >= 0 && root < comm.size(), "chain collective: root ", root, " outside ", comm.size(), " ranks");
  if (comm.size() == 1) return CommRequest();
  return CommRequest(std::make_unique<ChainCollective>(comm, data, count, root, tag, reduce));
}

}  // namespace

CommRequest chain_reduce_sum(Communicator& comm, float* data, size_t count, int root, int tag) {
  return start(comm, data, count, root, tag, true);
}

CommRequest chain_broadcast(Communicator& comm, float* data, size_t count, int root, int tag) {
  return start(comm, data, count, root, tag, false);
}

}  // namespace vitpipe
