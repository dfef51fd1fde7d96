#include "backend/cuda/calls/nccl_host_ranks.h"

#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/calls/nccl_interpreter.h"

namespace vitpipe::cuda {

struct HostNcclComm::World {
  explicit World(int n) : nranks(n), taken(static_cast<size_t>(n), false) {}

  // The collectives of the groups issued at one point, one entry per rank.
  struct Slot {
    std::vector<NcclGroup> groups;
    int arrived = 0, left = 0;
    bool done = false;
    std::string error;
  };
  struct Message {
    ElementType type;
    size_t count;
    std::vector<char> bytes;
  };

  const int nranks;
  std::mutex mutex;
  std::condition_variable changed;
  int joined = 0;
  std::vector<bool> taken;
  std::map<uint64_t, Slot> slots;
  std::map<std::pair<int, int>, std::deque<Message>> mail;  // (from, to) -> sends not yet received, in order
};

namespace {

std::mutex registry_mutex;
std::map<std::string, std::weak_ptr<HostNcclComm::World>>& registry() {
  static std::map<std::string, std::weak_ptr<HostNcclComm::World>> worlds;
  return worlds;
}

[[noreturn]] void fail(int rank, const std::string& what) {
  throw std::runtime_error("NCCL rank " + std::to_string(rank) + ": " + what);
}

}  // namespace

NcclIdBytes host_nccl_unique_id() {
  static std::atomic<uint64_t> counter{0};
  NcclIdBytes id{};
  const uint64_t n = ++counter;
  const int64_t pid = static_cast<int64_t>(getpid());
  std::memcpy(id.data(), "vitpipe-host-nccl", 17);
  std::memcpy(id.data() + 32, &n, sizeof n);
  std::memcpy(id.data() + 40, &pid, sizeof pid);
  return id;
}

HostNcclComm::HostNcclComm(const NcclIdBytes& id, int nranks, int rank, std::chrono::milliseconds timeout)
    : nranks_(nranks), rank_(rank), timeout_(timeout) {
  if (nranks < 1 || rank < 0 || rank >= nranks) {
    fail(rank, "no rank of a communicator of " + std::to_string(nranks));
  }
  {
    std::lock_guard<std::mutex> lock(registry_mutex);
    auto& worlds = registry();
    for (auto it = worlds.begin(); it != worlds.end();) it = it->second.expired() ? worlds.erase(it) : std::next(it);
    std::weak_ptr<World>& entry = worlds[std::string(id.data(), id.size())];
    world_ = entry.lock();
    if (world_ == nullptr) {
      world_ = std::make_shared<World>(nranks);
      entry = world_;
    }
  }
  World& w = *world_;
  std::unique_lock<std::mutex> lock(w.mutex);
  if (w.nranks != nranks) {
    fail(rank, "joins with " + std::to_string(nranks) + " ranks a communicator of " + std::to_string(w.nranks));
  }
  if (w.taken[static_cast<size_t>(rank)]) fail(rank, "joined the communicator twice");
  w.taken[static_cast<size_t>(rank)] = true;
  ++w.joined;
  w.changed.notify_all();
  if (!w.changed.wait_for(lock, timeout_, [&] { return w.joined >= w.nranks; })) {
    fail(rank, "only " + std::to_string(w.joined) + " of " + std::to_string(w.nranks) + " ranks joined");
  }
}

HostNcclComm::~HostNcclComm() = default;

void HostNcclComm::run(const NcclGroup& group) {
  World& w = *world_;
  NcclGroup collectives;
  std::vector<const NcclCall*> sends, recvs;
  for (const NcclCall& c : group.calls) {
    if (c.op == NcclOp::send || c.op == NcclOp::recv) {
      if (c.peer < 0 || c.peer >= nranks_) fail(rank_, describe(c) + ": no such peer");
      (c.op == NcclOp::send ? sends : recvs).push_back(&c);
    } else {
      collectives.calls.push_back(c);
    }
  }
  std::unique_lock<std::mutex> lock(w.mutex);
  if (!collectives.calls.empty()) {
    const uint64_t seq = next_collective_++;
    World::Slot& slot = w.slots[seq];
    if (slot.groups.empty()) slot.groups.resize(static_cast<size_t>(nranks_));
    slot.groups[static_cast<size_t>(rank_)] = collectives;
    if (++slot.arrived == nranks_) {
      try {
        std::vector<std::vector<NcclGroup>> programs(static_cast<size_t>(nranks_));
        for (int r = 0; r < nranks_; ++r) programs[static_cast<size_t>(r)] = {slot.groups[static_cast<size_t>(r)]};
        interpret_nccl(programs);
      } catch (const std::exception& e) {
        slot.error = e.what();
      }
      slot.done = true;
      w.changed.notify_all();
    } else if (!w.changed.wait_for(lock, timeout_, [&] { return slot.done; })) {
      fail(rank_, describe(collectives.calls[0]) + ": only " + std::to_string(slot.arrived) + " of " +
                      std::to_string(nranks_) + " ranks issued their collective");
    }
    const std::string error = slot.error;
    if (++slot.left == nranks_) w.slots.erase(seq);
    if (!error.empty()) throw std::runtime_error(error);
  }
  for (const NcclCall* s : sends) {
    const size_t bytes = s->count * static_cast<size_t>(element_bytes(s->type));
    World::Message m{s->type, s->count, std::vector<char>(bytes)};
    if (bytes > 0) std::memcpy(m.bytes.data(), s->send, bytes);
    w.mail[{rank_, s->peer}].push_back(std::move(m));
  }
  if (!sends.empty()) w.changed.notify_all();
  for (const NcclCall* r : recvs) {
    std::deque<World::Message>& box = w.mail[{r->peer, rank_}];
    if (!w.changed.wait_for(lock, timeout_, [&] { return !box.empty(); })) {
      fail(rank_, describe(*r) + ": no send from its peer");
    }
    World::Message m = std::move(box.front());
    box.pop_front();
    if (m.type != r->type || m.count != r->count) {
      fail(rank_, describe(*r) + " meets a send of " + std::to_string(m.count) + " x " + element_type_name(m.type));
    }
    if (!m.bytes.empty()) std::memcpy(r->recv, m.bytes.data(), m.bytes.size());
  }
}

}  // namespace vitpipe::cuda
