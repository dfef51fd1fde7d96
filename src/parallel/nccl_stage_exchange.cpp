#include "parallel/nccl_stage_exchange.h"

namespace vitpipe {

NcclStageExchange::NcclStageExchange(Backend& backend, Communicator& pipeline_group)
    : nccl_(std::make_unique<NcclGroup>(backend, pipeline_group)), joined_(nccl_->can_join()) {
  nccl_->set_point_to_point_on_communication_stream(joined_);
}

void NcclStageExchange::send(const Tensor& device, int peer) { held_.push_back({device, peer}); }

void NcclStageExchange::recv(const Tensor& device, int peer) { posted_.push_back({device, peer}); }

int64_t NcclStageExchange::issue() {
  if (held_.empty() && posted_.empty()) return issued_;
  nccl_->begin_group();
  for (const Transfer& t : held_) nccl_->send(t.data, t.peer);
  for (const Transfer& t : posted_) nccl_->recv(t.data, t.peer);
  nccl_->end_group();
  held_.clear();
  posted_.clear();
  return ++issued_;
}

void NcclStageExchange::join_through(int64_t group) {
  if (group <= joined_through_) return;
  if (joined_) nccl_->join();  // waits for every group issued so far, `group` among them
  joined_through_ = issued_;
}

void NcclStageExchange::finish() {
  issue();
  join_through(issued_);
  nccl_->wait();
}

}  // namespace vitpipe
