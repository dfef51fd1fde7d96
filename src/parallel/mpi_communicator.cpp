#include "parallel/mpi_communicator.h"

// The C API only: OpenMPI would otherwise pull in its deprecated C++ bindings (libmpi_cxx).
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "parallel/chain_collectives.h"
#include "parallel/comm_deadline.h"
#include "parallel/ring_allreduce.h"

namespace vitpipe {
namespace {

constexpr int kGatherTag = kMaxUserTag + 1;
constexpr size_t kChunkBytes = size_t{1} << 30;  // MPI counts are ints: move big buffers in 1 GiB pieces

struct MpiRuntime {
  bool initialised = false;  // by us
  bool finalised = false;
  int world_rank = 0;
  // Each world rank's host (comm_deadline.h: hostname and addresses), for naming the peer a wait is stuck on.
  std::vector<std::string> hosts;
};
MpiRuntime g_mpi;

// A failure this rank found itself (an exception): the network still works, so MPI_Abort takes the job down
// within seconds. A lost peer is the deadline's (comm_deadline.h), which cannot rely on MPI.
[[noreturn]] void abort_job(const std::string& reason) {
  report_rank_failure(reason);
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::_Exit(1);
}

void check(int code, const char* what) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  fail("MPI ", what, " failed: ", std::string(text, static_cast<size_t>(length)));
}

enum class AllreduceAlgorithm { ring, mpi };

// The gradient collectives: vitpipe's ring all-reduce (ring_allreduce.h) and chain reduce and broadcast
// (chain_collectives.h), or MPI_Iallreduce, MPI_Ireduce and MPI_Ibcast with the MPI library's choice
// (VITPIPE_ALLREDUCE=mpi, for comparison: Open MPI 4.1 takes a binomial tree below 4 ranks).
AllreduceAlgorithm allreduce_algorithm() {
  static const AllreduceAlgorithm chosen = [] {
    const char* text = std::getenv("VITPIPE_ALLREDUCE");
    const std::string value = text ? text : "";
    VP_REQUIRE(value.empty() || value == "ring" || value == "mpi", "VITPIPE_ALLREDUCE: expected ring or mpi, got \"",
               value, "\"");
    return value == "mpi" ? AllreduceAlgorithm::mpi : AllreduceAlgorithm::ring;
  }();
  return chosen;
}

// MPI_Wait under the deadline (comm_deadline.h): MPI itself waits for ever on a peer behind a lost link or on a
// dead host (a 2-host run whose link was cut hung past 885 s). It polls MPI_Test as MPI_Wait polls its progress
// engine (no sleeps: a message must not wait on one) while the watchdog watches the clock.
void wait_or_abort(MPI_Request* request, MPI_Status* status, const std::string& what) {
  BlockingCommunication blocked(what);
  for (;;) {
    int flag = 0;
    check(MPI_Test(request, &flag, status), what.c_str());
    if (flag) return;
  }
}

std::string host_of(int world_rank) {
  if (world_rank < 0 || static_cast<size_t>(world_rank) >= g_mpi.hosts.size()) return "?";
  return g_mpi.hosts[static_cast<size_t>(world_rank)];
}

int as_count(size_t count, const char* what) {
  VP_REQUIRE(count <= static_cast<size_t>(INT_MAX), "MPI ", what, " of ", count,
             " elements is larger than MPI's int count allows");
  return static_cast<int>(count);
}

// Exiting without finalize_mpi() means this rank did not finish its part: take the job down rather than leave the
// other ranks blocked on us.
void exit_handler() {
  int finalised = 0;
  MPI_Finalized(&finalised);
  if (g_mpi.initialised && !g_mpi.finalised && !finalised) {
    abort_job("exiting before the job finished (see the error above); aborting every rank");
  }
}

void terminate_handler() {
  std::string reason = "terminated";
  if (auto error = std::current_exception()) {
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      reason = e.what();
    } catch (...) {
      reason = "terminated by an unknown exception";
    }
  }
  abort_job(reason);
}

