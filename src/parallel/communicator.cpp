#include "parallel/communicator.h"

#include <cstdio>
#include <cstring>
#include <exception>

#include "parallel/local_communicator.h"
#include "parallel/mpi_communicator.h"

namespace vitpipe {

CommRequest& CommRequest::operator=(CommRequest&& other) noexcept {
  if (this != &other) {
    release();
    state_ = std::move(other.state_);
  }
  return *this;
}

CommRequest::~CommRequest() { release(); }

void CommRequest::release() {
  if (!state_) return;
  try {
    state_->abandon(std::uncaught_exceptions() > 0);
  } catch (...) {
  }
  state_.reset();
}

bool CommRequest::test() {
  if (!state_) return true;
  if (!state_->test()) return false;
  state_.reset();
  return true;
}

void CommRequest::wait() {
  if (!state_) return;
  state_->wait();
  state_.reset();
}

void wait_all(std::span<CommRequest> requests) {
  for (auto& request : requests) request.wait();
}

std::vector<std::vector<float>> Communicator::gather(std::span<const float> mine, int root) {
  auto bytes = gather_bytes(std::as_bytes(mine), root);
  std::vector<std::vector<float>> result(bytes.size());
  for (size_t r = 0; r < bytes.size(); ++r) {
    result[r].resize(bytes[r].size() / sizeof(float));
    if (!bytes[r].empty()) std::memcpy(result[r].data(), bytes[r].data(), result[r].size() * sizeof(float));
  }
  return result;
}

std::unique_ptr<Communicator> make_world_communicator() {
  if (launched_by_mpirun()) return mpi_world();
  return LocalWorld::create(1)->communicator(0);  // the communicator keeps its world alive
}

void run_or_abort(Communicator& world, const std::function<void()>& fn) {
  try {
    fn();
  } catch (const CommAborted&) {
    throw;  // another rank failed and already brought the job down
  } catch (const std::exception& e) {
    if (std::string(world.kind()) == "local") throw;
    world.abort(e.what());
  }
}

}  // namespace vitpipe
