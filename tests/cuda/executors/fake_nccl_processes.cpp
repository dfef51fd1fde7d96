#include "fake_nccl_processes.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "backend/cuda/calls/nccl_interpreter.h"

namespace vitpipe::fake_nccl {

constexpr int kMaxRanks = 8;
constexpr int kMaxCalls = 64;
// Each rank's send bytes per group, and each ordered pair's sends not yet received (a ring); touched pages only
// (tmpfs), so the reservation costs nothing unused.
constexpr size_t kRankBytes = size_t{32} << 20;
constexpr size_t kPairBytes = size_t{4} << 20;

struct SharedCall {
  int32_t op, type, peer, in_place;
  uint64_t count, offset;  // offset of its send bytes in the rank's region
};

struct ProcessNcclComm::Segment {
  std::atomic<uint32_t> state;  // 0 new, 1 being set up, 2 ready
  pthread_mutex_t mutex;
  pthread_cond_t changed;
  int32_t nranks, joined, taken[kMaxRanks];
  uint64_t current;  // the collective now being exchanged
  int32_t arrived, left;
  int32_t calls[kMaxRanks];
  SharedCall call[kMaxRanks][kMaxCalls];
  uint64_t written[kMaxRanks][kMaxRanks], read[kMaxRanks][kMaxRanks];  // [from][to]: bytes through the pair's ring
  char* region(int rank);        // kMaxRanks regions of kRankBytes after the header's pages
  char* ring(int from, int to);  // then kMaxRanks x kMaxRanks rings of kPairBytes
};

namespace {
constexpr size_t kHeaderBytes = (sizeof(ProcessNcclComm::Segment) + 4095) / 4096 * 4096;
}  // namespace

char* ProcessNcclComm::Segment::region(int rank) {
  return reinterpret_cast<char*>(this) + kHeaderBytes + static_cast<size_t>(rank) * kRankBytes;
}
char* ProcessNcclComm::Segment::ring(int from, int to) {
  return reinterpret_cast<char*>(this) + kHeaderBytes + kMaxRanks * kRankBytes +
         static_cast<size_t>(from * kMaxRanks + to) * kPairBytes;
}

namespace {

constexpr size_t kSegmentBytes = kHeaderBytes + kMaxRanks * kRankBytes + kMaxRanks * kMaxRanks * kPairBytes;

struct MessageHeader {
  int32_t type;
  uint64_t count, bytes;
};

// Copies into / out of a pair's ring at a running byte position, wrapping at its end.
void ring_put(char* ring, uint64_t at, const void* from, size_t n) {
  const size_t start = static_cast<size_t>(at % kPairBytes), first = std::min(n, kPairBytes - start);
  std::memcpy(ring + start, from, first);
  std::memcpy(ring, static_cast<const char*>(from) + first, n - first);
}
void ring_get(const char* ring, uint64_t at, void* to, size_t n) {
  const size_t start = static_cast<size_t>(at % kPairBytes), first = std::min(n, kPairBytes - start);
  std::memcpy(to, ring + start, first);
  std::memcpy(static_cast<char*>(to) + first, ring, n - first);
}

[[noreturn]] void fail(int rank, const std::string& what) {
  throw std::runtime_error("NCCL rank " + std::to_string(rank) + " (fake, across processes): " + what);
}

timespec deadline_after(std::chrono::milliseconds timeout) {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  const long long ns = t.tv_nsec + (timeout.count() % 1000) * 1000000LL;
  t.tv_sec += static_cast<time_t>(timeout.count() / 1000 + ns / 1000000000LL);
  t.tv_nsec = static_cast<long>(ns % 1000000000LL);
  return t;
}

class Lock {
 public:
  Lock(ProcessNcclComm::Segment& s, int rank) : s_(s) {
    const int r = pthread_mutex_lock(&s_.mutex);
    if (r == EOWNERDEAD) {
      pthread_mutex_consistent(&s_.mutex);
      pthread_mutex_unlock(&s_.mutex);
      fail(rank, "a rank died holding the communicator's lock");
    }
    if (r != 0) fail(rank, "cannot lock the communicator: " + std::string(std::strerror(r)));
  }
  ~Lock() { pthread_mutex_unlock(&s_.mutex); }
  // Waits for `done` until the deadline; false on timeout.
  template <class Done>
  bool wait(const timespec& deadline, Done done) {
    while (!done()) {
      const int r = pthread_cond_timedwait(&s_.changed, &s_.mutex, &deadline);
      if (r == ETIMEDOUT) return done();
      if (r == EOWNERDEAD) pthread_mutex_consistent(&s_.mutex);
    }
    return true;
  }

 private:
  ProcessNcclComm::Segment& s_;
};

size_t send_elements(const cuda::NcclCall& c, int nranks) {
  return c.op == cuda::NcclOp::reduce_scatter ? c.count * static_cast<size_t>(nranks) : c.count;
}

}  // namespace

std::string segment_name(const cuda::NcclIdBytes& id) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the id's bytes
  for (char c : id) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  const char* scope = std::getenv("FAKE_NCCL_SCOPE");
  char hash[24];
  std::snprintf(hash, sizeof hash, "%016llx", static_cast<unsigned long long>(h));
  return std::string("/vitpipe-fake-nccl-") + (scope != nullptr ? std::string(scope) + "-" : std::string()) + hash;
}

