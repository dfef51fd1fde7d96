#include "plan/segment_profile.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>

#include "backend/backend.h"
#include "backend/cpu/cpu_features.h"
#include "backend/cpu/cpu_level.h"
#include "backend/cuda_driver.h"
#include "backend/device_selection.h"
#include "model/vit_stage.h"
#include "util/atomic_file.h"
#include "util/error.h"
#include "util/json_integer.h"
#include "util/median.h"
#include "util/random.h"
#include "util/threads.h"

namespace vitpipe {
namespace {

// Samples after a warm-up run; their median is kept, the statistic train --layout auto reports of the measured steps.
constexpr int kRepeats = 3;
// A sample spans at least this long (several scheduler time slices): a rank sharing its core with others then
// includes its share of the waiting. Timed once, a pass shorter than a slice mostly runs uncontended, which made
// micro-batch 1 look twice as fast as it trains with 4 ranks on 2 cores.
constexpr double kMinSampleSeconds = 0.03;
constexpr int kMaxRunsPerSample = 256;

// Where a profile runs: the CPU backend, or the CUDA backend of this process's GPU.
struct MeasureDevice {
  Device device = Device::cpu;
  bool allow_tf32 = false;
};

// Seconds `fn` takes on `backend`. A GPU's ops return once enqueued: the device is waited for before the clock
// starts and before it stops (a one-element copy to the host, synchronous), so the time is the pass's own.
class PassClock {
 public:
  explicit PassClock(Backend& backend) : backend_(backend) {
    if (!backend.host_accessible()) {
      probe_ = backend.allocate({1}, DType::f32);
      host_ = Tensor::empty({1});
    }
  }
  double seconds_of(const std::function<void()>& fn) {
    wait();
    const auto start = std::chrono::steady_clock::now();
    fn();
    wait();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }

