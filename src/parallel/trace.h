// What every rank did when: forward, backward, send, receive, all-reduce... recorded cheaply as intervals, gathered
// to rank 0 and written as one Chrome/Perfetto trace (chrome://tracing, ui.perfetto.dev). The same events give the
// measured bubble fraction of the end-of-run summary.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace vitpipe {

class Communicator;

// Categories the summary understands; others are allowed and simply drawn.
inline constexpr const char* kTraceCompute = "compute";      // forward, backward (the bubble is idle compute)
inline constexpr const char* kTraceP2p = "p2p";              // send, recv
inline constexpr const char* kTraceAllReduce = "allreduce";  // gradient buckets
inline constexpr const char* kTraceOptimizer = "optimizer";
inline constexpr const char* kTraceData = "data";

struct TraceEvent {
  std::string name;  // short names stay in std::string's inline buffer: no allocation
  std::string category;
  int64_t start_ns = 0;  // since the recorder's origin (shared by all ranks after synchronize_start)
  int64_t duration_ns = 0;
  int rank = 0;   // pid in the trace
  int lane = 0;   // tid in the trace: stage chunk, or a helper lane such as the all-reduce
  int step = -1;  // optimizer step, -1 when not set
  int micro_batch = -1;
  int64_t value = -1;  // optional: bucket index...
  int64_t bytes = -1;  // optional: bytes moved (messages, collectives)
};

class TraceRecorder {
 public:
  explicit TraceRecorder(bool enabled = true, int rank = 0);

  bool enabled() const { return enabled_.load(std::memory_order_relaxed); }
  // Stops (or resumes) recording; what was recorded stays. E.g. after the first N steps of a long run.
  void set_enabled(bool enabled) { enabled_.store(enabled, std::memory_order_relaxed); }
  int rank() const { return rank_; }
  // Collective: a barrier, then every rank restarts its clock, so the ranks' times share an origin (to within the
  // barrier's skew, microseconds on one machine). Also takes the rank from `world`.
  void synchronize_start(Communicator& world);
  int64_t now_ns() const {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - origin_).count();
  }
  void set_step(int step) { step_ = step; }  // stamped on the events recorded afterwards; -1: outside steps
  int step() const { return step_; }
  void set_lane_name(int lane, std::string name);

  // Thread-safe; a no-op when disabled.
  void record(std::string_view name, std::string_view category, int64_t start_ns, int64_t end_ns, int lane = 0,
              int micro_batch = -1, int64_t value = -1, int64_t bytes = -1);

  // Records [construction, destruction) of a scope.
  class Scope {
   public:
    Scope(TraceRecorder* recorder, std::string_view name, std::string_view category, int lane = 0, int micro_batch = -1,
          int64_t value = -1);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    TraceRecorder* recorder_;
    std::string_view name_, category_;
    int lane_, micro_batch_;
    int64_t value_;
    int64_t start_ = 0;
  };

  std::vector<TraceEvent> events() const;
  std::map<int, std::string> lane_names() const;
  void clear();

 private:
  std::atomic<bool> enabled_;
  int rank_;
  int step_ = -1;
  std::chrono::steady_clock::time_point origin_;
  mutable std::mutex mutex_;
  std::vector<TraceEvent> events_;
  std::map<int, std::string> lane_names_;
};

// Everything rank 0 needs to draw the whole job.
struct GatheredTrace {
  std::vector<TraceEvent> events;                         // every rank's, rank set
  std::map<int, std::string> process_names;               // rank -> label, e.g. "rank 5: stage 1 of 4, replica 1 of 2"
  std::map<std::pair<int, int>, std::string> lane_names;  // (rank, lane) -> label
};

// Collective: every rank's events and names go to rank 0 (the others get an empty result).
GatheredTrace gather_trace(Communicator& world, const TraceRecorder& recorder, const std::string& process_name);

// {"traceEvents": [...], "displayTimeUnit": "ms"}: ph "X" events with ts/dur in microseconds, pid = rank,
// tid = lane, args {step, micro_batch, value, bytes}; plus process_name / thread_name metadata.
std::string chrome_trace_json(const GatheredTrace& trace);

// Collective: gathers, then rank 0 writes `path` atomically (complete or absent).
void write_chrome_trace(Communicator& world, const TraceRecorder& recorder, const std::string& process_name,
                        const std::filesystem::path& path);

// Bubble = idle compute: for each step, the window from the first compute event's start to the last one's end over
// all ranks; each rank's bubble is 1 - (its compute time in the step) / window. Returns the mean over ranks and
// steps (0 when there is no compute event). Events of step -1 (outside optimizer steps, e.g. evaluation) are left
// out. Comparable with SimulationResult::bubble_fraction.
struct MeasuredBubble {
  double fraction = 0.0;
  int steps = 0;
  std::map<int, double> per_rank;  // rank -> mean over steps
};
MeasuredBubble measured_bubble_fraction(std::span<const TraceEvent> events);

}  // namespace vitpipe
