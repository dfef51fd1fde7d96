#include "plan/core_scaling.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "util/error.h"

namespace vitpipe {

nlohmann::json CoreScaling::to_json() const {
  nlohmann::json ops = nlohmann::json::array();
  for (const auto& op : operations)
    ops.push_back({{"name", op.name},
                   {"seconds_per_step", op.seconds},
                   {"bytes_per_step", op.bytes},
                   {"bandwidth_bound", op.bandwidth_bound}});
  return {{"threads", threads},
          {"operations", ops},
          {"bandwidth_bytes_per_s", bandwidth},
          {"gradient_bytes", gradient_bytes},
          {"batch", batch},
          {"describe", describe}};
}

CoreScaling CoreScaling::from_json(const nlohmann::json& json_in, const std::string& source) {
  const nlohmann::json& j = json_in.is_object() && json_in.contains("scaling") ? json_in["scaling"] : json_in;
  auto field = [&](const nlohmann::json& o, const char* name, const char* expected) -> const nlohmann::json& {
    VP_REQUIRE(o.is_object() && o.contains(name), source, ": field \"", name, "\" missing (expected ", expected,
               "; write the file with `vitpipe bench --scaling 1,2 --json`)");
    return o[name];
  };
  CoreScaling s;
  try {
    s.threads = field(j, "threads", "the thread counts measured").get<std::vector<int>>();
    s.bandwidth = field(j, "bandwidth_bytes_per_s", "bytes/s per thread count").get<std::vector<double>>();
    s.gradient_bytes = field(j, "gradient_bytes", "a number").get<double>();
    s.batch = field(j, "batch", "images per step").get<int64_t>();
    if (j.contains("describe")) s.describe = j["describe"];
    for (const auto& o : field(j, "operations", "a list of operations")) {
      OpScaling op;
      op.name = field(o, "name", "a string").get<std::string>();
      op.seconds = field(o, "seconds_per_step", "seconds per thread count").get<std::vector<double>>();
      op.bytes = field(o, "bytes_per_step", "a number").get<double>();
      op.bandwidth_bound = field(o, "bandwidth_bound", "true or false").get<bool>();
      VP_REQUIRE(op.seconds.size() == s.threads.size(), source, ": operation \"", op.name, "\" has ", op.seconds.size(),
                 " times for ", s.threads.size(), " thread counts");
      VP_REQUIRE(std::all_of(op.seconds.begin(), op.seconds.end(), [](double x) { return x >= 0; }), source,
                 ": operation \"", op.name, "\": seconds_per_step must be >= 0");
      s.operations.push_back(std::move(op));
    }
  } catch (const nlohmann::json::exception& e) {
    fail(source, ": not a core-scaling profile (", e.what(), ")");
  }
  VP_REQUIRE(!s.threads.empty() && s.threads.front() == 1 && std::is_sorted(s.threads.begin(), s.threads.end()), source,
             ": field \"threads\" must be ascending and start at 1");
  VP_REQUIRE(s.bandwidth.size() == s.threads.size() &&
                 std::all_of(s.bandwidth.begin(), s.bandwidth.end(), [](double x) { return x > 0; }),
             source, ": field \"bandwidth_bytes_per_s\" must hold one positive number per thread count");
  VP_REQUIRE(s.batch > 0 && s.gradient_bytes >= 0, source, ": field \"batch\" must be > 0, \"gradient_bytes\" >= 0");
  return s;
}

double karp_flatt_serial_fraction(double speedup, int threads) {
  if (threads <= 1 || speedup <= 0) return 0.0;
  const double p = threads;
  return std::clamp((1.0 / speedup - 1.0 / p) / (1.0 - 1.0 / p), 0.0, 1.0);
}

double amdahl_speedup(double serial_fraction, double threads) {
  return 1.0 / (serial_fraction + (1.0 - serial_fraction) / std::max(1.0, threads));
}

namespace {

// Amdahl's prediction at `threads`, or the measurement itself where it was measured.
double scaled(const std::vector<int>& measured, const std::vector<double>& one_per_count, double at_one, double serial,
              int threads, bool time) {
  for (size_t i = 0; i < measured.size(); ++i)
    if (measured[i] == threads) return one_per_count[i];
  const double speedup = amdahl_speedup(serial, threads);
  return time ? at_one / speedup : at_one * speedup;
}

}  // namespace

double serial_fraction(const CoreScaling& s, const OpScaling& op) {
  if (s.threads.size() < 2 || op.seconds.front() <= 0) return 0.0;
  return karp_flatt_serial_fraction(op.seconds.front() / std::max(1e-12, op.seconds.back()), s.threads.back());
}

double bandwidth_at(const CoreScaling& s, int threads) {
  const double serial = s.threads.size() < 2
                            ? 1.0
                            : karp_flatt_serial_fraction(s.bandwidth.back() / s.bandwidth.front(), s.threads.back());
  return scaled(s.threads, s.bandwidth, s.bandwidth.front(), serial, threads, false);
}

double predicted_op_seconds(const CoreScaling& s, const OpScaling& op, int threads, int ranks) {
  const double compute = scaled(s.threads, op.seconds, op.seconds.front(), serial_fraction(s, op), threads, true);
  if (!op.bandwidth_bound) return compute;
  // The node's bandwidth is shared by every rank moving its bytes at the same time.
  return std::max(compute, op.bytes * ranks / bandwidth_at(s, ranks * threads));
}

double predicted_step_seconds(const CoreScaling& s, int threads, int ranks) {
  double total = 0;
  for (const auto& op : s.operations) total += predicted_op_seconds(s, op, threads, ranks);
  return total;
}

std::vector<NodeSplit> rank_node_splits(const CoreScaling& s, int cores) {
  VP_REQUIRE(cores >= 1, "--cores must be >= 1 (got ", cores, ")");
  std::vector<NodeSplit> splits;
  for (int ranks = 1; ranks <= cores; ++ranks) {
    if (cores % ranks != 0) continue;
    NodeSplit n;
    n.ranks = ranks;
    n.threads = cores / ranks;
    n.step_seconds = predicted_step_seconds(s, n.threads, ranks);
    n.allreduce_seconds = 4.0 * (ranks - 1) * s.gradient_bytes / bandwidth_at(s, cores);
    n.images_per_s = ranks * static_cast<double>(s.batch) / std::max(1e-12, n.step_seconds + n.allreduce_seconds);
    splits.push_back(n);
  }
  std::stable_sort(splits.begin(), splits.end(),
                   [](const NodeSplit& a, const NodeSplit& b) { return a.images_per_s > b.images_per_s; });
  return splits;
}

std::string format_node_splits(const CoreScaling& s, int cores, const std::vector<NodeSplit>& splits) {
  std::string out;
  char line[256];
  std::snprintf(line, sizeof line,
                "node split for %d cores (ranks x threads; per-operation scaling measured at 1..%d threads, "
                "Amdahl beyond, bandwidth-bound operations floored by the shared bandwidth):\n",
                cores, s.threads.back());
  out += line;
  std::snprintf(line, sizeof line, "  %-16s %12s %14s %12s\n", "ranks x threads", "step ms", "all-reduce ms",
                "images/s");
  out += line;
  for (size_t i = 0; i < splits.size(); ++i) {
    const NodeSplit& n = splits[i];
    char name[32];
    std::snprintf(name, sizeof name, "%d x %d", n.ranks, n.threads);
    std::snprintf(line, sizeof line, "  %-16s %12.1f %14.1f %12.1f%s\n", name, 1e3 * n.step_seconds,
                  1e3 * n.allreduce_seconds, n.images_per_s, i == 0 ? "  <- chosen" : "");
    out += line;
  }
  return out;
}

}  // namespace vitpipe