 private:
  void wait() {
    if (probe_.numel() > 0) backend_.copy_to_host(probe_, host_);
  }
  Backend& backend_;
  Tensor probe_, host_;
};

// Random values into `t`, a tensor of `backend` (written on the host, then copied in).
void fill_random(Backend& backend, const Tensor& t, Rng& rng, double stddev) {
  if (t.dtype() != DType::f32) return;
  Tensor host = Tensor::empty(t.shape());
  float* x = host.f32();
  for (int64_t i = 0; i < t.numel(); ++i) x[i] = static_cast<float>(rng.normal(0.0, stddev));
  backend.copy_from_host(host, t);
}

// The passes of a stage holding segments [first, last], at micro-batch b: the median of kRepeats samples.
PassTimes measure_stage(const std::shared_ptr<const TrainableSplit>& split, Precision precision, int first, int last,
                        int64_t b, const MeasureDevice& where) {
  const std::shared_ptr<const ParameterLayout>& layout = split->full;
  const ViTConfig& c = layout->config();
  auto backend = where.device == Device::cuda ? make_backend(Device::cuda, where.allow_tf32) : make_cpu_backend();
  PassClock clock(*backend);
  auto seconds_of = [&](const std::function<void()>& fn) { return clock.seconds_of(fn); };
  StageOptions o;
  o.first_segment = first;
  o.last_segment = last;
  o.precision = precision;
  o.max_micro_batch = b;
  o.split_backward = true;  // runs backward() as well as its two halves
  o.split = split;
  ViTStage stage(layout, *backend, o);
  Rng rng(7);
  fill_random(*backend, stage.parameters().flat(), rng, 0.02);
  stage.parameters_changed();
  Tensor targets =
      c.problem_type == ProblemType::multi_label ? Tensor::zeros({b, c.num_labels()}) : Tensor::zeros({b}, DType::i64);
  auto prepare = [&] {
    fill_random(*backend, stage.input(0, b), rng, 1.0);
    stage.forward(0, b);
    if (stage.has_head()) {
      stage.loss(0, b, targets, 1.0 / static_cast<double>(b));
    } else {
      fill_random(*backend, stage.grad(0, b), rng, 1e-3);
    }
  };
  auto run_once = [&](PassTimes& sum) {
    fill_random(*backend, stage.input(0, b), rng, 1.0);
    sum.forward += seconds_of([&] { stage.forward(0, b); });
    if (stage.has_head()) {
      stage.loss(0, b, targets, 1.0 / static_cast<double>(b));
    } else {
      fill_random(*backend, stage.grad(0, b), rng, 1e-3);
    }
    sum.backward += seconds_of([&] { stage.backward(0, b); });
    prepare();
    sum.backward_input += seconds_of([&] { stage.backward_input(0, b); });
    sum.backward_weight += seconds_of([&] { stage.backward_weight(0, b); });
    stage.zero_gradients();
  };
  PassTimes once;
  run_once(once);  // warms up: oneDNN's primitives (cuDNN's and cuBLASLt's engines on a GPU) are made on first use
  once = {};
  if (where.device == Device::cuda) {  // a second: kernels loaded lazily, workspaces grown by the first
    run_once(once);
    once = {};
  }
  run_once(once);
  const double run_seconds = once.forward + once.backward + once.backward_input + once.backward_weight;
  const int per_sample = static_cast<int>(
      std::clamp(std::ceil(kMinSampleSeconds / std::max(run_seconds, 1e-9)), 1.0, double{kMaxRunsPerSample}));
  std::vector<PassTimes> runs;
  for (int sample = 0; sample < kRepeats; ++sample) {
    PassTimes sum;
    for (int k = 0; k < per_sample; ++k) run_once(sum);
    runs.push_back({sum.forward / per_sample, sum.backward / per_sample, sum.backward_input / per_sample,
                    sum.backward_weight / per_sample});
  }
  auto median = [&](double PassTimes::*pass) {
    std::vector<double> v;
    for (const PassTimes& t : runs) v.push_back(t.*pass);
    return median_of(std::move(v));
  };
  return {median(&PassTimes::forward), median(&PassTimes::backward), median(&PassTimes::backward_input),
          median(&PassTimes::backward_weight)};
}

PassTimes minus(const PassTimes& a, const PassTimes& b) {
  return {std::max(0.0, a.forward - b.forward), std::max(0.0, a.backward - b.backward),
          std::max(0.0, a.backward_input - b.backward_input), std::max(0.0, a.backward_weight - b.backward_weight)};
}

// A block measured where the mode trains it with a gradient to pass down (blocks below the backward path run
// forward only: the planner gives them no backward time, segment_trains_backward()).
int profiled_block_segment(const TrainableSplit& split) {
  const int layers = split.full->num_segments() - 2;
  return std::clamp(split.first_trained_segment + 1, 1, layers);
}

ProfilePoint measure_point(const std::shared_ptr<const TrainableSplit>& split, Precision precision, int64_t b,
                           const MeasureDevice& where) {
  const int head = split->full->num_segments() - 1;
  const int block = profiled_block_segment(*split);
  ProfilePoint p;
  p.micro_batch = b;
  p.embeddings = measure_stage(split, precision, 0, 0, b, where);
  p.block = measure_stage(split, precision, block, block, b, where);
  p.head = measure_stage(split, precision, head, head, b, where);
  // The final block computes the classifier token only when its stage holds the head: measured with it.
  p.classifier_block = minus(measure_stage(split, precision, head - 1, head, b, where), p.head);
  return p;
}

nlohmann::json times_json(const PassTimes& t) {
  return {{"forward", t.forward},
          {"backward", t.backward},
          {"backward_input", t.backward_input},
          {"backward_weight", t.backward_weight}};
}

PassTimes times_from(const nlohmann::json& j) {
  return {j.at("forward").get<double>(), j.at("backward").get<double>(), j.at("backward_input").get<double>(),
          j.at("backward_weight").get<double>()};
}

nlohmann::json points_json(const std::vector<ProfilePoint>& points) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& p : points) {
    list.push_back({{"micro_batch", p.micro_batch},
                    {"embeddings", times_json(p.embeddings)},
                    {"block", times_json(p.block)},
                    {"classifier_block", times_json(p.classifier_block)},
                    {"head", times_json(p.head)}});
  }
  return list;
}

std::vector<ProfilePoint> points_from(const nlohmann::json& list, const std::string& source) {
  std::vector<ProfilePoint> points;
  for (const auto& point : list) {
    ProfilePoint q;
    q.micro_batch = json_integer<int64_t>(point.at("micro_batch"), source + " field \"micro_batch\"");
    q.embeddings = times_from(point.at("embeddings"));
    q.block = times_from(point.at("block"));
    q.classifier_block = times_from(point.at("classifier_block"));
    q.head = times_from(point.at("head"));
    VP_REQUIRE(q.micro_batch >= 1, source, ": micro_batch must be >= 1");
    points.push_back(q);
  }
  std::sort(points.begin(), points.end(),
            [](const ProfilePoint& a, const ProfilePoint& b) { return a.micro_batch < b.micro_batch; });
  return points;
}

