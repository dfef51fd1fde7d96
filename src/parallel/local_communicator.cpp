#include "parallel/local_communicator.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

namespace vitpipe {
namespace {

// One receive posted and not yet filled.
struct RecvOp {
  enum class Phase { posted, copying, done };
  int context = 0, source = 0, destination = 0, tag = 0;
  void* data = nullptr;
  size_t bytes = 0;
  Phase phase = Phase::posted;
  std::string error;
  int world_rank = 0;  // of the receiver
};

// A message sent before its receive was posted.
struct Message {
  int context = 0, source = 0, destination = 0, tag = 0;
  std::vector<std::byte> data;
};

enum class CollectiveKind { allreduce_f32, reduce_f32, allreduce_f64, broadcast, barrier, gather, split };

const char* collective_name(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::allreduce_f32:
      return "an all-reduce of floats";
    case CollectiveKind::reduce_f32:
      return "a reduce of floats";
    case CollectiveKind::allreduce_f64:
      return "an all-reduce of doubles";
    case CollectiveKind::broadcast:
      return "a broadcast";
    case CollectiveKind::barrier:
      return "a barrier";
    case CollectiveKind::gather:
      return "a gather";
    case CollectiveKind::split:
      return "a split";
  }
  return "?";
}

struct SplitResult {
  int context = -1;  // -1: not a member of any new communicator
  int rank = 0;
  std::vector<int> members;  // world ranks
};

// One collective call, filled by its members as they arrive; the last one does the work.
struct Collective {
  CollectiveKind kind = CollectiveKind::barrier;
  size_t count = 0;  // elements (all-reduce) or bytes (broadcast)
  ReduceOp op = ReduceOp::sum;
  int root = 0;
  int arrived = 0;
  bool working = false;  // every member arrived; the last one is copying or reducing
  bool done = false;
  bool cancelled = false;
  std::vector<void*> buffers;                      // per member
  std::vector<std::span<const std::byte>> inputs;  // gather: per member
  std::vector<std::vector<std::byte>> gathered;    // gather: the root's result
  std::vector<std::pair<int, int>> colors;         // split: (color, key) per member
  std::vector<SplitResult> splits;                 // split: per member
};

}  // namespace

class LocalWorldImpl : public LocalWorld, public std::enable_shared_from_this<LocalWorldImpl> {
 public:
  explicit LocalWorldImpl(int size) : size_(size), finished_(static_cast<size_t>(size), false) {}

  int size() const override { return size_; }
  std::unique_ptr<Communicator> communicator(int rank) override;
  void abort(const std::string& reason) override {
    std::lock_guard lock(mutex_);
    abort_locked(reason);
  }
  bool aborted() const override {
    std::lock_guard lock(mutex_);
    return failed_;
  }
  void mark_finished(int rank) override {
    std::lock_guard lock(mutex_);
    finished_.at(static_cast<size_t>(rank)) = true;
    cv_.notify_all();
  }

  void abort_locked(const std::string& reason) {
    if (!failed_) {
      failed_ = true;
      reason_ = reason;
    }
    cv_.notify_all();
  }
  void throw_if_failed_locked() const {
    if (failed_) throw CommAborted(concat("stopped because another rank failed: ", reason_));
  }

  // Blocks until `done` (read under the lock) is true; throws CommAborted when the world fails and Error when every
  // rank is waiting or finished with nothing to wake them (deadlock).
  template <class Done, class Describe>
  void wait_until(std::unique_lock<std::mutex>& lock, int world_rank, Done done, Describe describe) {
    if (done()) return;
    Waiter waiter{world_rank, [&] { return done(); }, [&] { return describe(); }};
    waiters_.push_back(&waiter);
    struct Unregister {
      LocalWorldImpl* self;
      Waiter* waiter;
      ~Unregister() { std::erase(self->waiters_, waiter); }
    } unregister{this, &waiter};
    for (;;) {
      if (done()) return;
      throw_if_failed_locked();
      if (deadlocked_locked()) {
        std::string message = "deadlock: every rank is waiting or finished:";
        std::vector<Waiter*> sorted = waiters_;
        std::sort(sorted.begin(), sorted.end(), [](Waiter* a, Waiter* b) { return a->world_rank < b->world_rank; });
        for (Waiter* w : sorted) message += concat(" rank ", w->world_rank, " waits for ", w->describe(), ";");
        for (int r = 0; r < size_; ++r) {
          if (finished_[static_cast<size_t>(r)]) message += concat(" rank ", r, " has finished;");
        }
        abort_locked(message);
        throw Error(message);
      }
      cv_.wait(lock);
    }
  }