bool processes_transport() {
  const char* on = std::getenv("FAKE_NCCL_PROCESSES");
  return on != nullptr && std::strcmp(on, "1") == 0;
}

ProcessNcclComm::ProcessNcclComm(const cuda::NcclIdBytes& id, int nranks, int rank, std::chrono::milliseconds timeout)
    : nranks_(nranks), rank_(rank), timeout_(timeout) {
  if (nranks < 1 || nranks > kMaxRanks || rank < 0 || rank >= nranks) {
    fail(rank, "no rank of a communicator of " + std::to_string(nranks) + " (at most " + std::to_string(kMaxRanks) +
                   " ranks)");
  }
  const std::string name = segment_name(id);
  const int fd = shm_open(name.c_str(), O_CREAT | O_RDWR, 0600);
  if (fd < 0) fail(rank, "shm_open " + name + ": " + std::strerror(errno));
  if (ftruncate(fd, static_cast<off_t>(kSegmentBytes)) != 0) {
    const int e = errno;
    close(fd);
    shm_unlink(name.c_str());
    fail(rank, "ftruncate " + name + ": " + std::strerror(e));
  }
  void* p = mmap(nullptr, kSegmentBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) fail(rank, "mmap " + name + ": " + std::strerror(errno));
  segment_ = static_cast<Segment*>(p);
  mapped_bytes_ = kSegmentBytes;
  try {
    join(name);
  } catch (...) {
    munmap(segment_, mapped_bytes_);  // the destructor does not run for a constructor that throws
    throw;
  }
}