uint64_t fnv1a(const std::string& text) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : text) {
    h ^= ch;
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace

const PassTimes& ProfilePoint::of(SegmentKind kind) const {
  switch (kind) {
    case SegmentKind::embeddings:
      return embeddings;
    case SegmentKind::block:
      return block;
    case SegmentKind::classifier_block:
      return classifier_block;
    case SegmentKind::head:
      return head;
  }
  return block;
}

namespace {

// Times at micro-batch b from `points` (ascending): linear between the measured sizes, proportional beyond.
PassTimes interpolate(const std::vector<ProfilePoint>& points, SegmentKind kind, double b) {
  VP_REQUIRE(!points.empty(), "profile: no measurements");
  auto scaled = [](const PassTimes& t, double f) {
    return PassTimes{t.forward * f, t.backward * f, t.backward_input * f, t.backward_weight * f};
  };
  if (b <= static_cast<double>(points.front().micro_batch)) {
    return scaled(points.front().of(kind), b / static_cast<double>(points.front().micro_batch));
  }
  for (size_t i = 1; i < points.size(); ++i) {
    const double lo = static_cast<double>(points[i - 1].micro_batch), hi = static_cast<double>(points[i].micro_batch);
    if (b <= hi) {
      const double w = (b - lo) / (hi - lo);
      const PassTimes a = points[i - 1].of(kind), c = points[i].of(kind);
      return {a.forward + w * (c.forward - a.forward), a.backward + w * (c.backward - a.backward),
              a.backward_input + w * (c.backward_input - a.backward_input),
              a.backward_weight + w * (c.backward_weight - a.backward_weight)};
    }
  }
  return scaled(points.back().of(kind), b / static_cast<double>(points.back().micro_batch));
}

}  // namespace

PassTimes ModelProfile::at(SegmentKind kind, double b) const { return interpolate(points, kind, b); }

PassTimes ModelProfile::alone_at(SegmentKind kind, double b) const {
  VP_REQUIRE(has_alone(), "profile: no times measured alone");
  return interpolate(alone_points, kind, b);
}

bool ModelProfile::has_alone() const {
  if (alone_points.size() != points.size() || points.empty()) return false;
  for (size_t i = 0; i < points.size(); ++i) {
    if (alone_points[i].micro_batch != points[i].micro_batch) return false;
  }
  return true;
}

bool ModelProfile::covers(int64_t b) const {
  return std::any_of(points.begin(), points.end(), [&](const ProfilePoint& p) { return p.micro_batch == b; });
}

nlohmann::json ModelProfile::to_json() const {
  nlohmann::json j;
  j["key"] = key;
  j["describe"] = describe;
  j["points"] = points_json(points);
  if (!alone_points.empty()) j["alone_points"] = points_json(alone_points);
  j["optimizer_seconds_per_element"] = optimizer_seconds_per_element;
  j["corunning_ranks"] = corunning_ranks;
  j["measured_together"] = measured_together;
  return j;
}

ModelProfile ModelProfile::from_json(const nlohmann::json& j, const std::string& source) {
  try {
    ModelProfile p;
    p.key = j.at("key").get<std::string>();
    p.describe = j.value("describe", nlohmann::json::object());
    p.points = points_from(j.at("points"), source);
    if (j.contains("alone_points")) p.alone_points = points_from(j.at("alone_points"), source);
    p.optimizer_seconds_per_element = j.value("optimizer_seconds_per_element", std::map<std::string, double>{});
    p.corunning_ranks = json_integer_or<int>(j, "corunning_ranks", 1, source);
    p.measured_together = json_integer_or<int>(j, "measured_together", 1, source);
    return p;
  } catch (const nlohmann::json::exception& e) {
    fail(source, ": not a vitpipe profile (", e.what(), ")");
  }
}

std::string profile_key(const ProfileRequest& r) {
  const ViTConfig& c = r.config;
  const std::string model = concat(
      "vitpipe-profile-v7 hidden=", c.hidden_size, " layers=", c.num_hidden_layers, " heads=", c.num_attention_heads,
      " mlp=", c.intermediate_size, " image=", c.image_size, " patch=", c.patch_size, " channels=", c.num_channels,
      " labels=", c.num_labels(), " qkv_bias=", c.qkv_bias ? 1 : 0, " problem=", problem_type_name(c.problem_type),
      " precision=", precision_name(r.precision), " mode=", r.mode.describe());
  if (r.device == Device::cuda) {
    // The GPU and its libraries instead of the CPU and its threads: the host's threads only launch kernels.
    VP_REQUIRE(r.gpu.is_object() && r.gpu.contains("name"), "profile: a cuda request names its GPU");
    return concat(model, " device=cuda gpu=", r.gpu.at("name").get<std::string>(),
                  " sm=", r.gpu.at("compute_capability").get<std::string>(),
                  " memory=", r.gpu.at("memory_bytes").get<uint64_t>(),
                  " driver=", r.gpu.at("driver").get<std::string>(), " libraries=", r.gpu.at("libraries").dump(),
                  " tf32=", r.allow_tf32 ? 1 : 0, " corunning=", r.corunning_ranks, " together=", r.measured_together);
  }
  return concat(model, " cpu=", cpu::cpu_features().model, " level=", cpu::cpu_level_name(cpu::selected_cpu_level()),
                " threads=", r.threads, " corunning=", r.corunning_ranks, " together=", r.measured_together);
}

nlohmann::json describe_profile_gpu() {
  const CudaStatus& status = cuda_status();
  VP_REQUIRE(status.usable(), "--device cuda cannot run: ", status.error);
  const int index = local_gpu_index();
  const auto& devices = status.driver.devices;
  const auto device =
      std::find_if(devices.begin(), devices.end(), [&](const CudaDevice& d) { return d.index == index; });
  VP_REQUIRE(device != devices.end(), "--device cuda: the driver lists no GPU ", index);
  const VitpipeCudaLibraryVersions& v = status.module.libraries;
  return {{"name", device->name},
          {"compute_capability", concat(device->major, ".", device->minor)},
          {"memory_bytes", device->memory_bytes},
          {"driver", cuda_version_text(status.driver.version)},
          {"libraries",
           {{"cuda_runtime", v.cuda_runtime},
            {"cublaslt", static_cast<uint64_t>(v.cublaslt)},
            {"cudnn", static_cast<uint64_t>(v.cudnn)},
            {"nccl", v.nccl}}}};
}

std::filesystem::path profile_cache_file(const ProfileRequest& request) {
  if (request.cache_dir.empty()) return {};
  char name[64];
  std::snprintf(name, sizeof(name), "profile-%016llx.json",
                static_cast<unsigned long long>(fnv1a(profile_key(request))));
  return request.cache_dir / name;
}

std::filesystem::path default_profile_cache() {
  if (const char* v = std::getenv("VITPIPE_CACHE"); v && *v) return v;
  if (const char* v = std::getenv("XDG_CACHE_HOME"); v && *v) return std::filesystem::path(v) / "vitpipe";
  if (const char* v = std::getenv("HOME"); v && *v) return std::filesystem::path(v) / ".cache" / "vitpipe";
  return std::filesystem::temp_directory_path() / "vitpipe-cache";
}

namespace {

nlohmann::json describe_request(const ProfileRequest& request) {
  nlohmann::json describe = {{"model",
                              {{"hidden_size", request.config.hidden_size},
                               {"layers", request.config.num_hidden_layers},
                               {"image_size", request.config.image_size},
                               {"patch_size", request.config.patch_size},
                               {"labels", request.config.num_labels()}}},
                             {"precision", precision_name(request.precision)},
                             {"training", request.mode.describe()},
                             {"corunning_ranks", request.corunning_ranks},
                             {"measured_together", request.measured_together}};
  if (request.device == Device::cuda) {  // the GPU and its libraries, not the host's CPU, decide the times
    describe["device"] = "cuda";
    describe["gpu"] = request.gpu;
    describe["allow_tf32"] = request.allow_tf32;
  } else {
    describe["device"] = "cpu";
    describe["cpu"] = cpu::cpu_features().model;
    describe["cpu_level"] = cpu::cpu_level_name(cpu::selected_cpu_level());
    describe["threads"] = request.threads;
  }
  return describe;
}

PassTimes* passes_of(ProfilePoint& p, int i) {
  PassTimes* all[] = {&p.embeddings, &p.block, &p.classifier_block, &p.head};
  return all[i];
}

// The times of `points` (and the optimizers' costs when given) as one flat list, in a fixed order, and back.
std::vector<double> flatten(std::vector<ProfilePoint>& points, const std::map<std::string, double>* optimizers) {
  std::vector<double> flat;
  for (ProfilePoint& p : points) {
    for (int k = 0; k < 4; ++k) {
      const PassTimes* t = passes_of(p, k);
      flat.insert(flat.end(), {t->forward, t->backward, t->backward_input, t->backward_weight});
    }
  }
  if (optimizers) {
    for (const char* name : {"adamw", "lamb", "sgd"}) {
      const auto it = optimizers->find(name);
      flat.push_back(it == optimizers->end() ? 0.0 : it->second);
    }
  }
  return flat;
}

void unflatten(const std::vector<double>& flat, std::vector<ProfilePoint>& points,
               std::map<std::string, double>* optimizers) {
  const size_t expected = points.size() * 16 + (optimizers ? 3 : 0);
  VP_REQUIRE(flat.size() == expected, "profile: ", flat.size(), " times shared where ", expected, " were expected");
  size_t i = 0;
  for (ProfilePoint& p : points) {
    for (int k = 0; k < 4; ++k) {
      *passes_of(p, k) = {flat[i], flat[i + 1], flat[i + 2], flat[i + 3]};
      i += 4;
    }
  }
  if (optimizers && !optimizers->empty()) {
    for (const char* name : {"adamw", "lamb", "sgd"}) (*optimizers)[name] = flat[i++];
  }
}

}  // namespace

ModelProfile measure_profile_work(const ProfileRequest& request, const ProfileWork& work,
                                  const OptimizerTimer& time_optimizers, const ProfileCombine& combine,
                                  const AloneTurn& alone) {
  ModelProfile profile;
  profile.key = profile_key(request);
  profile.describe = describe_request(request);
  profile.corunning_ranks = request.corunning_ranks;
  profile.measured_together = request.measured_together;
  const int saved_threads = configured_threads();
  configure_threads(request.threads);
  auto layout = std::make_shared<const ParameterLayout>(request.config, request.mode.lora);
  const auto split = make_trainable_split(layout, request.mode);
  const MeasureDevice where{request.device, request.allow_tf32};
  if (alone.share && !work.micro_batches.empty()) {
    std::vector<double> flat;
    if (alone.measures) {
      for (int64_t b : work.micro_batches)
        profile.alone_points.push_back(measure_point(split, request.precision, b, where));
      flat = flatten(profile.alone_points, nullptr);
      alone.share(flat);
    } else {
      alone.share(flat);
      for (int64_t b : work.micro_batches) profile.alone_points.push_back(ProfilePoint{b, {}, {}, {}, {}});
      unflatten(flat, profile.alone_points, nullptr);
    }
  }
  for (int64_t b : work.micro_batches) profile.points.push_back(measure_point(split, request.precision, b, where));
  if (work.optimizers && time_optimizers) profile.optimizer_seconds_per_element = time_optimizers(layout);
  configure_threads(saved_threads);
  if (combine) {
    std::vector<double> flat = flatten(profile.points, &profile.optimizer_seconds_per_element);
    combine(flat);
    unflatten(flat, profile.points, &profile.optimizer_seconds_per_element);
  }
  return profile;
}

ModelProfile load_or_measure_profile(const ProfileRequest& request, const OptimizerTimer& time_optimizers,
                                     bool* measured, const std::function<void(const ProfileWork&)>& work_known,
                                     const ProfileCombine& combine, const AloneTurn& alone) {
  const std::string key = profile_key(request);
  const std::filesystem::path file = profile_cache_file(request);
  ModelProfile profile;
  if (!file.empty() && std::filesystem::exists(file)) {
    try {
      ModelProfile cached = ModelProfile::from_json(nlohmann::json::parse(read_text_file(file)), file.string());
      if (cached.key == key) profile = std::move(cached);
    } catch (const Error&) {
      // An unreadable cache entry is measured again and replaced.
    } catch (const nlohmann::json::exception&) {
    }
  }
  profile.key = key;
  profile.describe = describe_request(request);
  profile.corunning_ranks = request.corunning_ranks;
  profile.measured_together = request.measured_together;
  ProfileWork work;
  for (int64_t b : request.micro_batches) {
    if (!profile.covers(b) &&
        std::find(work.micro_batches.begin(), work.micro_batches.end(), b) == work.micro_batches.end()) {
      work.micro_batches.push_back(b);
    }
  }
  work.optimizers = time_optimizers && profile.optimizer_seconds_per_element.empty();
  if (work_known) work_known(work);
  if (measured) *measured = !work.empty();
  if (work.empty()) return profile;

  ModelProfile now = measure_profile_work(request, work, time_optimizers, combine, alone);
  for (ProfilePoint& p : now.points) profile.points.push_back(p);
  for (ProfilePoint& p : now.alone_points) profile.alone_points.push_back(p);
  if (work.optimizers) profile.optimizer_seconds_per_element = now.optimizer_seconds_per_element;
  for (auto* list : {&profile.points, &profile.alone_points}) {
    std::sort(list->begin(), list->end(),
              [](const ProfilePoint& a, const ProfilePoint& b) { return a.micro_batch < b.micro_batch; });
  }
  if (!file.empty()) {
    std::filesystem::create_directories(request.cache_dir);
    write_text_file_atomically(file, profile.to_json().dump(1) + "\n");
  }
  return profile;
}

}  // namespace vitpipe