  // Waits for a bounded piece of work another thread is doing (a copy or a reduction), ignoring failures.
  template <class Done>
  void wait_for_work(std::unique_lock<std::mutex>& lock, Done done) {
    cv_.wait(lock, done);
  }

  std::mutex& mutex() { return mutex_; }
  std::condition_variable& cv() { return cv_; }
  int new_context_locked() { return next_context_++; }

  std::list<std::shared_ptr<RecvOp>> posted;
  std::list<Message> unexpected;
  std::map<std::pair<int, long>, std::shared_ptr<Collective>> collectives;

 private:
  struct Waiter {
    int world_rank;
    std::function<bool()> done;
    std::function<std::string()> describe;
  };

  bool deadlocked_locked() const {
    size_t stuck = waiters_.size();
    for (bool f : finished_) stuck += f ? 1 : 0;
    if (stuck < static_cast<size_t>(size_)) return false;
    for (const Waiter* w : waiters_) {
      if (w->done()) return false;
    }
    return true;
  }

  const int size_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  bool failed_ = false;
  std::string reason_;
  int next_context_ = 1;  // 0 is the world
  std::vector<bool> finished_;
  std::vector<Waiter*> waiters_;
};

namespace {

class LocalCommunicator;

class RecvState : public CommRequest::State {
 public:
  RecvState(std::shared_ptr<LocalWorldImpl> world, std::shared_ptr<RecvOp> op)
      : world_(std::move(world)), op_(std::move(op)) {}

  bool test() override {
    std::lock_guard lock(world_->mutex());
    if (op_->phase == RecvOp::Phase::done) return finish();
    world_->throw_if_failed_locked();
    return false;
  }
  void wait() override {
    std::unique_lock lock(world_->mutex());
    world_->wait_until(
        lock, op_->world_rank, [&] { return op_->phase == RecvOp::Phase::done; },
        [&] { return concat("a message from rank ", op_->source, " (tag ", op_->tag, ", ", op_->bytes, " bytes)"); });
    finish();
  }
  void abandon(bool unwinding) override {
    if (!unwinding) {
      try {
        wait();
      } catch (const std::exception&) {
      }
      return;
    }
    std::unique_lock lock(world_->mutex());
    if (op_->phase == RecvOp::Phase::posted) {
      world_->posted.remove(op_);
      op_->phase = RecvOp::Phase::done;
    }
    world_->wait_for_work(lock, [&] { return op_->phase == RecvOp::Phase::done; });
  }

 private:
  bool finish() {
    if (!op_->error.empty()) throw Error(op_->error);
    return true;
  }
  std::shared_ptr<LocalWorldImpl> world_;
  std::shared_ptr<RecvOp> op_;
};

class CollectiveState : public CommRequest::State {
 public:
  CollectiveState(std::shared_ptr<LocalWorldImpl> world, std::shared_ptr<Collective> collective, int world_rank)
      : world_(std::move(world)), collective_(std::move(collective)), world_rank_(world_rank) {}

  bool test() override {
    std::lock_guard lock(world_->mutex());
    if (collective_->done) return true;
    world_->throw_if_failed_locked();
    return false;
  }
  void wait() override {
    std::unique_lock lock(world_->mutex());
    world_->wait_until(
        lock, world_rank_, [&] { return collective_->done; },
        [&] {
          return concat(collective_name(collective_->kind), " (", collective_->arrived, " of ",
                        collective_->buffers.size(), " members arrived)");
        });
  }
  void abandon(bool unwinding) override {
    if (!unwinding) {
      try {
        wait();
      } catch (const std::exception&) {
      }
      return;
    }
    std::unique_lock lock(world_->mutex());
    if (collective_->working) {
      world_->wait_for_work(lock, [&] { return collective_->done; });
    } else if (!collective_->done) {
      // Our buffer is registered: nobody may complete this collective now.
      collective_->cancelled = true;
      world_->abort_locked(
          concat("rank ", world_rank_, " stopped with ", collective_name(collective_->kind), " pending"));
    }
  }