class MpiRequestState : public CommRequest::State {
 public:
  MpiRequestState(MPI_Request request, bool receive, size_t expected_bytes, int peer, int world_peer, int tag)
      : request_(request),
        receive_(receive),
        expected_bytes_(expected_bytes),
        peer_(peer),
        world_peer_(world_peer),
        tag_(tag) {}

  bool test() override {
    int flag = 0;
    MPI_Status status;
    check(MPI_Test(&request_, &flag, &status), receive_ ? "receive" : "request");
    if (flag) check_received(status);
    return flag != 0;
  }
  void wait() override {
    MPI_Status status;
    wait_or_abort(&request_, &status, describe());
    check_received(status);
  }
  void abandon(bool unwinding) override {
    if (request_ == MPI_REQUEST_NULL) return;
    if (!unwinding) {
      wait_or_abort(&request_, MPI_STATUS_IGNORE, describe());
      return;
    }
    // The job is going down (run_or_abort); stop MPI from writing into a buffer that is about to be freed.
    if (receive_) MPI_Cancel(&request_);
    MPI_Request_free(&request_);
  }

 private:
  std::string describe() const {
    return concat(receive_ ? "a receive of " : "a send of ", expected_bytes_, " bytes ", receive_ ? "from" : "to",
                  " rank ", world_peer_, " (tag ", tag_, ") on host ", host_of(world_peer_));
  }
  void check_received(const MPI_Status& status) {
    if (!receive_) return;
    int count = 0;
    MPI_Get_count(&status, MPI_BYTE, &count);
    VP_REQUIRE(static_cast<size_t>(count) == expected_bytes_, "received ", count, " bytes from rank ", peer_, " (tag ",
               tag_, ") where the receive expected ", expected_bytes_);
  }

  MPI_Request request_;
  bool receive_;
  size_t expected_bytes_;
  int peer_, world_peer_, tag_;
};

// Non-blocking collectives may not be freed while pending; during unwinding they are left to MPI_Abort.
class MpiCollectiveState : public CommRequest::State {
 public:
  MpiCollectiveState(MPI_Request request, std::string what) : request_(request), what_(std::move(what)) {}
  bool test() override {
    int flag = 0;
    check(MPI_Test(&request_, &flag, MPI_STATUS_IGNORE), "collective");
    return flag != 0;
  }
  void wait() override { wait_or_abort(&request_, MPI_STATUS_IGNORE, what_); }
  void abandon(bool unwinding) override {
    if (!unwinding && request_ != MPI_REQUEST_NULL) wait_or_abort(&request_, MPI_STATUS_IGNORE, what_);
  }

 private:
  MPI_Request request_;
  std::string what_;
};

