#include "parallel/trace.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "parallel/communicator.h"
#include "util/atomic_file.h"
#include "util/error.h"

namespace vitpipe {

TraceRecorder::TraceRecorder(bool enabled, int rank)
    : enabled_(enabled), rank_(rank), origin_(std::chrono::steady_clock::now()) {}

void TraceRecorder::synchronize_start(Communicator& world) {
  world.barrier();
  std::lock_guard lock(mutex_);
  rank_ = world.rank();
  origin_ = std::chrono::steady_clock::now();
}

void TraceRecorder::set_lane_name(int lane, std::string name) {
  std::lock_guard lock(mutex_);
  lane_names_[lane] = std::move(name);
}

void TraceRecorder::record(std::string_view name, std::string_view category, int64_t start_ns, int64_t end_ns, int lane,
                           int micro_batch, int64_t value, int64_t bytes) {
  if (!enabled()) return;
  TraceEvent event{std::string(name),
                   std::string(category),
                   start_ns,
                   std::max<int64_t>(0, end_ns - start_ns),
                   rank_,
                   lane,
                   step_,
                   micro_batch,
                   value,
                   bytes};
  std::lock_guard lock(mutex_);
  events_.push_back(std::move(event));
}

TraceRecorder::Scope::Scope(TraceRecorder* recorder, std::string_view name, std::string_view category, int lane,
                            int micro_batch, int64_t value)
    : recorder_(recorder && recorder->enabled() ? recorder : nullptr),
      name_(name),
      category_(category),
      lane_(lane),
      micro_batch_(micro_batch),
      value_(value) {
  if (recorder_) start_ = recorder_->now_ns();
}

TraceRecorder::Scope::~Scope() {
  if (recorder_) recorder_->record(name_, category_, start_, recorder_->now_ns(), lane_, micro_batch_, value_);
}

std::vector<TraceEvent> TraceRecorder::events() const {
  std::lock_guard lock(mutex_);
  return events_;
}

std::map<int, std::string> TraceRecorder::lane_names() const {
  std::lock_guard lock(mutex_);
  return lane_names_;
}

void TraceRecorder::clear() {
  std::lock_guard lock(mutex_);
  events_.clear();
}

namespace {

// A flat byte encoding for the gather: fixed-width integers, strings as length + bytes.
class Writer {
 public:
  template <class T>
  void put(T value) {
    const auto* p = reinterpret_cast<const std::byte*>(&value);
    bytes.insert(bytes.end(), p, p + sizeof(T));
  }
  void put(const std::string& text) {
    put<uint32_t>(static_cast<uint32_t>(text.size()));
    const auto* p = reinterpret_cast<const std::byte*>(text.data());
    bytes.insert(bytes.end(), p, p + text.size());
  }
  std::vector<std::byte> bytes;
};

class Reader {
 public:
  explicit Reader(std::span<const std::byte> bytes) : bytes_(bytes) {}
  template <class T>
  T get() {
    VP_REQUIRE(offset_ + sizeof(T) <= bytes_.size(), "trace gather: truncated record");
    T value;
    std::memcpy(&value, bytes_.data() + offset_, sizeof(T));
    offset_ += sizeof(T);
    return value;
  }
  std::string text() {
    const auto size = get<uint32_t>();
    VP_REQUIRE(offset_ + size <= bytes_.size(), "trace gather: truncated string");
    std::string value(reinterpret_cast<const char*>(bytes_.data() + offset_), size);
    offset_ += size;
    return value;
  }
  bool done() const { return offset_ == bytes_.size(); }