 private:
  std::shared_ptr<LocalWorldImpl> world_;
  std::shared_ptr<Collective> collective_;
  int world_rank_;
};

void reduce_into(double* target, const double* source, size_t count, ReduceOp op) {
  for (size_t i = 0; i < count; ++i) {
    switch (op) {
      case ReduceOp::sum:
        target[i] += source[i];
        break;
      case ReduceOp::max:
        target[i] = std::max(target[i], source[i]);
        break;
      case ReduceOp::min:
        target[i] = std::min(target[i], source[i]);
        break;
    }
  }
}

// The work of a full collective, done by its last member outside the lock (split is done under the lock).
void perform(Collective& c) {
  const size_t members = c.buffers.size();
  switch (c.kind) {
    case CollectiveKind::allreduce_f32: {
      auto* first = static_cast<float*>(c.buffers[0]);
      for (size_t m = 1; m < members; ++m) {  // rank order: every member gets the same bits
        const auto* other = static_cast<const float*>(c.buffers[m]);
        for (size_t i = 0; i < c.count; ++i) first[i] += other[i];
      }
      for (size_t m = 1; m < members; ++m) std::memcpy(c.buffers[m], first, c.count * sizeof(float));
      break;
    }
    case CollectiveKind::reduce_f32: {
      // Summed in rank order like the all-reduce above, so both give the same bits.
      auto* root = static_cast<float*>(c.buffers[static_cast<size_t>(c.root)]);
      const auto* first = static_cast<const float*>(c.buffers[0]);
      for (size_t i = 0; i < c.count; ++i) {
        float sum = first[i];
        for (size_t m = 1; m < members; ++m) sum += static_cast<const float*>(c.buffers[m])[i];
        root[i] = sum;
      }
      break;
    }
    case CollectiveKind::allreduce_f64: {
      auto* first = static_cast<double*>(c.buffers[0]);
      for (size_t m = 1; m < members; ++m) reduce_into(first, static_cast<const double*>(c.buffers[m]), c.count, c.op);
      for (size_t m = 1; m < members; ++m) std::memcpy(c.buffers[m], first, c.count * sizeof(double));
      break;
    }
    case CollectiveKind::broadcast:
      for (size_t m = 0; m < members; ++m) {
        if (static_cast<int>(m) != c.root && c.count > 0) std::memcpy(c.buffers[m], c.buffers[c.root], c.count);
      }
      break;
    case CollectiveKind::gather:
      c.gathered.resize(members);
      for (size_t m = 0; m < members; ++m) c.gathered[m].assign(c.inputs[m].begin(), c.inputs[m].end());
      break;
    case CollectiveKind::barrier:
    case CollectiveKind::split:
      break;
  }
}

class LocalCommunicator : public Communicator {
 public:
  LocalCommunicator(std::shared_ptr<LocalWorldImpl> world, int context, int rank, std::vector<int> members)
      : world_(std::move(world)), context_(context), rank_(rank), members_(std::move(members)) {}

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(members_.size()); }
  const char* kind() const override { return "local"; }

  CommRequest isend_bytes(const void* data, size_t bytes, int peer, int tag) override {
    check_peer(peer, tag, "send to");
    Message message{context_, rank_, peer, tag, std::vector<std::byte>(bytes)};
    if (bytes > 0) std::memcpy(message.data.data(), data, bytes);
    std::shared_ptr<RecvOp> receiver;
    {
      std::lock_guard lock(world_->mutex());
      world_->throw_if_failed_locked();
      auto& posted = world_->posted;
      auto it = std::find_if(posted.begin(), posted.end(), [&](const std::shared_ptr<RecvOp>& op) {
        return op->context == context_ && op->source == rank_ && op->destination == peer && op->tag == tag;
      });
      if (it == posted.end()) {
        world_->unexpected.push_back(std::move(message));
        return CommRequest();  // buffered: complete
      }
      receiver = *it;
      posted.erase(it);
      receiver->phase = RecvOp::Phase::copying;
    }
    deliver(*receiver, message);
    return CommRequest();
  }

  CommRequest irecv_bytes(void* data, size_t bytes, int peer, int tag) override {
    check_peer(peer, tag, "receive from");
    auto op = std::make_shared<RecvOp>();
    *op = RecvOp{context_, peer, rank_, tag, data, bytes, RecvOp::Phase::posted, {}, members_[rank_]};
    std::optional<Message> message;
    {
      std::lock_guard lock(world_->mutex());
      world_->throw_if_failed_locked();
      auto& unexpected = world_->unexpected;
      auto it = std::find_if(unexpected.begin(), unexpected.end(), [&](const Message& m) {
        return m.context == context_ && m.source == peer && m.destination == rank_ && m.tag == tag;
      });
      if (it == unexpected.end()) {
        world_->posted.push_back(op);
      } else {
        message = std::move(*it);
        unexpected.erase(it);
        op->phase = RecvOp::Phase::copying;
      }
    }
    if (message) deliver(*op, *message);
    return CommRequest(std::make_unique<RecvState>(world_, op));
  }