class MpiCommunicator : public Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, bool owned) : comm_(comm), owned_(owned) {
    check(MPI_Comm_rank(comm_, &rank_), "Comm_rank");
    check(MPI_Comm_size(comm_, &size_), "Comm_size");
    // Messages name peers by world rank and host: a stage's or a replica group's own numbering says nothing to
    // whoever reads the line.
    MPI_Group group, world_group;
    check(MPI_Comm_group(comm_, &group), "Comm_group");
    check(MPI_Comm_group(MPI_COMM_WORLD, &world_group), "Comm_group");
    std::vector<int> mine(static_cast<size_t>(size_));
    for (int r = 0; r < size_; ++r) mine[static_cast<size_t>(r)] = r;
    world_ranks_.resize(static_cast<size_t>(size_));
    check(MPI_Group_translate_ranks(group, size_, mine.data(), world_group, world_ranks_.data()),
          "Group_translate_ranks");
    MPI_Group_free(&group);
    MPI_Group_free(&world_group);
  }
  ~MpiCommunicator() override {
    int finalised = 0;
    MPI_Finalized(&finalised);
    if (owned_ && !finalised) MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* kind() const override { return "mpi"; }

  CommRequest isend_bytes(const void* data, size_t bytes, int peer, int tag) override {
    check_peer(peer, tag, "send to");
    MPI_Request request;
    check(MPI_Isend(data, as_count(bytes, "send"), MPI_BYTE, peer, tag, comm_, &request), "Isend");
    return CommRequest(std::make_unique<MpiRequestState>(request, false, bytes, peer, world_rank(peer), tag));
  }
  CommRequest irecv_bytes(void* data, size_t bytes, int peer, int tag) override {
    check_peer(peer, tag, "receive from");
    MPI_Request request;
    check(MPI_Irecv(data, as_count(bytes, "receive"), MPI_BYTE, peer, tag, comm_, &request), "Irecv");
    return CommRequest(std::make_unique<MpiRequestState>(request, true, bytes, peer, world_rank(peer), tag));
  }

  CommRequest iallreduce_sum(float* data, size_t count) override {
    if (size_ == 1) return CommRequest();
    if (allreduce_algorithm() == AllreduceAlgorithm::ring) {
      const int tag = next_ring_tag();
      return ring_allreduce_sum(*ring_, data, count, tag);
    }
    MPI_Request request;
    check(MPI_Iallreduce(MPI_IN_PLACE, data, as_count(count, "all-reduce"), MPI_FLOAT, MPI_SUM, comm_, &request),
          "Iallreduce");
    return CommRequest(std::make_unique<MpiCollectiveState>(request, collective("an all-reduce", count * 4)));
  }
  CommRequest ireduce_sum(float* data, size_t count, int root) override {
    check_root(root);
    if (size_ == 1) return CommRequest();
    if (allreduce_algorithm() == AllreduceAlgorithm::ring) {
      const int tag = next_ring_tag();
      return chain_reduce_sum(*ring_, data, count, root, tag);
    }
    MPI_Request request;
    const void* send = rank_ == root ? MPI_IN_PLACE : data;
    check(MPI_Ireduce(send, rank_ == root ? data : nullptr, as_count(count, "reduce"), MPI_FLOAT, MPI_SUM, root, comm_,
                      &request),
          "Ireduce");
    return CommRequest(std::make_unique<MpiCollectiveState>(request, collective("a reduce", count * 4)));
  }
  CommRequest ibroadcast(float* data, size_t count, int root) override {
    check_root(root);
    if (size_ == 1) return CommRequest();
    if (allreduce_algorithm() == AllreduceAlgorithm::ring) {
      const int tag = next_ring_tag();
      return chain_broadcast(*ring_, data, count, root, tag);
    }
    MPI_Request request;
    check(MPI_Ibcast(data, as_count(count, "broadcast"), MPI_FLOAT, root, comm_, &request), "Ibcast");
    return CommRequest(std::make_unique<MpiCollectiveState>(request, collective("a broadcast", count * 4)));
  }
  void allreduce(double* data, size_t count, ReduceOp op) override {
    const MPI_Op mpi_op = op == ReduceOp::sum ? MPI_SUM : op == ReduceOp::max ? MPI_MAX : MPI_MIN;
    MPI_Request request;
    check(MPI_Iallreduce(MPI_IN_PLACE, data, as_count(count, "all-reduce"), MPI_DOUBLE, mpi_op, comm_, &request),
          "Iallreduce");
    wait_or_abort(&request, MPI_STATUS_IGNORE, collective("an all-reduce", count * 8));
  }
  void broadcast_bytes(void* data, size_t bytes, int root) override {
    check_root(root);
    auto* base = static_cast<char*>(data);
    size_t offset = 0;
    do {
      const size_t n = std::min(kChunkBytes, bytes - offset);
      MPI_Request request;
      check(MPI_Ibcast(base + offset, static_cast<int>(n), MPI_BYTE, root, comm_, &request), "Ibcast");
      wait_or_abort(&request, MPI_STATUS_IGNORE, collective("a broadcast", n));
      offset += n;
    } while (offset < bytes);
  }
  void barrier() override {
    MPI_Request request;
    check(MPI_Ibarrier(comm_, &request), "Ibarrier");
    wait_or_abort(&request, MPI_STATUS_IGNORE, collective("a barrier", 0));
  }

  std::vector<std::vector<std::byte>> gather_bytes(std::span<const std::byte> mine, int root) override {
    check_root(root);
    unsigned long long my_size = mine.size();
    std::vector<unsigned long long> sizes(rank_ == root ? static_cast<size_t>(size_) : 0);
    MPI_Request sizes_request;
    check(MPI_Igather(&my_size, 1, MPI_UNSIGNED_LONG_LONG, sizes.data(), 1, MPI_UNSIGNED_LONG_LONG, root, comm_,
                      &sizes_request),
          "Igather");
    wait_or_abort(&sizes_request, MPI_STATUS_IGNORE, collective("a gather of sizes", 8));
    std::vector<MPI_Request> requests;
    std::vector<std::vector<std::byte>> result;
    auto chunks = [&](auto* base, size_t total, auto post) {
      for (size_t offset = 0; offset < total; offset += kChunkBytes) {
        MPI_Request request;
        post(base + offset, static_cast<int>(std::min(kChunkBytes, total - offset)), &request);
        requests.push_back(request);
      }
    };
    if (rank_ == root) {
      result.resize(static_cast<size_t>(size_));
      for (int r = 0; r < size_; ++r) {
        result[static_cast<size_t>(r)].resize(sizes[static_cast<size_t>(r)]);
        if (r == root) {
          std::copy(mine.begin(), mine.end(), result[static_cast<size_t>(r)].begin());
          continue;
        }
        chunks(result[static_cast<size_t>(r)].data(), result[static_cast<size_t>(r)].size(),
               [&](std::byte* p, int n, MPI_Request* request) {
                 check(MPI_Irecv(p, n, MPI_BYTE, r, kGatherTag, comm_, request), "Irecv (gather)");
               });
      }
    } else {
      chunks(mine.data(), mine.size(), [&](const std::byte* p, int n, MPI_Request* request) {
        check(MPI_Isend(p, n, MPI_BYTE, root, kGatherTag, comm_, request), "Isend (gather)");
      });
    }
    for (MPI_Request& request : requests) {
      wait_or_abort(&request, MPI_STATUS_IGNORE, collective("a gather (parameters or state to the root)", mine.size()));
    }
    return result;
  }

  std::unique_ptr<Communicator> split(int color, int key) override {
    MPI_Comm comm;
    {
      BlockingCommunication blocked(concat("a communicator split among ", describe_members()));
      check(MPI_Comm_split(comm_, color < 0 ? MPI_UNDEFINED : color, key, &comm), "Comm_split");
    }
    if (comm == MPI_COMM_NULL) return nullptr;
    check(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN), "Comm_set_errhandler");
    return std::make_unique<MpiCommunicator>(comm, true);
  }

  std::unique_ptr<Communicator> split_shared_memory() override {
    MPI_Comm comm;
    {
      BlockingCommunication blocked(concat("the split by host (shared memory) among ", describe_members()));
      check(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &comm), "Comm_split_type");
    }
    check(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN), "Comm_set_errhandler");
    return std::make_unique<MpiCommunicator>(comm, true);
  }

  [[noreturn]] void abort(const std::string& reason) override { abort_job(reason); }

 private:
  void check_peer(int peer, int tag, const char* what) const {
    VP_REQUIRE(peer >= 0 && peer < size_, "cannot ", what, " rank ", peer, ": the communicator has ", size_, " ranks");
    VP_REQUIRE(peer != rank_, "rank ", rank_, " cannot ", what, " itself");
    VP_REQUIRE(tag >= 0 && tag < kMaxUserTag, "message tag ", tag, " is outside [0, ", kMaxUserTag, ")");
  }
  int world_rank(int rank) const { return world_ranks_[static_cast<size_t>(rank)]; }
  // "ranks 1, 3 (hosts h0 10.0.0.1, h1 10.0.0.2)": the members a collective waits for, and where they run.
  std::string describe_members() const {
    std::string ranks, hosts;
    std::vector<std::string> seen;
    for (int world : world_ranks_) {
      ranks += (ranks.empty() ? "" : ", ") + std::to_string(world);
      const std::string host = host_of(world);
      if (std::find(seen.begin(), seen.end(), host) != seen.end()) continue;
      seen.push_back(host);
      hosts += (hosts.empty() ? "" : ", ") + host;
    }
    return concat("ranks ", ranks, " (host", seen.size() > 1 ? "s " : " ", hosts, ")");
  }
  std::string collective(const char* what, size_t bytes) const {
    return concat(what, " of ", bytes, " bytes among ", describe_members());
  }
  void check_root(int root) const {
    VP_REQUIRE(root >= 0 && root < size_, "root rank ", root, " is outside [0, ", size_, ")");
  }

  MPI_Comm comm_;
  bool owned_;
  // vitpipe's own collectives (ring all-reduce, chain reduce and broadcast) run on a duplicate of this communicator,
  // made at the first of them, which every member reaches in the same order, so that their messages meet no other;
  // one tag per collective, as many in flight as buckets.
  int next_ring_tag() {
    if (!ring_) ring_ = split(0, rank_);
    const int tag = ring_sequence_;
    ring_sequence_ = (ring_sequence_ + 1) % kMaxUserTag;
    return tag;
  }
  std::unique_ptr<Communicator> ring_;
  int ring_sequence_ = 0;
  int rank_ = 0;
  int size_ = 1;
  std::vector<int> world_ranks_;  // this communicator's rank -> MPI_COMM_WORLD's
};

