#include "parallel/nccl_stage_exchange.h"

namespace vitpipe {

NcclStageExchange::NcclStageExchange(Backend& backend, Communicator& pipeline_group)
    : nccl_(std::make_unique<NcclGroup>(backend, pipeline_group)), joined_(nccl_->can_join()) {
  nccl_->set_point_to_point_on_communication_stream(joined_);
}

void NcclStageExchange::issue_and_join() {
  nccl_->end_group();
  if (joined_) nccl_->join();
}

void NcclStageExchange::send(const Tensor& device, int peer) { held_.push_back({device, peer}); }

void NcclStageExchange::recv(const Tensor& device, int peer) {
  nccl_->begin_group();
  for (const HeldSend& s : held_) nccl_->send(s.data, s.peer);
  nccl_->recv(device, peer);
  issue_and_join();
  held_.clear();
}

void NcclStageExchange::flush() {
  if (held_.empty()) return;
  nccl_->begin_group();
  for (const HeldSend& s : held_) nccl_->send(s.data, s.peer);
  issue_and_join();
  held_.clear();
}

void NcclStageExchange::finish() {
  flush();
  nccl_->wait();
}

}  // namespace vitpipe