  CommRequest iallreduce_sum(float* data, size_t count) override {
    return start(CollectiveKind::allreduce_f32, data, count, ReduceOp::sum, 0);
  }
  CommRequest ireduce_sum(float* data, size_t count, int root) override {
    check_root(root);
    return start(CollectiveKind::reduce_f32, data, count, ReduceOp::sum, root);
  }
  CommRequest ibroadcast(float* data, size_t count, int root) override {
    check_root(root);
    return start(CollectiveKind::broadcast, data, count * sizeof(float), ReduceOp::sum, root);
  }
  void allreduce(double* data, size_t count, ReduceOp op) override {
    start(CollectiveKind::allreduce_f64, data, count, op, 0).wait();
  }
  void broadcast_bytes(void* data, size_t bytes, int root) override {
    check_root(root);
    start(CollectiveKind::broadcast, data, bytes, ReduceOp::sum, root).wait();
  }
  void barrier() override { start(CollectiveKind::barrier, nullptr, 0, ReduceOp::sum, 0).wait(); }

  std::vector<std::vector<std::byte>> gather_bytes(std::span<const std::byte> mine, int root) override {
    check_root(root);
    std::shared_ptr<Collective> c;
    CommRequest request = start(CollectiveKind::gather, nullptr, 0, ReduceOp::sum, root, &c, mine);
    request.wait();
    if (rank_ != root) return {};
    std::lock_guard lock(world_->mutex());
    return std::move(c->gathered);
  }

  std::unique_ptr<Communicator> split_shared_memory() override { return split(0, rank()); }

  std::unique_ptr<Communicator> split(int color, int key) override {
    std::shared_ptr<Collective> c;
    CommRequest request = start(CollectiveKind::split, nullptr, 0, ReduceOp::sum, 0, &c, {}, {color, key});
    request.wait();
    SplitResult result;
    {
      std::lock_guard lock(world_->mutex());
      result = c->splits.at(static_cast<size_t>(rank_));
    }
    if (result.context < 0) return nullptr;
    return std::make_unique<LocalCommunicator>(world_, result.context, result.rank, std::move(result.members));
  }

  [[noreturn]] void abort(const std::string& reason) override {
    world_->abort(concat("rank ", members_[static_cast<size_t>(rank_)], ": ", reason));
    throw Error(reason);
  }

 private:
  void check_peer(int peer, int tag, const char* what) const {
    VP_REQUIRE(peer >= 0 && peer < size(), "cannot ", what, " rank ", peer, ": the communicator has ", size(),
               " ranks");
    VP_REQUIRE(peer != rank_, "rank ", rank_, " cannot ", what, " itself");
    VP_REQUIRE(tag >= 0 && tag < kMaxUserTag, "message tag ", tag, " is outside [0, ", kMaxUserTag, ")");
  }
  void check_root(int root) const {
    VP_REQUIRE(root >= 0 && root < size(), "root rank ", root, " is outside [0, ", size(), ")");
  }

  void deliver(RecvOp& op, const Message& message) {
    std::string error;
    if (message.data.size() != op.bytes) {
      error = concat("received ", message.data.size(), " bytes from rank ", message.source, " (tag ", message.tag,
                     ") where the receive expected ", op.bytes);
    } else if (op.bytes > 0) {
      std::memcpy(op.data, message.data.data(), op.bytes);
    }
    std::lock_guard lock(world_->mutex());
    op.error = std::move(error);
    op.phase = RecvOp::Phase::done;
    world_->cv().notify_all();
  }