 private:
  std::span<const std::byte> bytes_;
  size_t offset_ = 0;
};

}  // namespace

GatheredTrace gather_trace(Communicator& world, const TraceRecorder& recorder, const std::string& process_name) {
  Writer writer;
  writer.put(process_name);
  const auto lanes = recorder.lane_names();
  writer.put<uint32_t>(static_cast<uint32_t>(lanes.size()));
  for (const auto& [lane, name] : lanes) {
    writer.put<int32_t>(lane);
    writer.put(name);
  }
  const auto events = recorder.events();
  writer.put<uint64_t>(events.size());
  for (const auto& e : events) {
    writer.put(e.name);
    writer.put(e.category);
    writer.put<int64_t>(e.start_ns);
    writer.put<int64_t>(e.duration_ns);
    writer.put<int32_t>(e.lane);
    writer.put<int32_t>(e.step);
    writer.put<int32_t>(e.micro_batch);
    writer.put<int64_t>(e.value);
    writer.put<int64_t>(e.bytes);
  }
  auto all = world.gather_bytes(writer.bytes, 0);
  GatheredTrace trace;
  for (size_t rank = 0; rank < all.size(); ++rank) {
    Reader reader(all[rank]);
    const int r = static_cast<int>(rank);
    trace.process_names[r] = reader.text();
    const auto lane_count = reader.get<uint32_t>();
    for (uint32_t i = 0; i < lane_count; ++i) {
      const int lane = reader.get<int32_t>();
      trace.lane_names[{r, lane}] = reader.text();
    }
    const auto count = reader.get<uint64_t>();
    for (uint64_t i = 0; i < count; ++i) {
      TraceEvent e;
      e.name = reader.text();
      e.category = reader.text();
      e.start_ns = reader.get<int64_t>();
      e.duration_ns = reader.get<int64_t>();
      e.rank = r;
      e.lane = reader.get<int32_t>();
      e.step = reader.get<int32_t>();
      e.micro_batch = reader.get<int32_t>();
      e.value = reader.get<int64_t>();
      e.bytes = reader.get<int64_t>();
      trace.events.push_back(std::move(e));
    }
    VP_REQUIRE(reader.done(), "trace gather: trailing bytes from rank ", r);
  }
  return trace;
}

std::string chrome_trace_json(const GatheredTrace& trace) {
  using nlohmann::json;
  json events = json::array();
  for (const auto& [rank, name] : trace.process_names) {
    events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", rank}, {"tid", 0}, {"args", {{"name", name}}}});
    events.push_back(
        {{"name", "process_sort_index"}, {"ph", "M"}, {"pid", rank}, {"tid", 0}, {"args", {{"sort_index", rank}}}});
  }
  for (const auto& [key, name] : trace.lane_names) {
    events.push_back(
        {{"name", "thread_name"}, {"ph", "M"}, {"pid", key.first}, {"tid", key.second}, {"args", {{"name", name}}}});
  }
  for (const auto& e : trace.events) {
    json args = json::object();
    if (e.step >= 0) args["step"] = e.step;
    if (e.micro_batch >= 0) args["micro_batch"] = e.micro_batch;
    if (e.value >= 0) args["value"] = e.value;
    if (e.bytes >= 0) args["bytes"] = e.bytes;
    events.push_back({{"name", e.name},
                      {"cat", e.category},
                      {"ph", "X"},
                      {"ts", static_cast<double>(e.start_ns) / 1000.0},
                      {"dur", static_cast<double>(e.duration_ns) / 1000.0},
                      {"pid", e.rank},
                      {"tid", e.lane},
                      {"args", std::move(args)}});
  }
  json root = {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}};
  return root.dump();
}

void write_chrome_trace(Communicator& world, const TraceRecorder& recorder, const std::string& process_name,
                        const std::filesystem::path& path) {
  GatheredTrace trace = gather_trace(world, recorder, process_name);
  if (world.rank() == 0) write_text_file_atomically(path, chrome_trace_json(trace));
}

MeasuredBubble measured_bubble_fraction(std::span<const TraceEvent> events) {
  struct Interval {
    int64_t start, end;
  };
  // step -> rank -> compute intervals
  std::map<int, std::map<int, std::vector<Interval>>> compute;
  for (const auto& e : events) {
    // Events outside optimizer steps (step -1: evaluation) belong to no step's window.
    if (e.category == kTraceCompute && e.step >= 0) {
      compute[e.step][e.rank].push_back({e.start_ns, e.start_ns + e.duration_ns});
    }
  }
  MeasuredBubble result;
  std::map<int, std::pair<double, int>> per_rank;  // rank -> (sum, count)
  double sum = 0.0;
  int count = 0;
  for (auto& [step, ranks] : compute) {
    int64_t first = INT64_MAX, last = INT64_MIN;
    for (const auto& [rank, intervals] : ranks) {
      for (const auto& i : intervals) {
        first = std::min(first, i.start);
        last = std::max(last, i.end);
      }
    }
    const double window = static_cast<double>(last - first);
    if (window <= 0) continue;
    ++result.steps;
    for (auto& [rank, intervals] : ranks) {
      // Union of the intervals, so overlapping events (nested scopes) count once.
      std::sort(intervals.begin(), intervals.end(),
                [](const Interval& a, const Interval& b) { return a.start < b.start; });
      int64_t busy = 0, open_start = intervals.front().start, open_end = intervals.front().end;
      for (const auto& i : intervals) {
        if (i.start > open_end) {
          busy += open_end - open_start;
          open_start = i.start;
          open_end = i.end;
        } else {
          open_end = std::max(open_end, i.end);
        }
      }
      busy += open_end - open_start;
      const double bubble = 1.0 - static_cast<double>(busy) / window;
      sum += bubble;
      ++count;
      per_rank[rank].first += bubble;
      ++per_rank[rank].second;
    }
  }
  result.fraction = count > 0 ? sum / count : 0.0;
  for (const auto& [rank, acc] : per_rank) result.per_rank[rank] = acc.first / acc.second;
  return result;
}

}  // namespace vitpipe
