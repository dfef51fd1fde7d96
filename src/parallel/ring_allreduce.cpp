#include "parallel/ring_allreduce.h"

#include <vector>

namespace vitpipe {
namespace {

class RingAllreduce : public CommRequest::State {
 public:
  RingAllreduce(Communicator& comm, float* data, size_t count, int tag)
      : comm_(comm), data_(data), count_(count), tag_(tag), n_(comm.size()), me_(comm.rank()) {
    incoming_.resize(count / static_cast<size_t>(n_) + 1);  // the largest chunk
    post();
  }

  bool test() override {
    while (step_ < steps()) {
      const bool sent = send_.test();
      const bool received = recv_.test();
      if (!sent || !received) return false;
      finish_step();
    }
    return true;
  }

  void wait() override {
    while (step_ < steps()) {
      send_.wait();
      recv_.wait();
      finish_step();
    }
  }

  // Unwinding: the pending sends and receives abandon themselves as they are destroyed.
  void abandon(bool unwinding) override {
    if (!unwinding) wait();
  }

 private:
  int steps() const { return 2 * (n_ - 1); }
  int wrap(int chunk) const { return ((chunk % n_) + n_) % n_; }
  size_t chunk_begin(int chunk) const { return count_ * static_cast<size_t>(chunk) / static_cast<size_t>(n_); }
  size_t chunk_size(int chunk) const { return chunk_begin(chunk + 1) - chunk_begin(chunk); }
  bool reducing() const { return step_ < n_ - 1; }
  // Reduce-scatter step k: send chunk me - k to the right, receive chunk me - k - 1 from the left and add it, so
  // that after n - 1 steps chunk me + 1 holds every rank's sum. All-gather step k: pass the finished chunks on.
  int chunk_sent() const { return wrap(reducing() ? me_ - step_ : me_ + 1 - (step_ - (n_ - 1))); }
  int chunk_received() const { return wrap(chunk_sent() - 1); }

  void post() {
    if (step_ >= steps()) return;
    const int right = wrap(me_ + 1), left = wrap(me_ - 1);
    const int out = chunk_sent(), in = chunk_received();
    float* into = reducing() ? incoming_.data() : data_ + chunk_begin(in);
    recv_ = comm_.irecv_bytes(into, chunk_size(in) * sizeof(float), left, tag_);
    send_ = comm_.isend_bytes(data_ + chunk_begin(out), chunk_size(out) * sizeof(float), right, tag_);
  }

  void finish_step() {
    if (reducing()) {
      const int in = chunk_received();
      float* sum = data_ + chunk_begin(in);
      const size_t size = chunk_size(in);
      for (size_t i = 0; i < size; ++i) sum[i] += incoming_[i];
    }
    ++step_;
    post();
  }

  Communicator& comm_;
  float* data_;
  size_t count_;
  int tag_;
  int n_, me_;
  int step_ = 0;
  std::vector<float> incoming_;
  CommRequest send_, recv_;
};

}  // namespace

CommRequest ring_allreduce_sum(Communicator& comm, float* data, size_t count, int tag) {
  if (comm.size() == 1) return CommRequest();
  return CommRequest(std::make_unique<RingAllreduce>(comm, data, count, tag));
}

}  // namespace vitpipe