  CommRequest start(CollectiveKind kind, void* data, size_t count, ReduceOp op, int root,
                    std::shared_ptr<Collective>* out = nullptr, std::span<const std::byte> input = {},
                    std::pair<int, int> color = {}) {
    const size_t members = members_.size();
    std::shared_ptr<Collective> c;
    {
      std::unique_lock lock(world_->mutex());
      world_->throw_if_failed_locked();
      auto& slot = world_->collectives[{context_, sequence_++}];
      if (!slot) {
        slot = std::make_shared<Collective>();
        slot->kind = kind;
        slot->count = count;
        slot->op = op;
        slot->root = root;
        slot->buffers.assign(members, nullptr);
        slot->inputs.resize(members);
        slot->colors.resize(members);
      } else if (slot->kind != kind || slot->count != count || slot->op != op || slot->root != root) {
        const std::string message =
            concat("collective mismatch: rank ", rank_, " called ", collective_name(kind), " (", count,
                   " elements, root ", root, ") where another rank called ", collective_name(slot->kind), " (",
                   slot->count, " elements, root ", slot->root, ")");
        world_->abort_locked(message);
        throw Error(message);
      }
      c = slot;
      VP_REQUIRE(!c->cancelled, "collective was cancelled");
      c->buffers[static_cast<size_t>(rank_)] = data;
      c->inputs[static_cast<size_t>(rank_)] = input;
      c->colors[static_cast<size_t>(rank_)] = color;
      if (out) *out = c;
      if (++c->arrived < static_cast<int>(members)) {
        return CommRequest(std::make_unique<CollectiveState>(world_, c, members_[static_cast<size_t>(rank_)]));
      }
      world_->collectives.erase({context_, sequence_ - 1});
      c->working = true;
      if (kind == CollectiveKind::split) {
        split_locked(*c);
        c->done = true;
        world_->cv().notify_all();
        return CommRequest();
      }
    }
    perform(*c);
    std::lock_guard lock(world_->mutex());
    c->done = true;
    world_->cv().notify_all();
    return CommRequest();
  }

  void split_locked(Collective& c) {
    std::map<int, std::vector<int>> groups;  // color -> member ranks of this communicator
    for (size_t m = 0; m < c.colors.size(); ++m) {
      if (c.colors[m].first >= 0) groups[c.colors[m].first].push_back(static_cast<int>(m));
    }
    c.splits.assign(c.colors.size(), SplitResult{});
    for (auto& [color, group] : groups) {
      std::stable_sort(group.begin(), group.end(), [&](int a, int b) {
        return c.colors[static_cast<size_t>(a)].second < c.colors[static_cast<size_t>(b)].second;
      });
      const int context = world_->new_context_locked();
      std::vector<int> world_ranks;
      for (int m : group) world_ranks.push_back(members_[static_cast<size_t>(m)]);
      for (size_t i = 0; i < group.size(); ++i) {
        c.splits[static_cast<size_t>(group[i])] = SplitResult{context, static_cast<int>(i), world_ranks};
      }
    }
  }

  std::shared_ptr<LocalWorldImpl> world_;
  int context_;
  int rank_;
  std::vector<int> members_;  // world rank of each rank of this communicator
  long sequence_ = 0;         // collectives called so far
};

}  // namespace

std::unique_ptr<Communicator> LocalWorldImpl::communicator(int rank) {
  VP_REQUIRE(rank >= 0 && rank < size_, "rank ", rank, " is outside the local world of ", size_);
  std::vector<int> members(static_cast<size_t>(size_));
  for (int r = 0; r < size_; ++r) members[static_cast<size_t>(r)] = r;
  return std::make_unique<LocalCommunicator>(shared_from_this(), 0, rank, std::move(members));
}

std::shared_ptr<LocalWorld> LocalWorld::create(int size) {
  VP_REQUIRE(size >= 1, "a local world needs at least one rank, got ", size);
  return std::make_shared<LocalWorldImpl>(size);
}

void run_local_ranks(int size, const std::function<void(Communicator&)>& fn) {
  auto world = LocalWorld::create(size);
  struct Failure {
    std::exception_ptr error;
    bool echo = false;  // CommAborted: only a consequence of another rank's failure
    long order = 0;
    std::string what;
  };
  std::vector<Failure> failures(static_cast<size_t>(size));
  std::atomic<long> failure_order{0};
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      Failure& failure = failures[static_cast<size_t>(r)];
      try {
        auto communicator = world->communicator(r);
        fn(*communicator);
      } catch (const CommAborted& e) {
        failure = {std::current_exception(), true, failure_order++, e.what()};
      } catch (const std::exception& e) {
        failure = {std::current_exception(), false, failure_order++, e.what()};
      } catch (...) {
        failure = {std::current_exception(), false, failure_order++, "unknown exception"};
      }
      if (failure.error) world->abort(concat("rank ", r, ": ", failure.what));
      world->mark_finished(r);
    });
  }
  for (auto& thread : threads) thread.join();
  const Failure* first = nullptr;
  int first_rank = 0;
  for (int r = 0; r < size; ++r) {
    const Failure& f = failures[static_cast<size_t>(r)];
    if (!f.error) continue;
    const bool better = !first || (first->echo && !f.echo) || (first->echo == f.echo && f.order < first->order);
    if (better) {
      first = &f;
      first_rank = r;
    }
  }
  if (!first) return;
  if (size == 1) std::rethrow_exception(first->error);
  throw Error(concat("rank ", first_rank, ": ", first->what));
}

}  // namespace vitpipe
