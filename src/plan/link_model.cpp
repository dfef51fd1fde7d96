#include "plan/link_model.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <vector>

#include "parallel/comm_deadline.h"
#include "parallel/communicator.h"
#include "parallel/local_communicator.h"
#include "util/error.h"

namespace vitpipe {
namespace {

constexpr int kPingTag = 31000;

// A number followed by a unit; the unit's factor turns it into bytes/s (or seconds).
double parse_quantity(std::string_view text, const std::vector<std::pair<std::string_view, double>>& units,
                      const std::string& where, std::string_view what) {
  double value = 0.0;
  const char* begin = text.data();
  const char* end = text.data() + text.size();
  auto [stop, error] = std::from_chars(begin, end, value);
  VP_REQUIRE(error == std::errc() && stop != begin && std::isfinite(value) && value >= 0.0, where, ": '", text,
             "' is not a ", what, " (expected a number and a unit, e.g. 10Gbit,20us)");
  const std::string_view unit(stop, static_cast<size_t>(end - stop));
  for (const auto& [name, factor] : units) {
    if (unit == name) return value * factor;
  }
  std::string known;
  for (const auto& [name, factor] : units) known += (known.empty() ? "" : ", ") + std::string(name);
  fail(where, ": unknown ", what, " unit '", unit, "' in '", text, "' (known: ", known, ")");
}

LinkModel from_round_trips(double small_rtt, double big_rtt, double big_bytes, std::string source) {
  LinkModel link;
  link.latency = small_rtt / 2;
  link.bandwidth = big_bytes / std::max(1e-9, big_rtt / 2 - link.latency);
  link.source = std::move(source);
  return link;
}

// Round trips between `me` (0 or 1) and the other of the two; the best of `tries`.
double best_round_trip(Communicator& comm, int me, std::vector<char>& buffer, int tries) {
  double best = 1e30;
  const int peer = 1 - me;
  for (int t = 0; t < tries; ++t) {
    const auto start = std::chrono::steady_clock::now();
    if (me == 0) {
      comm.isend_bytes(buffer.data(), buffer.size(), peer, kPingTag).wait();
      comm.irecv_bytes(buffer.data(), buffer.size(), peer, kPingTag).wait();
    } else {
      comm.irecv_bytes(buffer.data(), buffer.size(), peer, kPingTag).wait();
      comm.isend_bytes(buffer.data(), buffer.size(), peer, kPingTag).wait();
    }
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return best;
}

}  // namespace

std::string LinkModel::describe() const {
  char text[240];
  std::snprintf(text, sizeof(text), "%.2f Gbit/s, %.1f us latency (%s)", bandwidth * 8 / 1e9, latency * 1e6,
                source.c_str());
  std::string out = text;
  if (collective_bandwidth > 0) {
    std::snprintf(text, sizeof(text), "; gradient reduction measured at %.2f Gbit/s per ring link",
                  collective_bandwidth * 8 / 1e9);
    out += text;
  }
  return out;
}

LinkModel parse_link(std::string_view text, const std::string& where) {
  static const std::vector<std::pair<std::string_view, double>> bandwidth_units = {
      {"bit", 1.0 / 8},  {"Kbit", 1e3 / 8},    {"Mbit", 1e6 / 8},      {"Gbit", 1e9 / 8}, {"Tbit", 1e12 / 8},
      {"b/s", 1.0 / 8},  {"Kb/s", 1e3 / 8},    {"Mb/s", 1e6 / 8},      {"Gb/s", 1e9 / 8}, {"Tb/s", 1e12 / 8},
      {"bps", 1.0 / 8},  {"Kbps", 1e3 / 8},    {"Mbps", 1e6 / 8},      {"Gbps", 1e9 / 8}, {"Tbps", 1e12 / 8},
      {"B/s", 1.0},      {"KB/s", 1e3},        {"MB/s", 1e6},          {"GB/s", 1e9},     {"TB/s", 1e12},
      {"KiB/s", 1024.0}, {"MiB/s", 1048576.0}, {"GiB/s", 1073741824.0}};
  static const std::vector<std::pair<std::string_view, double>> time_units = {
      {"ns", 1e-9}, {"us", 1e-6}, {"ms", 1e-3}, {"s", 1.0}};
  const size_t comma = text.find(',');
  LinkModel link;
  link.bandwidth = parse_quantity(text.substr(0, comma), bandwidth_units, where, "bandwidth");
  VP_REQUIRE(link.bandwidth > 0, where, ": the bandwidth must be > 0 (got '", text.substr(0, comma), "')");
  if (comma != std::string_view::npos)
    link.latency = parse_quantity(text.substr(comma + 1), time_units, where, "latency");
  link.source = where;
  return link;
}

LinkModel measure_link(Communicator& world) {
  VP_REQUIRE(world.size() >= 2, "measure_link needs two ranks");
  std::vector<char> small(8), big(size_t{4} << 20);
  double rtt[2] = {0, 0};
  if (world.rank() < 2) {
    best_round_trip(world, world.rank(), small, 3);  // warm-up: connection set-up
    rtt[0] = best_round_trip(world, world.rank(), small, 20);
    rtt[1] = best_round_trip(world, world.rank(), big, 5);
  }
  world.broadcast_bytes(rtt, sizeof(rtt), 0);
  return from_round_trips(rtt[0], rtt[1], static_cast<double>(big.size()), "measured: ping-pong between ranks 0 and 1");
}

double measure_collective_bandwidth(Communicator& world, size_t bytes) {
  // As the sharded trainer reduces: the buffer cut into one piece per rank, each summed onto its owner, all in
  // flight at once (a reduce-scatter).
  const int n = world.size();
  std::vector<float> buffer(std::max<size_t>(static_cast<size_t>(n), bytes / sizeof(float)), 1e-3f);
  const size_t piece = buffer.size() / static_cast<size_t>(n);
  double best = 1e30;
  for (int run = 0; run < 4; ++run) {
    world.barrier();
    const auto start = std::chrono::steady_clock::now();
    std::vector<CommRequest> requests;
    for (int owner = 0; owner < n; ++owner) {
      requests.push_back(world.ireduce_sum(buffer.data() + static_cast<size_t>(owner) * piece, piece, owner));
    }
    wait_all(requests);
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (run > 0) best = std::min(best, t);
  }
  double seconds = best;
  world.allreduce(&seconds, 1, ReduceOp::max);  // every rank gets the same figure
  return (n - 1.0) / n * static_cast<double>(piece * static_cast<size_t>(n) * sizeof(float)) / std::max(seconds, 1e-9);
}

double measure_ring_rate(Communicator& pair, double line_rate) {
  VP_REQUIRE(pair.size() == 2, "measure_ring_rate needs two ranks");
  // 8 buckets for 1 s: 4 for 0.5 s measured 0.80 Gbit/s on a 1 Gbit/s link where training's 14 buckets got 0.89;
  // 8 for 1 s measured 0.85. Buckets in lock step leave the link idle while each step's next messages start.
  constexpr int kBuckets = 8;
  constexpr double kSeconds = 1.0;
  // A 2-rank ring moves each buffer's whole size over each direction (half reduced, half gathered).
  const size_t bytes =
      std::clamp<size_t>(static_cast<size_t>(line_rate * kSeconds), size_t{4} << 20, size_t{128} << 20);
  const size_t count = bytes / sizeof(float) / kBuckets;
  std::vector<float> buffer(count * kBuckets, 1e-3f);
  double best = 0;
  for (int run = 0; run < 3; ++run) {
    pair.barrier();
    // The warm-up moves a quarter of the volume; the two timed runs all of it.
    const size_t each = run == 0 ? count / 4 : count;
    const auto start = std::chrono::steady_clock::now();
    std::vector<CommRequest> requests;
    for (int b = 0; b < kBuckets; ++b) requests.push_back(pair.iallreduce_sum(buffer.data() + b * count, each));
    // Polled together, as the trainer's buckets are: a ring posts its next step only when tested.
    BlockingCommunication blocked("the ring-rate measurement between two hosts");
    for (bool done = false; !done;) {
      done = true;
      for (CommRequest& r : requests) done = r.test() && done;
    }
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (run > 0) best = std::max(best, static_cast<double>(each * kBuckets * sizeof(float)) / std::max(t, 1e-9));
  }
  double rate = best;
  pair.allreduce(&rate, 1, ReduceOp::min);  // both ends report the same figure
  return rate;
}

LinkModel measure_local_link() {
  double rtt[2] = {0, 0};
  run_local_ranks(2, [&](Communicator& comm) {
    std::vector<char> small(8), big(size_t{4} << 20);
    best_round_trip(comm, comm.rank(), small, 3);
    const double s = best_round_trip(comm, comm.rank(), small, 20);
    const double b = best_round_trip(comm, comm.rank(), big, 5);
    if (comm.rank() == 0) {
      rtt[0] = s;
      rtt[1] = b;
    }
  });
  return from_round_trips(rtt[0], rtt[1], 4.0 * 1048576, "measured: ping-pong between two threads of this process");
}

LinkModel assumed_gpu_link() {
  LinkModel link;
  link.bandwidth = kAssumedGpuLinkBytesPerSecond;
  link.latency = kAssumedGpuLinkLatencySeconds;
  link.source = "ASSUMED, not measured: NCCL between the node's GPUs at PCIe 4.0 x16's rate; --link to give it";
  return link;
}

}  // namespace vitpipe
