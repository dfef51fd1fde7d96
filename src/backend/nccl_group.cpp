#include "backend/nccl_group.h"

#include <string>

#include "backend/cuda_module_backend.h"
#include "util/error.h"

namespace vitpipe {
namespace {

void require_device(const Tensor& t, const char* what, bool f32_only) {
  VP_REQUIRE(t.defined(), "NCCL ", what, ": an undefined tensor");
  VP_REQUIRE(t.device() == Device::cuda, "NCCL ", what,
             ": a host tensor; NCCL moves device memory only (a tensor from the CUDA backend's allocate)");
  VP_REQUIRE(t.dtype() == DType::f32 || (!f32_only && t.dtype() == DType::bf16), "NCCL ", what, ": a ",
             dtype_name(t.dtype()), " tensor (", f32_only ? "f32 only" : "f32 or bf16", ")");
}

int32_t c_dtype(const Tensor& t) { return t.dtype() == DType::f32 ? VITPIPE_DTYPE_F32 : VITPIPE_DTYPE_BF16; }

}  // namespace

NcclGroup::NcclGroup(Backend& backend, Communicator& comm) : rank_(comm.rank()), size_(comm.size()) {
  std::optional<CudaModuleInstance> m = cuda_module_instance(backend);
  VP_REQUIRE(m.has_value(), "NCCL needs the CUDA module's backend, not the ", backend.name(), " backend");
  module_ = m->module;
  instance_ = std::move(m->instance);
  VP_REQUIRE(module_->nccl_unique_id != nullptr && module_->nccl_comm_create != nullptr &&
                 module_->nccl_comm_destroy != nullptr && module_->nccl_run != nullptr &&
                 module_->nccl_wait != nullptr && module_->nccl_query != nullptr,
             "the CUDA module has no NCCL entries");
  char id[VITPIPE_NCCL_UNIQUE_ID_BYTES] = {};
  char error[512] = {};
  // Rank 0's failure must not leave the others waiting in the broadcast: its first byte says whether it worked.
  char ok = 1;
  if (rank_ == 0) ok = module_->nccl_unique_id(id, error, sizeof error) == 0 ? 1 : 0;
  comm.broadcast_bytes(&ok, 1, 0);
  VP_REQUIRE(ok == 1, "NCCL: no unique id on rank 0", rank_ == 0 ? std::string(": ") + error : std::string());
  comm.broadcast_bytes(id, sizeof id, 0);
  if (module_->nccl_comm_create(instance_.get(), id, size_, rank_, &comm_, error, sizeof error) != 0 ||
      comm_ == nullptr) {
    fail("NCCL: rank ", rank_, " of ", size_, " could not join the communicator: ", error);
  }
}

NcclGroup::~NcclGroup() {
  if (comm_ != nullptr) {
    char error[512] = {};
    module_->nccl_wait(comm_, error, sizeof error);
    module_->nccl_comm_destroy(comm_);
  }
}

void NcclGroup::run(const std::vector<VitpipeNcclCall>& calls) {
  if (calls.empty()) return;
  char error[512] = {};
  if (module_->nccl_run(comm_, calls.data(), static_cast<int>(calls.size()), 0, error, sizeof error) != 0) {
    fail("NCCL (rank ", rank_, " of ", size_, "): ", error);
  }
}

void NcclGroup::issue(const VitpipeNcclCall& call) {
  if (grouping_) {
    pending_.push_back(call);
  } else {
    run({call});
  }
}

void NcclGroup::allreduce_sum(const Tensor& t) {
  require_device(t, "all-reduce", true);
  issue({VITPIPE_NCCL_ALL_REDUCE, VITPIPE_DTYPE_F32, t.raw(), t.raw(), static_cast<size_t>(t.numel()), -1,
         VITPIPE_NCCL_STREAM_COMMUNICATION});
}

void NcclGroup::reduce_sum(const Tensor& t, int root) {
  require_device(t, "reduce", true);
  VP_REQUIRE(root >= 0 && root < size_, "NCCL reduce: root ", root, " of ", size_, " ranks");
  issue({VITPIPE_NCCL_REDUCE, VITPIPE_DTYPE_F32, t.raw(), t.raw(), static_cast<size_t>(t.numel()), root,
         VITPIPE_NCCL_STREAM_COMMUNICATION});
}

void NcclGroup::broadcast(const Tensor& t, int root) {
  require_device(t, "broadcast", false);
  VP_REQUIRE(root >= 0 && root < size_, "NCCL broadcast: root ", root, " of ", size_, " ranks");
  issue({VITPIPE_NCCL_BROADCAST, c_dtype(t), t.raw(), t.raw(), static_cast<size_t>(t.numel()), root,
         VITPIPE_NCCL_STREAM_COMMUNICATION});
}

void NcclGroup::send(const Tensor& t, int peer) {
  require_device(t, "send", false);
  VP_REQUIRE(peer >= 0 && peer < size_, "NCCL send: peer ", peer, " of ", size_, " ranks");
  issue(
      {VITPIPE_NCCL_SEND, c_dtype(t), t.raw(), nullptr, static_cast<size_t>(t.numel()), peer, point_to_point_stream_});
}

void NcclGroup::recv(const Tensor& t, int peer) {
  require_device(t, "recv", false);
  VP_REQUIRE(peer >= 0 && peer < size_, "NCCL recv: peer ", peer, " of ", size_, " ranks");
  issue(
      {VITPIPE_NCCL_RECV, c_dtype(t), nullptr, t.raw(), static_cast<size_t>(t.numel()), peer, point_to_point_stream_});
}

bool NcclGroup::can_join() const { return module_->abi_version >= 9 && module_->nccl_join != nullptr; }

void NcclGroup::set_point_to_point_on_communication_stream(bool on) {
  VP_REQUIRE(!on || can_join(), "NCCL: point-to-point on the communication stream needs the module's nccl_join");
  point_to_point_stream_ = on ? VITPIPE_NCCL_STREAM_COMMUNICATION : VITPIPE_NCCL_STREAM_BACKEND;
}

void NcclGroup::join() {
  VP_REQUIRE(can_join(), "NCCL: join needs the module's nccl_join (module table version 9)");
  char error[512] = {};
  if (module_->nccl_join(comm_, error, sizeof error) != 0) fail("NCCL (rank ", rank_, " of ", size_, "): ", error);
}

void NcclGroup::begin_group() {
  VP_REQUIRE(!grouping_, "NCCL: begin_group inside a group");
  grouping_ = true;
}

void NcclGroup::end_group() {
  VP_REQUIRE(grouping_, "NCCL: end_group without begin_group");
  grouping_ = false;
  std::vector<VitpipeNcclCall> calls;
  calls.swap(pending_);
  run(calls);
}

void NcclGroup::wait() {
  char error[512] = {};
  if (module_->nccl_wait(comm_, error, sizeof error) != 0) fail("NCCL (rank ", rank_, " of ", size_, "): ", error);
}

bool NcclGroup::done() {
  char error[512] = {};
  int finished = 0;
  if (module_->nccl_query(comm_, &finished, error, sizeof error) != 0) {
    fail("NCCL (rank ", rank_, " of ", size_, "): ", error);
  }
  return finished != 0;
}

}  // namespace vitpipe