void ProcessNcclComm::join(const std::string& name) {
  const int nranks = nranks_, rank = rank_;
  Segment& s = *segment_;
  const auto give_up = std::chrono::steady_clock::now() + timeout_;
  uint32_t expected = 0;
  if (s.state.compare_exchange_strong(expected, 1)) {
    pthread_mutexattr_t ma;
    pthread_mutexattr_init(&ma);
    pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&ma, PTHREAD_MUTEX_ROBUST);
    pthread_mutex_init(&s.mutex, &ma);
    pthread_mutexattr_destroy(&ma);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setpshared(&ca, PTHREAD_PROCESS_SHARED);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s.changed, &ca);
    pthread_condattr_destroy(&ca);
    s.nranks = nranks;
    s.state.store(2);
  }
  while (s.state.load() != 2) {
    if (std::chrono::steady_clock::now() > give_up) {
      shm_unlink(name.c_str());
      fail(rank, "the communicator's segment " + name + " was never set up");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  Lock lock(s, rank);
  if (s.nranks != nranks) {
    fail(rank, "joins with " + std::to_string(nranks) + " ranks a communicator of " + std::to_string(s.nranks));
  }
  if (s.taken[rank] != 0) fail(rank, "joined the communicator twice");
  s.taken[rank] = 1;
  if (++s.joined == nranks) {
    shm_unlink(name.c_str());  // every rank has it mapped: nothing is left behind however they end
    pthread_cond_broadcast(&s.changed);
  }
  if (!lock.wait(deadline_after(timeout_), [&] { return s.joined >= nranks; })) {
    shm_unlink(name.c_str());
    fail(rank, "only " + std::to_string(s.joined) + " of " + std::to_string(nranks) + " ranks joined");
  }
}

ProcessNcclComm::~ProcessNcclComm() {
  if (segment_ != nullptr) munmap(segment_, mapped_bytes_);
}

void ProcessNcclComm::run(const cuda::NcclGroup& group) {
  // As the in-process ranks run a group: its collectives together, then its sends buffered, then its recvs.
  std::vector<cuda::NcclCall> collectives;
  std::vector<const cuda::NcclCall*> sends, recvs;
  for (const cuda::NcclCall& c : group.calls) {
    if (c.op == cuda::NcclOp::send || c.op == cuda::NcclOp::recv) {
      if (c.peer < 0 || c.peer >= nranks_) fail(rank_, describe(c) + ": no such peer");
      (c.op == cuda::NcclOp::send ? sends : recvs).push_back(&c);
    } else {
      collectives.push_back(c);
    }
  }
  if (!collectives.empty()) run_collectives(collectives);
  if (sends.empty() && recvs.empty()) return;
  Segment& s = *segment_;
  const timespec deadline = deadline_after(timeout_);
  Lock lock(s, rank_);
  for (const cuda::NcclCall* c : sends) {
    const MessageHeader h{static_cast<int32_t>(c->type), c->count,
                          c->count * static_cast<size_t>(cuda::element_bytes(c->type))};
    const uint64_t need = sizeof h + h.bytes;
    if (need > kPairBytes) fail(rank_, describe(*c) + ": larger than the fake's 4 MiB between two ranks");
    uint64_t& written = s.written[rank_][c->peer];
    const uint64_t& read = s.read[rank_][c->peer];
    if (!lock.wait(deadline, [&] { return written + need - read <= kPairBytes; })) {
      fail(rank_, describe(*c) + ": its peer never received the earlier sends");
    }
    char* ring = s.ring(rank_, c->peer);
    ring_put(ring, written, &h, sizeof h);
    if (h.bytes > 0) ring_put(ring, written + sizeof h, c->send, h.bytes);
    written += need;
  }
  if (!sends.empty()) pthread_cond_broadcast(&s.changed);
  for (const cuda::NcclCall* c : recvs) {
    const uint64_t& written = s.written[c->peer][rank_];
    uint64_t& read = s.read[c->peer][rank_];
    if (!lock.wait(deadline, [&] { return written > read; })) fail(rank_, describe(*c) + ": no send from its peer");
    const char* ring = s.ring(c->peer, rank_);
    MessageHeader h{};
    ring_get(ring, read, &h, sizeof h);
    if (h.type != static_cast<int32_t>(c->type) || h.count != c->count) {
      fail(rank_, describe(*c) + " meets a send of " + std::to_string(h.count) + " x " +
                      cuda::element_type_name(static_cast<cuda::ElementType>(h.type)));
    }
    if (h.bytes > 0) ring_get(ring, read + sizeof h, c->recv, h.bytes);
    read += sizeof h + h.bytes;
    pthread_cond_broadcast(&s.changed);
  }
}

void ProcessNcclComm::run_collectives(const std::vector<cuda::NcclCall>& mine) {
  Segment& s = *segment_;
  if (mine.size() > kMaxCalls) fail(rank_, std::to_string(mine.size()) + " collectives in one group (at most 64)");
  const uint64_t seq = next_collective_++;
  const timespec deadline = deadline_after(timeout_);
  Lock lock(s, rank_);
  if (!lock.wait(deadline, [&] { return s.current == seq; })) {
    fail(rank_, describe(mine[0]) + ": the other ranks never finished the previous collective");
  }
  // This rank's calls and send bytes into its region.
  size_t offset = 0;
  for (size_t i = 0; i < mine.size(); ++i) {
    const cuda::NcclCall& c = mine[i];
    const size_t bytes = send_elements(c, nranks_) * static_cast<size_t>(cuda::element_bytes(c.type));
    if (offset + bytes > kRankBytes) fail(rank_, describe(c) + ": the group outgrows the fake's 32 MiB per rank");
    if (bytes > 0) std::memcpy(s.region(rank_) + offset, c.send, bytes);
    s.call[rank_][i] = {
        static_cast<int32_t>(c.op), static_cast<int32_t>(c.type), c.peer, c.send == c.recv ? 1 : 0, c.count, offset};
    offset += (bytes + 63) / 64 * 64;
  }
  s.calls[rank_] = static_cast<int32_t>(mine.size());
  if (++s.arrived == nranks_) pthread_cond_broadcast(&s.changed);
  if (!lock.wait(deadline, [&] { return s.arrived == nranks_; })) {
    fail(rank_, describe(mine[0]) + ": only " + std::to_string(s.arrived) + " of " + std::to_string(nranks_) +
                    " ranks issued their collective");
  }
  // Every rank's program: this rank's own buffers, the others' as local copies (the interpreter writes their recvs).
  std::vector<std::vector<char>> scratch;
  std::vector<std::vector<cuda::NcclGroup>> programs(static_cast<size_t>(nranks_));
  for (int r = 0; r < nranks_; ++r) {
    cuda::NcclGroup g;
    if (r == rank_) {
      g.calls = mine;
    } else {
      for (int i = 0; i < s.calls[r]; ++i) {
        const SharedCall& sc = s.call[r][i];
        cuda::NcclCall c;
        c.op = static_cast<cuda::NcclOp>(sc.op);
        c.type = static_cast<cuda::ElementType>(sc.type);
        c.peer = sc.peer;
        c.count = sc.count;
        const size_t element = static_cast<size_t>(cuda::element_bytes(c.type));
        const size_t send_bytes = send_elements(c, nranks_) * element;
        scratch.emplace_back(s.region(r) + sc.offset, s.region(r) + sc.offset + send_bytes);
        c.send = scratch.back().data();
        if (sc.in_place != 0 && send_bytes >= c.count * element) {
          c.recv = scratch.back().data();
        } else {
          scratch.emplace_back(c.count * element);
          c.recv = scratch.back().data();
        }
        g.calls.push_back(c);
      }
    }
    programs[static_cast<size_t>(r)] = {std::move(g)};
  }
  std::string error;
  try {
    cuda::interpret_nccl(programs);
  } catch (const std::exception& e) {
    error = e.what();
  }
  if (++s.left == nranks_) {
    s.arrived = 0;
    s.left = 0;
    ++s.current;
    pthread_cond_broadcast(&s.changed);
  }
  if (!error.empty()) throw std::runtime_error(error);
}

}  // namespace vitpipe::fake_nccl
