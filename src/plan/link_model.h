// The network between processes as the planner models it: a message of n bytes takes latency + n / bandwidth.
// Given as --link BANDWIDTH[,LATENCY] ("10Gbit,20us", "100Gb/s", "12.5GB/s,2us"), or measured with a ping-pong.
#pragma once

#include <string>
#include <string_view>

namespace vitpipe {

class Communicator;

struct LinkModel {
  double bandwidth = 0;  // bytes per second
  double latency = 0;    // seconds
  // A ring's per-link bandwidth as a reduction of gradient-sized buffers achieved when measured (the MPI library's
  // reduction and copies included: on one node they are CPU work); 0 = not measured, `bandwidth` is used.
  double collective_bandwidth = 0;
  std::string source;  // how it was obtained, for the plan's printout

  double transfer_seconds(double bytes) const { return latency + bytes / bandwidth; }
  std::string describe() const;  // "10.0 Gbit/s, 20 us latency (--link)"
};

// Bandwidth units: bit/s (Kbit, Mbit, Gbit, Tbit; also written Gb/s, Gbps) or bytes/s (KB/s, MB/s, GB/s, KiB/s,
// MiB/s, GiB/s); latency: ns, us, ms or s (default 0). Throws naming `where` and the expected form.
LinkModel parse_link(std::string_view text, const std::string& where = "--link");

// A ping-pong between ranks 0 and 1 of `world` (collective: the other ranks only wait): half the round trip of a
// small message is the latency, a 4 MiB message gives the bandwidth. Best of a few tries.
LinkModel measure_link(Communicator& world);

// Times a reduce-scatter of `bytes` over `world` as the sharded trainer runs it (one reduce per owner, all in
// flight; collective, best of a few after a warm-up) and returns the per-link bandwidth of a ring that would take
// that long: (n - 1) / n x bytes / seconds.
double measure_collective_bandwidth(Communicator& world, size_t bytes);

// The gradient reduction's rate over a network link as the trainer gets it: the two ranks of `pair` (one on each of
// two hosts) run ring all-reduces of 8 gradient buckets in flight at once, about a second of traffic at
// `line_rate` (bytes/s; 4 to 128 MiB), after a warm-up that opens TCP's congestion window (a link that has just been
// idle measured anywhere from 48% to 94% of its rate with one cold bucket). Returns the payload bytes per second each
// direction carried, the best of two runs: what MPI's TCP transport delivers after its headers, acknowledgements
// sharing the queue with the reverse direction's data, and its protocol. Collective over `pair`.
double measure_ring_rate(Communicator& pair, double line_rate);

// The same between two threads of this process (no mpirun): the shared-memory copy a same-node MPI job would use.
LinkModel measure_local_link();

// Between the GPUs of one node (--device cuda), where nothing measured NCCL: an ASSUMPTION, labelled as such in its
// `source` and so in the plan's printout: PCIe 4.0 x16's order of rate (about 16 GB/s each way as NCCL gets it; an
// NVLink node is faster, so the plan errs against pipelines and replicas) and 20 us per message (a kernel launch and
// NCCL's protocol). --link replaces it.
constexpr double kAssumedGpuLinkBytesPerSecond = 16e9;
constexpr double kAssumedGpuLinkLatencySeconds = 20e-6;
LinkModel assumed_gpu_link();

}  // namespace vitpipe