// Every rank learns every rank's host once, so that a wait that never ends can name where its peer runs.
void gather_hosts() {
  constexpr size_t kWidth = 128;
  std::vector<char> mine(kWidth, '\0');
  const std::string& identity = this_host_identity();
  std::copy_n(identity.begin(), std::min(identity.size(), kWidth - 1), mine.begin());
  int size = 1;
  check(MPI_Comm_size(MPI_COMM_WORLD, &size), "Comm_size");
  std::vector<char> all(kWidth * static_cast<size_t>(size));
  MPI_Request request;
  check(MPI_Iallgather(mine.data(), static_cast<int>(kWidth), MPI_CHAR, all.data(), static_cast<int>(kWidth), MPI_CHAR,
                       MPI_COMM_WORLD, &request),
        "Iallgather");
  wait_or_abort(&request, MPI_STATUS_IGNORE, "the exchange of host names at the start");
  g_mpi.hosts.clear();
  for (int r = 0; r < size; ++r) g_mpi.hosts.emplace_back(all.data() + kWidth * static_cast<size_t>(r));
}

}  // namespace

bool launched_by_mpirun() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMIX_RANK") != nullptr ||
         std::getenv("PMI_RANK") != nullptr;
}

std::unique_ptr<Communicator> mpi_world() {
  allreduce_algorithm();  // a bad VITPIPE_ALLREDUCE is refused before MPI starts
  int initialised = 0;
  check(MPI_Initialized(&initialised), "Initialized");
  if (!initialised) {
    VP_REQUIRE(!g_mpi.finalised, "MPI was already finalised in this process");
    int provided = 0;
    check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "Init_thread");
    g_mpi.initialised = true;
    check(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "Comm_set_errhandler");
    check(MPI_Comm_rank(MPI_COMM_WORLD, &g_mpi.world_rank), "Comm_rank");
    set_comm_deadline_rank(g_mpi.world_rank);
    std::atexit(exit_handler);
    std::set_terminate(terminate_handler);
    gather_hosts();
    VP_REQUIRE(provided >= MPI_THREAD_FUNNELED, "MPI provides thread level ", provided, ", below MPI_THREAD_FUNNELED");
  }
  return std::make_unique<MpiCommunicator>(MPI_COMM_WORLD, false);
}

void finalize_mpi() {
  int initialised = 0, finalised = 0;
  MPI_Initialized(&initialised);
  MPI_Finalized(&finalised);
  if (!initialised || finalised) return;
  g_mpi.finalised = true;
  // Under the deadline like every other wait: Open MPI's finalize is a fence with every rank, so a peer lost now
  // (or a rank 0 still writing its report past --comm-timeout) would otherwise hold this rank for ever.
  BlockingCommunication blocked(
      "MPI_Finalize: the job's end, with every rank (rank 0 writes the final report and evaluation first)");
  check(MPI_Finalize(), "Finalize");
  end_comm_watchdog();
}

}  // namespace vitpipe
