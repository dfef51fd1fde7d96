// How each operation of a training step scales with one rank's threads, as `vitpipe bench --scaling 1,2,...`
// measures it (seconds per step at each thread count), and what that predicts for a node of many cores: Amdahl's
// law with the serial fraction each operation showed at the largest count measured (Karp-Flatt), and for an
// operation bound by memory bandwidth a floor of its bytes over the node's bandwidth, extrapolated the same way from
// the bandwidth measured at each count (ranks on one node share it). The planner splits a node's cores into
// ranks x threads with it: ranks each run the whole step on their own images (data parallel) and all-reduce their
// gradients through the node's memory, threads share one rank's step; an operation that does not scale favours more
// ranks of fewer threads, the all-reduce and bandwidth favour fewer.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace vitpipe {

struct OpScaling {
  std::string name;              // "GEMM", "attention", "LayerNorm", "GELU", "optimizer", "loader", ...
  std::vector<double> seconds;   // per step, at each of CoreScaling::threads
  double bytes = 0;              // moved per step (each tensor once)
  bool bandwidth_bound = false;  // its bytes over the bandwidth outlast its FLOPs at the GEMM peak (1 thread)
};

struct CoreScaling {
  std::vector<int> threads;  // ascending, the first 1
  std::vector<OpScaling> operations;
  std::vector<double> bandwidth;  // memory bandwidth (bytes/s) at each thread count
  double gradient_bytes = 0;      // what data-parallel ranks all-reduce per step
  int64_t batch = 1;              // images per step, per rank
  nlohmann::json describe;        // what was measured (model, precision, CPU)

  nlohmann::json to_json() const;
  // Reads to_json()'s object, or `vitpipe bench --scaling --json`'s output holding it under "scaling". Throws
  // vitpipe::Error naming `source` and the field.
  static CoreScaling from_json(const nlohmann::json& json, const std::string& source);
};

// The serial fraction f that explains a speedup S on p threads (Karp-Flatt: (1/S - 1/p) / (1 - 1/p)), clamped to
// [0, 1] (a superlinear or slower-than-serial measurement is noise, not physics).
double karp_flatt_serial_fraction(double speedup, int threads);
// Amdahl: 1 / (f + (1 - f) / p).
double amdahl_speedup(double serial_fraction, double threads);

// An operation's serial fraction, from its time at the largest thread count measured against 1 thread.
double serial_fraction(const CoreScaling& scaling, const OpScaling& op);
// The node's memory bandwidth at `threads` threads in all: measured where measured, beyond by Amdahl with the
// bandwidth's own serial fraction (saturation).
double bandwidth_at(const CoreScaling& scaling, int threads);

// One operation's seconds per step on one rank of `threads` threads while `ranks` such ranks run on the node.
double predicted_op_seconds(const CoreScaling& scaling, const OpScaling& op, int threads, int ranks);
double predicted_step_seconds(const CoreScaling& scaling, int threads, int ranks);

struct NodeSplit {
  int ranks = 1, threads = 1;
  double step_seconds = 0;       // one rank's step, all-reduce excluded
  double allreduce_seconds = 0;  // the gradients through the node's memory (ring: 2 (r - 1) / r of them per rank,
                                 // written and read; not overlapped)
  double images_per_s = 0;       // the node's
};

// Every split of `cores` into ranks x threads (ranks dividing cores), fastest first.
std::vector<NodeSplit> rank_node_splits(const CoreScaling& scaling, int cores);

// The table `vitpipe plan --scaling` prints: the splits of `cores`, fastest first, and why.
std::string format_node_splits(const CoreScaling& scaling, int cores, const std::vector<NodeSplit>& splits);

}  // namespace vitpipe
